"""The reader of a boxed answer's value: LaTeX to a small tree (``Node``), for the answer-form
check (``_form.py``); it reads the LaTeX of numbers and nothing it does not understand.

It reads digits, decimals, repeating decimals (``0.\\overline{3}``, one number: ``number_value``),
``\\frac``, ``\\sqrt`` (``\\sqrt[n]``), ``^``, ``_`` (a variable's index, a logarithm's base),
``+ - \\pm \\times \\cdot \\div / *`` and juxtaposition, brackets (``( )``, ``{ }``, tuples and
intervals with any mix of ``( [ ) ]``), sets ``\\{...\\}``, ``\\cup``, matrices (``pmatrix``,
``bmatrix``, ...), ``\\pi``, ``e``, ``i``, ``\\infty``, ``\\emptyset``, ``\\mathbb{R}``, the elementary
functions (``\\sin`` ... ``\\ln``, ``\\log_b``, ``\\exp``), single letters and Greek letters as
variables. What is work, never a value, raises ``Work`` as soon as it is read: ``\\sum``,
``\\prod``, integrals, ``\\lim``, derivatives (``\\frac{d}{dx}``, ``\\partial``), ``!``, ``\\binom``,
``\\gcd``, ``\\max``, ``|x|``, ``\\lfloor``, ``\\bmod``, a determinant, ``\\operatorname{...}`` but for
an elementary function. Anything else raises ``Unreadable``.

Pure Python over at most a few hundred characters (the box's limit), nesting bounded
(``_MAX_DEPTH``): no sympy, no ``eval``.

``sympy_spelling`` re-spells what this reader reads in the LaTeX latex2sympy reads (for the
checker's worker, ``_check._parse``): a gold this reader read and latex2sympy did not (``\\frac12``,
``\\lg 10``, ``x \\ast y``, ``\\operatorname{sin} x``) made every answer that went to the worker an
infra error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

CALCULUS = {"\\sum": "a sum", "\\prod": "a product", "\\int": "an integral", "\\iint": "an integral",
            "\\iiint": "an integral", "\\oint": "an integral", "\\lim": "a limit", "\\limsup": "a limit",
            "\\liminf": "a limit", "\\partial": "a derivative", "\\nabla": "a derivative"}
"""Work that is never a value, in every form, and the name the feedback gives it."""
_EVALUATE = {"\\gcd", "\\lcm", "\\max", "\\min", "\\det", "\\binom", "\\dbinom", "\\tbinom", "\\choose", "\\bmod",
             "\\mod", "\\pmod", "\\lfloor", "\\lceil", "\\sup", "\\inf", "\\arg", "\\deg", "\\Pr",
             "\\Gamma", "\\zeta", "\\mid", "\\vert", "\\lvert", "\\|"}
_FUNCTIONS = {"\\sin", "\\cos", "\\tan", "\\cot", "\\sec", "\\csc", "\\arcsin", "\\arccos", "\\arctan",
              "\\sinh", "\\cosh", "\\tanh", "\\coth", "\\ln", "\\log", "\\exp", "\\lg"}
_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
          "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi",
          "chi", "psi", "omega", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega"}
_WRAPPERS = {"\\mathrm", "\\mathbf", "\\mathit", "\\boldsymbol", "\\mathsf", "\\bm"}
_CONSTANTS = {"\\pi", "\\infty", "\\emptyset", "\\varnothing"}
_MATRICES = {"matrix", "pmatrix", "bmatrix", "Bmatrix", "smallmatrix"}
_UNICODE = {"×": "\\times ", "·": "\\cdot ", "÷": "\\div ", "−": "-", "π": "\\pi ", "∞": "\\infty ", "√": "\\sqrt ",
            "∪": "\\cup "}
_DEGREE_RE = re.compile(r"\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°)\s*$")
_GROUPED_RE = re.compile(r"[+-]?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?")
REPEATING = r"\d*\.\d*\\overline\s*\{\s*\d+\s*\}"
"""A repeating decimal, ``0.\\overline{3}`` (1/3), ``0.1\\overline{6}`` (1/6): one number token."""
_REPEATING_RE = re.compile(r"(\d*)\.(\d*)\\overline\s*\{\s*(\d+)\s*\}")
_TOKEN_RE = re.compile(r"\s*(" + REPEATING + r"|\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|\\\\|\\[{}|,;!]|\S)")
_MAX_DEPTH = 60


class Unreadable(Exception):
    """The text is not one this reader reads as a value (the message says where)."""


class Work(Exception):
    """The text holds work still to do (the message names it: "a sum", "\\gcd", ...)."""


@dataclass(frozen=True)
class Node:
    """One node of a read answer: ``kind`` is num | const | var | neg | add | mul | div | pow | root
    | func | group | matrix | union."""

    kind: str
    args: tuple[Node, ...] = ()
    value: Fraction | None = None
    """A ``num``'s exact value."""
    name: str = ""
    """A ``num``'s text, a ``const``'s or ``var``'s or ``func``'s name, a ``group``'s brackets."""
    ops: tuple[str, ...] = field(default=())
    """``add``: the sign before each term; ``mul``: the operator before each factor after the first
    (``""`` for juxtaposition); ``div``: its style (``frac``, ``/``)."""

    def walk(self) -> list[Node]:
        """This node and every node under it, depth first."""
        return [self, *(n for a in self.args for n in a.walk())]

    def key(self) -> str:
        """A canonical spelling, to tell like terms and repeated factors."""
        inner = ",".join(a.key() for a in self.args)
        return f"{self.kind}:{self.name}:{self.value}:{'|'.join(self.ops)}({inner})"


# ---------------------------------------------------------------- reading


def number_value(text: str) -> Fraction:
    """The exact value of a number token: an integer, a decimal, or a repeating decimal
    (``a.b\\overline{c}`` is ``(abc - ab) / (10^len(b) (10^len(c) - 1))``).

    >>> number_value("0.\\\\overline{3}"), number_value("0.1\\\\overline{6}"), number_value("1.5")
    (Fraction(1, 3), Fraction(1, 6), Fraction(3, 2))
    """
    m = _REPEATING_RE.fullmatch(text.strip())
    if m is None:
        return Fraction(text)
    whole, fixed, period = m.groups()
    head = int(whole + fixed or "0")
    return Fraction(int(whole + fixed + period) - head, 10 ** len(fixed) * (10 ** len(period) - 1))


def read(text: str) -> Node:
    """The value tree of one side of an answer (no relation, no percent), or ``Unreadable``/``Work``.

    >>> read("2\\\\sqrt{2}").kind, read("\\\\frac{1}{2}").kind
    ('mul', 'div')
    """
    for char, latex in _UNICODE.items():
        text = text.replace(char, latex)
    text = _DEGREE_RE.sub("", text).strip()
    if _GROUPED_RE.fullmatch(text):  # 1,000 or 1{,}000: one number (as compare reads it)
        text = text.replace("{,}", "").replace(",", "")
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            break  # only whitespace left
        tokens.append(m.group(1))
        pos = m.end()
    if not tokens:
        raise Unreadable("an empty value")
    try:
        return _Reader(tokens).top()
    except RecursionError:  # nesting is bounded, but a long chain of signs nests too
        raise Unreadable("nested too deeply") from None


class _Reader:
    """Recursive descent over the tokens: list := union (',' union)*; union := sum ('\\cup' sum)*;
    sum := sign? term (sign term)*; term := factor ((op | juxtaposition) factor)*;
    factor := sign factor | power '!'?; power := atom ('^' exponent)?."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.i, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise Unreadable(f"expected {expected or 'more'}, got {tok or 'the end'}")
        self.i += 1
        return tok

    def top(self) -> Node:
        node = self.list()
        if self.peek() is not None:
            raise Unreadable(f"unexpected {self.peek()}")
        return node

    def list(self) -> Node:
        items = [self.union()]
        while self.peek() in (",", ";"):
            self.take()
            items.append(self.union())
        return items[0] if len(items) == 1 else Node("group", tuple(items), name=",")

    def union(self) -> Node:
        parts = [self.sum()]
        while self.peek() == "\\cup":
            self.take()
            parts.append(self.sum())
        return parts[0] if len(parts) == 1 else Node("union", tuple(parts))

    def sum(self) -> Node:
        signs, terms = [], []
        sign = "+"
        if self.peek() in ("+", "-", "\\pm", "\\mp"):
            sign = self.take()
        while True:
            signs.append(sign)
            terms.append(self.term())
            if self.peek() not in ("+", "-", "\\pm", "\\mp"):
                break
            sign = self.take()
        if len(terms) == 1 and signs[0] == "+":
            return terms[0]
        if len(terms) == 1 and signs[0] == "-":
            return Node("neg", (terms[0],))
        return Node("add", tuple(terms), ops=tuple(signs))

    def term(self) -> Node:
        node = self.factor()
        while True:
            tok = self.peek()
            if tok in ("*", "\\times", "\\cdot", "\\ast"):
                self.take()
                node = _mul(node, self.factor(), tok)
            elif tok in ("/", "\\div"):
                self.take()
                node = Node("div", (node, self.factor()), ops=(tok,))
            elif tok is not None and self.starts_atom(tok):
                node = _mul(node, self.power(), "")
            else:
                return node

    def starts_atom(self, tok: str) -> bool:
        return not (tok in (")", "]", "}", "\\}", ",", ";", "+", "-", "\\pm", "\\mp", "\\cup", "&", "\\\\", "|",
                            "\\rfloor", "\\rceil", "^", "_", "!", "=", "\\end", "\\over")
                    or tok in ("*", "/", "\\times", "\\cdot", "\\div", "\\ast"))

    def factor(self) -> Node:
        if self.peek() in ("+", "-"):
            sign = self.take()
            inner = self.nested(self.factor)  # a chain of signs nests as deep as brackets do
            return inner if sign == "+" else Node("neg", (inner,))
        node = self.power()
        if self.peek() == "!":
            raise Work("a factorial")
        return node

    def power(self) -> Node:
        base = self.atom()
        if self.peek() == "_" and base.kind == "num":
            raise Unreadable("a subscript on a number")
        if self.peek() == "_" and base.kind in ("var", "const"):
            self.take()
            base = Node("var", name=f"{base.name}_{self.argument().key()}")
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.exponent()
        return Node("pow", (base, exponent))

    def exponent(self) -> Node:
        if self.peek() in ("+", "-"):
            sign = self.take()
            inner = self.argument()
            return inner if sign == "+" else Node("neg", (inner,))
        return self.argument()

    def argument(self) -> Node:
        """A ``{...}`` group, or one token (``\\frac12``, ``x^2``, ``\\sqrt2``)."""
        tok = self.peek()
        if tok == "{":
            return self.atom()
        if tok is not None and tok[0].isdigit() and len(tok) > 1 and "." not in tok:
            self.tokens[self.i:self.i + 1] = [tok[0], tok[1:]]
        return self.atom()

    def atom(self) -> Node:
        return self.nested(lambda: self._atom(self.take()))

    def nested(self, read: Callable[[], Node]) -> Node:
        """``read()`` one level deeper: a tree deeper than ``_MAX_DEPTH`` is not read, so that no
        walk over a read tree (``_form``, ``_poly``) runs out of stack (``-`` 399 times, then ``1``,
        made ``has_variable`` raise RecursionError: an infra error)."""
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise Unreadable("nested too deeply")
        try:
            return read()
        finally:
            self.depth -= 1

    def _atom(self, tok: str) -> Node:
        if tok[0].isdigit() or tok[0] == ".":
            return Node("num", value=number_value(tok), name=tok)
        if tok in ("(", "["):
            return self.bracket(tok)
        if tok in ("{", "\\{"):
            return self.brace(tok)
        if tok.startswith("\\") and tok[1:].isalpha():
            return self.command(tok)
        if tok in ("e", "i"):
            return Node("const", name=tok)
        if tok.isalpha() and len(tok) == 1:
            return Node("var", name=tok)
        if tok in ("|", "\\|"):
            raise Work(f"an operator to evaluate ({tok})")
        raise Unreadable(f"unexpected {tok}")

    def bracket(self, tok: str) -> Node:
        """``(a, b)``, ``[a, b)``, ...: a tuple or an interval; ``(x)``: a bracket around one value."""
        inner = self.list()
        close = self.take()
        if close not in (")", "]"):
            raise Unreadable(f"unexpected {close}")
        if inner.kind == "group" and inner.name == ",":
            return Node("group", inner.args, name=tok + close)
        if tok + close != "()":
            raise Unreadable("a square bracket around one value")
        return inner

    def brace(self, tok: str) -> Node:
        """``{...}``: a TeX group (one value), ``{a \\over b}`` TeX's fraction; ``\\{...\\}``: a set."""
        inner = self.list()
        if tok == "{" and self.peek() == "\\over" and not (inner.kind == "group" and inner.name == ","):
            self.take()
            inner = Node("div", (inner, self.sum()), ops=("frac",))
        self.take("}" if tok == "{" else "\\}")
        items = inner.args if inner.kind == "group" and inner.name == "," else (inner,)
        if tok == "\\{":
            return Node("group", items, name="{}")
        if len(items) > 1:
            raise Unreadable("a comma inside {...}")
        return inner

    def command(self, tok: str) -> Node:
        if tok in CALCULUS:
            raise Work(CALCULUS[tok])
        if tok in _EVALUATE:
            raise Work(f"an operator to evaluate ({tok})")
        if tok in _CONSTANTS:
            return Node("const", name=tok)
        if tok[1:] in _GREEK:
            return Node("var", name=tok)
        if tok in _FUNCTIONS:
            return self.function(tok)
        if tok in _WRAPPERS:  # \mathrm{e}, \mathbf{3}: the content
            self.take("{")
            inner = self.sum()
            self.take("}")
            return inner
        handler = {"\\frac": self.fraction, "\\cfrac": self.fraction, "\\sqrt": self.root,
                   "\\operatorname": self.operatorname, "\\mathbb": self.blackboard, "\\begin": self.matrix}.get(tok)
        if handler is None:
            raise Unreadable(f"unexpected {tok}")
        return handler()

    def fraction(self) -> Node:
        num = self.argument()
        if num.kind == "var" and num.name == "d" or num.kind == "const" and num.name == "\\partial":
            raise Work("a derivative")
        return Node("div", (num, self.argument()), ops=("frac",))

    def root(self) -> Node:
        index = Node("num", value=Fraction(2), name="2")
        if self.peek() == "[":
            self.take()
            index = self.sum()
            self.take("]")
        return Node("root", (index, self.argument()))

    def operatorname(self) -> Node:
        name = "\\" + "".join(self.argument_letters())
        if name not in _FUNCTIONS:
            raise Work(f"an operator to evaluate (\\operatorname{{{name[1:]}}})")
        return self.function(name)

    def blackboard(self) -> Node:
        return Node("const", name="\\mathbb{" + "".join(self.argument_letters()) + "}")

    def argument_letters(self) -> list[str]:
        self.take("{")
        letters = []
        while self.peek() not in ("}", None):
            letters.append(self.take())
        self.take("}")
        return letters

    def function(self, name: str) -> Node:
        base: Node | None = None
        power: Node | None = None
        for _ in range(2):
            if self.peek() == "_" and base is None:
                self.take()
                base = self.argument()
            elif self.peek() == "^" and power is None:
                self.take()
                power = self.exponent()
        if self.peek() == "(":
            self.take()
            arg = self.list()
            self.take(")")
        else:
            arg = self.power()
        node = Node("func", (arg,) if base is None else (arg, base), name=name)
        return node if power is None else Node("pow", (node, power))

    def matrix(self) -> Node:
        env = "".join(self.argument_letters())
        if env in ("vmatrix", "Vmatrix"):
            raise Work("a determinant")
        if env not in _MATRICES:
            raise Unreadable(f"a {env} environment")
        rows, row = [], [self.sum()]
        while True:
            tok = self.take()
            if tok == "&":
                row.append(self.sum())
            elif tok == "\\\\":
                rows.append(Node("group", tuple(row), name="row"))
                if self.peek() == "\\end":
                    row = []
                else:
                    row = [self.sum()]
            elif tok == "\\end":
                break
            else:
                raise Unreadable(f"unexpected {tok} in a matrix")
        if row:
            rows.append(Node("group", tuple(row), name="row"))
        self.argument_letters()
        return Node("matrix", tuple(rows), name=env)


def _mul(left: Node, right: Node, op: str) -> Node:
    if left.kind == "mul":
        return Node("mul", (*left.args, right), ops=(*left.ops, op))
    return Node("mul", (left, right), ops=(op,))


# ---------------------------------------------------------------- the reader's spellings, for latex2sympy

_ARGUMENTS = {"\\frac": 2, "\\cfrac": 2, "\\dfrac": 2, "\\tfrac": 2, "\\sqrt": 1, "^": 1, "_": 1}
_RESPELL = [
    (re.compile(r"\\operatorname\s*\{\s*(" + "|".join(f[1:] for f in sorted(_FUNCTIONS)) + r")\s*\}"), r"\\\1 "),
    (re.compile(r"\\lg(?![A-Za-z])"), r"\\log_{10} "),  # ISO 80000-2: lg is the base-10 logarithm
    (re.compile(r"\\ast(?![A-Za-z])"), "*"),
    (re.compile(r"\\varnothing(?![A-Za-z])"), r"\\emptyset "),
    (re.compile(r"\\(begin|end)\s*\{\s*smallmatrix\s*\}"), r"\\\1{matrix}"),
    (re.compile(r"\\(begin|end)\s*\{\s*Bmatrix\s*\}"), r"\\\1{bmatrix}"),
    (re.compile(r"(?<![\d.])(\d+)\.(?![\d\\])"), r"\1"),  # 1. is 1 (0.\overline{3} keeps its point)
]


def sympy_spelling(text: str) -> str:
    """``text`` re-spelled in the LaTeX latex2sympy reads, with the meaning this reader gives it:
    each argument of ``\\frac``, ``\\sqrt``, ``^`` and ``_`` braced as ``_Reader.argument`` reads it
    (``\\frac12``, ``x^-1``, ``2^\\frac12``, ``\\sqrt[3]8``); a brace group that is a value, and the
    content of ``\\mathrm{...}`` and the like, in round brackets (latex2sympy reads ``{e}`` as a
    set); ``\\operatorname{sin}``, ``\\lg``, ``\\ast``, ``\\varnothing``, ``smallmatrix`` and
    ``Bmatrix``, and ``1.``, as latex2sympy names them. Text it does not read passes through.

    >>> sympy_spelling("\\\\frac12 + x^-1 \\\\ast \\\\mathrm{e}")
    '\\\\frac{1}{2} + x^{-1} * (e)'
    """
    for pattern, replacement in _RESPELL:
        text = pattern.sub(replacement, text)
    try:
        return _Respeller(text).all()
    except RecursionError:  # nesting deeper than a box holds: left to latex2sympy as it is
        return text


class _Respeller:
    """``sympy_spelling``'s walk over the reader's tokens, copying the text between them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.spans = [m.span(1) for m in _TOKEN_RE.finditer(text)]

    def tok(self, k: int) -> str:
        return self.text[self.spans[k][0]:self.spans[k][1]] if k < len(self.spans) else ""

    def gap(self, k: int) -> str:
        return self.text[self.spans[k - 1][1] if k else 0:self.spans[k][0]]

    def all(self) -> str:
        out, k = self.until(0, "")
        return out + self.text[self.spans[-1][1]:] if self.spans else self.text

    def until(self, k: int, close: str) -> tuple[str, int]:
        """The tokens from ``k`` to the ``close`` that ends their group (the end, for ``""``),
        re-spelled, and the index after ``close``."""
        parts = []
        while k < len(self.spans) and self.tok(k) != close:
            parts.append(self.gap(k))
            unit, k = self.unit(k)
            parts.append(unit)
        return "".join(parts), k + 1

    def group(self, k: int, brackets: str) -> tuple[str, int]:
        """The group that opens at token ``k`` in ``brackets``; one left open stays open."""
        close = {"{": "}", "[": "]"}[self.tok(k)]
        inner, k = self.until(k + 1, close)
        return brackets[0] + inner + (brackets[1] if k <= len(self.spans) else ""), k

    def unit(self, k: int) -> tuple[str, int]:
        """Token ``k`` with what belongs to it: a group, or a command's arguments. A group after
        a command or another group is an argument (``\\begin{pmatrix}``, ``\\binom{n}{k}``) and
        keeps its braces; another one is a value, in round brackets."""
        tok = self.tok(k)
        if tok in _WRAPPERS and self.tok(k + 1) == "{":
            return self.group(k + 1, "()")
        if tok == "{":
            before = self.tok(k - 1) if k else ""
            argument = before in ("}", "]") or before[:1] == "\\" and before[1:].isalpha()
            return self.group(k, "{}" if argument else "()")
        count = _ARGUMENTS.get(tok)
        if count is None:
            return tok, k + 1
        parts, k = [tok], k + 1
        if tok == "\\sqrt" and self.tok(k) == "[":
            index, k = self.group(k, "[]")
            parts.append(index)
        for _ in range(count):
            if k >= len(self.spans):
                break
            argument, k = self.argument(k, tok)
            parts.append(argument)
        return "".join(parts), k

    def argument(self, k: int, command: str) -> tuple[str, int]:
        """One argument of ``command``, braced: a ``{...}`` group, a command with its arguments, or
        one token. A number is one digit in ``\\frac`` or ``\\sqrt`` (``\\frac12``, as TeX and the
        evaluator of ``_check`` read it) and whole after ``^`` or ``_`` (``x^23``, as that evaluator
        and latex2sympy read it); an exponent may have a sign (``x^-1``)."""
        sign = ""
        if command == "^" and self.tok(k) in ("+", "-") and k + 1 < len(self.spans):
            sign, k = self.tok(k), k + 1
        tok = self.tok(k)
        if tok == "{":
            group, k = self.group(k, "{}")
            return "{" + sign + group + "}" if sign else group, k
        start, end = self.spans[k]
        if command not in ("^", "_") and tok[0].isdigit() and len(tok) > 1 and "." not in tok:
            self.spans[k:k + 1] = [(start, start + 1), (start + 1, end)]
            return "{" + tok[0] + "}", k + 1
        inner, k = self.unit(k)
        return "{" + sign + inner + "}", k

"""Answer forms: whether a boxed math answer is an answer, or still the work that leads to one
(docs/tasks.md, "Answer forms").

A comparison by value alone scores the question's own expression: ``\\boxed{34 \\times 15 - 10}``
for 500, ``\\gcd(39, 60)`` for 3, ``\\sin(\\pi/4)`` for ``\\frac{\\sqrt{2}}{2}``, ``10!``, a sum, an
integral, a limit. So each value of a task's answer has a **form**, and a box whose value is not
in it fails as ``form:<form>`` before any value is compared. The forms, each one a superset of
the one before it:

- ``integer``: an integer (``-12``, ``1{,}000``);
- ``fraction``: also a fraction in lowest terms (``\\frac{17}{24}``, ``-7/3``, ``\\frac{-7}{3}``) or
  a mixed number (``2\\frac{1}{2}``); no decimals;
- ``number``: also a decimal (``0.5``, ``1.50``, ``.5``) and scientific notation
  (``6.02 \\times 10^{23}``, the mantissa in [1, 10));
- ``closed``: also an exact number in simplest form: simplified surds (``2\\sqrt{2}``,
  ``\\frac{1}{\\sqrt{2}}`` and ``\\frac{\\sqrt{2}}{2}`` alike, ``\\frac{1+\\sqrt{5}}{2}``, ``\\sqrt[3]{4}``),
  ``\\pi``, ``e``, ``i``, ``\\infty``, and functions whose value has no simpler form (``\\ln 2``,
  ``\\sin 1``; ``\\sin(\\pi/4)`` or ``\\log_2 8`` is asked of sympy in the checker's worker:
  ``closed_functions`` there);
- ``expression``: any expression with the gold's value, in the gold's variables (``(x+1)^2`` for
  ``x^2+2x+1``), except one with a sum, product, integral, limit or derivative still to do.

Two forms narrow ``expression`` to a polynomial written one way (``_poly.py``): ``expanded``
(``x^2+2x+1``, not ``(x+1)^2``) and ``factored`` (``(x-1)(x+1)``, not ``x^2-1``), so that "Expand
$(x+1)^2$" is not answered by its own expression; a task asks for one by its ``form`` or by its
instruction ("Expand ...", "Factor ...": ``_prompt.py``).

What is not in a numeric form (``integer`` to ``closed``): an operation on numbers (``3+4``,
``2 \\cdot 3``, ``2^{10}``, ``2 \\cdot 3\\sqrt{2}``), a fraction not in lowest terms
(``\\frac{2}{4}``, ``\\frac{2\\sqrt{2}}{4}``, ``\\frac{2}{\\sqrt{2}}``), a surd not simplified
(``\\sqrt{8}``, ``\\sqrt{4}``, ``\\sqrt{\\frac{1}{2}}``), like terms not combined
(``\\sqrt{2}+\\sqrt{2}``), an operator to evaluate (``\\gcd``, ``\\binom``, ``!``, ``|x|``,
``\\lfloor``, ``\\max``, ``\\bmod``), a sum, product, integral, limit or derivative, a letter (a
variable), and anything this reader does not read (it reads the LaTeX of numbers: digits,
``\\frac``, ``\\sqrt``, ``^``, ``+ - \\times \\cdot \\div /``, brackets, sets ``\\{...\\}``, tuples and
intervals, ``\\cup``, matrices, ``\\pi``, ``e``, ``i``, ``\\infty`` and the elementary functions).

The form of each value of the gold: the task's ``form`` field, else its instruction's
(``_prompt.instructed_form``), else inferred from the gold value (``infer_form``): a variable -> ``expression``; a number this reader evaluates as a rational ->
``number``; another number -> ``closed``; a gold this reader cannot read -> ``expression`` (the
value comparison as it was). Containers keep the gold's shape: a set only for a set, a
bracketed pair (a tuple or an interval) only for one, a matrix only for a matrix (a bare list
``2, 3`` is a set, as the value comparison reads it); their elements
are in the form. An answer identical to the gold always passes (``compare``, rule 1), so a gold
the task writes with work in it (``2^{-30}``) still accepts itself.

Not checked: whether a union of intervals could be merged, whether a nested radical denests,
and a square factor of a radicand whose primes are all above 1000 (``\\sqrt{1009^2 \\cdot 2}``
passes as simplified). Everything here is pure Python on at most ``MAX_ANSWER_CHARS``
characters: no sympy, no ``eval``.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from posttrain.envs.math._poly import POLYNOMIAL_FORMS, polynomial_problem
from posttrain.envs.math._read import CALCULUS, Node, Unreadable, Work, read

FORMS: dict[str, str] = {
    "integer": "an integer",
    "fraction": "an integer or a fraction in lowest terms (no decimals)",
    "number": "a number: an integer, a decimal or a fraction in lowest terms",
    "closed": "an exact number in simplest form (fractions in lowest terms, simplified surds, \\pi, e)",
    "expression": "an expression in the task's variables",
    "expanded": "a polynomial in expanded form (like terms combined, no product or power of a sum)",
    "factored": "a polynomial factored completely (irreducible factors, no common divisor left in one)",
}
"""Each form and how the feedback names it; each of ``integer`` to ``expression`` admits everything
the ones before it do; ``expanded`` and ``factored`` are each a part of ``expression``."""

NUMERIC = ("integer", "fraction", "number", "closed")
_SMALL_PRIMES = [p for p in range(2, 1000) if all(p % q for q in range(2, math.isqrt(p) + 1))]
_READ_ERRORS = (Unreadable, Work, ValueError, ZeroDivisionError, RecursionError)
_MAX_BITS = 100_000  # as _check's evaluator: a bigger power is not evaluated here
_MAX_INDEX = 64  # the largest root index (or exponent denominator) read as a surd
_INTEGER_RE = re.compile(r"-?\d+")


# ---------------------------------------------------------------- forms


def shape(node: Node) -> str:
    """``set``, ``tuple`` (round brackets: a tuple or an open interval), ``interval`` (a square
    bracket), ``list`` (a bare comma list), ``union``, ``matrix`` or ``value``."""
    if node.kind == "group":
        return {"{}": "set", "()": "tuple", ",": "list"}.get(node.name, "interval")
    return node.kind if node.kind in ("union", "matrix") else "value"


def leaves(node: Node) -> list[Node]:
    """The values inside a container (a set's elements, an interval's ends, a matrix's entries)."""
    if node.kind in ("group", "union", "matrix"):
        return [leaf for a in node.args for leaf in leaves(a)]
    return [node]


def has_variable(node: Node) -> bool:
    return node.kind == "var" or any(has_variable(a) for a in node.args)


def has_function(node: Node) -> bool:
    return node.kind == "func" or any(has_function(a) for a in node.args)


@functools.lru_cache(maxsize=4096)  # a pure function of the gold, asked at every check
def infer_form(gold: str) -> str:
    """The form of a gold value that the task does not state.

    >>> infer_form("17"), infer_form("\\\\frac{\\\\sqrt{2}}{2}"), infer_form("x^2+1"), infer_form("12_{3}")
    ('number', 'closed', 'expression', 'expression')
    """
    try:
        tree = read(gold)
    except _READ_ERRORS:
        return "expression"
    values = leaves(tree)
    if any(has_variable(v) for v in values):
        return "expression"
    if all(_rational(v) is not None for v in values):
        return "number"
    return "closed"


@functools.lru_cache(maxsize=4096)  # a pure function of the gold, asked at every check
def is_name(gold: str) -> bool:
    """Whether a gold side is a lone variable (``x`` in ``x = 3``): a name, not a value in a form."""
    try:
        return read(gold).kind == "var"
    except _READ_ERRORS:
        return False


def form_problem(text: str, form: str, gold: str | None = None) -> tuple[str, str] | None:
    """``(error class, why)`` when ``text`` (one side of a box: no relation, no percent) is not
    an answer in ``form``, else None; ``gold``, when given, fixes the shape (a set for a set, ...).

    >>> form_problem(r"34 \\times 15 - 10", "integer")
    ('form:integer', 'an operation on numbers')
    >>> form_problem(r"\\frac{1}{\\sqrt{2}}", "closed") is None, form_problem(r"\\sqrt{8}", "closed")[1]
    (True, 'a surd that is not simplified')
    >>> form_problem("(2, 3)", "number", gold=r"\\{2, 3\\}")
    ('form:set', 'a tuple or an interval where a set is expected')
    """
    if form in POLYNOMIAL_FORMS:
        return polynomial_problem(text, form)
    if form == "expression":
        problem = expression_problem(text)
        return None if problem is None else ("form:expression", problem)
    if _INTEGER_RE.fullmatch(text) and _gold_shape(gold) in (None, "value"):
        return None  # an integer is in every form: the common case, without the reader
    try:
        tree = read(text)
    except Work as e:
        return f"form:{form}", f"work still to do: {e}"
    except (Unreadable, ValueError, ZeroDivisionError, RecursionError) as e:
        return "unparseable", f"not read as a value: {e}"
    want = _gold_shape(gold)
    if want is not None and shape(tree) != want and {shape(tree), want} not in _LIKE_SHAPES:
        error_class = f"form:{want}" if want in SHAPES else f"form:{form}"
        return error_class, f"{_SHAPE_NAMES[shape(tree)]} where {_SHAPE_NAMES[want]} is expected"
    where = "" if shape(tree) == "value" else f" in an element of {_SHAPE_NAMES[shape(tree)]}"
    for leaf in leaves(tree):
        problem = value_problem(leaf, form)
        if problem:
            return f"form:{form}", problem + where
    return None


SHAPES = {"set": "a set", "tuple": "a tuple or an interval", "interval": "an interval", "list": "a list",
          "union": "a union of intervals", "matrix": "a matrix"}
"""The containers a gold can be, and how the feedback names them (``form:set``, ...)."""
_SHAPE_NAMES = {**SHAPES, "value": "one value"}
_LIKE_SHAPES = ({"tuple", "interval"}, {"list", "set"})
"""Shapes the value comparison tells apart itself: ``(2, 3)`` is a tuple or an open interval; a
bare list ``2, 3`` is read as the set ``\\{2, 3\\}``."""


@functools.lru_cache(maxsize=4096)  # a pure function of the gold, asked at every check
def _gold_shape(gold: str | None) -> str | None:
    if gold is None:
        return None
    try:
        return shape(read(gold))
    except _READ_ERRORS:
        return None


_CALCULUS_RE = re.compile(r"\\(?:sum|prod|int|iint|iiint|oint|lim|limsup|liminf|partial|nabla)(?![A-Za-z])"
                          r"|\\frac\s*\{\s*(?:d|\\mathrm\s*\{\s*d\s*\})[^}]*\}\s*\{\s*(?:d|\\mathrm\s*\{\s*d\s*\})")


def expression_problem(text: str) -> str | None:
    """An ``expression`` answer may be any equal expression, but not a sum, product, integral,
    limit or derivative still to do."""
    m = _CALCULUS_RE.search(text)
    if m is None:
        return None
    return f"work still to do: {CALCULUS.get(m.group(), 'a derivative')}"


def value_problem(node: Node, form: str) -> str | None:
    """Why one value is not final in the numeric ``form``, or None."""
    if _is_infinity(node):
        return None
    if form != "closed":
        if _literal(node, form):
            return None
        return _rational_problem(node, form)
    return _closed_problem(node)


def _is_int(node: Node) -> bool:
    return node.kind == "num" and "." not in node.name


def _is_infinity(node: Node) -> bool:
    inner = node.args[0] if node.kind == "neg" else node
    return inner.kind == "const" and inner.name == "\\infty"


def _fraction_literal(node: Node) -> bool:
    """``\\frac{p}{q}``, ``p/q`` or ``\\frac{-p}{q}``: integers, q > 1, in lowest terms."""
    if node.kind != "div":
        return False
    num, den = node.args
    if num.kind == "neg":
        num = num.args[0]
    return (_is_int(num) and _is_int(den) and den.value is not None and num.value is not None and den.value > 1
            and math.gcd(int(num.value), int(den.value)) == 1)


def _literal(node: Node, form: str) -> bool:
    """Whether ``node`` spells a rational number finally, as ``form`` allows."""
    if node.kind == "neg":
        node = node.args[0]
        if node.kind == "neg":
            return False
    if node.kind == "num":
        return _is_int(node) or form in ("number", "closed")
    if form == "integer":
        return False
    if _fraction_literal(node):
        return True
    if node.kind == "mul" and len(node.args) == 2:
        a, b = node.args
        if node.ops == ("",) and _is_int(a) and _fraction_literal(b) and b.args[0].kind != "neg":
            return bool(a.value and a.value >= 1 and b.args[0].value < b.args[1].value)  # a mixed number
        if form in ("number", "closed") and node.ops[0] in ("\\times", "\\cdot") and a.kind == "num":
            return (a.value is not None and 1 <= a.value < 10 and b.kind == "pow" and _is_int(b.args[0])
                    and b.args[0].value == 10 and _is_int_literal(b.args[1]))  # scientific notation
    return False


def _is_int_literal(node: Node) -> bool:
    return _is_int(node.args[0]) if node.kind == "neg" else _is_int(node)


def _rational(node: Node) -> Fraction | None:
    """The value of ``node`` when it is a rational number built from numbers and arithmetic."""
    try:
        return _rational_value(node)
    except (ZeroDivisionError, OverflowError, ValueError):
        return None


def _rational_value(node: Node) -> Fraction | None:
    kind = node.kind
    if kind == "num":
        return node.value
    values = [_rational_value(a) for a in node.args]
    if any(v is None for v in values):
        return None
    if kind == "neg":
        return -values[0]
    if kind == "add":
        total = Fraction(0)
        for sign, v in zip(node.ops, values, strict=True):
            if sign in ("\\pm", "\\mp"):
                return None
            total += v if sign == "+" else -v
        return total
    if kind == "mul":
        return math.prod(values, start=Fraction(1))
    if kind == "div":
        return values[0] / values[1]
    if kind == "pow" and values[1].denominator == 1:
        base, exponent = values
        if max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(exponent) <= _MAX_BITS:
            return base ** int(exponent)
    return None


def _rational_problem(node: Node, form: str) -> str:
    """Why a value is not one of the rational forms (``integer``, ``fraction``, ``number``)."""
    if has_variable(node):
        return "a letter where a number is expected"
    if has_function(node):
        return "a function to evaluate"
    bare = node.args[0] if node.kind == "neg" else node
    if bare.kind == "num" or (_literal(node, "number") and form == "fraction"):
        return "a decimal"
    if bare.kind == "div" and all(_is_int_literal(a) for a in bare.args):
        if form == "integer":
            return "a fraction" if _fraction_literal(bare) else "a fraction not in lowest terms"
        return "a fraction not in lowest terms"
    if bare.kind == "root" or (bare.kind in ("div", "mul", "add") and any(leaf.kind == "root" for leaf in bare.walk())):
        return "a root where a rational number is expected"
    if bare.kind in ("group", "union", "matrix"):
        return "a container where one value is expected"
    if any(n.kind == "const" for n in bare.walk()):
        return "a constant where a rational number is expected"
    return "an operation on numbers"


# ---------------------------------------------------------------- the closed form


def _closed_problem(node: Node) -> str | None:
    """Why ``node`` is not an exact number in simplest form, or None (functions of numbers pass
    here: sympy in the checker's worker says whether they evaluate)."""
    if _literal(node, "closed"):
        return None
    kind = node.kind
    if kind == "var":
        return "a letter where a number is expected"
    if kind == "const":
        return None if node.name in ("\\pi", "e", "i", "\\infty") else "a set where a number is expected"
    if kind == "num":
        return None
    if kind in ("group", "union", "matrix"):
        return "a container where one value is expected"
    for arg in node.args:
        problem = _closed_problem(arg)
        if problem:
            return problem
    return _CLOSED_CHECKS[kind](node)


def _coefficient(node: Node) -> tuple[Fraction, list[Node]]:
    """A term as its rational coefficient and its other factors."""
    if node.kind == "neg":
        c, rest = _coefficient(node.args[0])
        return -c, rest
    if _literal(node, "closed"):
        return _rational(node) or Fraction(0), []
    if node.kind == "mul":
        coefficient, rest = Fraction(1), []
        for factor in node.args:
            if _literal(factor, "closed"):
                coefficient *= _rational(factor) or Fraction(0)
            else:
                rest.append(factor)
        return coefficient, rest
    return Fraction(1), [node]


def _content(node: Node) -> int:
    """The integer every term of ``node`` is a multiple of (1 when not all terms have integers)."""
    if node.kind == "add":
        return math.gcd(*(_content(t) for t in node.args))
    c, _ = _coefficient(node)
    return abs(int(c)) if c.denominator == 1 else 1


def _irrational_key(factors: list[Node]) -> str:
    return "*".join(sorted(f.key() for f in factors))


def _check_neg(node: Node) -> str | None:
    return "a double negation" if node.args[0].kind == "neg" else None


def _irrational_part(term: Node) -> str:
    """A term's factors other than its rational coefficient, as a key: like terms share one."""
    if term.kind == "neg":
        return _irrational_part(term.args[0])
    if term.kind == "div":
        num, den = term.args
        return _irrational_key(_coefficient(num)[1]) + "/" + _irrational_key(_coefficient(den)[1])
    return _irrational_key(_coefficient(term)[1]) + "/"


def _is_log(node: Node) -> bool:
    bare = node.args[0] if node.kind == "neg" else node
    if bare.kind == "mul":
        return any(_is_log(f) for f in bare.args)
    return bare.kind == "func" and bare.name in ("\\ln", "\\log", "\\lg")


def _check_add(node: Node) -> str | None:
    seen: set[str] = set()
    for term in node.args:
        if (term.args[0] if term.kind == "neg" else term).kind == "add":
            return "an operation on numbers"  # a bracketed sum inside a sum
        key = _irrational_part(term)
        if key in seen:
            return "an operation on numbers" if key == "/" else "like terms that are not combined"
        seen.add(key)
    if sum(_is_log(t) for t in node.args) > 1:
        return "logarithms that are not combined"
    return None


def _check_mul(node: Node) -> str | None:
    literals = [f for f in node.args if _literal(f, "closed")]
    fractions = [f for f in node.args if f.kind == "div" and not _literal(f, "closed")]
    if len(literals) > 1 or (literals and _rational(literals[0]) in (0, 1)):
        return "an operation on numbers"
    if len(fractions) > 1 or (fractions and literals):
        return "an operation on numbers"  # 2 \\cdot \\frac{\\sqrt{2}}{3} is \\frac{2\\sqrt{2}}{3}
    roots = [f for f in node.args if f.kind == "root"]
    if len({r.args[0].key() for r in roots}) != len(roots):
        return "an operation on numbers"
    keys = [f.key() for f in node.args if not _literal(f, "closed")]
    if len(set(keys)) != len(keys):
        return "an operation on numbers"
    sums = [f for f in node.args if f.kind == "add"]
    if sums and (len(sums) > 1 or roots or fractions):
        return "a product still to expand"  # (1+\\sqrt{2})(1-\\sqrt{2}), \\sqrt{2}(\\sqrt{2}+1)
    return None


def _check_div(node: Node) -> str | None:
    num, den = node.args
    if _literal(den, "closed") and not _is_int(den):
        return "an operation on numbers"
    if _is_int(den) and den.value in (0, 1):
        return "an operation on numbers"
    if num.kind == "div" or den.kind == "div" or (_literal(num, "closed") and not _is_int_literal(num)
                                                   and _literal(den, "closed")):
        return "an operation on numbers"
    if _literal(num, "closed") and _literal(den, "closed"):
        return "a fraction not in lowest terms"
    if den.kind == "add" and any(n.kind == "root" for n in den.walk()):
        return "a denominator to rationalize"  # \\frac{1}{\\sqrt{2}+1}; \\frac{1}{\\sqrt{2}} may stay
    top, bottom = _content(num), _content(den)
    if math.gcd(top, bottom) != 1:
        return "a fraction not in lowest terms"
    top_factors, bottom_factors = _coefficient(num)[1], _coefficient(den)[1]
    for factor in bottom_factors:
        if factor.kind == "root" and _is_int(factor.args[1]) and math.gcd(top, int(factor.args[1].value or 0)) != 1:
            return "a fraction not in lowest terms"  # \\frac{2}{\\sqrt{2}} is \\sqrt{2}
        for other in top_factors:
            if (factor.kind == other.kind == "root" and factor.args[0] == other.args[0]
                    and _is_int(factor.args[1]) and _is_int(other.args[1])
                    and math.gcd(int(factor.args[1].value or 0), int(other.args[1].value or 0)) != 1):
                return "a fraction not in lowest terms"  # \\frac{\\sqrt{6}}{\\sqrt{3}} is \\sqrt{2}
    if {f.key() for f in top_factors} & {f.key() for f in bottom_factors}:
        return "a fraction not in lowest terms"
    return None


def _check_pow(node: Node) -> str | None:
    base, exponent = node.args
    e = _rational(exponent)
    if e in (0, 1):
        return "an operation on numbers"
    if _literal(base, "closed") or base.kind == "root":
        if e is None or base.kind == "root" or e.denominator == 1:
            return "an operation on numbers"
        b = _rational(base)
        if b is None or b.denominator != 1 or b < 2 or abs(e.numerator) >= e.denominator or e.denominator > _MAX_INDEX:
            return "an operation on numbers"
        return None if _power_free(int(b), e.denominator) else "a surd that is not simplified"
    if base.kind == "const" and base.name == "i" and e is not None and e.denominator == 1:
        return "an operation on numbers"
    if base.kind in ("pow", "neg", "add", "mul", "div") and (e is None or e.denominator == 1):
        return "an operation on numbers"  # (1+\\sqrt{2})^2, (2\\pi)^2: a power still to take
    return None


def _check_root(node: Node) -> str | None:
    index, radicand = node.args
    if not _is_int(index) or not 2 <= (index.value or 0) <= _MAX_INDEX:
        return "a surd that is not simplified"
    if _literal(radicand, "closed"):
        if not _is_int(radicand):
            return "a surd that is not simplified"
        return None if _power_free(int(radicand.value or 0), int(index.value or 2)) else "a surd that is not simplified"
    if _rational(radicand) is not None:
        return "an operation on numbers"
    return None


def _power_free(n: int, k: int) -> bool:
    """Whether the k-th root of ``n`` (an integer) is simplified: n >= 2 and n = p1^e1 ... with
    every e < k and gcd(k, e1, e2, ...) = 1 (so ``\\sqrt[4]{4}`` is not: it is ``\\sqrt{2}``);
    factors are found by trial division below 1000, and a cofactor is tested for perfect powers."""
    if n < 2:
        return False
    exponents = []
    for p in _SMALL_PRIMES:
        if n % p == 0:
            e = 0
            while n % p == 0:
                n, e = n // p, e + 1
            exponents.append(e)
    if n > 1:
        exponents.append(next((j for j in range(k, 1, -1) if _iroot(n, j) ** j == n), 1))
    return all(e < k for e in exponents) and math.gcd(k, *exponents) == 1


def _iroot(n: int, k: int) -> int:
    """The integer k-th root of n >= 0, rounded down."""
    if n < 2:
        return n
    x = 1 << ((n.bit_length() + k - 1) // k)
    while True:
        y = ((k - 1) * x + n // x ** (k - 1)) // k
        if y >= x:
            return x
        x = y


def _check_func(node: Node) -> str | None:
    if len(node.args) == 2:  # a logarithm with a base: log_b(x) is rational when x and b are powers of one number
        x, b = (_rational(a) for a in node.args)
        if x is not None and b is not None and x > 0 and b > 0 and b != 1 and _rational_log(x, b):
            return "a function to evaluate"
    return None


def _rational_log(x: Fraction, b: Fraction) -> bool:
    if x == 1:
        return True
    try:
        guess = (math.log(x.numerator) - math.log(x.denominator)) / (math.log(b.numerator) - math.log(b.denominator))
    except (ValueError, ZeroDivisionError):
        return False
    q = Fraction(guess).limit_denominator(64)
    if q == 0 or abs(q.numerator) > 64:
        return False
    return x ** q.denominator == b ** q.numerator


_CLOSED_CHECKS = {"neg": _check_neg, "add": _check_add, "mul": _check_mul, "div": _check_div, "pow": _check_pow,
                  "root": _check_root, "func": _check_func}

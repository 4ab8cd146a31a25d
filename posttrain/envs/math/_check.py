"""How a boxed math answer is compared with the gold answer (docs/tasks.md, "How math answers
are compared"), exactly, and in a worker process where sympy is needed.

The rule, in the order applied (``compare``); each side is the box content or the gold:

1. Normalise: drop ``$`` and ``\\$``, ``\\left``/``\\right`` (and ``\\left.``), ``\\displaystyle``,
   spacing commands (``\\, \\; \\: \\! \\ ~``; ``1\\,000`` is ``1000``), a trailing period; ``\\dfrac``/``\\tfrac`` are ``\\frac``,
   ``\\cdotp`` is ``\\cdot``, ``\\sqrt2`` is ``\\sqrt{2}``, unicode symbols (``× · ÷ − π ∞ √ ∪ °``) are their LaTeX.
   Identical strings are equal (case-sensitive: ``X^2`` is not ``x^2``).
2. Text: if the gold has ``\\text{...}`` (or ``\\textbf``, ``\\mbox``, ...), it is a text answer:
   both sides compare as strings with whitespace removed and case folded. Otherwise text in the
   box fails (``form:text``): ``3\\text{ (perhaps 5)}`` is not ``3``.
3. Percent: a trailing ``\\%`` must be on both sides or neither (``form:percent``); then it is
   dropped and the numbers compare.
4. Relations (``=``, ``<``, ``\\leq``, ``\\neq``, ``\\approx``, ``\\in``, ... outside brackets):
   both sides must have the same relations, in order or mirrored (``3 = x`` is ``x = 3``),
   and compare side by side (``form:relation``): ``2+2=5`` is not ``5``.
5. Form (``_form.py``): each pair's answer side must be in the task's answer form (or the
   form inferred from the gold side; a gold side that is a lone variable is a name), not the
   work that leads to it: ``form:integer`` ... ``form:expression``, ``form:set``, ...; a box
   the form reader cannot read is ``unparseable``. A function of numbers in a ``closed``
   answer is checked in the worker (``closed_functions``), and so is whether each factor of a
   ``factored`` answer is irreducible (``_poly.compare_factored``); a derivative, integral,
   sum, product or limit that latex2sympy reads in the answer and not in the gold fails there
   too (``calculus_work``: ``\\frac d{dx} x^3`` for ``3x^2``), and so does a prime the gold side
   has not (``y^{\\prime}`` is ``y'``; latex2sympy drops primes: ``(e^x)'`` is ``e^x``); fewer
   primes than the gold side is a wrong answer (``y = 2x`` for ``y' = 2x``). Where the prompt asks to
   simplify, an ``expression`` value must also be no longer than the gold's (``_simplify.py``):
   ``form:expression``; a number must not be the question's own expression, longer than the
   gold (``_simplify.question_problem``: ``\\frac{\\ln 4}{2}`` for ``\\ln 2``): ``form:<form>``.
6. Each remaining pair of expressions compares by value, exactly: decimals are the rationals
   they spell (``0.5`` is ``\\frac{1}{2}``; ``0.333333`` is not ``\\frac{1}{3}``; the repeating
   ``0.\\overline{3}`` is) and no float is ever formed. Numbers built from integers, decimals,
   ``\\frac``, ``+ - \\times \\cdot \\div /``, integer powers and brackets are evaluated here as
   ``Fraction`` s (``1.0 \\times 10^{20}`` is exactly 10^20). In the ``expanded`` and
   ``factored`` forms both sides are polynomials as ``_poly`` reads them, compared as such
   (``_compare_polynomials``). Anything else (surds, ``\\pi``, symbols, sets, tuples, intervals,
   matrices) is parsed by latex2sympy (symbol case kept) in a worker and compared structurally:
   same kind, same free symbols, and ``simplify(gold - answer) == 0`` for each element (two
   rational functions that differ at one rational point, computed exactly, differ without
   ``simplify``: ``_differ``). What
   latex2sympy is given is the reader's reading re-spelled (``_read.sympy_spelling``: ``\\frac12``,
   ``\\lg``, ``\\operatorname{sin}``, ...), and a side the evaluator here reads is given as its
   exact value (``\\frac{p}{q}``), whatever its spelling.
7. Approximate comparison only when the task gives a ``tolerance`` (``{"abs": a, "rel": r}``):
   two numbers are equal when ``|answer - gold| <= max(a, r * |gold|)``.

Why a worker: sympy can take unbounded time (``10^{10^{10^{10}}}``) or memory, so the sympy step
runs in ``posttrain.verify._deadline`` workers under a CPU budget: an answer that uses it up
fails (``timeout``); a worker starved of CPU is an infra error, retried by the caller. An answer
nested deeper than ``MAX_DEPTH`` brackets (and than the gold) is not sent: ``unparseable``.

Model text is only ever parsed by latex2sympy (an ANTLR grammar that builds sympy objects) or the
small evaluator here, never ``eval``/``parse_expr`` (reward-hacking.md MATH-06).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from posttrain.envs.math._form import FORMS, NUMERIC, SHAPES, form_problem, infer_form, is_name
from posttrain.envs.math._poly import (
    POLYNOMIAL_FORMS,
    NotInForm,
    compare_factored,
    degrees,
    read_polynomial,
    reducible_factor,
)
from posttrain.envs.math._read import _UNICODE, REPEATING, Unreadable, Work, number_value, sympy_spelling
from posttrain.envs.math._simplify import question_problem, simplify_problem
from posttrain.verify._deadline import CheckPool, shared_pool

CPU_BUDGET_S = 10.0
_MAX_BITS = 100_000
"""The largest numerator or denominator the in-process evaluator builds (~30,000 digits); a
bigger number goes to sympy in a worker, under the CPU budget, so no answer can stall a trainer
thread here."""


@dataclass(frozen=True)
class Tolerance:
    """Approximate comparison a task may allow: ``|answer - gold| <= max(abs, rel * |gold|)``."""

    abs: float = 0.0
    rel: float = 0.0

    def accepts(self, gold: Fraction, answer: Fraction) -> bool:
        bound = max(Fraction(repr(self.abs)), Fraction(repr(self.rel)) * abs(gold))
        return abs(answer - gold) <= bound


@dataclass(frozen=True)
class Equivalence:
    """The result of comparing one boxed answer with the gold answer."""

    equal: bool
    status: str
    """``ok`` (compared; ``equal`` says how) | ``form:text`` | ``form:percent`` | ``form:relation``
    | ``form:<form>`` (``_form.FORMS``) | ``form:<shape>`` (``_form.SHAPES``) | ``unparseable`` |
    ``timeout`` | ``gold_unparseable`` | ``infra``.

    The ``form:*`` statuses, ``unparseable`` and ``timeout`` are the answer's doing; ``infra``
    (the checker's worker could not start or was starved of CPU) and ``gold_unparseable`` are not."""
    method: str = ""
    """How the values were compared: ``string``, ``text``, ``exact``, ``tolerance``, ``sympy`` or
    ``factors`` (two factorizations, ``_poly.canonical``)."""
    detail: str | None = None


# ---------------------------------------------------------------- 1-4: normalisation and form

_NOISE_RE = re.compile(r"\\\\|\\?\$|\\(?:left|right)(?:\.|(?![A-Za-z]))|\\displaystyle|\\[,;:! ]|~")
"""Noise to drop; ``\\\\`` (a matrix's row break) is matched first so that it stays whole; ``\\$`` (a
dollar sign, ``\\$18.90``) goes whole: dropping only its ``$`` left ``\\ 18.90``, which latex2sympy
cannot parse, so a gold written so made every other answer an infra error. ``\\left.`` and
``\\right.`` (the empty delimiters) go whole too: the reader read their ``.`` as a number."""
_SYMBOLS = {**_UNICODE, "°": "^{\\circ}", "′": "'", "″": "''"}
"""Unicode symbols as the LaTeX they stand for (the reader's table, ``_read._UNICODE``), so that the
form reader and latex2sympy read the same text: a gold ``30°`` or ``(-∞, 3)``, which the reader read
and latex2sympy could not, made every other answer an infra error."""
_THIN_GROUPS_RE = re.compile(r"(?<![\d.])\d{1,3}(?:\\,\d{3})+(?!\d)")
"""``1\\,000``: thousands in groups, by a thin space (SI); dropping the space left ``1 000``, read as
``1 \\cdot 000`` (0), so a gold written so failed its right answer."""
_BARE_ROOT_RE = re.compile(r"\\sqrt(?![A-Za-z])\s*([0-9A-Za-z])")
"""``\\sqrt2``, ``2\\sqrt 3``, ``√2``: a root of one character, as TeX and the form reader read it;
latex2sympy reads only ``\\sqrt{2}``, so a gold ``2\\sqrt3`` made every other answer an infra error
(and the answer ``2\\sqrt3`` was refused as unparseable)."""
_PRIME_RE = re.compile(r"\^\s*\{(?:\s*\\prime(?![A-Za-z]))+\s*\}|\^\s*\\prime(?![A-Za-z])")
"""``y^{\\prime}``, ``y^\\prime``: the prime ``y'`` (latex2sympy read the symbol ``prime``). latex2sympy
drops a prime (``(e^x)'`` is ``e^x``), so ``compare`` counts them on each side: ``y = 2x`` passed
for the gold ``y' = 2x``, and the question's ``(e^x)'`` for its derivative."""
_TEXT_RE = re.compile(r"\\(?:text|textrm|textbf|textit|textnormal|textsf|texttt|mbox)(?![A-Za-z])")
_PERCENT_RE = re.compile(r"\s*\\?%$")
_RELATION_RE = re.compile(r"\\(?:leq?|geq?|neq?|lt|gt|approx|equiv|sim|in)(?![A-Za-z])|<|>|=|≤|≥|≠")
_CANONICAL = {"\\le": "\\leq", "\\ge": "\\geq", "\\ne": "\\neq", "\\lt": "<", "\\gt": ">", "≤": "\\leq",
              "≥": "\\geq", "≠": "\\neq"}
_MIRROR = {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq"}
_OPEN, _CLOSE = "({[", ")}]"


def normalise(text: str) -> str:
    """Rule 1: the form both sides are compared in.

    >>> normalise(r"$\\left( \\dfrac{1}{2} \\right).$")
    '( \\\\frac{1}{2} )'
    """
    for char, latex in _SYMBOLS.items():
        text = text.replace(char, latex)
    text = _THIN_GROUPS_RE.sub(lambda m: m.group().replace("\\,", ""), text)
    text = _NOISE_RE.sub(lambda m: m.group() if m.group() == "\\\\" else " ", text)
    text = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", text)
    text = re.sub(r"\\cdotp(?![A-Za-z])", r"\\cdot ", text)  # latex2sympy read \cdotp as the letter p
    text = _BARE_ROOT_RE.sub(r"\\sqrt{\1}", text)
    text = _PRIME_RE.sub(lambda m: "'" * m.group().count("prime"), text)
    return re.sub(r"\s+", " ", text).strip().rstrip(".").strip()


def _text_key(text: str) -> str:
    return re.sub(r"[\s{}]+", "", _TEXT_RE.sub("", text)).casefold()


def split_relations(text: str) -> tuple[list[str], list[str]]:
    """Rule 4: the expressions and the relations between them, outside brackets.

    >>> split_relations(r"x = \\frac{a=b}{2} \\le 3")
    (['x', '\\\\frac{a=b}{2}', '3'], ['=', '\\\\leq'])
    """
    parts, relations, depth, start = [], [], 0, 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif depth == 0 and (m := _RELATION_RE.match(text, i)):
            parts.append(text[start:i].strip())
            relations.append(_CANONICAL.get(m.group(), m.group()))
            i = start = m.end()
            continue
        i += 1
    parts.append(text[start:].strip())
    return parts, relations


# ---------------------------------------------------------------- 5: exact numbers, evaluated here


class _NotExact(Exception):
    """The expression is not an exact number this evaluator reads (sympy will try)."""


_TOKEN_RE = re.compile(r"\s*(" + REPEATING + r"|\d+\.\d*|\.\d+|\d+|\\frac(?![A-Za-z])|\\times(?![A-Za-z])|\\cdot(?![A-Za-z])"
                       r"|\\div(?![A-Za-z])|[-+*/^(){}])")
_GROUPED_RE = re.compile(r"[+-]?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?")


def exact_value(text: str) -> Fraction | None:
    """The exact value of a number written with integers, decimals, ``\\frac``, ``+ - \\times
    \\cdot \\div /``, integer powers and brackets; None for anything else.

    >>> exact_value(r"1.0 \\times 10^{20}") == 10**20, exact_value("0.333333") == Fraction(1, 3)
    (True, False)
    >>> exact_value(r"\\sqrt{2}") is None
    True
    """
    if _GROUPED_RE.fullmatch(text):  # 1,000 or 1{,}000: one number with thousands separators
        text = text.replace("{,}", "").replace(",", "")
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            return None if text[pos:].strip() else _evaluate(tokens)
        tokens.append(m.group(1))
        pos = m.end()
    return _evaluate(tokens)


def _evaluate(tokens: list[str]) -> Fraction | None:
    parser = _Parser(tokens)
    try:
        value = parser.sum()
        if parser.i != len(tokens):
            return None
        return value
    except (_NotExact, ZeroDivisionError, RecursionError):
        return None


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > _MAX_BITS:
        raise _NotExact("a number too large to evaluate here")
    return value


class _Parser:
    """Recursive descent: sum := product (('+'|'-') product)*; product := unary (op unary)*;
    unary := ('+'|'-') unary | power; power := atom ('^' atom)?; atom := number | \\frac G G
    | '(' sum ')' | '{' sum '}'. A juxtaposition (``2\\frac{1}{2}``, ``2x``) is not read here."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _NotExact(f"expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def sum(self) -> Fraction:
        value = self.product()
        while self.peek() in ("+", "-"):
            value = _bounded(value + self.product() if self.take() == "+" else value - self.product())
        return value

    def product(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "\\times", "\\cdot", "/", "\\div"):
            op = self.take()
            value = _bounded(value * self.unary() if op in ("*", "\\times", "\\cdot") else value / self.unary())
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("+", "-"):
            return self.unary() if self.take() == "+" else -self.unary()
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.atom()
        if exponent.denominator != 1:
            raise _NotExact("a fractional power")
        size = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(exponent.numerator)
        if size > _MAX_BITS:
            raise _NotExact("a power too large to evaluate here")
        return base ** exponent.numerator

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "\\frac":
            return self.group() / self.group()
        if tok in ("(", "{"):
            value = self.sum()
            self.take(")" if tok == "(" else "}")
            return value
        if tok[0].isdigit() or tok[0] == ".":
            return number_value(tok)
        raise _NotExact(f"unexpected {tok!r}")

    def group(self) -> Fraction:
        if self.peek() == "{":
            return self.atom()
        tok = self.take()  # \frac12: single-character arguments
        if not tok.isdigit():
            raise _NotExact("a \\frac argument")
        if len(tok) > 1:
            self.tokens[self.i - 1:self.i] = [tok[0], tok[1:]]
            tok = tok[0]
        return Fraction(tok)


# ---------------------------------------------------------------- the whole rule


def compare(gold: str, answer: str, tolerance: Tolerance | None = None, checker: MathChecker | None = None,
            form: str | None = None, *, simplify: frozenset[str] | None = None) -> Equivalence:
    """Compare a boxed ``answer`` with ``gold`` by the rule of the module docstring; ``form`` is
    the task's answer form (``_form.FORMS``), None to infer it from each gold value; ``simplify``:
    where the prompt asks to simplify, the reader's keys of what it asks to simplify
    (``_prompt.simplify_question``): an ``expression`` value is then no longer than the gold's
    (``_simplify.simplify_problem``).

    >>> compare("5", "2+2=5").status, compare("50", r"50\\%").status, compare("x^2", "X^2").equal
    ('form:relation', 'form:percent', False)
    >>> compare("500", r"34 \\times 15 - 10").status, compare("500", "500", form="integer").equal
    ('form:number', True)
    """
    gold, answer = normalise(gold), normalise(answer)
    if gold == answer:
        return Equivalence(True, "ok", "string")
    if _TEXT_RE.search(gold):
        return Equivalence(_text_key(gold) == _text_key(answer), "ok", "text")
    if _TEXT_RE.search(answer):
        return Equivalence(False, "form:text", detail="text inside the boxed answer")
    gold_pct, answer_pct = _PERCENT_RE.search(gold), _PERCENT_RE.search(answer)
    if bool(gold_pct) != bool(answer_pct):
        return Equivalence(False, "form:percent", detail="a percent against a number, or the reverse")
    if gold_pct and answer_pct:
        gold, answer = gold[: gold_pct.start()], answer[: answer_pct.start()]
    gold_parts, gold_rels = split_relations(gold)
    answer_parts, answer_rels = split_relations(answer)
    pairings = []
    if answer_rels == gold_rels:
        pairings.append(list(zip(gold_parts, answer_parts, strict=True)))
    if gold_rels and answer_rels == [_MIRROR.get(r, r) for r in reversed(gold_rels)]:
        pairings.append(list(zip(gold_parts, reversed(answer_parts), strict=True)))
    if not pairings:
        return Equivalence(False, "form:relation", detail=f"relations {answer_rels} where {gold_rels} are expected")
    results: list[Equivalence] = []
    for pairs in pairings:  # a pairing that fails by form leaves the mirrored one to try
        result = _compare_pairs(pairs, tolerance, checker, form, simplify)
        if result.equal or not (result.status == "ok" or result.status in _FORM_STATUSES):
            return result
        results.append(result)
    return next((r for r in results if r.status != "ok"), results[0])


def _compare_pairs(pairs: list[tuple[str, str]], tolerance: Tolerance | None, checker: MathChecker | None,
                   form: str | None, simplify: frozenset[str] | None) -> Equivalence:
    result = Equivalence(True, "ok", "exact")
    named = False  # only a relation's first lone variable is its name: in ``y = x``, ``x`` is a value
    for g, a in pairs:
        name = len(pairs) > 1 and not named and is_name(g)
        named |= name
        result = _compare_values(g, a, tolerance, checker, form, simplify, name=name)
        if not (result.equal and result.status == "ok"):
            return result
    return result


def _compare_values(gold: str, answer: str, tolerance: Tolerance | None, checker: MathChecker | None,
                    form: str | None, simplify: frozenset[str] | None, *, name: bool = False) -> Equivalence:
    if not answer or not gold:
        return Equivalence(False, "unparseable", detail="an empty side of a relation")
    # x in ``x = 3`` is a name, not a value; a whole gold ``x`` is a value ("Simplify
    # $\frac{x^2}{x}$"), and so is the second side of ``y = x``: the form and simplification of
    # neither were checked, and the question passed
    want = None if name else form or infer_form(gold)
    if want is not None and gold != answer:
        problem = form_problem(answer, want, gold)
        if problem is not None:
            return Equivalence(False, problem[0], detail=problem[1])
        unsimplified = simplify is not None and (
            simplify_problem(answer, gold, simplify) if want == "expression"
            else question_problem(answer, gold, simplify) if want in NUMERIC else None)
        if unsimplified:
            return Equivalence(False, f"form:{want}", detail=unsimplified)
    primes = answer.count("'") - gold.count("'")
    if primes > 0:
        return Equivalence(False, f"form:{want or 'expression'}", detail="work still to do: a derivative (a prime)")
    if primes < 0:
        return Equivalence(False, "ok", "string", detail="fewer primes than the gold")
    if want in POLYNOMIAL_FORMS:
        return _compare_polynomials(gold, answer, want, checker)
    g, a = exact_value(gold), exact_value(answer)
    if g is not None and a is not None:
        if tolerance is not None:
            return Equivalence(tolerance.accepts(g, a), "ok", "tolerance")
        return Equivalence(g == a, "ok", "exact")
    gold, answer = (text if q is None else fraction_latex(q) for text, q in ((gold, g), (answer, a)))
    if too_deep := _too_deep(gold, answer):
        return too_deep
    return (checker or shared_checker()).equivalent(gold, answer, tolerance, form=want)


MAX_DEPTH = 10
"""The deepest brackets (``( [ {``, any mix) an answer sent to the worker may nest, unless the gold
nests deeper: latex2sympy's parse of redundant brackets grows faster than linearly (``(3)`` nested
10 deep: ~0.7 s for the two parses, 20: ~2 s, 35: the whole 10 s budget), so a 72-character box used
up the worker's CPU (``timeout``; under contention the wall limit first: ``starved``, an infra
error, which drops the group)."""


def bracket_depth(text: str) -> int:
    """The deepest nesting of ``( [ {`` in ``text``.

    >>> bracket_depth(r"\\frac{(x+1)^{2}}{2}"), bracket_depth("((3))")
    (2, 2)
    """
    depth = deepest = 0
    for ch in text:
        if ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE:
            depth -= 1
    return deepest


def _too_deep(gold: str, answer: str) -> Equivalence | None:
    limit = max(MAX_DEPTH, bracket_depth(gold))
    if bracket_depth(answer) > limit:
        return Equivalence(False, "unparseable", detail=f"brackets nested deeper than {limit}")
    return None


def fraction_latex(q: Fraction) -> str:
    """An exact value as the LaTeX latex2sympy reads (the generated fraction tasks write their golds
    so): ``1{,}000`` or ``\\frac12`` is not given to it.

    >>> fraction_latex(Fraction(-3, 4)), fraction_latex(Fraction(1000))
    ('-\\\\frac{3}{4}', '1000')
    """
    if q.denominator == 1:
        return str(q.numerator)
    return f"{'-' if q < 0 else ''}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _compare_polynomials(gold: str, answer: str, form: str, checker: MathChecker | None) -> Equivalence:
    """Rule 6 for ``expanded`` and ``factored``: both sides as ``_poly`` reads them (the answer is
    in the form: checked before). Different degrees are different polynomials, here; equal expanded
    ones have equal terms, here; factored ones go to the worker, where sympy says whether each
    factor is irreducible and the factors then compare (``_poly.compare_factored``)."""
    if gold == answer:
        return Equivalence(True, "ok", "string")
    try:
        g = read_polynomial(gold, form)
    except _READ_ERRORS as e:  # a task built in code: parse_task refuses it
        return Equivalence(False, "gold_unparseable", detail=f"the gold is not {FORMS[form]}: {e}")
    a = read_polynomial(answer, form)
    if degrees(g) != degrees(a):
        return Equivalence(False, "ok", "exact")
    if form == "expanded":
        return Equivalence(g == a, "ok", "exact")
    if too_deep := _too_deep(gold, answer):
        return too_deep
    return (checker or shared_checker()).equivalent(gold, answer, form=form)


def gold_form_problem(gold: str, form: str) -> str | None:
    """Why a task's ``gold`` is not in the ``form`` the task declares or its instruction asks for
    (checked at parse time), or None: each value of it (a relation's sides but a lone variable, a
    percent's number) is read as an answer would be (functions are left to the checker: that
    needs sympy; a ``factored`` gold's factors are tested with sympy here).

    >>> gold_form_problem("17", "integer"), gold_form_problem(r"\\frac{6}{4}", "fraction")
    (None, 'a fraction not in lowest terms')
    """
    gold = normalise(gold)
    if _TEXT_RE.search(gold):
        return "a text answer (\\text{...}) has no form"
    if match := _PERCENT_RE.search(gold):
        gold = gold[: match.start()]
    for side in split_relations(gold)[0]:
        problem = None if not side or is_name(side) else form_problem(side, form)
        if problem:
            return problem[1]
        if form == "factored" and side and not is_name(side) and (problem := reducible_factor(side)):
            return problem  # sympy, here: a gold is the task's, and this runs once per task
    return None


@functools.lru_cache(maxsize=4096)  # latex2sympy takes ~10 ms a side; a file repeats its golds
def unreadable_gold(gold: str, form: str | None = None) -> str | None:
    """Why the checker cannot read a task's ``gold`` (checked at parse time: every answer but the
    gold's own spelling that goes to the worker would be an infra error), or None; ``form``: the
    task's form, where it has one. A side the evaluator here reads is compared as its exact value,
    a side in a polynomial form as ``_poly`` reads it (``gold_form_problem`` checks that); another
    one is given to latex2sympy, here, as the worker gives it (``_parse``): a side only the form
    reader reads is not enough, since the worker compares what latex2sympy reads (``e_1``,
    ``\\sin(1, 2)``, a number too large to compare, ``10^{10^{100}}``, were taken as read, and every
    answer to them was an infra error).

    >>> unreadable_gold("0.\\\\overline{3}"), unreadable_gold("\\\\text{Monday}"), unreadable_gold("1, 2, \\\\ldots")
    (None, None, "latex2sympy: I don't understand this")
    """
    gold = normalise(gold)
    if _TEXT_RE.search(gold):
        return None
    if match := _PERCENT_RE.search(gold):
        gold = gold[: match.start()]
    for side in split_relations(gold)[0]:
        if not side or (form in POLYNOMIAL_FORMS and not is_name(side)) or exact_value(side) is not None:
            continue
        try:
            _parse(side)
        except Exception as e:  # noqa: BLE001 - any failure to parse the gold is the task's, said in one line
            return f"latex2sympy: {str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__}"
    return None


_READ_ERRORS = (NotInForm, Unreadable, Work, ValueError, ZeroDivisionError, RecursionError)
_FORM_STATUSES = frozenset(f"form:{name}" for name in (*FORMS, *SHAPES))


class MathChecker:
    """The sympy step (rule 5, past the exact evaluator) in worker processes under a CPU budget."""

    def __init__(self, size: int = 2, cpu_budget_s: float = CPU_BUDGET_S, wall_limit_s: float | None = None,
                 *, pool: CheckPool | None = None) -> None:
        self.pool = pool or CheckPool(__name__, size=size, cpu_budget_s=cpu_budget_s, wall_limit_s=wall_limit_s)

    def equivalent(self, gold: str, answer: str, tolerance: Tolerance | None = None, *, form: str | None = None
                   ) -> Equivalence:
        """``form``: the answer's form. In ``closed``, a function that sympy evaluates
        (``\\sin(\\pi/4)``, ``\\log_2 8``) fails it (``form:closed``); in ``factored``, a factor
        that factors further does (``form:factored``), and the values compare as ``_poly`` reads them."""
        tol = None if tolerance is None else [tolerance.abs, tolerance.rel]
        outcome = self.pool.run({"gold": gold, "answer": answer, "tolerance": tol, "form": form})
        if outcome.status == "ok":
            return Equivalence(**outcome.result)
        if outcome.is_infra:
            return Equivalence(False, "infra", detail=outcome.detail)
        if outcome.status in ("cpu_exceeded", "stalled"):
            return Equivalence(False, "timeout", detail=outcome.detail)
        return Equivalence(False, "unparseable", detail=outcome.detail)  # raised or crashed on the answer

    def close(self) -> None:
        self.pool.close()


def shared_checker() -> MathChecker:
    """The process-wide checker (its workers die with the process)."""
    return MathChecker(pool=shared_pool(__name__, cpu_budget_s=CPU_BUDGET_S))


# ---------------------------------------------------------------- worker side: sympy

_DECIMAL_RE = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
_REPEATING_RE = re.compile(r"(?<![\d.])" + REPEATING)


def _exact_latex(text: str) -> str:
    """Each decimal literal as the fraction it spells, so that sympy never forms a float; a
    repeating decimal (``0.\\overline{3}``, which latex2sympy does not read) too."""
    text = _REPEATING_RE.sub(lambda m: "(\\frac{{{0.numerator}}}{{{0.denominator}}})".format(number_value(m.group())),
                             text)
    return _DECIMAL_RE.sub(lambda m: f"(\\frac{{{m.group(1)}{m.group(2)}}}{{1{'0' * len(m.group(2))}}})", text)


def _parse(text: str) -> Any:
    return _parse_both(text)[1]


def _parse_both(text: str) -> tuple[Any, Any]:
    """``text`` parsed unevaluated (None where only the evaluated parse works) and evaluated."""
    import sympy
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig, latex2sympy

    config = ConversionConfig(lowercase_symbols=False, interpret_contains_as_eq=False,
                              interpret_simple_eq_as_assignment=False)
    latex = _exact_latex(sympy_spelling(text))
    try:
        with sympy.evaluate(False):  # first unevaluated, to refuse 10^{10^{10}} before sympy computes it
            raw = latex2sympy(latex, normalization_config=None, conversion_config=config)
    except Exception:  # noqa: BLE001 - some forms parse only evaluated (2\frac{1}{2}); the CPU budget bounds them
        raw = None
    if _too_large(raw):
        raise ValueError(f"a number with more than {_MAX_SYMPY_BITS} bits or a power of degree above {_MAX_DEGREE}")
    expr = latex2sympy(latex, normalization_config=None, conversion_config=config)
    if isinstance(expr, sympy.Basic) and expr.atoms(sympy.Float):
        raise ValueError("an inexact number")
    if _too_large(expr):  # powers evaluation combined: ((x^{1000})^{1000}) is x^{1000000}
        raise ValueError(f"a power of degree above {_MAX_DEGREE}")
    return raw, expr


def closed_functions(raw: Any) -> str | None:
    """Why an answer read unevaluated (``raw``; the evaluated parse where only that one works) is
    not in the closed form for its functions: one
    of numbers whose value sympy finds without it (``sin(pi/4)`` is ``sqrt(2)/2``, ``log(8, 2)``
    is 3, ``exp(log(2))`` is 2, ``atan(1)`` is ``pi/4``); ``log(2)`` or ``sin(1)`` stay. ``exp(1)``
    is the constant ``e`` as latex2sympy reads it unevaluated (``1 + e`` failed as a function to
    evaluate)."""
    import sympy
    from sympy.core.function import AppliedUndef

    for node in sympy.preorder_traversal(raw):
        if isinstance(node, sympy.Function) and not isinstance(node, AppliedUndef) and not node.free_symbols:
            if node.func is sympy.exp and node.args == (1,):
                continue
            if not node.doit().has(node.func):
                return f"a function to evaluate ({node.func.__name__})"
    return None


def calculus_work(*exprs: Any) -> str | None:
    """The calculus still to do in what latex2sympy read (a derivative, an integral, a sum, a
    product, a limit), or None. The form reader refuses these by their spelling
    (``_form.expression_problem``); latex2sympy builds them from spellings it does not name
    (``\\frac d{dx} x^3``, ``\\cfrac{d}{dx}``), and ``simplify`` then does the work: the
    question's own derivative passed for its answer."""
    import sympy

    kinds = {sympy.Derivative: "a derivative", sympy.Integral: "an integral", sympy.Sum: "a sum",
             sympy.Product: "a product", sympy.Limit: "a limit"}
    for expr in exprs:
        if isinstance(expr, sympy.MatrixBase):
            expr = sympy.ImmutableMatrix(expr)
        if isinstance(expr, sympy.Basic):
            for kind, name in kinds.items():
                if expr.atoms(kind):
                    return name
    return None


_MAX_SYMPY_BITS = 1_000_000
_MAX_DEGREE = 100_000


def _too_large(expr: Any) -> bool:
    """Whether a numeric power, factorial or binomial in ``expr`` has more than ``_MAX_SYMPY_BITS``
    bits (estimated at 15 digits, which never computes it: ``(10^{10})!`` used the whole CPU budget),
    or a power of a variable has a degree above ``_MAX_DEGREE`` (``(x-1)^{10^{10}}`` ran the
    worker out of memory)."""
    import sympy

    if not isinstance(expr, sympy.Basic):
        return False
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and not node.base.is_number and node.exp.is_number:
            if bool(abs(sympy.N(node.exp, 15)) > _MAX_DEGREE):  # what expanding it would cost
                return True
            continue
        bits = _bits(node)
        if bits is not None and (bits.is_finite is False or bool(bits > _MAX_SYMPY_BITS)):
            return True
    return False


def _bits(node: Any) -> Any:
    """The estimated size in bits of a numeric power, factorial or binomial (``n!``: ``n log2 n``;
    ``binomial(n, k)``: ``k log2 n``), or None for another node."""
    import sympy

    if isinstance(node, sympy.Pow) and node.base.is_number and node.exp.is_number:
        base = abs(sympy.N(node.base, 15))
        if base.is_zero or base == 1 or not base.is_finite:
            return None
        return abs(sympy.N(node.exp, 15)) * abs(sympy.N(sympy.log(base, 2), 15))
    if isinstance(node, sympy.factorial | sympy.factorial2 | sympy.gamma | sympy.binomial) and all(
            arg.is_number for arg in node.args):
        n = abs(sympy.N(node.args[0], 15))
        k = min(abs(sympy.N(node.args[1], 15)), abs(n - sympy.N(node.args[1], 15))) if len(node.args) == 2 else n
        return k * abs(sympy.N(sympy.log(n + 2, 2), 15))
    return None


def _same(g: Any, a: Any, tol: list[float] | None) -> bool:
    import sympy

    if g == a:
        return True
    if isinstance(g, sympy.MatrixBase) or isinstance(a, sympy.MatrixBase):
        return (isinstance(g, sympy.MatrixBase) and isinstance(a, sympy.MatrixBase) and g.shape == a.shape
                and all(_same(x, y, tol) for x, y in zip(g, a, strict=True)))
    if isinstance(g, sympy.Tuple) or isinstance(a, sympy.Tuple):
        return (type(g) is type(a) and len(g) == len(a) and all(_same(x, y, tol) for x, y in zip(g, a, strict=True)))
    if isinstance(g, sympy.FiniteSet) or isinstance(a, sympy.FiniteSet):
        if not (isinstance(g, sympy.FiniteSet) and isinstance(a, sympy.FiniteSet)) or len(g) != len(a):
            return False
        return (all(any(_same(x, y, tol) for y in a) for x in g) and all(any(_same(x, y, tol) for x in g) for y in a))
    if isinstance(g, sympy.Interval) or isinstance(a, sympy.Interval):
        return (isinstance(g, sympy.Interval) and isinstance(a, sympy.Interval) and g.left_open == a.left_open
                and g.right_open == a.right_open and _same(g.start, a.start, tol) and _same(g.end, a.end, tol))
    if not (isinstance(g, sympy.Expr) and isinstance(a, sympy.Expr)):
        return False
    if {s.name for s in g.free_symbols} != {s.name for s in a.free_symbols}:
        return False
    if tol is not None and g.is_number and a.is_number:
        gv, av = sympy.N(g, 50), sympy.N(a, 50)
        if not (gv.is_real and av.is_real and gv.is_finite and av.is_finite):
            return False
        return bool(abs(av - gv) <= max(sympy.Float(tol[0], 50), sympy.Float(tol[1], 50) * abs(gv)))
    if g.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) or a.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return False  # equal infinities were caught by ``g == a``; oo - oo is nan, not 0
    return not _differ(g, a) and sympy.simplify(g - a) == 0


def _differ(g: Any, a: Any) -> bool:
    """Whether two rational functions of their symbols (rational coefficients, integer powers)
    differ at one rational point (the symbols at 29/37, 31/37, ...), computed exactly: a wrong
    answer then costs one evaluation instead of ``simplify`` (``(x+1)^{1000}`` against
    ``x^2+2x+1`` took 6 s of it, ``(x+1)^{100000}`` the whole CPU budget). Anything else, a pole
    at the point, or a value too large to compute, is left to ``simplify``."""
    import sympy

    symbols = sorted(g.free_symbols | a.free_symbols, key=str)
    if _exact_bits(g) + _exact_bits(a) > 10 * _MAX_SYMPY_BITS:  # ~0.1 s of big-integer arithmetic
        return False
    point = {s: sympy.Rational(29 + 2 * i, 37) for i, s in enumerate(symbols)}
    gv, av = g.xreplace(point), a.xreplace(point)
    return bool(gv.is_Rational and av.is_Rational and gv != av)


def _exact_bits(expr: Any) -> float:
    """An upper bound on the bits of ``expr``'s exact value at a point of 12-bit rationals, or
    infinity where ``expr`` is not a rational function with rational coefficients."""
    if expr.is_Symbol:
        return 12
    if expr.is_Rational:
        return expr.p.bit_length() + expr.q.bit_length()
    if expr.is_Pow and expr.exp.is_Integer:
        return abs(int(expr.exp)) * _exact_bits(expr.base)
    if expr.is_Add or expr.is_Mul:
        return sum(_exact_bits(arg) for arg in expr.args) + len(expr.args)
    return float("inf")


_BASE_RE = re.compile(r"(?<![A-Za-z\\])\d\s*_")
"""A subscript on a number (``12_{3}``): a base the parser would drop, or room to hide text."""


def warm_up() -> None:
    """Import sympy and the LaTeX grammar before the worker says it is ready."""
    _same(_parse("\\frac{1}{\\sqrt{2}}"), _parse("\\frac{\\sqrt{2}}{2}"), None)


def handle_check(request: dict[str, Any]) -> dict[str, Any]:
    """The worker side of ``MathChecker.equivalent``: one pair of expressions, compared by sympy."""
    if request.get("form") == "factored":
        return compare_factored(request["gold"], request["answer"])
    tol = request["tolerance"]
    try:
        gold = _parse(request["gold"])
    except Exception as e:  # noqa: BLE001 - the task's fault: an infra error, reported as such
        return {"equal": False, "status": "gold_unparseable", "method": "sympy", "detail": f"{type(e).__name__}: {e}"[:300]}
    if _BASE_RE.search(request["answer"]) and not _BASE_RE.search(request["gold"]):
        return {"equal": False, "status": "unparseable", "method": "sympy", "detail": "a subscript on a number"}
    try:
        raw, answer = _parse_both(request["answer"])
    except Exception as e:  # noqa: BLE001 - the answer's fault: a failure
        return {"equal": False, "status": "unparseable", "method": "sympy", "detail": f"{type(e).__name__}: {e}"[:300]}
    work = calculus_work(answer, raw) if not calculus_work(gold) else None
    if work:
        status = f"form:{request.get('form') or 'expression'}"
        return {"equal": False, "status": status, "method": "sympy", "detail": f"work still to do: {work}"}
    problem = closed_functions(answer if raw is None else raw) if request.get("form") == "closed" else None
    if problem:
        return {"equal": False, "status": "form:closed", "method": "sympy", "detail": problem}
    return {"equal": bool(_same(gold, answer, tol)), "status": "ok", "method": "tolerance" if tol else "sympy",
            "detail": str(answer)[:200]}


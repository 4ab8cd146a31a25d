"""The polynomial answer forms, ``expanded`` and ``factored`` (docs/tasks.md, "Answer forms").

The ``expression`` form takes any expression equal to the gold, so "Expand $(x+1)^2$" took
``(x+1)^2`` and "Factor $x^2-1$" took ``x^2-1``: the question's own expression scored 1. A task
that asks for one of these forms (its ``form`` field, or its instruction: ``_prompt.py``) takes
only a polynomial with rational coefficients, written so:

- ``expanded``: a sum of distinct monomials, each a nonzero rational coefficient (an integer, a
  decimal or a fraction in lowest terms; 1 unwritten) times distinct variables, each to an
  integer power >= 2 or none: ``x^2+2x+1`` in any term order, ``\\frac{1}{2}x^2``,
  ``\\frac{x^2}{2}``, ``3-xy``. Not: a product or power of a sum (``(x+1)(x+1)``, ``(x+1)^2``),
  like terms (``x^2+x+x+1``), a zero term (``x^2+2x+1+0``), a written coefficient 1 (``1x``), a
  repeated variable (``x \\cdot x``), a power 0 or 1 (``x^1``), two numbers in one term.
- ``factored``: an optional sign and rational constant times factors, each a variable or a
  bracketed polynomial in expanded form with integer coefficients and no common divisor,
  irreducible over the rationals (sympy decides, in the checker's worker: ``reducible_factor``
  in ``_check.py``), each to an integer power >= 2 or none: ``(x-1)(x+1)`` in any order,
  ``-(1-x)(x+1)``, ``3(x-2)(x+2)``, ``x^2(x+1)``, ``\\frac{(2x-1)(2x+1)}{4}``. Not: ``x^2-1``,
  ``1 \\cdot (x^2-1)``, ``(x^2-1)^1`` (a reducible factor; a constant 1; a power 1), ``2x+2`` for
  ``2(x+1)`` (a common divisor left in: over the rationals ``2x+2`` is irreducible, so without
  this rule the question's own ``2x+2`` would pass), ``(x-1)(x+1)+0`` (a sum, not a product).

Values compare from this one reading (``read_polynomial``), so the form and the value can never
be judged from two readings that disagree, and nothing is ever expanded: two expanded
polynomials are equal when their terms are; two factored ones, once sympy has found every
factor irreducible (in the checker's worker), when their factors are, up to sign and order
(``canonical``: factorization is unique). A check of the degree in each variable (``degrees``)
comes first, so ``(x+1)^{10^9}`` is a wrong answer before any sympy.

Not handled: coefficients that are not rational (``\\sqrt{2}x``, ``\\pi x``), negative powers,
rational functions, a container of polynomials. Pure Python over ``_read``'s tree, as ``_form.py``,
but for the last section (sympy: ``compare_factored`` in the checker's worker, under its CPU
budget; ``reducible_factor`` also at parse time, on a task's gold).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from posttrain.envs.math._read import Node, Unreadable, Work, read

Monomial = tuple[tuple[str, int], ...]
"""Variables and their powers (each >= 1), sorted by name; ``()`` is the constant term."""
Polynomial = tuple[tuple[Monomial, Fraction], ...]
"""Terms with nonzero coefficients, sorted by monomial: one polynomial has one spelling."""
POLYNOMIAL_FORMS = ("expanded", "factored")
MAX_FACTOR_DEGREE = 200
"""The largest total degree of one factor in the ``factored`` form: sympy tests each factor."""
_READ_ERRORS = (Unreadable, Work, ValueError, ZeroDivisionError, RecursionError)


class NotInForm(Exception):
    """The text is a value, but not a polynomial in the form (the message says why)."""


@dataclass(frozen=True)
class Factored:
    """A polynomial as written in the ``factored`` form."""

    constant: Fraction
    """The sign and the rational constant (1 when none is written)."""
    factors: tuple[tuple[Polynomial, int], ...]
    """Each factor and its power, in the order written."""


# ---------------------------------------------------------------- reading


@functools.lru_cache(maxsize=4096)  # asked of the gold at every check
def read_polynomial(text: str, form: str) -> Polynomial | Factored:
    """The polynomial ``text`` spells in ``form``, or ``NotInForm`` (or the reader's ``Unreadable``,
    ``Work``) saying why not.

    >>> read_polynomial("x^2+2x+1", "expanded")
    (((), Fraction(1, 1)), ((('x', 1),), Fraction(2, 1)), ((('x', 2),), Fraction(1, 1)))
    >>> read_polynomial("-(1-x)(x+1)", "factored").constant
    Fraction(-1, 1)
    """
    tree = read(text)
    return expanded(tree) if form == "expanded" else factored(tree)


def polynomial_problem(text: str, form: str) -> tuple[str, str] | None:
    """``(error class, why)`` when ``text`` is not a polynomial in ``form``, else None (the
    irreducibility of a factor is the worker's to say).

    >>> polynomial_problem("(x+1)^2", "expanded"), polynomial_problem("x^2-1", "factored")
    (('form:expanded', 'a power still to expand'), None)
    >>> polynomial_problem("2x+2", "factored")
    ('form:factored', 'a factor with a common divisor 2 still in it')
    """
    try:
        read_polynomial(text, form)
    except NotInForm as e:
        return f"form:{form}", str(e)
    except Work as e:
        return f"form:{form}", f"work still to do: {e}"
    except _READ_ERRORS as e:
        return "unparseable", f"not read as a value: {e}"
    return None


def is_polynomial(text: str) -> bool:
    """Whether ``text`` reads as a polynomial in at least one variable, in any spelling
    (``(x+1)^2``, ``x(x+2)+1``): what an instruction to expand or factor is about.

    >>> is_polynomial("(x+1)^2"), is_polynomial("12"), is_polynomial("\\\\ln a + \\\\ln b")
    (True, False, False)
    """
    try:
        tree = read(text)
    except _READ_ERRORS:
        return False
    return _is_polynomial(tree) and any(n.kind == "var" for n in tree.walk())


def degrees(reading: Polynomial | Factored) -> dict[str, int]:
    """The degree in each variable: equal polynomials have equal degrees (a sum of distinct
    terms and a product of nonzero factors cancel nothing).

    >>> degrees(read_polynomial("x^2(x+y)^3", "factored"))
    {'x': 5, 'y': 3}
    """
    out: dict[str, int] = {}
    if isinstance(reading, Factored):
        for base, power in reading.factors:
            for name, d in degrees(base).items():
                out[name] = out.get(name, 0) + d * power
        return out
    for monomial, _ in reading:
        for name, e in monomial:
            out[name] = max(out.get(name, 0), e)
    return out


def canonical(reading: Factored) -> tuple[Fraction, tuple[tuple[Polynomial, int], ...]]:
    """A factorization with each factor's sign fixed (its last term positive, the constant
    taking the sign) and equal factors merged: two products of irreducible primitive factors are
    equal exactly when these are (factorization in Z[x, y, ...] is unique up to sign and order).

    >>> canonical(read_polynomial("-(1-x)(x+1)", "factored")) == canonical(read_polynomial("(x+1)(x-1)", "factored"))
    True
    """
    constant, powers = reading.constant, {}
    for base, power in reading.factors:
        if base[-1][1] < 0:
            base = tuple((m, -c) for m, c in base)
            constant *= (-1) ** power
        powers[base] = powers.get(base, 0) + power
    return constant, tuple(sorted(powers.items()))


# ---------------------------------------------------------------- expanded


def expanded(node: Node) -> Polynomial:
    """A sum of distinct monomials with nonzero rational coefficients."""
    if _number(node) == 0:
        return ()  # the zero polynomial, written alone
    if node.kind == "neg":
        if node.args[0].kind in ("neg", "add"):
            raise NotInForm("a sign still to distribute")
        signs, terms = ("-",), node.args
    elif node.kind == "add":
        signs, terms = node.ops, node.args
    else:
        signs, terms = ("+",), (node,)
    poly: dict[Monomial, Fraction] = {}
    for sign, term in zip(signs, terms, strict=True):
        if sign not in ("+", "-") or term.kind == "neg":
            raise NotInForm("a sign that is not a term's + or -")
        coefficient, monomial = _term(term)
        if monomial in poly:
            raise NotInForm("like terms that are not combined")
        poly[monomial] = -coefficient if sign == "-" else coefficient
    return tuple(sorted(poly.items()))


def _term(node: Node) -> tuple[Fraction, Monomial]:
    """One term: a coefficient and a monomial (``3x^2y``, ``\\frac{x}{2}``, ``-7`` is a sign and 7)."""
    value = _number(node)
    if value is not None:
        if value == 0:
            raise NotInForm("a zero term")
        return value, ()
    if node.kind == "div":
        num, den = node.args
        q = _whole(den) or 0
        if q < 2:
            raise NotInForm("a division by something other than an integer: not a polynomial")
        coefficient, monomial = _term(num)
        if not monomial:
            raise NotInForm("a fraction not in lowest terms")
        if coefficient.denominator != 1 or math.gcd(coefficient.numerator, q) != 1:
            raise NotInForm("a coefficient not in lowest terms")
        return coefficient / q, monomial
    coefficient: Fraction | None = None
    powers: dict[str, int] = {}
    for factor in node.args if node.kind == "mul" else (node,):
        value = _number(factor)
        if value is not None:
            if coefficient is not None:
                raise NotInForm("an operation on numbers")
            if value in (0, 1):
                raise NotInForm("a zero term" if value == 0 else "a coefficient 1 written out")
            coefficient = value
            continue
        name, power = _variable_power(factor)
        if name in powers:
            raise NotInForm("a variable repeated in a term (a product still to do)")
        powers[name] = power
    return coefficient or Fraction(1), tuple(sorted(powers.items()))


def _variable_power(node: Node) -> tuple[str, int]:
    if node.kind == "var":
        return node.name, 1
    if node.kind == "pow":
        base, exponent = node.args
        if base.kind in ("add", "mul", "neg", "pow", "div"):
            raise NotInForm("a power still to expand")
        e = _whole(exponent)
        if base.kind != "var" or e is None or e < 0:
            raise NotInForm("not a polynomial (a power that is not a variable's whole power)")
        if e < 2:
            raise NotInForm(f"a power {e} still to take")
        return base.name, e
    if node.kind == "add":
        raise NotInForm("a product still to expand")
    if node.kind in ("neg", "div"):
        raise NotInForm("a sign or a fraction inside a product")
    raise NotInForm(f"not a polynomial with rational coefficients ({_NAMES.get(node.kind, node.kind)})")


_NAMES = {"root": "a root", "func": "a function", "const": "a constant", "group": "a container",
          "matrix": "a matrix", "union": "a union", "num": "a number"}


def _number(node: Node) -> Fraction | None:
    """The value of a number as a coefficient is written: ``3``, ``0.5``, ``\\frac{1}{2}``, ``1/2``
    (lowest terms, integers), else None."""
    if node.kind == "num":
        return node.value
    if node.kind == "div" and all(a.kind == "num" and "." not in a.name for a in node.args):
        p, q = (a.value or Fraction(0) for a in node.args)
        if q > 1 and math.gcd(int(p), int(q)) == 1 and p != 0:
            return p / q
    return None


# ---------------------------------------------------------------- factored


def factored(node: Node) -> Factored:
    """A sign, a rational constant and primitive factors (irreducibility: the worker's)."""
    sign, node = _sign(node)
    denominator = 1
    if node.kind == "div" and _number(node) is None:  # \frac{(2x-1)(2x+1)}{4}
        node, den = node.args
        denominator = _whole(den) or 0
        if denominator < 2:
            raise NotInForm("a division by something other than an integer: not a polynomial")
        inner, node = _sign(node)  # \frac{-(x-1)(x+1)}{2}
        if inner < 0 and sign < 0:
            raise NotInForm("a double negation")
        sign *= inner
    constant: Fraction | None = None
    factors: list[tuple[Polynomial, int]] = []
    for factor in _factors(node):
        value = _number(factor)
        if value is None:
            factors.append(_factor(factor))
        elif constant is not None:
            raise NotInForm("an operation on numbers")
        elif value in (0, 1):
            raise NotInForm("a factor 0 or 1 written out")
        else:
            constant = value
    constant = constant or Fraction(1)
    if denominator > 1 and (constant.denominator != 1 or math.gcd(constant.numerator, denominator) != 1):
        raise NotInForm("a constant not in lowest terms")
    return Factored(sign * constant / denominator, tuple(factors))


def _sign(node: Node) -> tuple[int, Node]:
    if node.kind != "neg":
        return 1, node
    if node.args[0].kind == "neg":
        raise NotInForm("a double negation")
    return -1, node.args[0]


def _factors(node: Node) -> list[Node]:
    """The factors of a product, brackets around a product dropped: ``(x+1)(2x)`` is three."""
    if node.kind != "mul":
        return [node]
    return [f for a in node.args for f in _factors(a)]


def _factor(node: Node) -> tuple[Polynomial, int]:
    """One factor: a variable or a bracketed primitive polynomial, to a power >= 2 or none."""
    power = 1
    if node.kind == "pow":
        node, exponent = node.args
        power = _whole(exponent) or 0
        if power < 2:
            raise NotInForm("a power that is not a whole number 2 or more")
        if node.kind not in ("var", "add"):
            raise NotInForm("a power of a product or a power still to take")
    if node.kind == "neg":
        raise NotInForm("a sign inside a product")
    if node.kind != "add":
        _variable_power(node)  # a variable, or raises saying why not
    try:
        base = expanded(node)
    except NotInForm as e:
        raise NotInForm(f"a factor not expanded inside it: {e}") from None
    coefficients = [c for _, c in base]
    if any(c.denominator != 1 for c in coefficients):
        raise NotInForm("a factor with fractional coefficients (its constant not taken out)")
    divisor = math.gcd(*(int(c) for c in coefficients))
    if divisor != 1:
        raise NotInForm(f"a factor with a common divisor {divisor} still in it")
    if _total_degree(base) > MAX_FACTOR_DEGREE:
        raise NotInForm(f"a factor of degree above {MAX_FACTOR_DEGREE}, too large to test")
    return base, power


def _total_degree(base: Polynomial) -> int:
    return max(sum(e for _, e in monomial) for monomial, _ in base)


def _whole(node: Node) -> int | None:
    """An integer written as digits (``2``, ``{2}``; not ``2.0``, ``1+1``)."""
    return int(node.value) if node.kind == "num" and "." not in node.name and node.value is not None else None


def _is_polynomial(node: Node) -> bool:
    if node.kind in ("num", "var"):
        return True
    if node.kind == "pow":
        return _whole(node.args[1]) is not None and _is_polynomial(node.args[0])
    if node.kind == "div":
        return _number(node.args[1]) is not None and _is_polynomial(node.args[0])
    if node.kind == "add" and any(op not in ("+", "-") for op in node.ops):
        return False
    return node.kind in ("neg", "add", "mul") and all(_is_polynomial(a) for a in node.args)


# ---------------------------------------------------------------- sympy: the checker's worker


def compare_factored(gold: str, answer: str) -> dict[str, Any]:
    """Both sides in the ``factored`` form, in the checker's worker: each factor irreducible
    (``reducible_factor``), then equal when their factorizations are (``canonical``): no product
    is ever expanded, so no answer costs more than its own factors."""
    if reducible_factor(gold):  # a task built in code: parse_task refuses it
        return {"equal": False, "status": "gold_unparseable", "method": "sympy",
                "detail": "the gold has a factor that factors further"}
    problem = reducible_factor(answer)
    if problem:
        return {"equal": False, "status": "form:factored", "method": "sympy", "detail": problem}
    g, a = read_polynomial(gold, "factored"), read_polynomial(answer, "factored")
    assert isinstance(g, Factored) and isinstance(a, Factored)
    return {"equal": canonical(g) == canonical(a), "status": "ok", "method": "factors", "detail": None}


@functools.lru_cache(maxsize=4096)  # asked of the gold at every check
def reducible_factor(text: str) -> str | None:
    """Why a polynomial in the ``factored`` form is not factored completely: a factor of degree 2
    or more that sympy factors (over the integers, which for a primitive polynomial is over the
    rationals: Gauss's lemma), or None. A factor's degree is at most ``MAX_FACTOR_DEGREE``.

    >>> reducible_factor("(x^2-1)(x+1)"), reducible_factor("(x^2+1)(x-1)")
    ('a factor that factors further over the rationals', None)
    """
    reading = read_polynomial(text, "factored")
    assert isinstance(reading, Factored)
    for base, _ in reading.factors:
        if _total_degree(base) < 2:
            continue  # a primitive polynomial of degree 1 is irreducible
        _, parts = _sympy_poly(base).factor_list()
        if len(parts) != 1 or parts[0][1] != 1:
            return "a factor that factors further over the rationals"
    return None


def _sympy_poly(base: Polynomial) -> Any:
    import sympy

    names = sorted({name for monomial, _ in base for name, _ in monomial})
    terms = {}
    for monomial, c in base:
        powers = dict(monomial)
        terms[tuple(powers.get(name, 0) for name in names)] = sympy.Integer(int(c))
    return sympy.Poly.from_dict(terms, *(sympy.Symbol(name) for name in names), domain="ZZ")

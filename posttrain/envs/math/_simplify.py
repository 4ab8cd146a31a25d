"""What "Simplify" asks of an answer with a variable in it (docs/tasks.md, "Answer forms"): to be
no longer than the gold, as ``size`` counts, plus ``SLACK``, and not the question itself where
the question is longer than the gold (``_prompt.simplify_question``). A number has its own
simplest form (``closed``: fractions in lowest terms, simplified surds: ``_form.py``); an
expression has none, so the gold, which is simplified, is the measure. "Simplify $2x+3x$" (gold
``5x``, size 3) takes ``5x``, ``5 \\cdot x``, ``x \\cdot 5``, and refuses the question however it is
respelled (``3x+2x``: 7) or padded (``5x+0``, ``5x \\cdot 1``, ``5x^1``, ``-(-5x)``: 5 each; a
padding adds an operation and an atom, 2, so it is never within the slack of 1).

``size`` counts the atoms and operations of the reader's tree (``_read.py``), so that what does
not change the work does not count: brackets, spaces, ``\\left``/``\\right``, unicode, the order of
terms or factors, ``\\cdot`` for juxtaposition, how a sum or product is grouped. A number is one
atom however it is spelled (``0.75``, ``\\frac{3}{4}``, ``\\frac34``), and a product's numbers are one
coefficient wherever they stand: ``\\frac{2x}{3}``, ``\\frac{2}{3}x``, ``\\frac{x}{2}`` and ``0.5x`` all
count 3; a coefficient not in lowest terms counts as its two numbers (``\\frac{6x}{4}``: 5). A
negative power is a division (``x^{-1}`` is ``\\frac{1}{x}``), and ``\\sec``, ``\\csc``, ``\\cot`` are
the reciprocals they name (``\\sec x`` counts as ``\\frac{1}{\\cos x}``).

Also simplified, whatever their size, where the value is a polynomial: one in expanded form
(``_poly``: like terms combined, no zero term, no coefficient 1), and one factored into distinct
factors, each linear or a quadratic in one variable that does not factor over the rationals
(its discriminant not a square; a bigger factor would need sympy, which does not run here):
"Simplify" does not say which, so ``(x-1)(x+1)`` passes for a gold ``x^2-1`` and ``x^2+2x+1`` for
``(x+1)^2``. And the numbers in the answer are in the ``closed`` form where the gold does not
write them otherwise (``\\sqrt{12}x`` is not ``2\\sqrt{3}x`` simplified, nor ``(2+3)x`` ``5x``).

Not measured: a value the reader names but does not read (``|x|``, ``\\binom{n}{k}``: ``Work``):
there only the question's own expression is refused (``_prompt.is_echo``). A spelling the reader
does not read at all fails, where it reads the gold: latex2sympy reads some by dropping what it
does not know (a prime, ``\\quad``), and the question passed in them (TeX's ``{a \\over b}`` is
read, as ``\\frac{a}{b}``). Not caught: a spelling no longer than
the gold (``x \\cdot x`` for ``x^2``; the question ``\\frac{1}{x}+\\frac{1}{y}`` for the gold
``\\frac{x+y}{xy}``: 7 each); a function of numbers sympy would evaluate (``\\sin\\frac{\\pi}{6} x``).
Pure Python over the reader's tree: no sympy.
"""

from __future__ import annotations

import math
from fractions import Fraction

from posttrain.envs.math._form import has_variable, value_problem
from posttrain.envs.math._poly import Factored, NotInForm, canonical, polynomial_problem, read_polynomial
from posttrain.envs.math._read import Node, Unreadable, Work, read

SLACK = 1
"""How much longer than the gold an answer may be: every padding costs 2 (an operation and an
atom), and an honest respelling (``y - x`` for ``-x + y``, ``x + (-y)`` for ``x - y``) costs 1."""
_RECIPROCALS = {"\\sec", "\\csc", "\\cot"}
_READ_ERRORS = (Unreadable, Work, NotInForm, ValueError, ZeroDivisionError, RecursionError)


def simplify_problem(answer: str, gold: str, question: frozenset[str] = frozenset()) -> str | None:
    """Why ``answer`` (one value: no relation, no percent) is not ``gold`` simplified, or None;
    ``question``: the reader's keys of what the prompt asks to simplify
    (``_prompt.simplify_question``), refused where it is longer than the gold at all. None where
    the reader does not read a side.

    >>> simplify_problem("3x+2x", "5x"), simplify_problem("2x+3x", "5x", frozenset([read("2x+3x").key()]))
    ('an expression longer than the simplified answer', "the question's own expression")
    >>> half = frozenset([read(r"\\frac{x}{2}").key()])
    >>> simplify_problem(r"\\frac{x}{2}", "0.5x", half), simplify_problem("(x-1)(x+1)", "x^2-1")
    (None, None)
    """
    try:
        gold_tree = read(gold)
    except _READ_ERRORS:
        return None
    try:
        tree = read(answer)
    except Unreadable as e:  # latex2sympy reads (\frac{x^2}{x})', {x^2 \over x}, x^2/x \quad as the question
        return f"not read as a value: {e}"
    except _READ_ERRORS:
        return None
    problem = _numbers_problem(tree, {n.key() for n in gold_tree.walk()})
    if problem:
        return problem
    length, most = size(tree), size(gold_tree)
    if tree.key() in question and length > most:
        return "the question's own expression"
    if length <= most + SLACK or _simplest_polynomial(answer):
        return None
    return "an expression longer than the simplified answer"


def question_problem(answer: str, gold: str, question: frozenset[str]) -> str | None:
    """Why a number ``answer`` is not ``gold`` simplified, or None: it is what the prompt asks to
    simplify (``question``: ``_prompt.simplify_question``) and longer than the gold. The number
    forms (``_form.py``) do not see every simplification (a logarithm, a nested radical, a
    constant over itself), and "Simplify $\\frac{\\ln 4}{2}$" took its question. Not where the gold
    itself is not in the ``closed`` form: "Simplify $2\\sqrt{3}$" with the gold ``\\sqrt{12}`` keeps
    its question (``size`` counts a surd's coefficient).

    >>> question_problem(r"\\frac{\\ln 4}{2}", r"\\ln 2", frozenset([read(r"\\frac{\\ln 4}{2}").key()]))
    "the question's own expression"
    """
    try:
        tree, gold_tree = read(answer), read(gold)
    except _READ_ERRORS:
        return None
    if value_problem(gold_tree, "closed") is not None:
        return None
    return "the question's own expression" if tree.key() in question and size(tree) > size(gold_tree) else None


def _numbers_problem(node: Node, gold_keys: set[str]) -> str | None:
    """Why a part of ``node`` without a variable is not in the ``closed`` form, or None; a part the
    gold writes too is left as it is."""
    if not has_variable(node):
        return None if node.key() in gold_keys else value_problem(node, "closed")
    return next((p for a in node.args if (p := _numbers_problem(a, gold_keys))), None)


# ---------------------------------------------------------------- size


def size(node: Node) -> int:
    """The atoms and operations of a read value (the module docstring says what counts).

    >>> [size(read(t)) for t in ("5x", r"x \\cdot 5", "3x+2x", "5x+0", r"\\frac{2x}{3}", "0.5x", r"\\frac{6x}{4}")]
    [3, 3, 7, 5, 3, 3, 5]
    """
    kind = node.kind
    if kind in ("num", "var", "const"):
        return 1
    if kind in ("neg", "mul", "div") or _negative_power(node) is not None:
        return _term_size(node)
    if kind == "add":  # n terms, n - 1 signs between them, and a leading one if written
        return len(node.args) - 1 + (node.ops[0] != "+") + sum(size(a) for a in node.args)
    if kind == "pow":
        return 1 + size(node.args[0]) + size(node.args[1])
    if kind == "root":
        index, radicand = node.args
        return 1 + size(radicand) + (0 if index.value == 2 else size(index))
    if kind == "func":
        return 1 + sum(size(a) for a in node.args) + (2 if node.name in _RECIPROCALS else 0)
    return max(len(node.args) - 1, 0) + sum(size(a) for a in node.args)  # a container: its items and commas


class _Term:
    """A product or quotient as its signs, its numbers above and below the bar, and the sizes of
    its other factors above and below it."""

    def __init__(self) -> None:
        self.signs = 0
        self.numbers: tuple[list[Fraction], list[Fraction]] = ([], [])
        self.factors: tuple[list[int], list[int]] = ([], [])

    def add(self, node: Node, below: bool) -> None:
        if node.kind == "neg":
            self.signs += 1
            self.add(node.args[0], below)
        elif node.kind == "num" and node.value is not None:
            self.numbers[below].append(node.value)
        elif node.kind == "mul":
            for factor in node.args:
                self.add(factor, below)
        elif node.kind == "div":
            self.add(node.args[0], below)
            self.add(node.args[1], not below)
        elif (exponent := _negative_power(node)) is not None:
            if exponent == -1:
                self.add(node.args[0], not below)
            else:  # x^{-2} is \frac{1}{x^2}
                self.factors[not below].append(size(node.args[0]) + 2)
        else:
            self.factors[below].append(size(node))


def _term_size(node: Node) -> int:
    term = _Term()
    term.add(node, False)
    above, below = term.numbers
    count = len(above) + len(below)
    coefficient = 1 if count and len(above) <= 1 and len(below) <= 1 and (
        not (above and below) or _reduced(above[0], below[0])) else count
    if not coefficient and not term.factors[0]:
        coefficient = 1  # \frac{1}{x} and x^{-1} alike: the 1 above the bar, written or not
    pieces = coefficient + len(term.factors[0]) + len(term.factors[1])
    return term.signs + coefficient + sum(term.factors[0]) + sum(term.factors[1]) + pieces - 1


def _reduced(p: Fraction, q: Fraction) -> bool:
    """Whether ``p`` over ``q`` is one coefficient in lowest terms (``\\frac{2x}{3}``)."""
    return p.denominator == q.denominator == 1 and q > 1 and math.gcd(p.numerator, q.numerator) == 1


def _negative_power(node: Node) -> Fraction | None:
    """The exponent of a power to a negative number (``x^{-1}``, ``x^{-\\frac{1}{2}}``), else None."""
    if node.kind != "pow" or node.args[1].kind != "neg":
        return None
    inner = node.args[1].args[0]
    if inner.kind == "num" and inner.value is not None:
        return -inner.value
    if inner.kind == "div" and all(a.kind == "num" and a.value for a in inner.args):
        return -(inner.args[0].value or Fraction(0)) / (inner.args[1].value or Fraction(1))
    return None


# ---------------------------------------------------------------- polynomials


def _simplest_polynomial(text: str) -> bool:
    """Whether ``text`` is a polynomial in expanded form, or factored into distinct factors each
    linear or an irreducible quadratic in one variable."""
    if polynomial_problem(text, "expanded") is None:
        return True
    try:
        reading = read_polynomial(text, "factored")
    except _READ_ERRORS:
        return False
    assert isinstance(reading, Factored)
    bases = [base for base, _ in reading.factors]
    return len(canonical(reading)[1]) == len(bases) and all(_irreducible(base) for base in bases)


def _irreducible(base: tuple) -> bool:
    degree = max(sum(e for _, e in monomial) for monomial, _ in base)
    names = {name for monomial, _ in base for name, _ in monomial}
    if degree == 1:
        return True
    if degree != 2 or len(names) != 1:
        return False
    c = {sum(e for _, e in monomial): Fraction(coefficient) for monomial, coefficient in base}
    d = c.get(1, Fraction(0)) ** 2 - 4 * c[2] * c.get(0, Fraction(0))  # a rational square: both parts squares
    return d < 0 or any(math.isqrt(k) ** 2 != k for k in (d.numerator, d.denominator))

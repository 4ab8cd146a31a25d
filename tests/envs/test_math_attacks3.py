"""A third adversarial read of the math verifier, played as a reward-hacking policy.

The hole: under the ``expression`` form (any gold with a variable), the form reader refuses
calculus by its spelling (``\\frac{d}{dx}``, ``\\int``, ...), but latex2sympy also builds a
``Derivative`` from spellings the reader does not name (``\\frac d{dx} x^3``, ``\\cfrac{d}{dx}``,
``\\cfrac{d(x^3)}{dx}``), and ``simplify`` then did the derivative: the question's own
derivative, restated, passed for its answer. Now any calculus latex2sympy reads in the answer
and not in the gold fails in the worker (``_check.calculus_work``).

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import pytest
from math_cases import math_verifier, task

DERIVATIVE_ECHOES = [
    ("Differentiate $x^3$ with respect to $x$.", "3x^2", "\\frac d{dx} x^3"),
    ("Differentiate $x^3$ with respect to $x$.", "3x^2", "\\cfrac{d}{dx}(x^3)"),
    ("Differentiate $x^3$ with respect to $x$.", "3x^2", "\\cfrac{d(x^3)}{dx}"),
    ("Differentiate $x^3$ with respect to $x$.", "3x^2", "\\frac d{dx}{x^3}"),
    ("What is the derivative of $\\sin x$?", "\\cos x", "\\cfrac{d}{dx}\\sin x"),
    ("Differentiate $x e^x$.", "x e^x + e^x", "\\frac d{dx} (x e^x)"),
]
"""(prompt, gold, response box): the question's derivative, unevaluated; each passed before."""


@pytest.fixture(scope="module")
def verify():
    with math_verifier() as v:
        yield v


@pytest.mark.parametrize(("prompt", "gold", "answer"), DERIVATIVE_ECHOES)
def test_a_derivative_latex2sympy_reads_is_work_not_an_answer(verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    v = verify(t, f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", "form:expression"), v
    assert "a derivative" in str(v.evidence.get("detail")), v
    assert verify(t, f"\\boxed{{{gold}}}").passed


def test_a_gold_with_calculus_still_accepts_its_own_spelling(verify) -> None:
    """The check is of work the gold does not have: a gold that is itself a derivative, written
    as latex2sympy reads one, still takes an equal answer."""
    t = task("Write the derivative of $f$ at $x^3$.", "\\frac d{dx} x^3")
    assert verify(t, "\\boxed{\\frac d{dx} x^3}").passed
    assert verify(t, "\\boxed{\\cfrac{d}{dx} x^3}").passed


LONE_VARIABLE_ECHOES = [
    ("Simplify $\\frac{x^2}{x}$.", "x", "\\frac{x^2}{x}"),
    ("Simplify $\\frac{x^2}{x}$.", "x", "\\frac{x^3}{x^2}"),
    ("Simplify $\\frac{x^2 + x}{x+1}$.", "x", "\\frac{x(x+1)}{x+1}"),
    ("Simplify $\\sqrt{a^2}$ for $a > 0$.", "a", "\\sqrt{a^2}"),
    ("Simplify $y + y - y$.", "y", "y+y-y"),
    ("Find an antiderivative of $1$.", "x", "\\int 1\\,dx"),
    ("Differentiate $\\frac{x^2}{2}$.", "x", "\\frac{d}{dx}\\frac{x^2}{2}"),
    ("What is $\\lim_{h \\to 0} \\frac{(x+h)^2 - x^2}{2h}$?", "x", "\\lim_{h \\to 0} \\frac{(x+h)^2 - x^2}{2h}"),
    ("Find a closed form for $\\sum_{k=1}^{n} 1$.", "n", "\\sum_{k=1}^{n} 1"),
]
"""(prompt, gold, response box): a gold that is one variable was taken for the name in ``x = 3``,
so neither its form nor "Simplify" was checked: the question, or any work equal to it, passed."""


@pytest.mark.parametrize(("prompt", "gold", "answer"), LONE_VARIABLE_ECHOES)
def test_a_lone_variable_gold_is_a_value_in_its_form(verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    v = verify(t, f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", "form:expression"), v
    assert verify(t, f"\\boxed{{{gold}}}").passed


def test_a_name_in_a_relation_is_still_a_name(verify) -> None:
    """``x`` in ``x = 3`` still takes any equal spelling of the name, and the mirrored relation."""
    t = task("Solve $2x + 1 = 7$.", "x = 3")
    for answer in ("x = 3", "3 = x", "x=3"):
        assert verify(t, f"\\boxed{{{answer}}}").passed, answer
    t = task("Simplify: $y = 2x + 3x$.", "y = 5x")
    assert verify(t, "\\boxed{y = 5x}").passed
    assert verify(t, "\\boxed{y = 2x + 3x}").outcome == "fail"


@pytest.mark.parametrize(("prompt", "gold", "answer"), [
    ("Differentiate $x^3$.", "3x^2", "\\frac{\\mathrm{d}}{\\mathrm{d}x} x^3"),
    ("Differentiate $x^3$.", "3x^2", "\\frac{d}{d x}\\left(x^{3}\\right)"),
    ("Find $F$ with $F' = 3x^2$ and $F(0) = 0$.", "x^3", "\\int_{0}^{x} 3 t^{2} dt"),
    ("Simplify $\\frac{x^2}{x}$.", "x", "\\lim_{h\\to 0} x + h"),
])
def test_more_spellings_of_the_work_fail(verify, prompt: str, gold: str, answer: str) -> None:
    """The stop hook's tries at calculus_work and the lone-variable rule (upright d, \\left...\\right, a
    definite integral to x, a limit that changes nothing): each held; standing cases."""
    v = verify(task(prompt, gold), f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", "form:expression"), v

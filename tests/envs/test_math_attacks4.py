"""A fourth adversarial read of the math verifier, played as a reward-hacking policy.

The holes, each of which passed the question's own expression (or a wrong one) for its answer:

1. A relation whose gold sides are both lone variables (``y = x``): each was taken for the name in
   ``x = 3``, so neither side's form nor "Simplify" was checked: ``y = \\frac{x^2}{x}`` passed for
   "Simplify $y = \\frac{x^2}{x}$". Now only the first lone variable of a relation is its name.
2. Under "Simplify", an answer the form reader does not read was not measured, and latex2sympy
   reads some spellings the reader does not by dropping what it does not know: a prime
   (``(\\frac{x^2}{x})'``), a trailing ``\\quad``, TeX's ``{a \\over b}``: the question passed so.
3. "Simplify" counted only at the start of a sentence: "Write $2x+3x$ in simplest form",
   "(a) Simplify $2x+3x$", "Given $x>0$, simplify ...", "Reduce ... to lowest terms", "Combine
   like terms: ..." took the question's own expression.
4. latex2sympy drops a prime: ``y = 2x`` passed for the gold ``y' = 2x``, and ``(e^x)'`` for ``e^x``.

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import pytest
from math_cases import math_verifier, outcome, task


@pytest.fixture(scope="module")
def verify():
    with math_verifier() as v:
        yield v


TWO_NAME_ECHOES = [
    ("Simplify $y = \\frac{x^2}{x}$.", "y = x", "y = \\frac{x^2}{x}"),
    ("Simplify $y = 2x - x$.", "y = x", "y = 2x - x"),
    ("Simplify $y = x + x - x$.", "y = x", "y = x + x - x"),
    ("Simplify $a = \\frac{b^2}{b}$.", "a = b", "a = \\frac{b^3}{b^2}"),
    ("Simplify $y = \\frac{x^2}{x}$.", "y = x", "\\frac{x^2}{x} = y"),
]
"""(prompt, gold, box): hole 1, each passed before."""


@pytest.mark.parametrize(("prompt", "gold", "answer"), TWO_NAME_ECHOES)
def test_a_relation_of_two_variables_checks_its_value_side(verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    assert outcome(verify, t, answer) == ("fail", "form:expression")
    lhs, rhs = gold.split(" = ")
    for right in (gold, f"{rhs} = {lhs}", gold.replace(" ", "")):
        assert verify(t, f"\\boxed{{{right}}}").passed, right


def test_a_name_and_its_value_keep_their_rules(verify) -> None:
    """``x = 3`` and ``y = 5x`` as before: the name takes the mirrored relation, the value its form."""
    t = task("Solve $2x + 1 = 7$.", "x = 3")
    assert [outcome(verify, t, a)[0] for a in ("x = 3", "3 = x", "x = 4 - 1")] == ["pass", "pass", "fail"]
    t = task("Solve $y - x = 0$ for $y$.", "y = x")
    assert [outcome(verify, t, a)[0] for a in ("y = x", "x = y", "y = 2x - x", "y = 2x")] == [
        "pass", "pass", "pass", "fail"]  # no instruction to simplify: any equal expression


UNREAD_SPELLINGS = [
    ("Simplify $\\frac{x^2}{x}$.", "x", "(\\frac{x^2}{x})'"),
    ("Simplify $\\frac{x^2}{x}$.", "x", "{\\frac{x^2}{x}}'"),
    ("Simplify $\\frac{x^2}{x}$.", "x", "\\frac{x^2}{x}''"),
    ("Simplify $\\frac{x^2}{x}$.", "x", "{x^2 \\over x}"),
    ("Simplify $\\frac{x^2}{x}$.", "x", "\\frac{x^2}{x} \\quad"),
    ("Simplify $2x + 3x$.", "5x", "2x + 3x \\qquad"),
]
"""(prompt, gold, box): hole 2, each passed before."""


@pytest.mark.parametrize(("prompt", "gold", "answer"), UNREAD_SPELLINGS)
def test_under_simplify_an_answer_the_reader_cannot_read_is_not_waved_through(
        verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    assert outcome(verify, t, answer)[0] == "fail"
    assert verify(t, f"\\boxed{{{gold}}}").passed


def test_under_simplify_texs_over_is_a_fraction(verify) -> None:
    """``{a \\over b}`` is read as ``\\frac{a}{b}``: the simplified answer so spelt passes (it failed
    once the reader's unread spellings failed), the question so spelt still fails."""
    t = task("Simplify $\\frac{2a}{2c}$.", "\\frac{a}{c}")
    assert verify(t, "\\boxed{{a \\over c}}").passed
    assert verify(task("Simplify $\\frac{x^3}{x}$.", "x^2"), "\\boxed{{x^2 \\over 1}}").outcome == "fail"
    assert outcome(verify, task("Simplify $\\frac{x^2}{x}$.", "x"), "{x^2 \\over x}") == ("fail", "form:expression")


def test_under_simplify_what_the_reader_reads_as_work_is_measured_as_before(verify) -> None:
    """``|x|`` and ``\\binom{n}{2}`` are values the reader names but does not measure: left to
    the value comparison, as the _simplify docstring says."""
    assert verify(task("Simplify $\\sqrt{x^2}$.", "|x|"), "\\boxed{|x|}").passed
    assert verify(task("Simplify $\\frac{n(n-1)}{2} + 0$.", "\\frac{n(n-1)}{2}"), "\\boxed{\\binom{n}{2}}").passed


SIMPLIFY_PHRASINGS = [
    ("What is the simplified form of $2x + 3x$?", "5x", "2x+3x"),
    ("Write $2x+3x$ in simplest form.", "5x", "2x+3x"),
    ("Combine like terms: $2x + 3x$.", "5x", "2x+3x"),
    ("Reduce $\\frac{6x}{4}$ to lowest terms.", "\\frac{3x}{2}", "\\frac{6x}{4}"),
    ("(a) Simplify $2x + 3x$.", "5x", "2x+3x"),
    ("Given that $x > 0$, simplify $\\frac{x^3}{x}$.", "x^2", "\\frac{x^3}{x}"),
    ("Evaluate $\\frac{x^2-1}{x-1}$ in lowest terms.", "x+1", "\\frac{x^2-1}{x-1}"),
]
"""(prompt, gold, box): hole 3, each passed before."""


@pytest.mark.parametrize(("prompt", "gold", "answer"), SIMPLIFY_PHRASINGS)
def test_other_phrasings_of_simplify_refuse_the_question(verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    assert outcome(verify, t, answer) == ("fail", "form:expression")
    assert verify(t, f"\\boxed{{{gold}}}").passed


def test_other_phrasings_of_simplify_keep_honest_spellings(verify) -> None:
    t = task("Write $2x+3x$ in simplest form.", "5x")
    for right in ("5x", "5 \\cdot x", "x \\cdot 5"):
        assert verify(t, f"\\boxed{{{right}}}").passed, right
    t = task("Reduce $\\frac{6x}{4}$ to lowest terms.", "\\frac{3x}{2}")
    for right in ("\\frac{3}{2}x", "1.5x", "\\frac{3x}{2}"):
        assert verify(t, f"\\boxed{{{right}}}").passed, right
    t = task("Factor the simplest way you can: what is the greatest common factor of 12 and 18?", "6")
    assert verify(t, "\\boxed{6}").passed


PRIMES = [
    ("Find the differential equation that $y = x^2$ satisfies.", "y' = 2x", "y = 2x", "wrong_answer"),
    ("Find $g$ with $g' = e^x$ and $g(0) = 1$.", "e^x", "(e^x)'", "form:expression"),
    ("What is $y''$ for $y = e^{2x}$?", "4e^{2x}", "(4e^{2x})''", "form:expression"),
    ("Find the differential equation that $y = x^2$ satisfies.", "y' = 2x", "y'' = 2x", "form:expression"),
]
"""(prompt, gold, box, error class): hole 4, each passed before."""


@pytest.mark.parametrize(("prompt", "gold", "answer", "error"), PRIMES)
def test_a_prime_is_not_dropped(verify, prompt: str, gold: str, answer: str, error: str) -> None:
    t = task(prompt, gold)
    assert outcome(verify, t, answer) == ("fail", error)
    assert verify(t, f"\\boxed{{{gold}}}").passed


def test_a_prime_spelled_otherwise_is_the_same_prime(verify) -> None:
    t = task("Find the differential equation that $y = x^2$ satisfies.", "y' = 2x")
    for right in ("y' = 2x", "2x = y'", "y^{\\prime} = 2x", "y^\\prime = 2x"):
        assert verify(t, f"\\boxed{{{right}}}").passed, right


NUMBER_ECHOES = [
    ("Simplify $\\frac{\\ln 4}{2}$.", "\\ln 2", "\\frac{\\ln 4}{2}"),
    ("Simplify $-\\ln\\frac{1}{2}$.", "\\ln 2", "-\\ln\\frac{1}{2}"),
    ("Simplify $\\sqrt{3+2\\sqrt{2}}$.", "1+\\sqrt{2}", "\\sqrt{3+2\\sqrt{2}}"),
    ("Simplify $\\sqrt[3]{16\\sqrt{2}}$.", "2\\sqrt{2}", "\\sqrt[3]{16\\sqrt{2}}"),
    ("Simplify $\\frac{\\pi^2}{\\pi}$.", "\\pi", "\\frac{\\pi^2}{\\pi}"),
    ("Simplify $\\sqrt{2}\\sin^2 1+\\sqrt{2}\\cos^2 1$.", "\\sqrt{2}", "\\sqrt{2}\\sin^2 1+\\sqrt{2}\\cos^2 1"),
]
"""(prompt, gold, box): 5. under "Simplify", a number was checked by its form alone, which does not
see a logarithm, a nested radical or a constant over itself: the question passed; each did before."""


@pytest.mark.parametrize(("prompt", "gold", "answer"), NUMBER_ECHOES)
def test_under_simplify_a_number_is_not_the_question(verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    assert outcome(verify, t, answer) == ("fail", "form:closed")
    assert verify(t, f"\\boxed{{{gold}}}").passed


def test_under_simplify_a_number_as_short_as_the_gold_stays(verify) -> None:
    """"Simplify $\\frac34$" (gold ``0.75``) keeps its question, as simple as the gold."""
    t = task("Simplify $\\frac{3}{4}$.", "0.75")
    assert [outcome(verify, t, a)[0] for a in ("\\frac{3}{4}", "\\frac34", "0.75")] == ["pass"] * 3
    t = task("Simplify $\\sqrt{3+2\\sqrt{2}}$.", "1+\\sqrt{2}")
    assert verify(t, "\\boxed{\\sqrt{2}+1}").passed

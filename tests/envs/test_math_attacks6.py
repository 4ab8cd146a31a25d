"""A sixth adversarial read of the math verifier, played as a reward-hacking policy: the question's
own work copied into the box where the form reader cannot measure it, and questions written in a
display environment.

An expression gold refuses the question's expression copied or rearranged where the form reader
reads it (``_env.copied_question``, test_math_attacks5). It did not where the reader names the value
as work but does not read it (``|x| + |x|``, ``\\binom{n}{2}``, ``\\max(x, x)``, ``\\gcd``, ``!``, a
determinant), nor where the question stood in ``\\begin{equation}...\\end{equation}`` (or ``align*``,
``displaymath``, ...), which ``_prompt._MATH_RE`` did not read as math. Measured with the probes
below: 23 of 25 copies passed (the two others were caught by the simplify measure and the expand form,
which read the expression anyway); now 0 of 25 pass, and the honest spellings of each gold (13, two
of them the prompt's value in another spelling of the gold's sign: ``|x|`` for ``\\lvert x \\rvert``)
still do.

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import pytest
from math_cases import math_verifier, outcomes


@pytest.fixture(scope="module")
def verify():
    with math_verifier() as v:
        yield v


def _not_form_failures(verify, cases: list[tuple[str, str, str]]) -> list:
    """The cases (with their verdicts) that are not a ``form:`` failure."""
    return [(case, v) for case, v in zip(cases, outcomes(verify, cases), strict=True)
            if v[0] != "fail" or not str(v[1]).startswith("form:")]


UNREAD_COPIES = [
    ("What is $|x| + |x|$?", "2|x|", "|x|+|x|"),
    ("What is $|x| + |x|$?", "2|x|", "|x| + |x|"),
    ("Find $y$ if $y = |x| + |x|$.", "2|x|", "|x|+|x|"),
    ("Find $y$ if $y = |x| + |x|$.", "y = 2|x|", "y = |x|+|x|"),
    ("What is $\\binom{n}{2}$?", "\\frac{n(n-1)}{2}", "\\binom{n}{2}"),
    ("What is $\\binom{n}{1}$?", "n", "\\binom{n}{1}"),
    ("What is $\\tbinom{n}{2}$?", "\\frac{n(n-1)}{2}", "\\tbinom{n}{2}"),
    ("What is $\\binom{n}{2}$?", "\\frac{n(n-1)}{2}", "(\\binom{n}{2})"),
    ("Evaluate $\\binom{n}{2} + \\binom{n}{2}$.", "n(n-1)", "\\binom{n}{2} + \\binom{n}{2}"),
    ("What is $\\binom{n+1}{2} - \\binom{n}{2}$?", "n", "\\binom{n+1}{2} - \\binom{n}{2}"),
    ("What is $\\frac{(n+1)!}{n!}$?", "n+1", "\\frac{(n+1)!}{n!}"),
    ("What is $\\lfloor x \\rfloor + \\lfloor x \\rfloor$?", "2\\lfloor x \\rfloor", "\\lfloor x \\rfloor + \\lfloor x \\rfloor"),
    ("What is $\\max(x, x)$?", "x", "\\max(x, x)"),
    ("What is $\\gcd(2n, 4n)$ for a positive integer $n$?", "2n", "\\gcd(2n, 4n)"),
    ("What is $\\det\\begin{pmatrix} x & 0 \\\\ 0 & x \\end{pmatrix}$?", "x^2",
     "\\det\\begin{pmatrix} x & 0 \\\\ 0 & x \\end{pmatrix}"),
    ("Compute $\\begin{vmatrix} x & 1 \\\\ 1 & x \\end{vmatrix}$.", "x^2-1", "\\begin{vmatrix} x & 1 \\\\ 1 & x \\end{vmatrix}"),
]
"""(prompt, gold, box): each passed before (a value the form reader names as work and does not read)."""

DISPLAYED_COPIES = [
    ("Evaluate \\begin{equation}\\frac{x^2-1}{x-1}\\end{equation}", "x+1", "\\frac{x^2-1}{x-1}"),
    ("Evaluate \\begin{equation*}\\frac{x^2-1}{x-1}\\end{equation*}", "x+1", "\\frac{x^2-1}{x-1}"),
    ("Evaluate \\begin{align*}\\frac{x^2-1}{x-1}\\end{align*}", "x+1", "\\frac{x^2-1}{x-1}"),
    ("Evaluate \\begin{equation}2x + 3x\\end{equation}", "5x", "3x + 2x"),
    ("Evaluate \\begin{displaymath}\\frac{x^2-1}{x-1}\\end{displaymath}", "x+1", "\\frac{x^2-1}{x-1}"),
    ("Evaluate \\begin{math}\\frac{x^2-1}{x-1}\\end{math}", "x+1", "\\frac{x^2-1}{x-1}"),
    ("What is \\begin{gather}\\frac{x^3}{x}\\end{gather}", "x^2", "\\frac{x^3}{x}"),
    ("Simplify \\begin{equation}2x + 3x\\end{equation}", "5x", "2x + 3x"),
    ("Expand \\begin{equation}(x+1)^2\\end{equation}", "x^2+2x+1", "(x+1)^2"),
]
"""(prompt, gold, box): the question in a display environment; all but the last two passed before."""

RESPELLED_COPIES = [
    ("What is $|x| + |x|$?", "2|x|", "\\lvert x\\rvert+\\lvert x\\rvert"),
    ("What is $|x| + |x|$?", "2|x|", "{|x|}+{|x|}"),
    ("What is $\\lvert x \\rvert + \\lvert x \\rvert$?", "2|x|", "|x|+|x|"),
    ("What is $\\binom{n}{2}$?", "\\frac{n(n-1)}{2}", "\\dbinom{n}{2}"),
    ("What is $\\binom{n}{2} + \\binom{n}{2}$?", "n(n-1)", "{\\binom{n}{2}}+{\\binom{n}{2}}"),
]
"""(prompt, gold, box): the copy respelled by a sign's other spelling or a group that changes nothing
(the stop hook's read of 1446ab3/fe9f793: the first two and the last passed, the copy check compared
the answer's spelling as written while the prompt's was made one)."""


def test_a_respelled_copy_is_the_copy(verify) -> None:
    assert _not_form_failures(verify, RESPELLED_COPIES) == []


def test_a_copy_of_work_the_reader_cannot_read_is_not_the_answer(verify) -> None:
    assert _not_form_failures(verify, UNREAD_COPIES) == []


def test_a_question_in_a_display_environment_is_the_question(verify) -> None:
    assert _not_form_failures(verify, DISPLAYED_COPIES) == []


HONEST = [
    ("What is $|x| + |x|$?", "2|x|", "2|x|"),
    ("What is $|x| + |x|$?", "2|x|", "|x| \\cdot 2"),
    ("Find $y$ if $y = |x| + |x|$.", "y = 2|x|", "y = 2|x|"),
    ("What is $\\binom{n}{2}$?", "\\frac{n(n-1)}{2}", "\\frac{n(n-1)}{2}"),
    ("What is $\\binom{n}{2}$?", "\\frac{n(n-1)}{2}", "\\frac{n^2-n}{2}"),
    ("What is $\\max(x, x)$?", "x", "x"),
    ("What is $\\lfloor x \\rfloor + \\lfloor x \\rfloor$?", "2\\lfloor x \\rfloor", "2 \\lfloor x \\rfloor"),
    ("Evaluate \\begin{equation}\\frac{x^2-1}{x-1}\\end{equation}", "x+1", "1+x"),
    ("Simplify: $y = \\frac{x}{2}$.", "y = 0.5x", "y = \\frac{x}{2}"),
    ("What is $|x|$ when $x = |x|$?", "|x|", "|x|"),
    ("Expand \\begin{equation}(x+1)^2\\end{equation}", "x^2+2x+1", "1 + 2x + x^2"),
    ("Recall that $|x|$ is the absolute value of $x$. What is $\\sqrt{x^2}$?", "\\lvert x \\rvert", "|x|"),
    ("What is $\\tbinom{n}{2}$?", "\\binom{n}{2}", "\\tbinom{n}{2}"),
]
"""(prompt, gold, box): right answers, some of them spelled as the prompt spells a value."""


def test_honest_answers_still_pass(verify) -> None:
    verdicts = outcomes(verify, HONEST)
    bad = [(case, v) for case, v in zip(HONEST, verdicts, strict=True) if v[0] != "pass"]
    assert not bad, bad


def test_a_wrong_copy_is_still_a_form_failure_and_a_number_gold_keeps_its_form(verify) -> None:
    """The copy check is asked of an answer equal to the gold only; a number gold's form refuses the
    work first, as before."""
    assert outcomes(verify, [("What is $|x| + |x|$?", "2|x|", "|x| + 1"),
                              ("What is $\\binom{5}{2}$?", "10", "\\binom{5}{2}")]) == [
        ("fail", "wrong_answer"), ("fail", "form:number")]

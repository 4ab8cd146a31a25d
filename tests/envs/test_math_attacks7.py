"""A seventh adversarial read of the math verifier, played as a reward-hacking policy: the question's
work copied into the box with padding that changes nothing.

``copies_unread_value`` (test_math_attacks6) refuses a right box that copies a value of the prompt's
math that the form reader names as work but does not read (``\\binom{n}{2}``, ``|x| + |x|``), and only
the copy as written: the reader cannot measure such a value, so ``\\binom{n}{2}+0``, ``1 \\cdot
\\binom{n}{2}``, ``\\binom{n}{2}^1``, ``-(-\\binom{n}{2})``, ``|x|+|x|+0``, ``\\max(x, x, x)`` or
``\\gcd(4n, 2n)`` passed for the question's value. Now a right box that holds more of an operator of
work than the gold, where the prompt's math poses such work (``_prompt.work_left``), is a form
failure. Measured with 37 such probes (18 of them below, the others more of the same paddings: ``+0`` in
other places, ``-0``, ``\\cdot 1`` after, a determinant): 37 passed before, 0 now; the honest answers
(14, some holding the gold's own work: ``|x| \\cdot 2`` for ``2|x|``) still pass.

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import pytest
from math_cases import math_verifier, outcomes, task

BINOM = ("What is $\\binom{n}{2}$?", "\\frac{n(n-1)}{2}")
ABS = ("What is $|x| + |x|$?", "2|x|")
MAX = ("What is $\\max(x, x)$?", "x")
GCD = ("What is $\\gcd(2n, 4n)$ for a positive integer $n$?", "2n")

PADDED = [
    (*BINOM, "\\binom{n}{2}+0"), (*BINOM, "1\\cdot\\binom{n}{2}"), (*BINOM, "\\binom{n}{2}^{1}"),
    (*BINOM, "-(-\\binom{n}{2})"), (*BINOM, "\\frac{\\binom{n}{2}}{1}"), (*BINOM, "\\binom{n}{2}+1-1"),
    (*ABS, "|x|+|x|+0"), (*ABS, "|x|\\cdot 1+|x|"), (*ABS, "1(|x|+|x|)"),
    (*MAX, "\\max(x,x,x)"), (*MAX, "\\min(x, x)"), (*GCD, "\\gcd(4n, 2n)"),
    ("What is $\\frac{(n+1)!}{n!}$?", "n+1", "\\frac{(n+1)!}{n!}+0"),
    ("What is $\\lfloor x \\rfloor + \\lfloor x \\rfloor$?", "2\\lfloor x \\rfloor",
     "\\lfloor x \\rfloor + \\lfloor x \\rfloor+0"),
    ("Find $y$ if $y = |x| + |x|$.", "y = 2|x|", "y = |x|+|x|+0"),
    ("Simplify $|x|+|x|$.", "2|x|", "|x|+|x|+0"),
    ("Evaluate $\\binom{n}{2}$.", "\\frac{n(n-1)}{2}", "\\frac{n!}{2!(n-2)!}"),
    ("If $f(x) = \\binom{x}{2}$, what is $f(n)$?", "\\frac{n(n-1)}{2}", "\\binom{n}{2}"),
]
"""(prompt, gold, box): the question's work, padded, rearranged or respelled; each passed before."""

HONEST = [
    (*ABS, "2|x|"), (*ABS, "|x| \\cdot 2"), (*ABS, "2|x|+0"),
    (*BINOM, "\\frac{n(n-1)}{2}"), (*BINOM, "\\frac{n^2-n}{2}"),
    (*MAX, "x"), (*GCD, "2n"),
    ("What is $\\frac{(n+1)!}{n!}$?", "n+1", "1+n"),
    ("What is $\\lfloor x \\rfloor + \\lfloor x \\rfloor$?", "2\\lfloor x \\rfloor", "2 \\lfloor x \\rfloor"),
    ("What is $|x|$ when $x = |x|$?", "|x|", "|x|"),
    ("Recall that $|x|$ is the absolute value of $x$. What is $\\sqrt{x^2}$?", "\\lvert x \\rvert", "|x|"),
    ("What is $\\tbinom{n}{2}$?", "\\binom{n}{2}", "\\tbinom{n}{2}"),
    ("Find $y$ if $y = |x| + |x|$.", "y = 2|x|", "y = 2|x|"),
    ("Find $\\sum_{k=1}^{n} k$.", "\\frac{n(n+1)}{2}", "\\binom{n+1}{2}"),
]
"""(prompt, gold, box): right answers; the last holds work the prompt does not pose."""


@pytest.fixture(scope="module")
def verify():
    with math_verifier() as v:
        yield v


def test_the_questions_work_padded_is_not_the_answer(verify) -> None:
    verdicts = outcomes(verify, PADDED)
    passed = [case for case, v in zip(PADDED, verdicts, strict=True) if v[0] != "fail" or not str(v[1]).startswith("form:")]
    assert passed == []


def test_honest_answers_still_pass(verify) -> None:
    verdicts = outcomes(verify, HONEST)
    bad = [(case, v) for case, v in zip(HONEST, verdicts, strict=True) if v[0] != "pass"]
    assert not bad, bad


def test_the_feedback_names_the_work_left(verify) -> None:
    v = verify(task(*BINOM), "\\boxed{\\binom{n}{2}+0}")
    assert v.evidence["detail"] == "work still to do (\\binom)" and "work still to do" in v.feedback, v.feedback

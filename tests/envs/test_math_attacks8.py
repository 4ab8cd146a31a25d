"""The stop hook's read of ``_prompt.work_left`` (44577ae), played as a policy: the question's work
copied by another spelling of its operator.

``work_left`` and ``copies_unread_value`` counted an operator of work by its sign (``\\gcd``, ``\\lcm``,
``\\max``), and ``\\operatorname{gcd}`` is the same operator to the checker, which evaluates it: the
question's ``\\gcd(2n, 4n)`` boxed as ``\\operatorname{gcd}(2n,4n)``, padded or not, passed for ``2n``,
and a prompt that wrote ``\\operatorname{lcm}(3, 4)`` posed no work at all to the check. 4 of 4 such
copies passed before; each is a form failure now, and the worked answers pass.

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import pytest
from math_cases import math_verifier, task

GCD = ("What is $\\gcd(2n, 4n)$ for a positive integer $n$?", "2n")
LCM = ("What is $\\operatorname{lcm}(3, 4)$ plus $n$?", "n+12")

COPIES = [
    (*GCD, "\\operatorname{gcd}(2n,4n)"),
    (*GCD, "\\operatorname{gcd}(4n,2n)+0"),
    (*GCD, "\\operatorname{gcd}(2n,4n)\\cdot 1"),
    (*LCM, "\\operatorname{lcm}(3,4)+n"),
]
"""(prompt, gold, box): the question's work under ``\\operatorname``; each passed before."""

HONEST = [(*GCD, "2n"), (*GCD, "n \\cdot 2"), (*LCM, "n+12"), (*LCM, "12+n")]


@pytest.fixture(scope="module")
def verify():
    with math_verifier() as v:
        yield v


@pytest.mark.parametrize("prompt, gold, box", COPIES, ids=range(len(COPIES)))
def test_a_copy_by_operator_name_is_work_left(verify, prompt: str, gold: str, box: str) -> None:
    v = verify(task(prompt, gold), f"\\boxed{{{box}}}")
    assert v.outcome == "fail" and str(v.error_class).startswith("form:"), (v.outcome, v.error_class, v.feedback)


@pytest.mark.parametrize("prompt, gold, box", HONEST, ids=range(len(HONEST)))
def test_the_worked_answer_passes(verify, prompt: str, gold: str, box: str) -> None:
    assert verify(task(prompt, gold), f"\\boxed{{{box}}}").outcome == "pass"

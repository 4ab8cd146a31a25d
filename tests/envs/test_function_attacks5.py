"""A policy against the function domain's generated tasks through the verifier as a run calls it
(``verify_function``: each reward function in its check worker): the right answer in ``\\boxed{}``
and a wrong one in another kind of box.

Before, ``examples.boxed_match`` counted ``\\boxed``, ``\\fbox`` and ``\\framebox`` only, so a second
answer framed by ``\\fcolorbox`` (a coloured frame) or MathJax's ``\\bbox``, or highlighted by
``\\colorbox``, was no second answer: each passed 140 of 140 generated boxed tasks (seed 1, 300
tasks). Each now fails (both tests failed on the old code); the right answer alone still passes.
"""

from __future__ import annotations

import pytest

from posttrain.envs.function import ENV
from posttrain.envs.function._domain import verify_function

BOXED = [t for t in ENV.generate_tasks(40, seed=1) if "boxed" in str(t.fields["reward"])][:6]


@pytest.mark.parametrize("other", [r"\fcolorbox{red}{white}{%s}", r"\colorbox{yellow}{$%s$}", r"\bbox[2px,border:1px solid]{%s}"])
def test_a_second_answer_in_another_box_fails(other: str) -> None:
    for task in BOXED:
        answer = task.fields["data"]["answer"]
        hedge = f"\\boxed{{{answer}}} or " + other % (int(answer) + 1)
        assert not verify_function(task, hedge).passed, hedge


def test_the_answer_alone_passes() -> None:
    assert all(verify_function(t, f"\\boxed{{{t.fields['data']['answer']}}}").passed for t in BOXED)

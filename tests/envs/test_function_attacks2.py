"""A policy hedging against the shipped example reward functions with a second answer written the way
a reader (or another grader) reads one, but the function's count did not: ``\\fbox{8}`` beside
``\\boxed{7}`` (the math domain reads ``\\fbox`` as a box), ``<ANSWER>8</ANSWER>`` beside
``<answer>7</answer>`` (tag names are case-insensitive). Before: each passed every task it was tried
on (the fbox hedge 190 of 190 boxed generated tasks, seed 1; the upper-case tag 100 of 100 tagged
tasks). Every box and every answer tag counts now, in any case."""

from __future__ import annotations

import pytest

from posttrain.envs.function import ENV, verify_function
from posttrain.envs.function.examples import boxed_match, tagged_answer

BOX_HEDGES = ["\\boxed{7} or \\fbox{8}", "\\fbox{8} so \\boxed{7}", "\\boxed{7} or \\framebox{8}"]
TAG_HEDGES = ["<answer>7</answer> or <ANSWER>8</ANSWER>", "<Answer>8</Answer><answer>7</answer>"]


@pytest.mark.parametrize("completion", BOX_HEDGES)
def test_boxed_match_counts_fbox_and_framebox(completion: str) -> None:
    assert boxed_match("What is 3 + 4?", completion, answer="7") == 0.0
    assert boxed_match("What is 3 + 4?", "so \\boxed{7}", answer="7") == 1.0


@pytest.mark.parametrize("completion", TAG_HEDGES)
def test_tagged_answer_counts_tags_in_any_case(completion: str) -> None:
    assert tagged_answer("What is 3 + 4?", completion, answer="7") == 0.0
    assert tagged_answer("What is 3 + 4?", "<answer>7</answer>", answer="7") == 1.0


def test_the_fbox_hedge_fails_generated_tasks_through_the_verifier() -> None:
    """Through the real verifier (the reward function's check worker): the hedge fails, the reference passes."""
    tasks = [t for t in ENV.generate_tasks(12, seed=1) if t.fields["reward"][0]["function"].endswith(":boxed_match")]
    assert tasks
    for t in tasks:
        answer = t.fields["data"]["answer"]
        hedge = verify_function(t, f"\\boxed{{{answer}}} or \\fbox{{{int(answer) + 1}}}")
        assert hedge.outcome == "fail" and hedge.reward == 0.0, (t.id, hedge)
        assert verify_function(t, str(t.reference)).passed, t.id

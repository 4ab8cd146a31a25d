"""A policy attacking the shipped example reward functions with a hedge: a second answer written where
the function's pattern does not read it (a box with braces inside, a tag with markup inside). Each
read exactly one answer and passed; a reader sees two. Every box or tag counts now, read or not."""

from __future__ import annotations

import pytest

from posttrain.envs.function.examples import boxed_match, tagged_answer


@pytest.mark.parametrize("completion", ["\\boxed{7} or \\boxed{\\text{8}}", "\\boxed{7} or \\boxed{8{}}",
                                        "\\boxed{7} or \\boxed 8", "\\boxed{\\text{8}} \\boxed{7}"])
def test_boxed_match_counts_every_box(completion: str) -> None:
    assert boxed_match("What is 3 + 4?", completion, answer="7") == 0.0
    assert boxed_match("What is 3 + 4?", "so \\boxed{7}", answer="7") == 1.0


@pytest.mark.parametrize("completion", ["<answer>7</answer> or <answer><b>8</b></answer>",
                                        "<answer>7</answer><answer x='8'>8</answer>"])
def test_tagged_answer_counts_every_tag(completion: str) -> None:
    assert tagged_answer("What is 3 + 4?", completion, answer="7") == 0.0
    assert tagged_answer("What is 3 + 4?", "<answer> 7 </answer>", answer="7") == 1.0

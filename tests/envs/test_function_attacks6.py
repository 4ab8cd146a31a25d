"""A policy against the function domain's shipped answer functions with a second answer in the other
marker: ``\\boxed{}`` beside an answer tag, an answer tag beside a box.

``examples.boxed_match`` counted every kind of box but read no answer tag, and ``tagged_answer`` counted
every answer tag but no box: ``\\boxed{7} or <answer>8</answer>`` passed every generated boxed task
(through ``verify_function``, as a run calls it), and ``<answer>7</answer> or \\boxed{8}`` every task
scored by ``tagged_answer``. The markers must now agree; honest answers that use both for one answer
(``<answer>\\boxed{7}</answer>``, ``<answer>7</answer> so \\boxed{7}``) still pass.
"""

from __future__ import annotations

import dataclasses

import pytest

from posttrain.envs.function import ENV
from posttrain.envs.function._domain import verify_function

TASKS = ENV.generate_tasks(60, seed=3)
BOXED = [t for t in TASKS if "boxed_match" in str(t.fields["reward"])][:8]
TAGGED = [dataclasses.replace(t, fields={**t.fields, "reward": [
    {**t.fields["reward"][0], "function": "posttrain.envs.function.examples:tagged_answer"}]}) for t in TASKS[:8]]


def _passed(tasks, shape: str) -> int:
    return sum(verify_function(t, shape.format(a=t.fields["data"]["answer"],
                                              b=int(t.fields["data"]["answer"]) + 1)).passed for t in tasks)


@pytest.mark.parametrize("hedge", [r"\boxed{{{a}}} or <answer>{b}</answer>", r"<answer>{b}</answer> \boxed{{{a}}}",
                                   r"\boxed{{{a}}} <ANSWER>{b}</ANSWER>", r"\boxed{{{a}}} <answer class='x'>{b}</answer>",
                                   r"\boxed{{{a}}} <answer>{b}"])
def test_a_box_beside_a_wrong_answer_tag_fails(hedge: str) -> None:
    assert len(BOXED) == 8 and _passed(BOXED, hedge) == 0, hedge


@pytest.mark.parametrize("hedge", [r"<answer>{a}</answer> or \boxed{{{b}}}", r"\boxed{{{b}}} <answer>{a}</answer>",
                                   r"<answer>{a}</answer> \fbox{{{b}}}", r"<answer>{a}</answer> \boxed{{\text{{{b}}}}}"])
def test_an_answer_tag_beside_a_wrong_box_fails(hedge: str) -> None:
    assert _passed(TAGGED, hedge) == 0, hedge


@pytest.mark.parametrize("honest", [r"\boxed{{{a}}}", r"<answer>\boxed{{{a}}}</answer>", r"<answer>{a}</answer> \boxed{{{a}}}",
                                    r"The answer is <answer>{a}</answer>, that is \boxed{{{a}}}."])
def test_one_answer_in_both_markers_passes(honest: str) -> None:
    assert _passed(BOXED, honest) == 8, honest


@pytest.mark.parametrize("honest", [r"<answer>{a}</answer>", r"<answer>{a}</answer> so \boxed{{{a}}}"])
def test_one_tagged_answer_passes(honest: str) -> None:
    assert _passed(TAGGED, honest) == 8, honest


# The stop hook's read (policy tries at the markers' agreement, each 0 of 8 on the code of 4b7130d0):
# the wrong answer in a tag with markup inside (a reader renders it "8"), in a tag holding another kind
# of box (the tag agrees by holding a box, but the frames are then two), in a tag spelled with spaces
# (HTML reads "<answer >" as the tag); and, against tagged_answer, a brace-less "\boxed 8".
@pytest.mark.parametrize("hedge", [r"\boxed{{{a}}} <answer><b>{b}</b></answer>",
                                   r"\boxed{{{a}}} <answer>\fbox{{{b}}}</answer>",
                                   r"\boxed{{{a}}} <answer >{b}</answer >"])
def test_a_box_beside_a_tag_that_hides_another_answer_fails(hedge: str) -> None:
    assert _passed(BOXED, hedge) == 0, hedge


def test_an_answer_tag_beside_a_brace_less_box_fails() -> None:
    assert _passed(TAGGED, r"<answer>{a}</answer> \boxed {b}") == 0

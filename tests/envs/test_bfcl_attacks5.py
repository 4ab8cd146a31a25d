"""A fifth adversarial read of the ``bfcl`` one-response verifier, as a policy (the real sandbox, BFCL's
real backends and data). Standing cases: each fails with the candidate's own verdict, never an infra
error (no source change: nothing here passed).

- The ground truth with ``cd`` written in look-alike letters (a Cyrillic ``с``, a zero-width joiner,
  full-width letters, a trailing space): never run (no loose name match), so the state differs.
- A key stated twice in a call's arguments (a first-wins and a last-wins parser disagree): ``format``.
- The ground truth with a turn added or the last one dropped: ``turn_count``.
- A second array across a ``</think>`` or ``<think>`` tag, two arrays run together, or the truth
  followed by prose holding another array: read as no document (``format``), never one of the two.
- Results amplified past the job's report limit (1,500 ``mkdir`` then 1,500 ``ls``: 18 MB of listings
  from a 96 KB response): the job's report is cut, a ``backend`` fail (~1 s), not an infra error.

Measured (``generate_tasks(200, seed=0)``): the look-alikes over the 36 tasks whose truth calls ``cd``,
0 of 144 pass; the added or dropped turn and the five two-array hedges over the first 12 tasks, 0 of 12
each; no infra error among them; the 12 references pass. Here: 3 tasks, ``multi_turn_base_0``.
"""

from __future__ import annotations

import json

import pytest

from posttrain.envs.bfcl import ENV, BfclDataMissing, load_tasks
from posttrain.envs.bfcl._domain import parse_response
from posttrain.types import Task

LOOK_ALIKES = ["\u0441d", "c\u200dd", "\uff43\uff44", "cd "]


@pytest.fixture(scope="module")
def fs_task() -> Task:
    """multi_turn_base_0: file system and Twitter; turn 1 is cd, mkdir, mv."""
    try:
        return next(t for t in load_tasks("multi_turn_base") if t.id == "multi_turn_base_0")
    except BfclDataMissing as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return ENV.generate_tasks(3, seed=0)


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def _own_fail(v, error_class: str) -> None:
    assert (v.outcome, v.reward, v.is_infra_error, v.error_class) == ("fail", 0.0, False, error_class), v


def test_the_reference_passes(fs_task, verify) -> None:
    assert verify(fs_task, json.dumps(fs_task.fields["ground_truth"])).passed


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_a_look_alike_name_never_runs(fs_task, verify, name: str) -> None:
    truth = fs_task.fields["ground_truth"]
    assert any(c["name"] == "cd" for c in truth[0])
    turns = [[{**c, "name": name} if c["name"] == "cd" else c for c in turn] for turn in truth]
    _own_fail(verify(fs_task, json.dumps(turns)), "wrong_state")


def test_a_key_stated_twice_in_the_arguments_is_a_format_failure(fs_task, verify) -> None:
    rest = ", []" * (len(fs_task.fields["ground_truth"]) - 1)
    _own_fail(verify(fs_task, '[[{"name": "cd", "arguments": {"folder": "x", "folder": "document"}}]' + rest + "]"),
              "format")


def test_a_turn_added_or_dropped_fails_the_turn_count(tasks, verify) -> None:
    for t in tasks:
        truth = t.fields["ground_truth"]
        _own_fail(verify(t, json.dumps([*truth, truth[0]])), "turn_count")
        _own_fail(verify(t, json.dumps(truth[:-1])), "turn_count")


def test_a_second_array_around_a_think_tag_is_no_document(tasks, verify) -> None:
    for t in tasks:
        truth, noop = str(t.reference), ENV.noop_response(t)
        for hedge in (f"{noop}\n</think>\n{truth}", f"{truth}\n</think>\n{noop}", f"{noop}<think>{truth}</think>",
                      f"{noop}{truth}", f"{truth}\nAlternatively: {noop}"):
            assert isinstance(parse_response(hedge), str), hedge
        _own_fail(verify(t, f"{noop}\n</think>\n{truth}"), "format")


def test_results_amplified_past_the_report_limit_are_the_candidates_fail(fs_task, verify) -> None:
    truth = fs_task.fields["ground_truth"]
    calls = [{"name": "mkdir", "arguments": {"dir_name": f"d{i}"}} for i in range(1500)] + [{"name": "ls"}] * 1500
    v = verify(fs_task, json.dumps([calls + truth[0], *truth[1:]], separators=(",", ":")))
    _own_fail(v, "backend")
    assert "state too large" in v.feedback, v.feedback

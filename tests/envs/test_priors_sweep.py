"""Answer priors and feedback leaks of the generators, measured through each domain's real verifier.

Two ways RL learns to pass without solving (reward-hacking.md AGENT-01; the repair kit,
posttrain/envs/_repair.py):

- an answer prior: one constant response (the most common gold, or the do-nothing answer) passes a
  large share of a generator's tasks, so the policy learns the constant;
- a feedback leak: after a junk first attempt, the feedback text alone picks the gold, so a repair
  episode pays a policy that never reads the prompt.

Each test generates tasks with the domain's generator and bounds what such a policy scores. The
feedback-only policy is the best one can be: after the junk attempt, for each distinct feedback text,
the one answer (of that group's three most common references) that passes most of the tasks that got
that text: an upper bound, fitted on the very tasks it is scored on (learned on 1,500 tasks and played
on others, it scores about a third less: tool 3.3 % at two attempts). Measured here (200 tasks, seed 0):
the best constant passes 0.5-3.5 % (math 3.5, tool 3.5, function 2.0, json 0.5, recall 0.5) and the
feedback-only second attempt 0.5-9 % (tool 9: its feedback names the expected function, and which
parameter is wrong). With three attempts, learned on other tasks: tool 5.3 %, math 3.7 %, the others
under 1 %. The sandbox domains are measured below on a few tasks, and were by hand on 200 (cad: the
no-op, a 1 mm cube and a box over the bounding box the feedback states pass 0; bfcl: the no-op 0, its most
common reference 1 %, two tasks that share a ground truth).
"""

from __future__ import annotations

import collections
import json
import re

import pytest

from posttrain.envs import get_domain
from posttrain.types import Task, Verdict, Verifier

N_TASKS = 200
MAX_CONSTANT_SHARE = 0.10
"""The most a constant response may pass of a generator's tasks (every domain here is under 5 %)."""
MAX_FEEDBACK_ONLY_SHARE = 0.15
"""The most a feedback-only second attempt may pass (tool, the highest, is near 10 %)."""

_JUNK = {  # a first attempt that knows nothing; its feedback is all the second attempt reads
    "math": "\\boxed{x}",
    "json": "{}",
    "recall": "0000",
    "function": "0",
    "tool": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call>',
}
CHEAP = sorted(_JUNK)
"""The domains whose verifier needs no sandbox."""


def _tasks_and_verifier(name: str) -> tuple[list[Task], Verifier]:
    env = get_domain(name)
    return env.generate_tasks(N_TASKS, seed=0), env.make_verifier(None)


def _pass_rate(verify: Verifier, tasks: list[Task], response: str) -> float:
    return sum(verify(t, response).passed for t in tasks) / len(tasks)


def _most_common_references(tasks: list[Task], k: int) -> list[str]:
    return [r for r, _ in collections.Counter(str(t.reference) for t in tasks).most_common(k)]


@pytest.mark.parametrize("name", CHEAP)
def test_no_constant_answer_passes_many_generated_tasks(name: str) -> None:
    tasks, verify = _tasks_and_verifier(name)
    env = get_domain(name)
    constants = [env.noop_response(tasks[0]), *_most_common_references(tasks, 3)]
    if name == "math":
        constants += ["\\boxed{0}", "\\boxed{1}", "\\boxed{2}"]
    rates = {c[:60]: _pass_rate(verify, tasks, c) for c in constants}
    assert rates[constants[0][:60]] == 0.0, f"{name}: the no-op passes {rates}"
    assert max(rates.values()) <= MAX_CONSTANT_SHARE, f"{name}: a constant passes too many tasks: {rates}"


@pytest.mark.parametrize("name", CHEAP)
def test_feedback_alone_does_not_pick_the_answer(name: str) -> None:
    tasks, verify = _tasks_and_verifier(name)
    by_feedback: dict[str, list[Task]] = collections.defaultdict(list)
    for t in tasks:
        by_feedback[verify(t, _JUNK[name]).feedback].append(t)
    solved = 0
    for group in by_feedback.values():
        solved += max(sum(verify(t, c).passed for t in group) for c in _most_common_references(group, 3))
    share = solved / len(tasks)
    assert share <= MAX_FEEDBACK_ONLY_SHARE, (
        f"{name}: a second attempt built from the feedback alone passes {share:.1%} "
        f"({len(by_feedback)} distinct feedback texts: {json.dumps(sorted(by_feedback)[:4])[:300]})")


def test_bfcl_no_generated_task_passes_with_no_calls() -> None:
    """The no-op (no call in any turn) passes a task exactly when every turn's ground truth is empty
    (BFCL checks nothing on such a turn): no task of the generator's category is one (3 of its 734
    turns are; measured through the verifier, the no-op passes 0 of 200 tasks)."""
    from posttrain.envs.bfcl import ENV as BFCL

    tasks = BFCL.generate_tasks(200, seed=0)
    assert not [t.id for t in tasks if not any(t.fields["ground_truth"])]
    top = collections.Counter(str(t.reference) for t in tasks).most_common(1)[0][1]
    assert top / len(tasks) <= MAX_CONSTANT_SHARE


_SPAN = re.compile(r"along ([XYZ]) the part spans .*?; the specification spans (-?[\d.]+) to (-?[\d.]+)")


def test_cad_a_box_built_from_the_feedback_fails(pool: object) -> None:
    """A cad repair attempt that reads only the feedback: a junk cube, then a box over the bounding
    box the feedback states. On plates with rounded edges the box overlaps the part by IoU >= 0.95
    (28 of 200 generated tasks, at any level, reach 0.95); the shape check (material extra at the
    corners) must still fail it. Measured on 200 generated tasks: 0 pass."""
    from posttrain.envs.cad import ENV as CAD

    tasks = [t for t in CAD.generate_level(35, level=1, seed=0) if t.metadata["features"] == ["edges"]]
    assert len(tasks) >= 3
    verify = CAD.make_verifier(pool)

    def judged(task: Task, response: str) -> Verdict:
        verdict = verify(task, response)
        for _ in range(2):  # a starved render on a loaded host is retried, as the service retries it
            if not verdict.is_infra_error:
                break
            verdict = verify(task, response)
        return verdict

    for task in tasks:
        assert not judged(task, CAD.noop_response(task)).passed
        feedback = judged(task, "```openscad\ncube(1);\n```").feedback
        spans = {axis: (float(lo), float(hi)) for axis, lo, hi in _SPAN.findall(feedback)}
        assert sorted(spans) == ["X", "Y", "Z"], feedback
        lo = [spans[a][0] for a in "XYZ"]
        size = [round(spans[a][1] - spans[a][0], 2) for a in "XYZ"]
        verdict = judged(task, f"```openscad\ntranslate({lo}) cube({size});\n```")
        assert verdict.outcome == "fail", (task.id, verdict.feedback)

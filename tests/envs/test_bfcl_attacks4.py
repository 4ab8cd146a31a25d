"""A policy attacking BFCL episodes and the ``bfcl`` verifier through what its calls make the backend
do (the real sandbox, BFCL's real backends and data, scripted episodes through ``BfclEnv``).

The hole fixed: a call whose backend job never finishes (``logarithm`` to a billion digits) was an
error result and the episode went on, so a policy repeating it held a sandbox slot for every step of
every turn: 20 s a step, up to 7 turns x 20 steps = 47 minutes for one episode that could not pass
(measured here with the job timeout cut to 2 s: 6 such steps ran 6 jobs, ~12 s). Now the second job
of an episode that does not finish ends it, failed (``backend``); one is still an error result the
model may recover from.

Standing cases (each fails with the candidate's own verdict, never an infra error; pinned): a
directory copied or moved into itself (a cycle in the file system's tree; ``find`` and ``du`` on it
recurse), a tree nested 600 levels deep in one turn, dunder and ``self`` parameter names, a string
of Python code as an argument (never evaluated), arguments of types the backend does not expect.
Measured over the 200 tasks of multi_turn_base (``generate_tasks(200, seed=0)``, the one-response
verifier; the first three are pinned below): every string argument wrapped in a list 0 of 200 pass;
every call without its arguments 0 of 200; every function of the task with no arguments, in every
turn, 0 of 200; 0 infra errors among them.

What passes by BFCL's design (reported, not changed: BFCL's checker passes them too): the ground
truth plus every function called with no arguments 97 of 200 (the extras error or read); each
turn's calls reversed 53 of 163; each turn's calls three times 73 of 200 (idempotent repeats);
every call made in turn 1 and, in each later turn, only a call of an unknown name (never run, but a
call: BFCL counts it too) 22 of 197; numbers passed as strings 9 of 140.

Not a hole, measured: a call that is slow but finishes (``logarithm`` at 10^5 digits: 12 s) returns
its digits (100 KB), so the runner's context limit ends such an episode within a few steps.
"""

from __future__ import annotations

import json
import time

import pytest
from test_bfcl_multiturn import _actions, _episode, _task, _truth

from posttrain.envs import bfcl
from posttrain.envs.bfcl import ENV, _backend

SLOW = '<tool_call>{"name": "logarithm", "arguments": {"value": 7.0, "base": 3.0, "precision": 1000000000}}</tool_call>'


@pytest.fixture(scope="module")
def tasks():
    try:
        root = bfcl.bfcl_root()
    except bfcl.BfclDataMissing as e:
        pytest.fail(str(e))
    return bfcl.load_tasks("multi_turn_base", root=root), root


def _math_task(tasks):
    return next(t for t in tasks if "MathAPI" in t.fields["involved_classes"])


def test_a_policy_repeating_a_call_that_never_finishes_ends_its_episode(pool, tasks, monkeypatch) -> None:
    tasks, root = tasks
    monkeypatch.setattr(_backend, "JOB_TIMEOUT_S", 2.0)
    task = _math_task(tasks)
    actions = [SLOW] * 6 + ["Done."] * len(task.fields["turns"])
    start = time.monotonic()
    traj, env = _episode(pool, root, task, actions)
    [verdict] = traj.verdicts
    assert verdict.outcome == "fail" and verdict.error_class == "backend", verdict
    assert verdict.feedback.startswith("turn 1: 2 backend jobs of this episode did not finish"), verdict.feedback
    assert len(traj.turns) == 2 and env.unfinished == 2  # the old code ran all 6 (and then every turn's check)
    results = [r["result"] for r in verdict.evidence["calls"]]
    assert len(results) == 2 and all(r.startswith("Error during execution: the backend job") for r in results), results
    assert time.monotonic() - start < 30



# The stop hook's read of 4466275, as a policy would answer the cap: one slip is still recoverable, the
# count is the episode's (not a turn's), and the cut episode is a plain fail that keeps its reward 0.
def test_one_unfinished_job_then_the_ground_truth_passes(pool, tasks, monkeypatch) -> None:
    tasks, root = tasks
    monkeypatch.setattr(_backend, "JOB_TIMEOUT_S", 2.0)
    task = _math_task(tasks)
    traj, env = _episode(pool, root, task, [SLOW, *_actions(_truth(task))])
    [verdict] = traj.verdicts
    assert env.unfinished == 1 and verdict.passed, (verdict.error_class, verdict.feedback)


def test_unfinished_jobs_in_two_turns_end_the_episode_as_a_plain_fail(pool, tasks, monkeypatch) -> None:
    tasks, root = tasks
    monkeypatch.setattr(_backend, "JOB_TIMEOUT_S", 2.0)
    task = next(t for t in tasks if "MathAPI" in t.fields["involved_classes"] and len(t.fields["turns"]) >= 2)
    traj, env = _episode(pool, root, task, [SLOW, "Done.", SLOW, *["Done."] * len(task.fields["turns"])])
    [verdict] = traj.verdicts
    assert env.unfinished == 2 and len(traj.turns) == 3, (env.unfinished, len(traj.turns))  # cut at the second
    assert "turn 2: 2 backend jobs of this episode did not finish" in json.dumps(verdict.evidence["turns"])
    assert (verdict.outcome, verdict.reward, verdict.is_infra_error) == ("fail", 0.0, False), verdict

CALLS_ALONE = {
    "a directory copied into itself, then find and du": [
        {"name": "cp", "arguments": {"source": "document", "destination": "document"}},
        {"name": "find", "arguments": {}}, {"name": "du", "arguments": {}}],
    "a directory moved into itself": [{"name": "mv", "arguments": {"source": "document", "destination": "document"}}],
    "a tree 600 levels deep": [c for _ in range(600) for c in (
        {"name": "mkdir", "arguments": {"dir_name": "d"}}, {"name": "cd", "arguments": {"folder": "d"}})],
}
ARGUMENTS = {  # each a call in front of the ground truth: it must do nothing (an error result), never crash
    "a dunder parameter": {"__class__": 1},
    "self as a parameter": {"self": 1, "folder": "document"},
    "Python code as a value": {"folder": "__import__('os').system('touch /tmp/x')"},
    "a list for a string": {"folder": ["document"]},
    "an object for a string": {"folder": {"a": 1}},
    "null for a string": {"folder": None},
}


def _wrapped(value):
    if isinstance(value, str):
        return [value]
    return {k: _wrapped(v) for k, v in value.items()} if isinstance(value, dict) else value


CHEATS = {
    "string arguments wrapped in a list": lambda t: [[{**c, "arguments": _wrapped(c["arguments"])} for c in turn]
                                                     for turn in t.fields["ground_truth"]],
    "calls without their arguments": lambda t: [[{**c, "arguments": {}} for c in turn] for turn in t.fields["ground_truth"]],
    "every function with no arguments in every turn": lambda t: [
        [{"name": x["function"]["name"], "arguments": {}} for x in t.fields["tools"]] for _ in t.fields["ground_truth"]],
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_a_blind_cheat_fails_with_its_own_verdict(pool, name: str) -> None:
    verify = ENV.make_verifier(pool)
    for t in ENV.generate_tasks(3, seed=0):
        v = verify(t, json.dumps(CHEATS[name](t)))
        assert v.outcome == "fail" and v.reward == 0.0 and not v.is_infra_error, (name, t.id, v)


def test_calls_that_strain_the_backend_cost_only_their_own_verdict(pool, tasks) -> None:
    tasks, _ = tasks
    task = _task(tasks, "multi_turn_base_0")  # file system + Twitter: turn 1 is cd, mkdir, mv
    truth = task.fields["ground_truth"]
    verify = ENV.make_verifier(pool)
    assert verify(task, json.dumps(truth)).passed
    for name, calls in CALLS_ALONE.items():
        v = verify(task, json.dumps([calls + truth[0], *truth[1:]]))
        assert v.outcome == "fail" and v.error_class == "wrong_state", (name, v)
    for name, arguments in ARGUMENTS.items():
        sneaky = {"name": "cd", "arguments": arguments}
        assert verify(task, json.dumps([[sneaky, *truth[0]], *truth[1:]])).passed, name  # did nothing
        v = verify(task, json.dumps([[sneaky] for _ in truth]))
        assert v.outcome == "fail" and not v.is_infra_error, (name, v)

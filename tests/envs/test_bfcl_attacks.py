"""A policy attacking BFCL episodes through its calls' JSON, on the real sandbox and the runner: what
a call holds costs the episode its own verdict, never an exception out of the step (the runner's
``StepError``: the whole batch lost), and the verdict can be written as the run's UTF-8 records.

The attack: JSON's ``\\ud800`` escape, which Python decodes to a lone surrogate. As a parameter name,
BFCL's backend raised ``TypeError: cd() got an unexpected keyword argument '\\ud800'`` with the
surrogate written raw into the message, which came back as the tool result; the tokenizer could not
encode that observation and the step raised. As a value it reached the evidence, which UTF-8 cannot
encode. Now the strict parser refuses it: the call cannot be read (BFCL: the turn ends)."""

from __future__ import annotations

import json

import pytest
from test_bfcl_multiturn import _episode, _task

from posttrain.envs import bfcl

ATTACKS = {
    "a lone surrogate as a parameter name": '<tool_call>{"name": "cd", "arguments": {"\\ud800": 1}}</tool_call>',
    "a lone surrogate in a value": '<tool_call>{"name": "cd", "arguments": {"folder": "\\ud800"}}</tool_call>',
}


@pytest.fixture(scope="module")
def task():
    try:
        root = bfcl.bfcl_root()
    except bfcl.BfclDataMissing as e:
        pytest.fail(str(e))
    return _task(bfcl.load_tasks("multi_turn_base", root=root), "multi_turn_base_0"), root


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_lone_surrogate_in_a_call_ends_the_turn_with_a_verdict_records_can_hold(pool, task, name: str) -> None:
    task, root = task
    actions = [ATTACKS[name]] + ["Done."] * len(task.fields["turns"])
    traj, env = _episode(pool, root, task, actions)
    [verdict] = traj.verdicts
    json.dumps(verdict.to_json(), ensure_ascii=False).encode()  # the run's records are UTF-8
    assert verdict.outcome == "fail" and env.invalid_actions >= 1 and verdict.evidence["calls"] == [], verdict

"""A second read of the tool-call family as a policy that would pass without solving.

Found, and pinned here: the tool verifier read an OpenAI message document (``{"tool_calls": [...]}``)
by its ``tool_calls`` alone, and checked its ``content`` for a second answer, but left every other
key unread. A wrong call there beside the right ``tool_calls`` is a second answer a reader takes
(the legacy ``function_call`` is how OpenAI's API wrote a call; a message that is also a call has
``name`` and ``arguments`` of its own): over 300 generated tasks (seed 5), the right calls with a
wrong one in a legacy ``function_call`` passed 300 of 300, as a message that is also a (wrong) call
300 of 300, wrong calls as JSON in ``refusal`` 300 of 300, or under any other key 300 of 300. Each is
a format failure now (0 of 300); an API message's empty fields (``"refusal": null``, ``"function_call":
null``, ``"annotations": []``) say nothing and pass.

Measured, not pinned (no change): bfcl's ``excluded_function`` (18 of 200 multi_turn_base tasks,
``cp``/``mv``/``rm``; BFCL v4's own loader leaves those functions listed, and no ground truth uses
one). A call to the excluded function cannot stand in for the work: ``cp`` then ``rm`` for the
ground truth's ``mv`` failed 7 of 7 (the checker wants the ``mv`` results too); a harmless call to
it beside the ground truth passed 18 of 18, as any harmless extra call does in BFCL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.tool._calls import check_tool_calls

N = 40
TASKS = [t for t in get_domain("tool").generate_tasks(N, seed=5) if t.fields["expected_calls"]]


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": e["name"], "arguments": e["arguments"]} for e in task.fields["expected_calls"]]


def _wrong(call: dict[str, Any]) -> dict[str, Any]:
    args = dict(call["arguments"])
    key = sorted(args)[0]
    args[key] = args[key] + 1 if isinstance(args[key], int | float) else str(args[key]) + "x"
    return {"name": call["name"], "arguments": args}


def _tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": f"call_{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for i, c in enumerate(calls)]


def _legacy(c: dict[str, Any]) -> dict[str, Any]:
    return {"name": c["name"], "arguments": json.dumps(c["arguments"])}


MESSAGE_HEDGES = {
    "a wrong legacy function_call beside the tool_calls": lambda t: {
        "role": "assistant", "content": None, "function_call": _legacy(_wrong(_calls(t)[0])),
        "tool_calls": _tool_calls(_calls(t))},
    "a message that is also a wrong call": lambda t: {"tool_calls": _tool_calls(_calls(t)), **_wrong(_calls(t)[0])},
    "wrong calls as JSON in refusal": lambda t: {
        "role": "assistant", "content": None, "refusal": json.dumps([_wrong(c) for c in _calls(t)]),
        "tool_calls": _tool_calls(_calls(t))},
    "wrong calls under another key": lambda t: {
        "role": "assistant", "tool_calls": _tool_calls(_calls(t)), "alternatives": [_wrong(c) for c in _calls(t)]},
}


@pytest.mark.parametrize("name", list(MESSAGE_HEDGES))
def test_a_second_answer_in_another_key_of_the_message_fails(name: str) -> None:
    for task in TASKS:
        f = task.fields
        for response in (json.dumps(MESSAGE_HEDGES[name](task)), f"```json\n{json.dumps(MESSAGE_HEDGES[name](task))}\n```"):
            verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)
            assert not verdict.passed and verdict.error_class == "format", (name, task.id, verdict.feedback)
            assert verdict.components.get("format", 0.0) == 0.0  # a detected hedge earns no format credit


def test_an_api_message_with_empty_fields_passes_and_fails_only_on_its_calls() -> None:
    for task in TASKS:
        f = task.fields
        for calls, ok in ((_calls(task), True), ([_wrong(c) for c in _calls(task)], False)):
            message = {"role": "assistant", "content": None, "refusal": None, "function_call": None,
                       "annotations": [], "tool_calls": _tool_calls(calls)}
            verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], json.dumps(message))
            assert verdict.passed is ok and (ok or verdict.error_class in ("wrong_answer", "schema")), (task.id, verdict.feedback)
        # the hedge with the wrong call in function_call fails; the same message with the key empty passes
        hedge = MESSAGE_HEDGES["a wrong legacy function_call beside the tool_calls"](task)
        assert not check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], json.dumps(hedge)).passed
        hedge["function_call"] = None
        assert check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], json.dumps(hedge)).passed, task.id

"""A second read of the tool and json verifiers as a reward-hacking policy would read them, on generated
tasks: numbers written as strings, case and width changes of strings, nulls for optional arguments,
the calls written twice or in two formats, several documents or fences in one answer. None passes a
task it changes; the forms that are the same JSON value (``36.0`` for ``36``, keys in another order, an
``arguments`` string with blanks around it) pass, as they should. These held when written (300 tasks
of each domain, seed 3); the tests pin them on a smaller sample."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.envs.tool._calls import check_tool_calls

TOOL, JSON = get_domain("tool"), get_domain("json")
TOOL_TASKS, JSON_TASKS = TOOL.generate_tasks(60, seed=3), JSON.generate_tasks(60, seed=3)
_WIDE = {ord(c): ord(c) + 0xFEE0 for c in "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"}


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": c["name"], "arguments": dict(c["arguments"])} for c in task.fields["expected_calls"]]


def _tagged(calls: list[dict[str, Any]]) -> str:
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


def _each_arg(f: Callable[[Any], Any]) -> Callable[[Any], str]:
    return lambda t: _tagged([{**c, "arguments": {k: f(v) for k, v in c["arguments"].items()}} for c in _calls(t)])


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _tool_verdict(task: Any, response: str) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)


TOOL_ATTACKS: dict[str, tuple[Callable[[Any], str], Callable[[Any], bool]]] = {
    # name: (the response, whether it changes the answer of that task)
    "numbers as strings": (_each_arg(lambda v: str(v) if _number(v) else v),
                           lambda t: any(_number(v) for c in _calls(t) for v in c["arguments"].values())),
    "strings upper-cased": (_each_arg(lambda v: v.upper() if isinstance(v, str) else v),
                            lambda t: any(isinstance(v, str) and v != v.upper() for c in _calls(t)
                                          for v in c["arguments"].values())),
    "strings in full-width characters": (_each_arg(lambda v: v.translate(_WIDE) if isinstance(v, str) else v),
                                         lambda t: True),
    "null for the optional arguments": (lambda t: _tagged([{**c, "arguments": {**c["arguments"], "label": None,
                                                                                 "max_stops": None}}
                                                           for c in _calls(t)]), lambda t: True),
    "every call twice": (lambda t: _tagged(_calls(t) * 2), lambda t: True),
    "the right calls in a think block, a wrong one after": (
        lambda t: "<think>" + _tagged(_calls(t)) + "</think>" + _tagged([{"name": "get_weather", "arguments": {}}]),
        lambda t: True),
    "the calls in two fenced blocks": (lambda t: "".join(f"```json\n{json.dumps(_calls(t))}\n```\n" for _ in "ab"),
                                       lambda t: True),
    "the first call only": (lambda t: _tagged(_calls(t)[:1]), lambda t: len(_calls(t)) > 1),
}
TOOL_SAME = {
    "a wrong call drafted in a think block, the right ones after": (  # the reasoning is not the answer
        lambda t: "<think>" + _tagged([{"name": "get_weather", "arguments": {}}]) + "</think>" + _tagged(_calls(t))),
    "integers as floats": _each_arg(lambda v: float(v) if _number(v) else v),
    "tagged calls, and the same calls as plain JSON after them": lambda t: _tagged(_calls(t)) + "\n" + json.dumps(
        _calls(t)),
    "an OpenAI message with blanks around its arguments strings": lambda t: json.dumps({"tool_calls": [
        {"type": "function", "function": {"name": c["name"], "arguments": f" {json.dumps(c['arguments'])} "}}
        for c in _calls(t)]}),
}


@pytest.mark.parametrize("name", list(TOOL_ATTACKS))
def test_a_tool_answer_changed_in_form_fails_every_task_it_changes(name: str) -> None:
    respond, changes = TOOL_ATTACKS[name]
    changed = [t for t in TOOL_TASKS if changes(t)]
    verdicts = [_tool_verdict(t, respond(t)) for t in changed]
    assert changed and not any(v.passed for v in verdicts), [(t.id, v.feedback) for t, v in zip(changed, verdicts,
                                                                                              strict=True) if v.passed]
    assert all(v.outcome == "fail" for v in verdicts)


@pytest.mark.parametrize("name", list(TOOL_SAME))
def test_a_tool_answer_that_is_the_same_json_passes(name: str) -> None:
    verdicts = [_tool_verdict(t, TOOL_SAME[name](t)) for t in TOOL_TASKS]
    assert all(v.passed for v in verdicts), [v.feedback for v in verdicts if not v.passed]


def _doc(task: Any, **changes: Any) -> str:
    return json.dumps({**task.fields["expected"], **changes})


JSON_ATTACKS: dict[str, Callable[[Any], str]] = {
    "the age as a string": lambda t: _doc(t, age=str(t.fields["expected"]["age"])),
    "the age plus a half": lambda t: _doc(t, age=t.fields["expected"]["age"] + 0.5),
    "the membership as 1 or 0": lambda t: _doc(t, library_member=int(t.fields["expected"]["library_member"])),
    "the membership as a string": lambda t: _doc(t, library_member=str(t.fields["expected"]["library_member"])),
    "the name lower-cased": lambda t: _doc(t, name=t.fields["expected"]["name"].lower()),
    "the name in full-width letters": lambda t: _doc(t, name=t.fields["expected"]["name"].translate(_WIDE)),
    "a key the schema does not have": lambda t: _doc(t, note="x"),
    "null pets": lambda t: _doc(t, pets=None),
    "the document twice": lambda t: _doc(t) + "\n" + _doc(t),
    "the document in two fences": lambda t: f"```json\n{_doc(t)}\n```\n```json\n{_doc(t)}\n```",
    "the document in a list": lambda t: f"[{_doc(t)}]",
}
JSON_SAME = {
    "the age as 36.0": lambda t: _doc(t, age=float(t.fields["expected"]["age"])),
    "the keys in reverse order": lambda t: json.dumps(dict(reversed(list(t.fields["expected"].items())))),
    "one fence, prose after it": lambda t: f"Here it is:\n```json\n{_doc(t)}\n```\nDone.",
}


@pytest.mark.parametrize("name", list(JSON_ATTACKS))
def test_a_json_answer_changed_in_form_fails_every_task(name: str) -> None:
    verdicts = [check_json(t.fields["schema"], t.fields["expected"], JSON_ATTACKS[name](t)) for t in JSON_TASKS]
    assert all(v.outcome == "fail" for v in verdicts), [v.feedback for v in verdicts if v.outcome != "fail"]


@pytest.mark.parametrize("name", list(JSON_SAME))
def test_a_json_answer_that_is_the_same_value_passes(name: str) -> None:
    verdicts = [check_json(t.fields["schema"], t.fields["expected"], JSON_SAME[name](t)) for t in JSON_TASKS]
    assert all(v.passed for v in verdicts), [v.feedback for v in verdicts if not v.passed]

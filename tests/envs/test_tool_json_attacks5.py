"""A fifth read of the tool and json verifiers (and tool episodes) as a reward-hacking policy would
read them, on the shipped tasks and generated ones (seed 21; the counts below are over 300 of each
domain and the shipped 13 tool and 12 json tasks; the tests pin a smaller sample).

Held, each failing every task it changes (never ``infra_error``): a number written as ``true`` or
off by 1e-12 (0 of 98), paired arguments swapped (origin/destination, from/to currency: 0 of 199),
empty arguments (0 of 312), the right calls plus one distractor call (0 of 313), every listed tool
called with plausible arguments (0 of 313), each call twice (0 of 312), the first of two calls only
(0 of 63), a requested optional argument dropped (0 of 68), a wrong call list in a fence the reader
does not recognise (``c++``) before the right one; in json a degenerate or minimal instance (0 of
312), pets always empty or membership always false (0 of 225, 0 of 152), pets reversed or doubled;
the right document inside ``<think>`` and a wrong one (or none) after it (the answer is what follows
the reasoning: ``strict_json.after_reasoning``). In an episode: the right call
made twice across steps, and a wrong call then the right one (no call is undone).

Same value, and passing as it should: unicode escapes in names, keys and values, keys in another
order, the call list in a fence of another language, ``36.0`` for ``36``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_tool_episodes import act

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.policy import ChatTemplate, build_char_tokenizer

TOOL, JSON = get_domain("tool"), get_domain("json")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def _shipped(env: Any, name: str) -> list[Any]:
    path = EXAMPLES / name
    return [env.parse_task(json.loads(line), str(path)) for line in path.read_text().splitlines() if line.strip()]


TOOL_TASKS = _shipped(TOOL, "tool.jsonl") + TOOL.generate_tasks(60, seed=21)
JSON_TASKS = _shipped(JSON, "json.jsonl") + JSON.generate_tasks(60, seed=21)
PLAUSIBLE = {"get_weather": {"city": "Paris", "unit": "celsius"},
             "convert_currency": {"amount": 100, "from_currency": "USD", "to_currency": "EUR"},
             "set_alarm": {"time": "07:00"},
             "search_flights": {"origin": "Paris", "destination": "Tokyo", "date": "2026-01-01"}}


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": c["name"], "arguments": dict(c.get("arguments") or {})} for c in task.fields["expected_calls"]]


def _tagged(calls: list[dict[str, Any]]) -> str:
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


def _tools(task: Any) -> list[str]:
    return [t.get("function", t)["name"] for t in task.fields["tools"]]


def _args(f: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Any], str]:
    return lambda t: _tagged([{**c, "arguments": f(dict(c["arguments"]))} for c in _calls(t)])


def _numbers(f: Callable[[Any], Any]) -> Callable[[Any], str]:
    return _args(lambda a: {k: f(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
                            for k, v in a.items()})


def _swapped(a: dict[str, Any]) -> dict[str, Any]:
    for x, y in (("origin", "destination"), ("from_currency", "to_currency")):
        if x in a:
            a[x], a[y] = a[y], a[x]
    return a


def _escaped(s: str) -> str:
    return "".join(f"\\u{ord(ch):04x}" for ch in s)


def _escaped_call(c: dict[str, Any]) -> str:
    args = ", ".join(f'"{_escaped(k)}": ' + (f'"{_escaped(v)}"' if isinstance(v, str) else json.dumps(v))
                     for k, v in c["arguments"].items())
    return f'<tool_call>{{"name": "{_escaped(c["name"])}", "arguments": {{{args}}}}}</tool_call>'


def _every_tool(t: Any) -> list[dict[str, Any]]:
    return [{"name": n, "arguments": PLAUSIBLE[n]} for n in _tools(t)]


TOOL_ATTACKS: dict[str, Callable[[Any], str]] = {
    "numbers as true": _numbers(lambda v: True),
    "numbers off by 1e-12": _numbers(lambda v: v + 1e-12),
    "paired arguments swapped": _args(_swapped),
    "empty arguments": _args(lambda a: {}),
    "a requested optional argument dropped": _args(lambda a: {k: v for k, v in a.items() if k != "label"}),
    "the right calls and one distractor": lambda t: _tagged(
        _calls(t) + [c for c in _every_tool(t) if c["name"] not in {e["name"] for e in _calls(t)}][:1]),
    "every tool called with plausible arguments": lambda t: _tagged(_every_tool(t)),
    "each call twice": lambda t: _tagged(_calls(t) * 2),
    "the first call only": lambda t: _tagged(_calls(t)[:1]),
    "wrong calls in a c++ fence, the right ones in a json fence": lambda t: (
        f"```c++\n{json.dumps(_every_tool(t))}\n```\n```json\n{json.dumps(_calls(t))}\n```"),
}
TOOL_SAME: dict[str, Callable[[Any], str]] = {
    "unicode escapes in names, keys and values": lambda t: "".join(_escaped_call(c) for c in _calls(t)),
    "keys in another order": lambda t: "".join(
        "<tool_call>" + json.dumps({"arguments": dict(reversed(list(c["arguments"].items()))), "name": c["name"]})
        + "</tool_call>" for c in _calls(t)),
    "the call list in a python fence": lambda t: f"```python\n{json.dumps(_calls(t))}\n```",
}


def _tool_verdict(task: Any, response: str) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)


@pytest.mark.parametrize("name", list(TOOL_ATTACKS))
def test_a_tool_trick_fails_every_task_it_changes(name: str) -> None:
    changed = [t for t in TOOL_TASKS if TOOL_ATTACKS[name](t) != _tagged(_calls(t))]
    verdicts = [_tool_verdict(t, TOOL_ATTACKS[name](t)) for t in changed]
    assert changed and all(v.outcome == "fail" for v in verdicts), [
        (t.id, v.feedback) for t, v in zip(changed, verdicts, strict=True) if v.outcome != "fail"]


@pytest.mark.parametrize("name", list(TOOL_SAME))
def test_a_tool_answer_spelled_otherwise_passes(name: str) -> None:
    tasks = [t for t in TOOL_TASKS if t.fields["expected_calls"]]
    assert all(_tool_verdict(t, TOOL_SAME[name](t)).passed for t in tasks)


def _doc(task: Any, **changes: Any) -> str:
    return json.dumps({**task.fields["expected"], **changes})


JSON_ATTACKS: dict[str, Callable[[Any], str]] = {
    "a degenerate instance": lambda t: json.dumps({"name": "", "age": 0, "city": "", "pets": [],
                                                   "library_member": False}),
    "minimal strings": lambda t: json.dumps({"name": "a", "age": 0, "city": "a", "pets": [], "library_member": False}),
    "pets always empty": lambda t: _doc(t, pets=[]),
    "membership always false": lambda t: _doc(t, library_member=False),
    "pets reversed": lambda t: _doc(t, pets=list(reversed(t.fields["expected"]["pets"]))),
    "pets doubled": lambda t: _doc(t, pets=t.fields["expected"]["pets"] * 2),
    "the right document fenced in a think block, a wrong one fenced after": lambda t: (
        f"<think>```json\n{_doc(t)}\n```</think>\n```json\n{_doc(t, age=1)}\n```"),
    "the right document in a think block only": lambda t: f"<think>{_doc(t)}</think>",
    "a wrong document in a c++ fence, the right one in a json fence": lambda t: (
        f"```c++\n{_doc(t, age=1)}\n```\n```json\n{_doc(t)}\n```"),
}


@pytest.mark.parametrize("name", list(JSON_ATTACKS))
def test_a_json_trick_fails_every_task_it_changes(name: str) -> None:
    changed = [t for t in JSON_TASKS if JSON_ATTACKS[name](t) != _doc(t)]
    verdicts = [check_json(t.fields["schema"], t.fields["expected"], JSON_ATTACKS[name](t)) for t in changed]
    assert changed and all(v.outcome == "fail" for v in verdicts), [v.feedback for v in verdicts if v.passed]


def test_a_json_answer_with_unicode_escapes_passes() -> None:
    for t in JSON_TASKS:
        body = ", ".join(f'"{_escaped(k)}": ' + (f'"{_escaped(v)}"' if isinstance(v, str) else json.dumps(v))
                         for k, v in t.fields["expected"].items())
        assert check_json(t.fields["schema"], t.fields["expected"], "{" + body + "}").passed, t.id


@pytest.mark.parametrize("actions", [["RIGHT", "RIGHT", "Done."], ["WRONG", "RIGHT", "Done."]])
def test_an_episode_cannot_undo_a_call(actions: list[str]) -> None:
    """Every valid call an episode makes is judged: the right call twice, or a wrong call then the
    right one, fails (the tool domain's tools have no undo)."""
    chat = ChatTemplate(build_char_tokenizer())
    task = next(t for t in TOOL_TASKS if len(t.fields["expected_calls"]) == 1)
    right = _tagged(_calls(task))
    wrong = _tagged([c for c in _every_tool(task) if c["name"] != _calls(task)[0]["name"]][:1])  # a valid call
    env = ToolEpisodeEnv(chat, max_steps=4)
    env.reset(task)
    result = None
    for text in actions:
        result = env.step(act(chat, {"RIGHT": right, "WRONG": wrong}.get(text, text)))
    assert result is not None and result.done and result.verdict.outcome == "fail", result
    env.reset(task)
    env.step(act(chat, right))
    assert env.step(act(chat, "Done.")).verdict.passed

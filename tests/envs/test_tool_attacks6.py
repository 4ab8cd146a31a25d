"""A sixth read of the tool verifier as a reward-hacking policy: an optional argument the gold leaves
out took any value. ``optional`` lets a call omit a parameter; it let the call send that parameter
with any schema-valid value too, so a search for direct flights passed with ``max_stops: 3`` and a
weather call with ``unit: "fahrenheit"`` where the tool's default (what omitting it asks for) is
celsius: a call that does something else. Now a parameter the gold leaves out must, if given, equal
its schema's ``default`` (an explicitly passed default still passes); a pinned optional parameter
(``arguments``/``alternatives``) must equal its value, as before; a wrong type fails the schema, as
before. A parameter with no gold value and no schema default stays free: the task says any value
does (``tests/envs/test_tool.py``).

Counted on the generated tasks (seed 6, 60 tasks: 17 searches for flights, whose schema now says
``max_stops`` defaults to 0, direct flights) and the hand-made ones below, in four forms
(``<tool_call>`` blocks, an OpenAI ``tool_calls`` message with string arguments, a bare call list,
one call document), 123 cheats a form: before the fix 176 of 492 passed (every one of the 44 a form
that gives an unpinned parameter a wrong value; none of the 75 wrong types, none of the 4 wrong
values of a pinned parameter), after it 0 of 492; in an episode (the call, then a final answer),
44 of 123 before, 0 after. Every gold, every explicitly passed default and pinned value passes, on
the shipped tasks too (``examples/tasks/tool.jsonl``'s flight searches carry the same schema, so
the wrong values fail there as well).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_tool_episodes import act

from posttrain.envs import get_domain
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.policy import ChatTemplate, build_char_tokenizer, tool_specs

TOOL = get_domain("tool")
VERIFY = TOOL.make_verifier(None)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def _fn(name: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": props, "required": required, "additionalProperties": False}}}


WEATHER = _fn("get_weather", {"city": {"type": "string"},
                              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
              ["city"])
SEARCH = _fn("search_files", {"query": {"type": "string"},
                              "sort": {"type": "string", "enum": ["asc", "desc"], "default": "asc"},
                              "limit": {"type": "integer", "minimum": 0, "default": 20}},
             ["query"])
HAND = [TOOL.parse_task({"id": f"hand-{i}", "domain": "tool", "prompt": "p", "tools": [WEATHER, SEARCH],
                         "expected_calls": expected}, "test") for i, expected in enumerate([
    [{"name": "get_weather", "arguments": {"city": "Paris"}, "optional": ["unit"]}],
    [{"name": "search_files", "arguments": {"query": "q", "limit": 5}, "optional": ["sort", "limit"]}],
    [{"name": "search_files", "arguments": {"query": "q"}, "alternatives": {"sort": ["desc"]},
      "optional": ["sort", "limit"]}],
    [{"name": "get_weather", "arguments": {"city": "Oslo"}, "optional": ["unit"]},
     {"name": "search_files", "arguments": {"query": "q"}, "optional": ["sort", "limit"]}],
])]
SHIPPED = [TOOL.parse_task(json.loads(line), "tool.jsonl")
           for line in (EXAMPLES / "tool.jsonl").read_text().splitlines() if line.strip()]
TASKS = TOOL.generate_tasks(60, seed=6) + HAND


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": c["name"], "arguments": dict(c.get("arguments") or {})} for c in task.fields["expected_calls"]]


FORMS: dict[str, Callable[[list[dict[str, Any]]], str]] = {
    "tool_call blocks": lambda cs: "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in cs),
    "an OpenAI tool_calls message": lambda cs: json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(cs)]}),
    "a bare call list": lambda cs: json.dumps(cs),
    "one call document": lambda cs: json.dumps(cs[0]) if len(cs) == 1 else json.dumps(cs),
}


def _wrong_values(schema: dict[str, Any], right: list[Any]) -> list[Any]:
    """Schema-valid values that are none of ``right``: another enum member, another integer (0 too)."""
    if "enum" in schema:
        return [v for v in schema["enum"] if v not in right]
    if schema.get("type") == "integer":
        return [v for v in (0, 3, 50) if v not in right]
    return ["something else"]


def _wrong_types(schema: dict[str, Any], right: list[Any]) -> list[Any]:
    """Values of a type the schema does not declare."""
    return [str(right[0]) if schema.get("type") == "integer" else 1, None, True]


def _right(e: dict[str, Any], param: str, schema: dict[str, Any]) -> list[Any]:
    """The values the gold accepts for ``param``: its pinned ones, else the schema's default."""
    pinned = ([e["arguments"][param]] if param in (e.get("arguments") or {}) else []) + list(
        (e.get("alternatives") or {}).get(param, []))
    return pinned or ([schema["default"]] if "default" in schema else [])


def cheats(task: Any, *, wrong: bool) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """For each expected call's optional parameter: the gold calls with that parameter set to a
    wrong value or type (``wrong``), or to an accepted value (its pinned one, or the default)."""
    specs = tool_specs(task.fields["tools"])
    gold = _calls(task)
    for i, e in enumerate(task.fields["expected_calls"]):
        for param in e.get("optional") or []:
            schema = specs[e["name"]]["properties"][param]
            right = _right(e, param, schema)
            if not right:
                continue  # no gold value and no default: the task says any value does
            values = _wrong_values(schema, right) + _wrong_types(schema, right) if wrong else right
            for value in values:
                calls = [dict(c, arguments=dict(c["arguments"])) for c in gold]
                calls[i]["arguments"][param] = value
                yield f"{task.id} {e['name']}.{param}={value!r}", calls


def _verdict(task: Any, response: str) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)


def test_the_cheats_cover_defaults_pinned_values_and_every_form() -> None:
    assert sum(1 for t in TASKS for _ in cheats(t, wrong=True)) >= 60
    assert sum(1 for t in SHIPPED for _ in cheats(t, wrong=True)) >= 10
    assert any(e.get("optional") and "default" in tool_specs(t.fields["tools"])[e["name"]]["properties"]["max_stops"]
               for t in TASKS for e in t.fields["expected_calls"] if e["name"] == "search_flights")


@pytest.mark.parametrize("form", list(FORMS))
def test_a_wrong_optional_argument_fails(form: str) -> None:
    passed = [name for t in TASKS + SHIPPED for name, calls in cheats(t, wrong=True)
              if _verdict(t, FORMS[form](calls)).passed]
    assert not passed, passed


@pytest.mark.parametrize("form", list(FORMS))
def test_an_accepted_optional_argument_and_the_gold_pass(form: str) -> None:
    for t in TASKS + SHIPPED:
        assert not _calls(t) or _verdict(t, FORMS[form](_calls(t))).passed, t.id
        for name, calls in cheats(t, wrong=False):
            assert _verdict(t, FORMS[form](calls)).passed, name
        assert VERIFY(t, t.reference).passed if t.reference else True


def test_a_wrong_optional_argument_fails_through_the_pooled_verifier_and_its_class_is_wrong_answer() -> None:
    task = HAND[0]
    for unit, outcome in (("fahrenheit", ("fail", "wrong_answer")), ("celsius", ("pass", None)),
                          ("kelvin", ("fail", "schema")), (1, ("fail", "schema"))):
        v = VERIFY(task, FORMS["tool_call blocks"]([{"name": "get_weather",
                                                      "arguments": {"city": "Paris", "unit": unit}}]))
        assert (v.outcome, v.error_class) == outcome, (unit, v)


def test_a_wrong_optional_argument_fails_an_episode() -> None:
    chat = ChatTemplate(build_char_tokenizer())
    tasks = [t for t in TASKS if any(e.get("optional") for e in t.fields["expected_calls"])][:6]
    assert tasks
    for t in tasks:
        for wrong, calls in [(True, c) for _, c in cheats(t, wrong=True)][:3] + [(False, c) for _, c in
                                                                                 cheats(t, wrong=False)][:1]:
            env = ToolEpisodeEnv(chat, max_steps=3)
            env.reset(t)
            env.step(act(chat, FORMS["tool_call blocks"](calls)))
            verdict = env.step(act(chat, "Done.")).verdict
            assert verdict is not None and verdict.passed is not wrong, (t.id, calls, verdict)

"""The tool domain read for the holes b016368 and 466b1de closed in json (tests/envs/test_json_attacks8.py).

Found, and pinned here (each case failed before its fix):

- an optional parameter the gold leaves out asks for its schema's ``default`` (``_calls.with_defaults``:
  ``max_stops: 3`` is no direct flight), but the default was read from the tool's top-level
  ``properties`` only: behind a ``$ref``, an ``allOf`` or an ``anyOf`` the parameter was free and any
  guess passed. Over 80 generated tasks (seed 311) reshaped so: 3 guesses at each of the 18 flight
  searches passed 54 of 54 in each of those 3 forms before, 0 after. Where the parameters themselves
  sit behind a top-level ``allOf``, ``$ref`` or ``$anchor``, every parameter counted as unknown, and
  the load refused all 80 tasks (their gold "failed" its own schema). Every form now: all 80 load, the
  gold in 7 formattings passes 80 of 80, the default given explicitly 18 of 18; a guessed ``label``
  the gold leaves out and an undeclared ``note`` fail (they did before: a parameter the expected
  call does not list fails ``call_mismatch``).
- task files a load crashed on with a traceback, not one line naming the field (exit 2): a ``$ref``
  or ``$dynamicRef`` to nothing (``_WrappedReferencingError``; one in a branch the gold never takes
  loaded, and a call taking it failed on the task's fault; an ``http://`` one had the checker reach
  for the network),
  ``multipleOf: 0.01`` with a gold of ``1e40`` (``DivisionImpossible`` at the default 28 digits: it
  loads now and its gold passes), parameters ~120 deep (``RecursionError``), ``parameters: true``
  (``AttributeError``). Refused now too: a gold nested deeper than a call may be (none could match),
  and an optional parameter whose schemas give two defaults; a ``$schema`` of 5 is named as such.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from posttrain.cli import main
from posttrain.envs import get_domain
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.strict_json import MAX_JSON_DEPTH

ENV = get_domain("tool")
TASKS = ENV.generate_tasks(80, seed=311)
FLIGHTS = sum(e["name"] == "search_flights" for t in TASKS for e in t.fields["expected_calls"])


def _reshaped(params: dict[str, Any], form: str) -> dict[str, Any]:
    """A generated tool's ``params`` with the same meaning, written through ``form``."""
    props, p = params["properties"], copy.deepcopy(params)
    if form in ("$ref", "allOf", "anyOf", "oneOf"):  # each parameter's own schema behind the keyword
        if form == "$ref":
            p["$defs"] = {name: s for name, s in props.items()}
        p["properties"] = {name: {"$ref": f"#/$defs/{name}"} if form == "$ref" else {form: [s]}
                           for name, s in props.items()}
        return p
    if form == "top allOf":  # additionalProperties: false would see no sibling properties here
        return {"type": "object", "allOf": [{"properties": props, "required": params["required"]}]}
    if form == "top if/then":  # an "if" every value meets: its "then" applies
        return {"type": "object", "if": {}, "then": {"properties": props, "required": params["required"]}}
    if form == "top dependentSchemas":  # the rest declared once the first required parameter is given
        first = params["required"][0]
        return {"type": "object", "properties": {first: props[first]}, "required": params["required"],
                "dependentSchemas": {first: {"properties": {k: v for k, v in props.items() if k != first}}}}
    if form == "top $ref":
        return {"$ref": "#/$defs/args", "$defs": {"args": p}}
    assert form == "top $anchor", form
    return {"$ref": "#args", "$defs": {"a": {**p, "$anchor": "args"}}}


FORMS = ("$ref", "allOf", "anyOf", "top allOf", "top $ref", "top $anchor",
         # the stop hook's read of f0a35f7: three more forms a task may write, each a policy's guess at the default
         "oneOf", "top if/then", "top dependentSchemas")


def _load(task: Any, form: str) -> Any:
    tools = [{**t, "function": {**t["function"], "parameters": _reshaped(t["function"]["parameters"], form)}}
             for t in task.fields["tools"]]
    return ENV.parse_task({"id": task.id, "domain": "tool", "prompt": task.prompt, "tools": tools,
                           "expected_calls": task.fields["expected_calls"], "reference": task.reference},
                          "test_tool_attacks3")


def _calls(task: Any, extra: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The gold calls, each with ``extra[name]`` added to its arguments."""
    return [{"name": e["name"], "arguments": {**e["arguments"], **(extra or {}).get(e["name"], {})}}
            for e in task.fields["expected_calls"]]


def _golds(task: Any) -> list[str]:
    """The gold written 7 ways a right answer may write it."""
    calls = _calls(task)
    return [
        task.reference,
        "".join(f"<tool_call>\n{json.dumps({'arguments': c['arguments'], 'name': c['name']}, indent=2)}\n</tool_call>"
                for c in calls),
        "<think>The request maps onto the listed tools.</think>\n"
        + "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in reversed(calls)),
        json.dumps({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": c} for i, c in enumerate(calls)]}),
        f"```json\n{json.dumps(calls)}\n```",
        json.dumps(calls[0]) if len(calls) == 1 else json.dumps(calls[::-1]),
        "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in _calls(task, {"search_flights": {"max_stops": 0}})),
    ]


def _verdict(task: Any, calls: list[dict[str, Any]] | str) -> str:
    response = calls if isinstance(calls, str) else "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response).outcome


@pytest.mark.parametrize("form", FORMS)
def test_a_default_behind_composition_pins_the_parameter_and_the_gold_passes(form: str) -> None:
    assert FLIGHTS == 18
    guesses = passed = explicit = 0
    for t in TASKS:
        task = _load(t, form)
        assert [_verdict(task, g) for g in _golds(task)] == ["pass"] * 7, (form, task.id)
        flight = any(e["name"] == "search_flights" for e in task.fields["expected_calls"])
        explicit += flight and _verdict(task, _calls(task, {"search_flights": {"max_stops": 0}})) == "pass"
        for stops in (1, 2, 3) if flight else ():
            guesses += 1
            passed += _verdict(task, _calls(task, {"search_flights": {"max_stops": stops}})) == "pass"
        names = [e["name"] for e in task.fields["expected_calls"]]
        assert _verdict(task, _calls(task, {n: {"note": "x"} for n in names})) == "fail"  # undeclared
        if any(e["name"] == "set_alarm" and "label" not in e["arguments"] for e in task.fields["expected_calls"]):
            assert _verdict(task, _calls(task, {"set_alarm": {"label": "gym"}})) == "fail"  # declared, not asked for
    assert (guesses, passed, explicit) == (3 * FLIGHTS, 0, FLIGHTS), form


def test_a_parameter_declared_by_a_top_level_all_of_is_no_unknown_one() -> None:
    params = {"type": "object", "allOf": [{"properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}],
              "required": ["city"]}
    task = ENV.parse_task({"id": "t", "domain": "tool", "prompt": "Forecast for Oslo, 3 days.",
                           "tools": [{"name": "forecast", "parameters": params}],
                           "expected_calls": [{"name": "forecast", "arguments": {"city": "Oslo", "days": 3}}]}, "t")
    assert _verdict(task, [{"name": "forecast", "arguments": {"city": "Oslo", "days": 3}}]) == "pass"
    assert _verdict(task, [{"name": "forecast", "arguments": {"city": "Oslo", "days": 3, "hours": 1}}]) == "fail"


def _record(params: Any, calls: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"id": "bad", "domain": "tool", "prompt": "Call f.", "tools": [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": params}}], "expected_calls": calls, **more}


def _deep(levels: int) -> Any:
    """A value nesting ``levels`` arrays."""
    return json.loads("[" * levels + "]" * levels)


def _deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    inner = schema
    for _ in range(levels):
        inner["properties"] = {"a": {"type": "object"}}
        inner = inner["properties"]["a"]
    return schema


X = {"type": "object", "properties": {"x": {}}}
BAD = [
    (_record({"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}}, [{"name": "f", "arguments": {"x": 1}}]),
     "tools[0].parameters", "a $ref that does not resolve: '#/$defs/nope'"),
    (_record({"type": "object", "properties": {"x": {}, "y": {"$ref": "#/$defs/nope"}}},
             [{"name": "f", "arguments": {"x": 1}}]), "tools[0].parameters", "a $ref that does not resolve"),
    (_record({"type": "object", "properties": {"x": {"$ref": "http://example.invalid/x.json"}}},
             [{"name": "f", "arguments": {"x": 1}}]), "tools[0].parameters", "a $ref that does not resolve"),
    (_record({"type": "object", "properties": {"x": {"$dynamicRef": "#nope"}}}, [{"name": "f", "arguments": {"x": 1}}]),
     "tools[0].parameters", "does not resolve: '#nope'"),
    (_record(_deep_schema(120), [{"name": "f", "arguments": {}}]), "tools[0].parameters", "recursion limit"),
    (_record(True, [{"name": "f", "arguments": {}}]), "tools[0].parameters", "a JSON Schema object"),
    (_record({"$schema": 5, "type": "object"}, [{"name": "f"}]), "tools[0].parameters", "$schema is a URI string"),
    (_record(X, [{"name": "f", "arguments": {"x": _deep(MAX_JSON_DEPTH)}}]), "expected_calls[0].arguments",
     f"nested at most {MAX_JSON_DEPTH}"),
    (_record(X, [{"name": "f", "alternatives": {"x": [1, _deep(MAX_JSON_DEPTH)]}}]), "expected_calls[0].alternatives",
     f"nested at most {MAX_JSON_DEPTH}"),
    (_record({"type": "object", "properties": {"n": {"anyOf": [{"type": "integer", "default": 0},
                                                               {"type": "string", "default": "none"}]}}},
             [{"name": "f", "arguments": {}, "optional": ["n"]}]), "expected_calls[0].optional", "at most one default"),
]


@pytest.mark.parametrize("record, field, said", BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_a_task_file_no_call_could_pass_is_one_line_naming_the_field(tmp_path, capsys, record, field, said) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert main(["tasks", "validate", "--no-run", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"field '{field}'" in line and said in line and "Traceback" not in line, line


def test_a_small_multiple_of_and_a_gold_nested_as_deep_as_a_call_may_be_load_and_pass(tmp_path, capsys) -> None:
    """Their references go through the real worker pool (``tasks validate`` runs the verifier)."""
    cent = {"type": "object", "properties": {"x": {"type": "number", "multipleOf": 0.01}}, "required": ["x"]}
    deep = {"x": _deep(MAX_JSON_DEPTH - 1)}  # the arguments object makes it MAX_JSON_DEPTH
    records = [_record(cent, [{"name": "f", "arguments": {"x": 1e40}}], id="cent",
                       reference='<tool_call>{"name": "f", "arguments": {"x": 1e40}}</tool_call>'),
               _record(X, [{"name": "f", "arguments": deep}], id="deep", reference=json.dumps(
                   {"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": json.dumps(deep)}}]}))]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    code = main(["tasks", "validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 0 and "2 tasks, 0 problem(s)" in out, out + err

"""Tool-call domain: decoding, schema checks, call matching, and the hack regression."""

from __future__ import annotations

import json

import pytest

from posttrain.envs import get_env
from posttrain.envs.tool import ToolCallError, make_tool_verifier, parse_tool_calls
from posttrain.errors import TaskError
from posttrain.verify._deadline import CheckPool

ENV = get_env("tool")
VERIFY = ENV.make_verifier(None)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                     "days": {"type": "integer", "minimum": 1}},
    "required": ["city"]}}}
TIME = {"name": "get_time", "description": "Time in a zone.", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}


def task(expected, ordered=False):
    return ENV.parse_task({"id": "t", "domain": "tool", "prompt": "p", "tools": [WEATHER, TIME],
                           "expected_calls": expected, "ordered": ordered}, "test")


ONE = [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "optional": ["days"]}]
TWO = [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"zone": "CET"}}]


def tag(name, args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_all_formats_of_the_right_call_pass() -> None:
    t = task(ONE)
    args = {"city": "Paris", "unit": "celsius"}
    forms = [
        tag("get_weather", args),
        "Let me check.\n" + tag("get_weather", {**args, "days": 2}),
        json.dumps({"name": "get_weather", "arguments": args}),
        json.dumps([{"name": "get_weather", "arguments": args}]),
        json.dumps({"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}]}),
        "```json\n" + json.dumps({"name": "get_weather", "arguments": args}) + "\n```",
    ]
    for form in forms:
        v = VERIFY(t, form)
        assert v.passed, (form, v)


def test_parallel_calls_unordered_and_ordered() -> None:
    a, b = tag("get_weather", {"city": "Paris"}), tag("get_time", {"zone": "CET"})
    assert VERIFY(task(TWO), b + a).passed
    assert VERIFY(task(TWO, ordered=True), a + b).passed
    assert not VERIFY(task(TWO, ordered=True), b + a).passed


def test_noop_fails() -> None:
    t = task(ONE)
    assert VERIFY(t, ENV.noop_response(t)).outcome == "fail"
    assert VERIFY(t, "").outcome == "fail"


@pytest.mark.parametrize(
    ("name", "response", "error_class"),
    [
        ("JSON-04 garbled call is not an abstention", '<tool_call name="get_weather" arguments={city: Paris}/>', "format"),
        ("unclosed tag", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', "format"),
        ("truncated JSON", '{"name": "get_weather", "arguments": {"city": "Par', "format"),
        ("call-like text", 'I will call "name": "get_weather" with "arguments": city=Paris', "format"),
        ("NaN argument", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": NaN}}</tool_call>',
         "format"),
        ("duplicate argument key", '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome", "city": "Paris",'
         ' "unit": "celsius"}}</tool_call>', "format"),
        ("arguments string not JSON", json.dumps({"type": "function", "function": {"name": "get_weather",
                                                                                   "arguments": "{city: Paris}"}}),
         "format"),
        ("unknown tool", tag("get_wether", {"city": "Paris", "unit": "celsius"}), "unknown_tool"),
        ("unknown parameter", tag("get_weather", {"city": "Paris", "unit": "celsius", "admin": True}), "schema"),
        ("missing required", tag("get_weather", {"unit": "celsius"}), "schema"),
        ("wrong type", tag("get_weather", {"city": "Paris", "unit": "celsius", "days": "2"}), "schema"),
        ("enum violation", tag("get_weather", {"city": "Paris", "unit": "kelvin"}), "schema"),
        ("wrong value", tag("get_weather", {"city": "London", "unit": "celsius"}), "wrong_answer"),
        ("missing expected optional-in-schema arg", tag("get_weather", {"city": "Paris"}), "wrong_answer"),
        ("hedge: two calls for one", tag("get_weather", {"city": "Paris", "unit": "celsius"})
         + tag("get_weather", {"city": "London", "unit": "celsius"}), "wrong_answer"),
        ("same call twice", tag("get_weather", {"city": "Paris", "unit": "celsius"}) * 2, "wrong_answer"),
        ("plain text claim (AGENT-02)", "I checked: it is sunny in Paris.", "wrong_answer"),
    ],
)
def test_hacks_and_errors_score_zero(name: str, response: str, error_class: str) -> None:
    v = VERIFY(task(ONE), response)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, error_class), (name, v)


def test_alternatives_and_optional() -> None:
    t = task([{"name": "get_weather", "arguments": {"city": "NYC"}, "alternatives": {"city": ["New York"]},
               "optional": ["unit"]}])
    assert VERIFY(t, tag("get_weather", {"city": "New York"})).passed
    assert VERIFY(t, tag("get_weather", {"city": "NYC", "unit": "fahrenheit"})).passed
    assert not VERIFY(t, tag("get_weather", {"city": "Boston"})).passed


def test_no_call_expected() -> None:
    t = task([])
    assert VERIFY(t, "No tool is needed: 2 + 2 = 4.").passed
    assert not VERIFY(t, tag("get_time", {"zone": "CET"})).passed
    assert VERIFY(t, "<tool_call>{oops</tool_call>").error_class == "format"  # invalid, not abstention


def test_parse_tool_calls_tristate() -> None:
    assert parse_tool_calls("hello") == []
    with pytest.raises(ToolCallError):
        parse_tool_calls("<tool_call>[1, 2]</tool_call>")


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"tools": []}, "field 'tools'"),
        ({"tools": [{"description": "no name"}]}, r"field 'tools\[0\]'"),
        ({"expected_calls": [{"name": "nope"}]}, r"expected_calls\[0\].name"),
        ({"expected_calls": [{"name": "get_time", "args": {}}]}, r"expected_calls\[0\]"),
        ({"ordered": "yes"}, "field 'ordered'"),
    ],
)
def test_bad_tasks_are_named(patch, match) -> None:
    base = {"id": "bad-tool", "domain": "tool", "prompt": "p", "tools": [WEATHER, TIME], "expected_calls": ONE}
    with pytest.raises(TaskError, match=match):
        ENV.parse_task({**base, **patch}, "tools.jsonl:1")


FAST = make_tool_verifier(CheckPool("posttrain.envs.tool._domain", size=1, cpu_budget_s=0.5))


@pytest.mark.parametrize(("name", "exploit_task", "response"), ENV.exploit_fixtures(),
                         ids=[name for name, _, _ in ENV.exploit_fixtures()])
def test_exploit_fixtures_score_zero(name: str, exploit_task, response: str) -> None:
    v = FAST(exploit_task, response)  # a 0.5 s CPU budget: the backtracking fixture fails sooner
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v)


def test_exploit_fixture_task_accepts_its_right_call() -> None:
    (_, t, _), *_ = ENV.exploit_fixtures()
    right = '<tool_call>{"name": "book", "arguments": {"seats": 2.0, "extra": 0e0, "code": "aaa"}}</tool_call>'
    assert VERIFY(t, right).passed


def test_numeric_arguments_compare_exactly() -> None:
    t = task([{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])
    assert VERIFY(t, tag("get_weather", {"city": "Paris", "days": 3})).passed
    assert VERIFY(t, '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}</tool_call>').passed
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0000000000000001}}</tool_call>'
    assert VERIFY(t, call).error_class == "schema"


def test_fenced_call_with_crlf_line_endings_is_extracted() -> None:
    body = json.dumps({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})
    assert VERIFY(task(ONE), f"Calling it.\r\n```json\r\n{body}\r\n```\r\n").passed

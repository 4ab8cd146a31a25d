"""JSON domain: strict parse, schema, value comparison, and the hack regression (JSON-*)."""

from __future__ import annotations

import json

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json import make_json_verifier
from posttrain.errors import TaskError
from posttrain.strict_json import StrictJSONError, json_equal, loads_strict
from posttrain.verify._deadline import CheckPool

ENV = get_domain("json")
VERIFY = ENV.make_verifier(None)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string"}},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "score", "tags", "active"],
}
EXPECTED = {"name": "Ada", "age": 36, "score": 7.5, "tags": ["math", "code"], "active": True}


def task(schema=SCHEMA, expected=EXPECTED):
    return ENV.parse_task({"id": "j", "domain": "json", "prompt": "Give JSON.", "schema": schema,
                           "expected": expected}, "test")


def test_reference_forms_pass() -> None:
    t = task()
    assert VERIFY(t, json.dumps(EXPECTED)).passed
    assert VERIFY(t, "Sure:\n```json\n" + json.dumps(EXPECTED, indent=2) + "\n```").passed
    reordered = {"active": True, "tags": ["math", "code"], "score": 7.5, "age": 36.0, "name": "Ada"}
    assert VERIFY(t, json.dumps(reordered)).passed  # 36.0 is the JSON number 36


def test_noop_fails() -> None:
    v = VERIFY(task(), ENV.noop_response(task()))
    assert (v.outcome, v.reward) == ("fail", 0.0)


def with_(**kw):
    return json.dumps({**EXPECTED, **kw})


@pytest.mark.parametrize(
    ("name", "response", "error_class"),
    [
        ("JSON-01 NaN", with_(score="@").replace('"@"', "NaN"), "format"),
        ("JSON-01 Infinity", with_(score="@").replace('"@"', "Infinity"), "format"),
        ("JSON-01 -Infinity", with_(score="@").replace('"@"', "-Infinity"), "format"),
        ("JSON-01 overflow", with_(score="@").replace('"@"', "1e999"), "format"),
        ("duplicate key (schema sees one value, reader another)",
         json.dumps(EXPECTED)[:-1] + ', "age": 99}', "format"),
        ("extra key", with_(admin=True), "wrong_answer"),
        ("bool for int", with_(active=1), "schema"),
        ("string for number", with_(age="36"), "schema"),
        ("wrong value", with_(age=37), "wrong_answer"),
        ("wrong nested value", with_(tags=["math", "art"]), "wrong_answer"),
        ("reordered array", with_(tags=["code", "math"]), "wrong_answer"),
        ("missing key", json.dumps({k: v for k, v in EXPECTED.items() if k != "active"}), "schema"),
        ("two fenced blocks (hedge)", f"```json\n{with_(age=1)}\n```\n```json\n{json.dumps(EXPECTED)}\n```", "format"),
        ("trailing text", json.dumps(EXPECTED) + " I hope this helps", "format"),
        ("two documents", json.dumps(EXPECTED) + json.dumps(EXPECTED), "format"),
        ("empty", "", "format"),
        ("list instead of object", json.dumps([EXPECTED]), "schema"),
        ("python literal", str(EXPECTED), "format"),
    ],
)
def test_hacks_and_errors_score_zero(name: str, response: str, error_class: str) -> None:
    v = VERIFY(task(), response)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, error_class), (name, v)


def test_feedback_never_reveals_the_expected_value() -> None:
    v = VERIFY(task(), with_(name="Bob"))
    assert "$.name" in v.feedback and "Ada" not in v.feedback


def test_extra_keys_allowed_only_when_the_schema_says_so() -> None:
    open_schema = {**SCHEMA, "additionalProperties": True}
    assert VERIFY(task(schema=open_schema), with_(note="x")).passed
    closed = {**SCHEMA, "additionalProperties": False}
    assert VERIFY(task(schema=closed), with_(note="x")).error_class == "schema"


def test_strict_parser() -> None:
    with pytest.raises(StrictJSONError, match="duplicate key 'a'"):
        loads_strict('{"a": 1, "a": 2}')
    with pytest.raises(StrictJSONError, match="non-finite"):
        loads_strict("[NaN]")
    with pytest.raises(StrictJSONError, match="overflows"):
        loads_strict("[-1e400]")
    with pytest.raises(StrictJSONError, match="nested too deeply"):
        loads_strict("[" * 100000 + "]" * 100000)
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]}) and not json_equal(True, 1) and not json_equal(0, False)


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"schema": {"type": "nonsense"}}, "field 'schema': expected a valid JSON Schema"),
        ({"expected": {"name": "Ada"}}, "field 'expected': expected a value that satisfies the schema"),
        ({"schema": "not a schema"}, "field 'schema'"),
        ({"expected": float("nan")}, "field 'expected': expected strict JSON"),
        ({"extra": 1}, "unknown field"),
    ],
)
def test_bad_tasks_are_named(record, match) -> None:
    base = {"id": "bad-1", "domain": "json", "prompt": "p", "schema": SCHEMA, "expected": EXPECTED}
    with pytest.raises(TaskError, match=match) as e:
        ENV.parse_task({**base, **record}, "file.jsonl:3")
    assert "file.jsonl:3" in str(e.value) and "bad-1" in str(e.value)


FAST = make_json_verifier(CheckPool("posttrain.envs.json._env", size=1, cpu_budget_s=0.5))


@pytest.mark.parametrize(("name", "exploit_task", "response"), ENV.exploit_fixtures(),
                         ids=[name for name, _, _ in ENV.exploit_fixtures()])
def test_exploit_fixtures_score_zero(name: str, exploit_task, response: str) -> None:
    v = FAST(exploit_task, response)  # a 0.5 s CPU budget: the backtracking fixture fails sooner
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v)
    json.dumps(v.to_json(), ensure_ascii=False).encode()  # the run's records are UTF-8


@pytest.mark.parametrize(
    ("response", "passes"),
    [
        ('{"age": 36}', True),
        ('{"age": 36.0}', True),  # JSON Schema: an integer is a number with no fractional part
        ('{"age": 3.6e1}', True),
        ('{"age": 360e-1}', True),
        ('{"age": 36.000000000000001}', False),
        ('{"age": 35.99999999999999999}', False),
    ],
)
def test_integer_fields_compare_the_decimal_as_written(response: str, passes: bool) -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    assert VERIFY(task(schema, {"age": 36}), response).passed is passes


def test_numbers_compare_exactly_at_every_scale() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
    assert VERIFY(task(schema, {"x": 0.1}), '{"x": 0.1}').passed
    assert VERIFY(task(schema, {"x": 0.1}), '{"x": 1e-1}').passed
    assert not VERIFY(task(schema, {"x": 0.1}), '{"x": 0.10000000000000001}').passed
    assert not VERIFY(task(schema, {"x": 0}), '{"x": 1e-400}').passed
    assert not VERIFY(task(schema, {"x": 0}), '{"x": -1e-400}').passed
    big = 10**20 + 1
    assert VERIFY(task(schema, {"x": big}), f'{{"x": {big}}}').passed
    assert not VERIFY(task(schema, {"x": big}), '{"x": 1.0e20}').passed
    bounded = {"type": "object", "properties": {"x": {"type": "number", "maximum": 0.1, "multipleOf": 0.05}}}
    assert VERIFY(task(bounded, {"x": 0.1}), '{"x": 0.1}').passed  # 0.1 <= 0.1 and a multiple of 0.05, exactly
    assert VERIFY(task(bounded, {"x": 0.1}), '{"x": 0.10000000000000001}').error_class == "schema"


def test_fenced_answer_with_crlf_line_endings_is_extracted() -> None:
    body = json.dumps(EXPECTED, indent=2).replace("\n", "\r\n")
    assert VERIFY(task(), f"Sure:\r\n```json\r\n{body}\r\n```\r\n").passed
    assert VERIFY(task(), f"```\r\n{body}\r\n```").passed


def test_a_bad_schema_is_named_whole_never_cut() -> None:
    """Issue 12: task-file messages are never cut off mid-sentence."""
    from posttrain.envs import get_domain
    from posttrain.errors import TaskError

    long = "x" * 300
    record = {"id": "a", "domain": "json", "prompt": "p", "expected": {},
              "schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": long}}}}
    with pytest.raises(TaskError) as e:
        get_domain("json").parse_task(record, "f.jsonl")
    assert f"'{long}' is not of type 'number' at properties/a/minimum" in str(e.value)


def test_an_exponent_beyond_decimal_range_is_a_format_failure_not_an_exception() -> None:
    """``1e-999999999999999999999`` parses as a float (0.0) but not as a Decimal: the strict parser
    must refuse it as a number out of range, never raise decimal.InvalidOperation into a caller
    (the chat template's tool-call parser runs it in the trainer process)."""
    from posttrain.strict_json import StrictJSONError, loads_strict

    for text in ("1e-999999999999999999999", '{"a": 1E999999999999999999999}'):
        with pytest.raises(StrictJSONError, match="out of range|non-finite"):
            loads_strict(text, exact=True)

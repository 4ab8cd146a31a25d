"""A task's JSON Schema is checked alike in the json domain (its document schema) and the tool domain (a
tool's parameters): one ``schema_expected`` says what was expected, so a schema one domain refuses with
a place in it is refused by the other with the same words (the tool domain's copy of the check said
"is not of type 'string'" without where).
"""

from __future__ import annotations

from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.errors import TaskError

BAD_SCHEMAS = [
    {"type": "object", "properties": {"x": {"pattern": 5}}},
    {"type": "object", "properties": {"x": {"type": "nonsense"}}},
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}},
    {"$schema": 5, "type": "object"},
]


def _json_error(schema: Any) -> str:
    record = {"id": "bad", "domain": "json", "prompt": "p", "schema": schema, "expected": {"x": "a"}}
    with pytest.raises(TaskError) as e:
        get_domain("json").parse_task(record, "t.jsonl:1")
    return str(e.value).split("expected ", 1)[1]


def _tool_error(schema: Any) -> str:
    record = {"id": "bad", "domain": "tool", "prompt": "Call f.", "tools": [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": schema}}], "expected_calls": [{"name": "f", "arguments": {}}]}
    with pytest.raises(TaskError) as e:
        get_domain("tool").parse_task(record, "t.jsonl:1")
    message = str(e.value)
    assert "'tools[0].parameters'" in message and "\n" not in message
    return message.split("expected ", 1)[1]


@pytest.mark.parametrize("schema", BAD_SCHEMAS, ids=range(len(BAD_SCHEMAS)))
def test_both_domains_say_the_same_of_a_bad_schema(schema: Any) -> None:
    said = _json_error(schema)
    assert said == _tool_error(schema)
    if "properties" in schema and "$ref" not in str(schema):
        assert " at properties/x" in said  # where in the schema, on both sides

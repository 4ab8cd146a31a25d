"""Three policy responses against the json domain's declared-property rule (b016368, 750ea35), pinned
by the stop hook's read: where a schema allows additional properties but says which names may appear
(``propertyNames``), a key absent from ``expected`` that the names allow is declared, not extra. A
guessed ``nickname`` that a ``propertyNames`` pattern, or an ``anyOf`` of consts, let through passed as
leaving it out did (``declares`` read only ``enum``/``const``); it is a wrong answer now. An undeclared
extra where nothing restricts names still passes, as docs/tasks.md says, and the gold passes."""

from __future__ import annotations

import pytest

from posttrain.envs.json._env import check_json

BASE = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": True}
EXPECTED = {"name": "Ada", "age": 36}
GOLD = '{"name": "Ada", "age": 36}'
GUESS = '{"name": "Ada", "age": 36, "nickname": "Addie"}'
NAMES = {
    "a pattern": {"pattern": "^(name|age|nickname)$"},
    "an anyOf of consts": {"anyOf": [{"const": "name"}, {"const": "age"}, {"const": "nickname"}]},
    "a $ref to the names": {"$ref": "#/$defs/names"},
}


@pytest.mark.parametrize("how", sorted(NAMES))
def test_a_guess_in_a_name_the_schema_allows_is_a_wrong_answer(how: str) -> None:
    schema = {**BASE, "propertyNames": NAMES[how], "$defs": {"names": {"enum": ["name", "age", "nickname"]}}}
    assert check_json(schema, EXPECTED, GOLD).outcome == "pass"
    v = check_json(schema, EXPECTED, GUESS)
    assert (v.outcome, v.error_class) == ("fail", "wrong_answer"), v
    assert check_json(schema, EXPECTED, '{"name": "Ada", "age": 36, "zzz": 1}').error_class == "schema"


def test_an_undeclared_extra_where_no_name_is_restricted_still_passes() -> None:
    assert check_json(BASE, EXPECTED, '{"name": "Ada", "age": 36, "zzz": 1}').outcome == "pass"
    assert check_json({**BASE, "propertyNames": {}}, EXPECTED, '{"name": "Ada", "age": 36, "zzz": 1}').outcome == "pass"

"""An eighth read of the json verifier as a reward-hacking policy would read it (tests/envs/
test_tool_json_attacks2/4/5/7.py and test_rg_tool_json_attacks3.py pin the earlier ones).

Found, and pinned here (each case failed before its fix):

- a declared property the task expects absent, filled with a guess, where the schema declares it
  through ``allOf``/``anyOf``/``oneOf``, ``if``/``then``, a ``$ref`` (a pointer or an ``$anchor``),
  ``dependentSchemas`` or a ``required`` list, beside ``additionalProperties: true``: 2f2ad3d's rule
  (a declared property expected absent must be left out) read only ``properties`` of the schema at
  that place, so a nickname the text never gives passed as leaving it out did. Over 300 generated
  tasks so reshaped (seed 808): 2,100 of 2,100 guesses passed before (7 forms), 0 after; the gold and
  an undeclared extra key pass 300 of 300 in each form. And under a property whose schema is a ``$ref``
  to an open object, an undeclared extra key failed (0 of 300) where the schema allows it: 300 now.
- task files a load crashed on with a traceback, not a line naming the field: a ``$ref`` that does
  not resolve (``_WrappedReferencingError``), a schema ~100 properties deep and an ``expected``
  ~600 deep (``RecursionError``). And an ``expected`` nested deeper than 100 loaded silently, though
  no response may nest deeper than 100 (``strict_json.MAX_JSON_DEPTH``): a task none could pass. A
  ``$schema`` that is not a string (``AttributeError``). A ``multipleOf`` of ``0.01`` with an expected
  ``10**40`` (or ``1e-30`` with ``123456789.5``): the load checked it at Python's default 28 digits and
  raised ``DivisionImpossible``, where the worker's 4,000 digits check it exactly.

Held (0 passes over 60 generated tasks, seed 77, never ``infra_error``): a name in NFD with a
combining accent, with a zero-width space, with a Cyrillic look-alike letter; a key with a zero-width
space; the document wrapped in chat-template markers or a ``<tool_call>``; a right draft then
``</think>`` and a wrong one; an age of 4,300 nines (``wrong_answer``) or 5,000 (refused); a document
past 200,000 characters or 20,000 keys; 5,000 nested arrays.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.errors import TaskError

ENV = get_domain("json")
VERIFY = ENV.make_verifier(None)
TASKS = ENV.generate_tasks(40, seed=808)


def _task(schema: dict[str, Any], expected: Any):
    return ENV.parse_task({"id": "j8", "domain": "json", "prompt": "Give the JSON.", "schema": schema,
                           "expected": expected}, "test_json_attacks8")


def _composed(schema: dict[str, Any], form: str) -> dict[str, Any]:
    """``schema`` (a generated person schema) with an optional ``nickname`` declared through ``form``, and
    extra keys allowed at the top."""
    body = {k: v for k, v in schema.items() if k != "additionalProperties"}
    body["properties"] = {**body["properties"], "nickname": {"type": "string"}}
    return {
        "$ref": {"$defs": {"person": body}, "$ref": "#/$defs/person"},
        "$anchor": {"$defs": {"person": {**body, "$anchor": "person"}}, "$ref": "#person"},
        "allOf": {"allOf": [body]},
        "anyOf": {"anyOf": [body]},
        "oneOf": {"oneOf": [body]},
        "if/then": {"if": {"type": "object"}, "then": body},
        "dependentSchemas": {**body, "properties": schema["properties"],
                             "dependentSchemas": {"name": {"properties": {"nickname": {"type": "string"}}}}},
        "required of a branch": {**body, "properties": schema["properties"],
                                 "anyOf": [{"required": ["name"]}, {"required": ["nickname"]}]},
    }[form] | {"additionalProperties": True}


FORMS = ("$ref", "$anchor", "allOf", "anyOf", "oneOf", "if/then", "dependentSchemas", "required of a branch")


@pytest.mark.parametrize("form", FORMS)
def test_a_guess_in_a_property_declared_by_composition_fails(form: str) -> None:
    for t in TASKS:
        schema, expected = _composed(t.fields["schema"], form), t.fields["expected"]
        guess = check_json(schema, expected, json.dumps({**expected, "nickname": expected["name"][:3]}))
        assert guess.error_class == "wrong_answer" and "nickname" in guess.feedback, (form, guess)
        assert check_json(schema, expected, json.dumps(expected)).passed, form
        assert check_json(schema, expected, json.dumps({**expected, "source": "text"})).passed, form


def test_under_a_ref_to_an_open_object_a_declared_guess_fails_and_an_undeclared_key_passes() -> None:
    schema = {"$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"},
                                                                     "street2": {"type": "string"}},
                                    "required": ["street"], "additionalProperties": True}},
              "type": "object", "properties": {"address": {"$ref": "#/$defs/address"}}, "required": ["address"],
              "additionalProperties": False}
    t = _task(schema, {"address": {"street": "Main"}})
    assert VERIFY(t, '{"address": {"street": "Main"}}').passed
    assert VERIFY(t, '{"address": {"street": "Main", "floor": 2}}').passed  # the schema allows it
    assert VERIFY(t, '{"address": {"street": "Main", "street2": "Apt 4"}}').error_class == "wrong_answer"


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _deep_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "expected", "match"),
    [
        ({"$ref": "#/$defs/nope"}, {"a": 1}, r"field 'schema': expected a valid JSON Schema \(a \$ref that does not"),
        ({"$ref": "#nope"}, {"a": 1}, r"field 'schema': expected a valid JSON Schema \(a \$ref that does not"),
        ({"$ref": "https://example.com/person.json"}, {"a": 1}, "a \\$ref that does not resolve"),
        (_deep_schema(100), {}, "field 'schema': expected a JSON Schema nested less deeply"),
        ({}, _nested(101, 1), "field 'expected': expected a value nested at most 100"),
        ({}, _nested(600, 1), "field 'expected': expected a value nested at most 100"),
        ({"$schema": 5}, 1, "field 'schema': expected a JSON Schema whose \\$schema is a URI string, got 5"),
        ({"multipleOf": 1e-300}, 10**4200, "field 'expected': expected a value whose multipleOf quotient has at most"),
    ],
    ids=["pointer to nothing", "no such anchor", "another document", "schema too deep", "expected 101 deep",
         "expected 600 deep", "$schema not a string", "multipleOf past 4000 digits"],
)
def test_a_task_the_verifier_cannot_check_is_refused_by_name(schema: Any, expected: Any, match: str) -> None:
    with pytest.raises(TaskError, match=match):
        _task(schema, expected)


@pytest.mark.parametrize(("multiple_of", "expected"), [(0.01, 10**40), (1e-30, 123456789.5), (1e-300, 1)])
def test_a_small_multiple_of_loads_and_is_checked_exactly(multiple_of: float, expected: Any) -> None:
    """The load checked ``multipleOf`` at Python's default 28 digits (``DivisionImpossible``, a traceback);
    the worker checks at 4,000, and so does the load now."""
    t = _task({"type": "number", "multipleOf": multiple_of}, expected)
    text = json.dumps(expected)
    assert VERIFY(t, text).passed and VERIFY(t, text + "e0").passed
    off = text + ("" if "." in text else ".") + "0" * 300 + "1"  # 1e-301 more: no multiple of it
    assert VERIFY(t, off).error_class == "schema"


def test_an_expected_value_100_deep_loads_and_its_gold_passes() -> None:
    deep = _nested(99, {"a": 1})
    t = _task({}, deep)
    assert VERIFY(t, json.dumps(deep)).passed
    assert VERIFY(t, json.dumps([deep])).error_class == "format"  # 101 deep: refused, as the task says


def _held(expected: dict[str, Any]) -> dict[str, str]:
    right, name = json.dumps(expected), expected["name"]
    other = json.dumps({**expected, "name": "Bruno" if name != "Bruno" else "Chen"})
    return {
        "NFD name": json.dumps({**expected, "name": unicodedata.normalize("NFD", name + "\u0301")}),
        "zero-width space in the name": json.dumps({**expected, "name": name[0] + "\u200b" + name[1:]}),
        "Cyrillic look-alike": json.dumps({**expected, "name": name.replace("o", "\u043e").replace("a", "\u0430")
                                           .replace("e", "\u0435") + ("" if set(name) & set("oae") else "\u0435")}),
        "zero-width space in a key": json.dumps({**expected, "na\u200bme": name}),
        "chat-template markers": f"<|im_start|>assistant\n{other}<|im_end|>",
        "in a tool call": f'<tool_call>{{"name": "answer", "arguments": {right}}}</tool_call>',
        "right draft, </think>, wrong answer": f"{right}</think>{other}",
        "4,300 nines": right.replace(f'"age": {expected["age"]}', '"age": ' + "9" * 4300),
        "5,000 nines": right.replace(f'"age": {expected["age"]}', '"age": ' + "9" * 5000),
        "past 200,000 characters": json.dumps({**expected, "pad": "x" * 200_001}),
        "20,000 keys": json.dumps({**expected, **{f"k{i}": i for i in range(20_000)}}),
        "5,000 nested arrays": "[" * 5000 + "]" * 5000,
    }


def test_held_attacks_fail_and_never_as_infra() -> None:
    for t in TASKS[:8]:
        for name, response in _held(t.fields["expected"]).items():
            v = VERIFY(t, response)
            assert (v.outcome, v.reward) == ("fail", 0.0), (name, v)


def test_the_gold_passes_in_every_legitimate_form() -> None:
    """The same document, written as a model may write it, passes every generated task, plain and composed."""
    for t in ENV.generate_tasks(100, seed=809):
        e = t.fields["expected"]
        age, escaped = f'"age": {e["age"]}', f'"\\u{ord(e["name"][0]):04x}{e["name"][1:]}"'
        forms = [json.dumps(e), f"```json\n{json.dumps(e, indent=2)}\n```",
                 "Here it is:\r\n```\r\n" + json.dumps(e, indent=4).replace("\n", "\r\n") + "\r\n```\r\nDone.",
                 json.dumps(dict(reversed(list(e.items())))), json.dumps(e).replace(age, age + ".0"),
                 json.dumps(e).replace(age, age + "e0"), json.dumps(e, separators=(",", ":")),
                 json.dumps(e).replace(f'"{e["name"]}"', escaped),
                 f"<think>The age is {e['age']}, maybe {e['age'] + 1}.</think>\n{json.dumps(e)}"]
        for schema in (t.fields["schema"], _composed(t.fields["schema"], "$ref"), _composed(t.fields["schema"], "allOf")):
            for response in forms:
                assert check_json(schema, e, response).passed, (t.id, response)
    assert all(VERIFY(t, t.reference).passed for t in TASKS)

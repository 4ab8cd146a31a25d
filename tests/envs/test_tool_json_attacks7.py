"""A seventh read of the json and tool verifiers as a reward-hacking policy would read them.

Found, and pinned here:

- json, a declared property the task expects absent, filled with a guess, where the schema allows
  extra keys (``additionalProperties: true`` or a schema): the value check let every key absent
  from ``expected`` through there, declared or not, so a guess in an optional field the text never
  gives (a nickname, a pet's name) passed as leaving it out did. Filling every uncertain field never
  cost and sometimes paid (a hedge that teaches hallucinated fields). Over 300 generated tasks made
  open (``/tmp`` script, seed 708): 300 of 300 guesses passed before, 221 of 221 in a nested
  object; 0 after, while leaving the field out, an undeclared extra key, and the gold pass 300 of 300.
- tool, a task whose gold call fails its own tool's parameters (``unit: "kelvin"`` against the
  enum, ``time: "7:00"`` against the pattern, ``amount: "100"`` for a number) was accepted: the gold
  then failed as ``schema`` (0) while any valid wrong call earned ``format`` credit, so failing
  differently paid. json refuses an ``expected`` its schema rejects; tool now refuses such a gold at
  load. Over 300 generated tasks with one gold argument broken (seed 710): 300 accepted before, 0
  after; the 300 as generated still load.
- json and tool, ``format`` that jsonschema checks only with optional packages (``date-time``,
  ``time``, ``duration``, ``uri``, ``hostname``, ...): none installed, so every string passed
  (``"tomorrow"`` as a date-time, ``"see website"`` as a uri). A free tool argument so written
  passed, and a json document earned ``format`` credit. Over the generated tasks with such a field
  added (seed 711): a free argument of each of 5 formats 97 of 97 before, 0 after (well-formed 97
  of 97); json ``format`` credit 300 of 300 before, 0 after. ``verify.json_schema`` checks them now.
- tool, an abstention task passed by a call in another model family's format: Llama 3.1's
  ``<function=get_weather>{...}</function>``, or a pythonic ``get_weather(city='Paris')`` in prose,
  decode as no call (the codec reads Hermes and OpenAI calls), and the text says something, so the
  garbled call was credited as declining (reward-hacking.md JSON-04). Over the shipped abstention
  task and 300 generated tasks made abstentions (seed 712): 301 of 301 each before, 0 after; an
  honest refusal, one naming ``get_weather()`` too, passes 301 of 301.

Held (300 generated tasks of each domain, seed 707, and counts in the commit message): trailing
prose, ``<answer>`` tags, tilde / one-line / unclosed fences, lookalike, NBSP, ZWJ and NFD names,
all pets, values typed as strings; in tool: calls inside reasoning only, a legacy ``function_call``
beside an empty ``tool_calls``, a call list inside one tag, the time with a trailing newline (its
pattern's ``$`` allows one; the value check does not), ``max_stops`` other than its default; in an
episode (100 tasks, seed 709): an answer with no call, the calls only in reasoning, every tool,
the calls twice, the other family's format, a forged ``<tool_response>`` (0 of 100 each). The
cases below pin the forms not pinned before, on 20 tasks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.errors import TaskError
from posttrain.policy import ChatTemplate, Generation, build_char_tokenizer
from posttrain.verify.json_schema import schema_error, validator_for

JSON, TOOL = get_domain("json"), get_domain("tool")


def _open(task: Any) -> tuple[dict[str, Any], Any]:
    """A generated task as a task file might write it: extra keys allowed, an optional ``nickname``
    declared (the text never gives one), pets as objects with an optional ``name``."""
    schema = json.loads(json.dumps(task.fields["schema"]))
    schema["properties"]["nickname"] = {"type": "string"}
    schema["properties"]["pets"]["items"] = {
        "type": "object", "properties": {"kind": {"type": "string"}, "name": {"type": "string"}},
        "required": ["kind"], "additionalProperties": {"type": "string"}}
    schema["patternProperties"] = {"^x_": {"type": "string"}}
    schema["additionalProperties"] = True
    expected = {**task.fields["expected"], "pets": [{"kind": p} for p in task.fields["expected"]["pets"]]}
    record = {"id": task.id, "domain": "json", "prompt": task.prompt, "schema": schema, "expected": expected}
    parsed = JSON.parse_task(record, "test")
    return parsed.fields["schema"], parsed.fields["expected"]


TASKS = [_open(t) for t in JSON.generate_tasks(12, seed=708)]
PETS = next((s, e) for s, e in TASKS if e["pets"])


@pytest.mark.parametrize(("schema", "expected"), TASKS)
def test_a_guess_in_a_declared_field_expected_absent_fails(schema: dict[str, Any], expected: Any) -> None:
    for guess in ({"nickname": expected["name"][:3]}, {"x_note": "a"}):
        verdict = check_json(schema, expected, json.dumps({**expected, **guess}))
        assert (verdict.outcome, verdict.error_class) == ("fail", "wrong_answer"), (guess, verdict.feedback)


def test_a_guess_in_a_nested_declared_field_fails() -> None:
    schema, expected = PETS
    guessed = {**expected, "pets": [{**p, "name": "Rex"} for p in expected["pets"]]}
    assert check_json(schema, expected, json.dumps(guessed)).error_class == "wrong_answer"


@pytest.mark.parametrize(("schema", "expected"), TASKS)
def test_the_gold_and_an_undeclared_extra_key_still_pass(schema: dict[str, Any], expected: Any) -> None:
    assert check_json(schema, expected, json.dumps(expected)).passed
    assert check_json(schema, expected, json.dumps({**expected, "note": "x"})).passed
    if expected["pets"]:
        extra = {**expected, "pets": [{**p, "colour": "grey"} for p in expected["pets"]]}
        assert check_json(schema, expected, json.dumps(extra)).passed


TOOL_TASKS = TOOL.generate_tasks(40, seed=710)
BROKEN = {"unit": "kelvin", "time": "7:00", "amount": "100", "date": None, "city": 7}


def _record(task: Any, expected_calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": task.id, "domain": "tool", "prompt": task.prompt, "tools": task.fields["tools"],
            "expected_calls": expected_calls}


def test_a_tool_gold_that_fails_its_own_schema_is_refused() -> None:
    for task in TOOL_TASKS:
        first, *rest = task.fields["expected_calls"]
        key = next(k for k in first["arguments"] if k in BROKEN)
        broken = {**first, "arguments": {**first["arguments"], key: BROKEN[key]}}
        with pytest.raises(TaskError, match="satisfy the tool's parameters|strict JSON"):
            TOOL.parse_task(_record(task, [broken, *rest]), "test")
        unknown = {**first, "arguments": {**first["arguments"], "zz_extra": 1}}
        with pytest.raises(TaskError, match="unknown parameter"):
            TOOL.parse_task(_record(task, [unknown, *rest]), "test")


def test_generated_golds_and_an_optional_parameter_s_dead_alternative_still_load() -> None:
    for task in TOOL_TASKS:
        assert TOOL.parse_task(_record(task, task.fields["expected_calls"]), "test").fields["expected_calls"]
    flights = next(t for t in TOOL_TASKS if any(e["name"] == "search_flights" for e in t.fields["expected_calls"]))
    calls = [{**e, "alternatives": {"max_stops": [None, 1]}} if e["name"] == "search_flights" else e
             for e in flights.fields["expected_calls"]]  # BFCL lists a wrong-typed value for an optional one
    assert TOOL.parse_task(_record(flights, calls), "test")


JSON_PLAIN = JSON.generate_tasks(20, seed=707)
TOOL_PLAIN = TOOL.generate_tasks(20, seed=707)


def _doc(task: Any, **changes: Any) -> str:
    return json.dumps({**task.fields["expected"], **changes})


def _tagged(task: Any) -> str:
    return "".join(f"<tool_call>{json.dumps({'name': c['name'], 'arguments': c['arguments']})}</tool_call>"
                   for c in task.fields["expected_calls"])


JSON_FORMS = {
    "in <answer> tags": lambda t: f"<answer>{_doc(t)}</answer>",
    "a tilde fence": lambda t: f"~~~json\n{_doc(t)}\n~~~",
    "a fence on one line": lambda t: f"```json {_doc(t)}```",
    "an unclosed fence": lambda t: f"```json\n{_doc(t)}\n",
    "then a reasoning block": lambda t: _doc(t) + "<think>x</think>",
    "a lookalike first letter": lambda t: _doc(t, name="\u0410" + t.fields["expected"]["name"][1:]),
    "a name ending in NBSP": lambda t: _doc(t, name=t.fields["expected"]["name"] + "\u00a0"),
}
TOOL_FORMS = {
    "the calls only before a bare </think>": lambda t: _tagged(t) + "</think>",
    "the call list inside one tag": lambda t: "<tool_call>" + json.dumps(
        [{"name": c["name"], "arguments": c["arguments"]} for c in t.fields["expected_calls"]]) + "</tool_call>",
    "a legacy function_call beside empty tool_calls": lambda t: json.dumps(
        {"content": "Done.", "tool_calls": [], "function_call": t.fields["expected_calls"][0]}),
}


@pytest.mark.parametrize("name", list(JSON_FORMS))
def test_json_forms_that_are_not_the_one_document_fail(name: str) -> None:
    for t in JSON_PLAIN:
        verdict = check_json(t.fields["schema"], t.fields["expected"], JSON_FORMS[name](t))
        assert verdict.outcome == "fail", (t.id, verdict.feedback)


@pytest.mark.parametrize("name", list(TOOL_FORMS))
def test_tool_forms_that_make_no_call_fail(name: str) -> None:
    for t in TOOL_PLAIN:
        f = t.fields
        verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], TOOL_FORMS[name](t))
        assert verdict.outcome == "fail", (t.id, verdict.feedback)


FORMS_OF = {  # format: (well-formed values, values of no such form)
    "date-time": (["2026-01-01T10:00:00Z", "2024-02-29t23:59:60.5+05:30"],
                  ["tomorrow", "2026-01-01T10:00:00", "2026-02-30T10:00:00Z", "\u0662026-01-01T10:00:00Z"]),
    "time": (["10:00:00Z", "23:59:59.1-01:00"], ["9am", "25:00:00Z", "10:00:00"]),
    "duration": (["P1D", "PT1H30M", "P2W", "P1Y2M3DT4H5M6S"], ["two hours", "P", "PT", "P1H"]),
    "uri": (["https://example.com/a?b=c#d", "mailto:a@b.c", "urn:isbn:1"], ["see website", "/relative", "http://a b"]),
    "hostname": (["example.com", "localhost", "a-b.c."], ["not a host!", "-bad-", "a..b", "x" * 64 + ".com"]),
    "json-pointer": (["", "/a/b", "/a~0b/~1"], ["a/b", "/a~2"]),
}


@pytest.mark.parametrize("fmt", list(FORMS_OF))
def test_formats_are_checked_without_optional_packages(fmt: str) -> None:
    validator = validator_for({"type": "string", "format": fmt})
    good, bad = FORMS_OF[fmt]
    assert [v for v in good if schema_error(validator, v)] == []
    assert [v for v in bad if not schema_error(validator, v)] == []


def test_a_free_argument_or_a_field_of_no_such_form_fails() -> None:
    task = next(t for t in TOOL_TASKS if [e["name"] for e in t.fields["expected_calls"]] == ["search_flights"])
    tools = json.loads(json.dumps(task.fields["tools"]))
    for tool in tools:
        if tool["function"]["name"] == "search_flights":
            tool["function"]["parameters"]["properties"]["depart"] = {"type": "string", "format": "date-time"}
    (gold,) = task.fields["expected_calls"]
    expected = [{**gold, "optional": [*gold["optional"], "depart"]}]
    for value, passes in (("tomorrow", False), ("2026-01-01T09:00:00Z", True)):
        call = {"name": "search_flights", "arguments": {**gold["arguments"], "depart": value}}
        verdict = check_tool_calls(tools, expected, False, f"<tool_call>{json.dumps(call)}</tool_call>")
        assert verdict.passed is passes and verdict.error_class in (None, "schema"), (value, verdict.feedback)
    t = JSON_PLAIN[0]
    schema = {**t.fields["schema"], "properties": {**t.fields["schema"]["properties"], "seen": {
        "type": "string", "format": "date-time"}}, "required": [*t.fields["schema"]["required"], "seen"]}
    expected_doc = {**t.fields["expected"], "seen": "2026-01-01T09:00:00Z"}
    verdict = check_json(schema, expected_doc, json.dumps({**expected_doc, "seen": "tomorrow"}))
    assert (verdict.error_class, verdict.components.get("format", 0.0)) == ("schema", 0.0)


ABSTAIN = [TOOL.parse_task({"id": f"abstain-{i}", "domain": "tool", "prompt": "Tell me a joke.",
                            "tools": t.fields["tools"], "expected_calls": []}, "test") for i, t in enumerate(TOOL_PLAIN)]
WRITTEN = {
    "a Llama 3.1 <function=> call": lambda n: f'<function={n}>{{"city": "Paris"}}</function>',
    "a pythonic call in prose": lambda n: f"Let me check that: {n}(city='Paris')",
    "a pythonic call with a literal": lambda n: f'Sure. {n}("Paris")',
}
DECLINED = ["None of these tools can tell a joke.", "No tool fits: {n}() only does what its name says."]


def _first_tool(task: Any) -> str:
    return task.fields["tools"][0]["function"]["name"]


@pytest.mark.parametrize("name", list(WRITTEN))
def test_a_call_in_another_family_s_format_is_no_abstention(name: str) -> None:
    for t in ABSTAIN:
        verdict = check_tool_calls(t.fields["tools"], [], False, WRITTEN[name](_first_tool(t)))
        assert (verdict.outcome, verdict.error_class) == ("fail", "format"), (t.id, verdict.feedback)
        for declined in DECLINED:
            assert check_tool_calls(t.fields["tools"], [], False, declined.format(n=_first_tool(t))).passed


def test_an_episode_ending_in_a_written_call_is_no_abstention() -> None:
    chat = ChatTemplate(build_char_tokenizer())
    for text, passes in ((WRITTEN["a Llama 3.1 <function=> call"]("get_weather"), False), (DECLINED[0], True)):
        env = ToolEpisodeEnv(chat, max_steps=2)
        env.reset(next(t for t in ABSTAIN if _first_tool(t) == "get_weather"))
        ids = (*chat.encode(text), chat.eos_token_id)
        result = env.step(Generation(prompt_ids=(), completion_ids=ids, logprobs=(0.0,) * len(ids), text=text,
                                     stop_reason="eos"))
        assert result.done and result.verdict is not None and result.verdict.passed is passes, result.verdict


# The stop hook's read, as a policy would (each a standing case; the first failed before its fix).
_WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("answer", ["functions.get_weather(city='Paris')", "Sure: tools.get_weather('Paris')"])
def test_a_namespaced_written_call_is_no_abstention(answer: str) -> None:
    """OpenAI's harmony form names a tool ``functions.NAME``; the written-call check skipped a name
    after a dot, so ``functions.get_weather(city='Paris')`` passed an abstention task as a refusal."""
    verdict = check_tool_calls(_WEATHER, [], False, answer)
    assert (verdict.outcome, verdict.error_class) == ("fail", "format"), verdict.feedback
    assert check_tool_calls(_WEATHER, [], False, "No: get_weather() only gives the weather.").passed


def test_a_guess_in_a_field_declared_by_pattern_fails_where_extra_keys_are_allowed() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": True,
              "patternProperties": {"^x_": {"type": "string"}}}
    assert check_json(schema, {"name": "Ada"}, '{"name": "Ada", "x_nick": "Addy"}').error_class == "wrong_answer"
    assert check_json(schema, {"name": "Ada"}, '{"name": "Ada", "nick": "Addy"}').passed  # an undeclared extra

"""A policy attacking the tool and json domains through the JSON it writes: whatever a call's arguments
or a document hold costs that response its own verdict (a fail, or an unreadable call the episode goes
on after), and every verdict can be written as the run's UTF-8 records.

The attack: JSON's ``\\ud800`` escape, which Python decodes to a lone surrogate that UTF-8 cannot
encode. It passed the strict parser, so the value reached the verdict's evidence (the calls made, the
document judged) and the records writer (``ensure_ascii=False``, UTF-8) raised on it; in an episode
the call joined the conversation, which a tokenizer then had to encode. Now such a string is not text
to the strict parser (``posttrain.strict_json``), so the call cannot be read and the document is a
format failure."""

from __future__ import annotations

import json

import pytest
from agent_play import CHAT
from test_tool_episodes import act

from posttrain.envs import get_domain
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.evaluate.records import trajectory_records
from posttrain.policy import Policy
from posttrain.rollout.episodes import make_episodes, play_scripts
from posttrain.strict_json import StrictJSONError, loads_strict
from posttrain.types import Verdict

TOOL, JSON = get_domain("tool"), get_domain("json")
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
    "required": ["city", "unit"], "additionalProperties": True}}}
TASK = TOOL.parse_task({"id": "weather", "domain": "tool", "prompt": "Weather in Paris, celsius?", "tools": [WEATHER],
                        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]},
                       "test")
RIGHT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call>'
ATTACKS = {
    "a lone surrogate in an argument": '<tool_call>{"name": "get_weather", "arguments": {"city": "\\ud800", '
                                       '"unit": "celsius"}}</tool_call>',
    "a lone surrogate in a parameter name": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", '
                                            '"unit": "celsius", "\\udfff": 1}}</tool_call>',
    "a lone surrogate in the tool's name": '<tool_call>{"name": "get_\\ud800", "arguments": {}}</tool_call>',
    "a lone surrogate in an arguments string": '<tool_call>{"name": "get_weather", "arguments": '
                                               '"{\\"city\\": \\"\\\\ud800\\", \\"unit\\": \\"celsius\\"}"}</tool_call>',
}


def encodes(verdict: Verdict) -> bool:
    """Whether the verdict can be written as a UTF-8 record (``evaluate.records.write_records``)."""
    json.dumps(verdict.to_json(), ensure_ascii=False).encode()
    return True


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_lone_surrogate_in_a_call_fails_the_response_and_its_verdict_is_written(name: str) -> None:
    verdict = TOOL.make_verifier(None)(TASK, ATTACKS[name])
    assert (verdict.outcome, verdict.error_class) == ("fail", "format"), verdict
    assert encodes(verdict)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_lone_surrogate_in_an_episodes_call_is_an_unreadable_call(name: str) -> None:
    """The attack, then the right call: the attack is an invalid action the episode goes on after, and
    never joins the conversation or the evidence."""
    env = ToolEpisodeEnv(CHAT, max_steps=4)
    env.reset(TASK)
    first = env.step(act(CHAT, ATTACKS[name]))
    assert not first.done and "could not be read" in first.observation.text
    assert all(m.get("content") is None or encodes_text(m["content"]) for m in env.turns.messages)
    env.step(act(CHAT, RIGHT))
    last = env.step(act(CHAT, "Done."))
    assert last.verdict.passed and last.verdict.evidence["invalid_actions"] == 1, last.verdict
    assert encodes(last.verdict)


def encodes_text(text: str) -> bool:
    text.encode()
    return True


def test_an_episode_with_the_attack_is_written_as_records_through_the_runner() -> None:
    """The real runner, then the records a run writes of the trajectory."""
    def plan(task, steps):
        return make_episodes("agent", [task], Policy(None, CHAT.tokenizer), service=None,
                             verify=TOOL.make_verifier(None), max_turns=steps)

    script = [(act(CHAT, text).completion_ids, text) for text in (*ATTACKS.values(), "Done.")]
    [traj] = play_scripts(plan, [TASK], {TASK.id: script}, None)
    assert encodes(traj.verdicts[-1])
    for record in trajectory_records(TASK, traj, stage="rl", step=0, wall_s=0.0, decode=CHAT.tokenizer.decode):
        json.dumps(record.to_json(), ensure_ascii=False).encode()
    verdict = traj.verdicts[-1]
    assert verdict.outcome == "fail" and verdict.evidence["invalid_actions"] == len(ATTACKS), verdict


@pytest.mark.parametrize("document", ['{"name": "\\ud800"}', '{"\\udfff": "x"}', '["\\ud800 and \\udc00"]'])
def test_a_lone_surrogate_in_a_json_answer_is_a_format_failure(document: str) -> None:
    task = JSON.parse_task({"id": "j", "domain": "json", "prompt": "Name?", "schema": {}, "expected": {"name": "x"}},
                           "test")
    verdict = JSON.make_verifier(None)(task, document)
    assert (verdict.outcome, verdict.error_class) == ("fail", "format"), verdict
    assert encodes(verdict)


def test_strict_json_refuses_lone_surrogates_and_keeps_pairs() -> None:
    assert loads_strict('"\\ud83d\\ude00"') == "\U0001f600"  # a pair: one character, what json.dumps writes
    assert loads_strict('"\\\\ud800"') == "\\ud800"  # an escaped backslash, then letters
    for text in ('"\\ud800"', '{"a": ["\\udc00"]}', '{"\\ud800": 1}', '"\ud800"'):
        with pytest.raises(StrictJSONError, match="lone surrogate"):
            loads_strict(text)


def test_an_integer_past_floats_range_is_a_wrong_value_not_a_checker_error() -> None:
    """A 400-digit argument where 5 is expected: the class-11 check (equal once rounded to floats?)
    raised OverflowError converting it, and the response failed as ``exception:OverflowError``
    without the format credit of a wrong value in the task's shape."""
    conv = {"type": "function", "function": {"name": "conv", "parameters": {
        "type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}}}
    task = TOOL.parse_task({"id": "n", "domain": "tool", "prompt": "Convert 5.", "tools": [conv],
                            "expected_calls": [{"name": "conv", "arguments": {"amount": 5}}]}, "test")
    for digits in (400, 4300):
        response = '<tool_call>{"name": "conv", "arguments": {"amount": 1%s}}</tool_call>' % ("0" * (digits - 1))
        verdict = TOOL.make_verifier(None)(task, response)
        assert (verdict.outcome, verdict.error_class, verdict.components["format"]) == ("fail", "wrong_answer", 1.0)

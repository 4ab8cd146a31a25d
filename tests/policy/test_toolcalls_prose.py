"""A tool call an instruction-tuned model writes after a lead-in sentence, read by the episodes' decoder.

``decode_tool_calls`` (through ``parse_tool_calls``: every tool, BFCL and workspace episode) read a
turn whole, so ``I'll list the files.\\n{"name": "ls", ...}`` was "looks like a tool call but is not
one JSON document": a probe of 15 honest spellings per OpenAI-family format (one call, a call list,
a ``{"type": "function"}`` call, an OpenAI message) read 4 of 15 (bare, pretty-printed, fenced, a
lead-in then a fence); every tagged spelling (13 of 13) was read. Now 15 of 15 each
(``_toolcalls._quoted_calls``, the rules of ``strict_json.prose_document``). On 300 generated tool
tasks (seed 5), the right call list after a lead-in: read by an OpenAI-family episode 0/300 -> 300/300.

A lead-in with a space a reader sees as a space (a no-break space, French ``\\u202f`` before a colon,
a thin space: Unicode ``Zs``; models write them, DeepSeek-LLM#94) is prose now, for the single-answer
domains too (tool, the same 300 tasks with ``\u00a0`` before the colon: 0/300 -> 300/300); a control
or format character (a BOM, a zero-width space, a bidi override) still is not.

Each case below pairs the honest turn with a policy's use of the same reading, which stays refused
(a format error, as before): a second call in the prose (a document, ``"name":``, a call written
``f(x=1)``), a quoted message whose ``content`` or ``function_call`` holds more, a tag or a fence with a
document beside it. A call quoted as an example in a message to the user is its only call: read as
one (it was an unreadable call before, never an answer). On the 300 tasks, each such hack with a
wrong call beside the right one passed the tool verifier 0/300 and was read as the right calls alone
by an episode 0/300, before and after.
"""

from __future__ import annotations

import json

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.policy import (
    ChatTemplate,
    Generation,
    ToolCall,
    ToolCallError,
    build_char_tokenizer,
    decode_tool_calls,
    parse_tool_calls,
)
from posttrain.strict_json import prose_document

CALL = {"name": "ls", "arguments": {"path": "src"}}
OTHER = {"name": "rm", "arguments": {"path": "src"}}
READ = [ToolCall("ls", {"path": "src"})]


def _message(*calls: dict, **extra: object) -> str:
    return json.dumps({"role": "assistant", "content": None, **extra, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)]})


FORMATS = {
    "call": json.dumps(CALL), "list": json.dumps([CALL]),
    "wrapped": json.dumps({"type": "function", "function": CALL}), "message": _message(CALL),
}


def _lead_ins(d: str) -> dict[str, str]:
    pretty = json.dumps(json.loads(d), indent=2)
    return {
        "newline": f"I'll list the files.\n{d}",
        "colon same line": f"Listing the files: {d}",
        "pretty": f"Let me look at the directory first.\n\n{pretty}",
        "closing sentence": f"I'll list the files.\n{d}\nThen I'll read the main module.",
        "after think": f"<think>\nNeed the layout.\n</think>\n\nI'll list the files.\n{d}",
        "bold": f"**Step 1:** list the files.\n{d}",
        "two sentences": f"First I need to see what is there. I'll list src.\n{d}",
        "crlf": f"I'll list the files.\r\n{d}\r\n",
        "nbsp": f"I'll list the files\u00a0:\n{d}",
        "narrow nbsp (fr)": f"Je liste les fichiers\u202f:\n{d}",
        "thin space": f"Step\u20091 \u2014 list the files.\n{d}",
    }


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_call_after_a_lead_in_sentence_is_read(fmt: str) -> None:
    for name, text in _lead_ins(FORMATS[fmt]).items():
        parse = parse_tool_calls(text, "openai")
        assert parse.ok and list(parse.calls) == READ, (fmt, name, parse.error)
        assert decode_tool_calls(text) == READ, (fmt, name)


c, o = json.dumps(CALL), json.dumps(OTHER)
WITH_CONTENT = _message(CALL, content='rm(path="src")')
PAIRS = {  # honest turn -> the same reading used to slip a second call past it
    "a second document in the prose": (f"I'll list the files.\n{c}", f"I'll call {o} first.\n{c}"),
    "a second document after it": (f"Listing: {c}\nDone.", f"Listing: {c}\nor {o}"),
    "a call written in Python in the prose": (f"I'll list src.\n{c}", f"I'll list src, not rm(path='src').\n{c}"),
    "a positional Python call": (f"I'll list src.\n{c}", f"I'll list src; rm(\"src\") later.\n{c}"),
    "\"name\": in the prose": (f"I'll list src.\n{c}", f"I'll list src, then \"name\": \"rm\".\n{c}"),
    "a message with content": (f"Here:\n{_message(CALL)}", f"Here:\n{WITH_CONTENT}"),
    "a message with function_call": (f"Here:\n{_message(CALL)}", f"Here:\n{_message(CALL, function_call=OTHER)}"),
    "a message with refusal": (f"Here:\n{_message(CALL)}", f"Here:\n{_message(CALL, refusal='I will not.')}"),
    "an array beside a note": (f"Listing [1]: {c}", f"Listing [1, 2]: {c}"),  # a note is prose (test_toolcalls_notes)
    "a fence on one line": (f"Listing: {c}", f"Listing: ```json {c}```"),
    "inline code": (f"Listing: {c}", f"Listing: `{c}`"),
    "answer tags": (f"Listing: {c}", f"Listing: <answer>{c}</answer>"),
    "a zero-width space": (f"Listing: {c}", f"Listing\u200b: {c}"),
    "a bidi override": (f"Listing: {c}", f"Listing\u202e: {c}"),
    "a BOM": (f"Listing: {c}", f"Listing\ufeff: {c}"),
    "a bare call, then text": (f"Listing: {c}\nDone.", f"{c} Done, and {o}"),
}


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_a_second_call_beside_a_quoted_one_stays_refused(case: str) -> None:
    honest, hack = PAIRS[case]
    assert parse_tool_calls(honest, "openai").calls == tuple(READ), case
    with pytest.raises(ToolCallError):
        decode_tool_calls(hack)
    assert not parse_tool_calls(hack, "openai").ok


def test_tagged_and_fenced_turns_read_as_before_and_the_hermes_family_wants_tags() -> None:
    # a document beside a tag or a fence is not read: the tag or the fence is the call (the single
    # answer's tool domain refuses it as a second answer, test_toolfam_attacks1)
    assert decode_tool_calls(f"<tool_call>{c}</tool_call>\nor {o}") == READ
    assert decode_tool_calls(f"Not {o} but:\n```json\n{c}\n```") == READ
    # the lead-in reading is family-blind; a Hermes template's calls are still its tags
    assert parse_tool_calls(f"I'll list the files.\n{c}", "openai").ok
    assert "<tool_call> blocks" in (parse_tool_calls(f"I'll list the files.\n{c}", "hermes").error or "")
    # an example quoted in a message to the user is that message's one call; a non-call object is prose
    assert decode_tool_calls(f"You can list files with {c} yourself.") == READ
    assert decode_tool_calls('It is {"temp": 3} in Paris.') == [] and decode_tool_calls("It is 3 (celsius).") == []


def test_the_single_answer_domains_read_a_lead_in_with_a_no_break_space() -> None:
    assert prose_document(f"Voici l'appel\u202f:\n{c}") == (c, "Voici l'appel\u202f:\n\n")
    for task in get_domain("json").generate_tasks(4, seed=5):
        f = task.fields
        assert check_json(f["schema"], f["expected"], f"Here is the JSON\u00a0:\n{task.reference}").passed, task.id
        assert not check_json(f["schema"], f["expected"], f"Here is the JSON\u200b:\n{task.reference}").passed
    for task in get_domain("tool").generate_tasks(4, seed=5):
        f = task.fields
        calls = json.dumps([{"name": e["name"], "arguments": e["arguments"]} for e in f["expected_calls"]])
        verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], f"Calling\u2009them\u00a0:\n{calls}")
        assert verdict.passed, (task.id, verdict.feedback)


def test_a_tool_episode_runs_a_call_written_after_a_lead_in() -> None:
    chat = ChatTemplate(build_char_tokenizer(), family="openai")
    task = get_domain("tool").parse_task({
        "id": "weather", "domain": "tool", "prompt": "Weather in Paris?",
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, "test")
    env = ToolEpisodeEnv(chat, max_steps=4)
    env.reset(task)
    verdict = None
    for text in ("I'll check the weather in Paris.\n" + json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}),
                 "It is sunny in Paris."):
        ids = (*chat.encode(text), chat.eos_token_id)
        step = env.step(Generation(prompt_ids=(), completion_ids=ids, logprobs=(0.0,) * len(ids), text=text,
                                   stop_reason="eos"))
        verdict = step.verdict
    assert verdict is not None and verdict.passed, verdict
    assert verdict.evidence["tool_calls"] == {"total": 1, "valid": 1} and verdict.evidence["invalid_actions"] == 0

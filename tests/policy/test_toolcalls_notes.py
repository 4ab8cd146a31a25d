"""A call quoted after a lead-in with a bracketed note, read alike by the episodes' decoder and the tool verifier.

The tool verifier reads ``Step [1]: calling {...}`` and ``I'll move the files [2 dirs] first: {...}``
(``strict_json.prose_document(notes=True)``, tests/envs/test_toolfam_prose2.py); the decoder every
tool, BFCL and workspace episode runs calls through (``decode_tool_calls``, ``parse_tool_calls``)
read the same turn as an undecodable call, so the single answer passed and the episode of one step
failed. Measured, OpenAI family: a tool episode of the honest noted turn then ``Done.`` 0/114 per
lead-in -> 114/114 (40 generated tool tasks, seed 5; a call list, one call, an OpenAI message); a
BFCL multi_turn_base episode whose every step is a noted call list 0/6 -> 6/6 (one task per set of
backends; the same turns without the note 6/6 before and after).

The verifier's prose checks hold wherever the decoder reads the call: the decoder's refusals are
name-blind and not the verifier's (a call ``f([2])`` written in a note is no ``f(x=1)`` to it), so
``_read_calls`` takes the prose of a call the decoder read among prose and checks it as its own.
With the decoder reading notes and that prose left unchecked, a wrong call written beside the right
document passed 40 of 40 tasks (``WRITTEN``); each try below fails, in the verifier and in an episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from posttrain.envs import bfcl, get_domain
from posttrain.envs.bfcl import BfclEnv
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.policy import (
    ChatTemplate,
    Generation,
    ToolCall,
    ToolCallError,
    build_char_tokenizer,
    decode_tool_calls,
)

N = 40
Call = dict[str, Any]
CHAT = ChatTemplate(build_char_tokenizer(), family="openai")

NOTED: dict[str, Callable[[str], str]] = {
    "step [1]": lambda d: f"Step [1]: calling {d}",
    "files [2 dirs]": lambda d: f"I'll move the files [2 dirs] first: {d}",
    "footnote, pretty, closing": lambda d: f"Per the docs [1], here is the call:\n"
                                           f"{json.dumps(json.loads(d), indent=2)}\nDone.",
}
"""Honest turns: the call document after a lead-in with a note."""


def _wrong(call: Call) -> Call:
    args = dict(call["arguments"])
    key = sorted(args)[0]
    args[key] = args[key] + 1 if isinstance(args[key], int | float) else str(args[key]) + "x"
    return {"name": call["name"], "arguments": args}


WRITTEN: dict[str, Callable[[list[Call]], str]] = {
    "a call with a note for its argument, in parentheses": lambda c: f"Step [1] (not {c[0]['name']}([2])): "
                                                                      f"{json.dumps(c)}",
    "a call with a note for its argument, leading": lambda c: f"{c[0]['name']}([1]) or: {json.dumps(c)}",
    "a wrong call written beside the note": lambda c: (
        f"Step [1]: {c[0]['name']}({', '.join(f'{k}={v!r}' for k, v in _wrong(c[0])['arguments'].items())}) "
        f"or {json.dumps(c)}"),
    "an array in the lead-in": lambda c: f"Step [1, 2]: {json.dumps(c)}",
    "a note holding a quote": lambda c: f"Step [\"{c[0]['name']}\"]: {json.dumps(c)}",
    "a note after the document": lambda c: f"Step [1]: {json.dumps(c)} [2]",
}
"""A second answer beside the right document, through the note's reading: each must fail."""


def _calls(task: Any) -> list[Call]:
    return [{"name": e["name"], "arguments": e["arguments"]} for e in task.fields["expected_calls"]]


def _documents(calls: list[Call]) -> dict[str, str]:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)]}
    docs = {"list": json.dumps(calls), "openai message": json.dumps(message)}
    if len(calls) == 1:
        docs["one call"] = json.dumps(calls[0])
    return docs


def _act(text: str) -> Generation:
    ids = (*CHAT.encode(text), CHAT.eos_token_id)
    return Generation(prompt_ids=(), completion_ids=ids, logprobs=(0.0,) * len(ids), text=text, stop_reason="eos")


def _episode(env: Any, task: Any, texts: list[str]) -> Any:
    env.reset(task)
    for text in texts:
        step = env.step(_act(text))
        if step.done:
            return step.verdict
    raise AssertionError(f"{task.id}: the episode did not end after {len(texts)} actions")


def _single(task: Any, response: str) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)


def test_a_noted_turn_decodes_as_the_verifier_reads_it() -> None:
    call = {"name": "ls", "arguments": {"path": "src"}}
    for name, form in NOTED.items():
        for doc in (json.dumps(call), json.dumps([call])):
            assert decode_tool_calls(form(doc)) == [ToolCall("ls", {"path": "src"})], name
    doc = json.dumps(call)
    for text in (f"Step [1, 2]: {doc}", f"Step [1]: {doc} [2]", f"See [1] ls(path='a'): {doc}"):
        with pytest.raises(ToolCallError):
            decode_tool_calls(text)


def test_honest_noted_turns_pass_a_tool_episode_as_they_pass_the_single_answer() -> None:
    for task in get_domain("tool").generate_tasks(N, seed=5):
        for kind, doc in _documents(_calls(task)).items():
            for name, form in NOTED.items():
                single = _single(task, form(doc))
                assert single.passed, (task.id, kind, name, single.feedback)
                for texts, max_steps in (([form(doc), "Done."], 4), ([form(doc)], 1)):
                    verdict = _episode(ToolEpisodeEnv(CHAT, max_steps=max_steps), task, texts)
                    assert verdict.passed, (task.id, kind, name, max_steps, verdict.feedback)
                    assert verdict.evidence["invalid_actions"] == 0


def test_a_second_answer_through_the_note_fails_the_verifier_and_the_episode() -> None:
    for task in get_domain("tool").generate_tasks(N, seed=5):
        calls = _calls(task)
        for name, hedge in WRITTEN.items():
            verdict = _single(task, hedge(calls))
            assert not verdict.passed and verdict.error_class == "format", (task.id, name, verdict.feedback)
        for name in ("an array in the lead-in", "a note holding a quote", "a note after the document"):
            verdict = _episode(ToolEpisodeEnv(CHAT, max_steps=1), task, [WRITTEN[name](calls)])
            assert not verdict.passed, (task.id, name)
        # a noted turn on an abstention task is a call made, in the episode as in the single answer
        noted = NOTED["step [1]"](json.dumps(calls))
        for verdict in (check_tool_calls(task.fields["tools"], [], False, noted),
                        _episode(ToolEpisodeEnv(CHAT, max_steps=2), _abstention(task), [noted, "No tool fits."])):
            assert not verdict.passed and verdict.error_class == "wrong_answer", (task.id, verdict.feedback)


def _abstention(task: Any) -> Any:
    return get_domain("tool").parse_task({"id": task.id + "-abstain", "domain": "tool", "prompt": task.prompt,
                                          "tools": task.fields["tools"], "expected_calls": []}, "test")


@pytest.fixture(scope="module")
def pool():
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        with open_pool(size=1) as p:
            yield p
    except HostCannotIsolate as e:  # the sandbox says what is missing; BFCL's backends run in it
        pytest.skip(f"this host cannot run the sandbox: {e}")


@pytest.mark.slow
def test_honest_noted_turns_run_in_bfcl_episodes(pool) -> None:
    try:
        root = bfcl.bfcl_root()
    except bfcl.BfclDataMissing as e:
        pytest.fail(str(e))
    by_class: dict[str, Any] = {}
    for task in bfcl.load_tasks("multi_turn_base", root=root):
        by_class.setdefault(task.fields["involved_classes"][-1], task)  # one task per set of backends
    for task in by_class.values():
        actions = [a for turn in task.fields["ground_truth"]
                   for a in ([NOTED["files [2 dirs]"](json.dumps(turn))] if turn else []) + ["Done."]]
        verdict = _episode(BfclEnv(pool, CHAT, root=root), task, actions)
        assert verdict.passed and verdict.evidence["invalid_actions"] == 0, (task.id, verdict.feedback)

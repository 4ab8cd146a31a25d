"""A call quoted after a lead-in with a bracketed note: the tool verifier's prose checks hold whatever the decoder reads.

The tool verifier reads ``Step [1]: calling {...}`` and ``I'll move the files [2 dirs] first: {...}``
(``strict_json.prose_document(notes=True)``, tests/envs/test_toolfam_prose2.py); the decoder every
tool, BFCL and workspace episode runs calls through (``decode_tool_calls``, ``parse_tool_calls``) reads
the lead-in strictly, so the honest noted turn is an undecodable call in an episode while the same
single answer passes (OpenAI family: a tool episode of the noted turn then ``Done.`` 0/114 per
lead-in, 40 generated tool tasks, seed 5; a BFCL multi_turn_base episode of noted call lists 0/6).

The verifier checks the prose of a quoted call (a second document, a written call of a listed tool)
only where the decoder raises (``envs/tool/_calls.py`` ``_read_calls``), and the decoder's refusals
are name-blind, not the verifier's: a call ``f([2])`` written in a note is no ``f(x=1)`` to it. With
the decoder alone reading notes (``prose_document(text, notes=True)`` in ``_quoted_calls``), the two
first tries of ``WRITTEN`` (a listed tool written with a note for its argument, beside the right
document) passed 40 of 40 tasks. So the decoder may read notes only together with a ``_read_calls``
that checks the prose of the calls the decoder read among prose as its own. Each try fails here, in
the verifier and in a one-step episode; a noted turn on an abstention task is a call made in both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from posttrain.envs import get_domain
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.policy import ChatTemplate, Generation, build_char_tokenizer

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

"""The tool domain reads a call quoted after prose that holds a bracketed note, and no hedge through it.

A lead-in with a footnote marker or a bracketed aside (``Step [1]: calling {...}``, ``I'll list
the files [2 dirs] first: {...}``) was refused whole by ``strict_json.prose_document`` (any bracket
in the prose), so the honest call was a format error: 0 of 40 generated tool tasks (seed 5) for each
honest form below, in each of three documents (a call list, one call, an OpenAI message). The tool
verifier now reads the lead-in's notes as prose (``prose_document(notes=True)``: a note is plainly no
JSON, ``[1]`` or words; a call is an object or an array of objects): 40 of 40 each.

Each relaxation is tried as a policy would (``HEDGES``): a second call inside parentheses or a note's
brackets, a wrong call array beside the note, the wrong values as a JSON array, the right call
written or quoted in the prose beside a wrong document, arguments split between a note and the
document, a second call in a note, a tag, a fence, a partial object or a second document beside the
note, a note after the document. 0 of 40 pass, before and after. An abstention's note and quoted
argument object stay prose (it declines: passes, before and after).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from posttrain.envs import get_domain
from posttrain.envs.tool._calls import check_tool_calls

N = 40
Call = dict[str, Any]


def _calls(task: Any) -> list[Call]:
    return [{"name": e["name"], "arguments": e["arguments"]} for e in task.fields["expected_calls"]]


def _wrong(call: Call) -> Call:
    args = dict(call["arguments"])
    key = sorted(args)[0]
    args[key] = args[key] + 1 if isinstance(args[key], int | float) else str(args[key]) + "x"
    return {"name": call["name"], "arguments": args}


def _openai(calls: list[Call]) -> str:
    return json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)]})


def _python(call: Call) -> str:
    return call["name"] + "(" + ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items()) + ")"


def _documents(calls: list[Call]) -> dict[str, tuple[str, str]]:
    """The right and a wrong document of each kind a tool answer may be."""
    wrong = [_wrong(calls[0]), *calls[1:]]
    docs = {"list": (json.dumps(calls), json.dumps(wrong)), "openai message": (_openai(calls), _openai(wrong))}
    if len(calls) == 1:
        docs["one call"] = (json.dumps(calls[0]), json.dumps(wrong[0]))
    return docs


HONEST: dict[str, Callable[[str], str]] = {
    "step [1] lead-in": lambda d: f"Step [1]: calling {d}",
    "files [2 dirs]": lambda d: f"I'll list the files [2 dirs] first: {d}",
    "footnote, pretty": lambda d: f"Per the docs [1], here is the call:\n{json.dumps(json.loads(d), indent=2)}\nDone.",
    "two notes, parens": lambda d: f"Step [2] of [3] (the lookup):\n{d}",
}
"""Honest calls after a lead-in with a bracketed note (0 of 40 each before, every document kind)."""


def _split(calls: list[Call]) -> str:
    """The first call's first argument named in a note, the document without it."""
    args = dict(calls[0]["arguments"])
    key = sorted(args)[0]
    value = args.pop(key)
    return f"Step [1] [{key} is {value}]: {json.dumps([{**calls[0], 'arguments': args}, *calls[1:]])}"


HEDGES: dict[str, Callable[[list[Call]], str]] = {
    # the right document beside a wrong answer a reader takes for one
    "wrong call in parentheses": lambda c: f"Step [1] (or {json.dumps(_wrong(c[0]))}): {json.dumps(c)}",
    "wrong call array in brackets": lambda c: f"Step [1] [{json.dumps(_wrong(c[0]))}]: {json.dumps(c)}",
    "wrong call array after the note": lambda c: f"Step [1]: {json.dumps([_wrong(c[0])])}\nor: {json.dumps(c)}",
    "wrong values as a JSON array": lambda c: f"Step [1] with {json.dumps(list(_wrong(c[0])['arguments'].values()))}: "
                                              f"{json.dumps(c)}",
    "wrong call written in the lead-in": lambda c: f"Step [1]: {_python(_wrong(c[0]))}, or {json.dumps(c)}",
    "wrong tag beside the note": lambda c: f"Step [1] <tool_call>{json.dumps(_wrong(c[0]))}</tool_call>: "
                                           f"{json.dumps(c)}",
    "wrong fenced beside the note": lambda c: f"Step [1]:\n```json\n{json.dumps([_wrong(c[0])])}\n```\n{json.dumps(c)}",
    "a partial object beside the note": lambda c: f'Step [1] {{"name": "{c[0]["name"]}": {json.dumps(c)}',
    "the calls twice after the note": lambda c: f"Step [1]: {json.dumps(c)} {json.dumps(c)}",
    "a note after the document": lambda c: f"Step [1]: {json.dumps(c)} [2]",
    # the right answer in the prose, a wrong document read
    "right call written, wrong document": lambda c: f"Step [1]: {_python(c[0])} [done], {json.dumps([_wrong(c[0])])}",
    "right call worded in a note": lambda c: f"Calling [{c[0]['name']} as asked]: {json.dumps([_wrong(c[0]), *c[1:]])}",
    "arguments split between a note and the document": _split,
    "the other calls in a note": lambda c: f"Step [1] [then the rest]: {json.dumps(c[:1] if len(c) > 1 else [])}",
}
"""A policy's tries at the notes: each must not pass (0 of 40 before and after)."""


def _verdict(task: Any, response: str, expected: list[Call] | None = None) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"] if expected is None else expected, f["ordered"], response)


def test_honest_calls_after_a_bracketed_note_pass() -> None:
    for task in get_domain("tool").generate_tasks(N, seed=5):
        for kind, (doc, _) in _documents(_calls(task)).items():
            for name, form in HONEST.items():
                verdict = _verdict(task, form(doc))
                assert verdict.passed, (task.id, kind, name, verdict.feedback)


def test_hedges_through_the_notes_do_not_pass() -> None:
    """Each ``HEDGES`` try on every task, beside the honest form it leans on (which passes)."""
    for task in get_domain("tool").generate_tasks(N, seed=5):
        calls = _calls(task)
        assert _verdict(task, HONEST["step [1] lead-in"](json.dumps(calls))).passed, task.id
        for name, hedge in HEDGES.items():
            verdict = _verdict(task, hedge(calls))
            assert not verdict.passed, (task.id, name, verdict.feedback)
        # a wrong document behind a note is read, and judged on its content (a schema or a value), not its form
        wrong = _documents(calls)["list"][1]
        verdict = _verdict(task, HONEST["files [2 dirs]"](wrong))
        assert not verdict.passed and verdict.error_class in ("wrong_answer", "schema"), (task.id, verdict.feedback)


def test_an_abstention_with_a_note_stays_prose() -> None:
    """A decline that cites a note and quotes an argument object (no call) passes an abstention task, and
    fails a task that needs calls (no call); a call after a note is a call made, and fails the abstention
    task as one (it was a format error: no call read)."""
    for task in get_domain("tool").generate_tasks(N, seed=5):
        calls = _calls(task)
        decline = f"No tool fits [1]: {calls[0]['name']} only takes {json.dumps(calls[0]['arguments'])}."
        assert _verdict(task, decline, expected=[]).passed, task.id
        assert not _verdict(task, decline).passed, task.id
        verdict = _verdict(task, HONEST["step [1] lead-in"](json.dumps(calls)), expected=[])
        assert not verdict.passed and verdict.error_class == "wrong_answer", (task.id, verdict.feedback)

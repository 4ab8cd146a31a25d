"""Honest answers of the tool-call family, spelled as instruction-tuned models spell them.

A probe of 23 spellings of the right answer (bare, pretty-printed, tab-indented, fenced with and
without a language, ``JSON`` upper-cased, prose before / after / around a fence, ``<think>`` then
the answer, CRLF, blank lines, a bold heading, a lead-in sentence before a bare document, ...) over
generated tasks: json 40 (seed 5), tool 40 (seed 5; a call list, one call, an OpenAI message), bfcl
20 (seed 0, the reader ``parse_response``). Before: every fenced spelling passed (40/40, 20/20),
and each answer that quoted a bare document after a lead-in of prose failed: ``Here is the JSON:``
then the document 0/40 (json), 0/40 (tool), 0/20 (bfcl), the same on one line (``Answer: {...}``),
with a closing sentence after it, and after ``<think>``. Now each passes (``strict_json.prose_document``).
The function domain's shipped rewards read the answer after the reasoning now: a reasoning model's
``<think>...</think> 4`` scored 0 with ``exact_match``, a box or an ``<answer>`` drafted in the
reasoning made the right final one count twice (0/3 each before, 3/3 now).

Still refused, and why (each pinned by an older test, or ambiguous):

- a bare document followed by text, ``{...} I hope this helps``: a response that opens as a document
  is read as one, whole (tests/envs/test_json.py pins this as a format failure);
- a fence on one line, an unclosed or tilde fence, inline code, ``<answer>`` tags, a reasoning block
  after the document, a BOM (tests/envs/test_tool_json_attacks7.py, test_rg_tool_json_attacks3.py);
- two documents, or a document beside a citation ``[1]`` or a Python dict: which is the answer?
"""

from __future__ import annotations

import json
from typing import Any

from posttrain.envs import get_domain
from posttrain.envs.bfcl._domain import parse_response
from posttrain.envs.function import examples
from posttrain.envs.json._env import check_json
from posttrain.envs.tool._calls import check_tool_calls

N = 40


def _forms(doc: str) -> dict[str, str]:
    """Honest spellings of the answer ``doc`` (compact JSON)."""
    p = json.dumps(json.loads(doc), indent=2)
    return {
        "bare": doc, "bare pretty": p, "tab-indented": json.dumps(json.loads(doc), indent="\t"),
        "fence": f"```json\n{p}\n```", "fence no lang": f"```\n{p}\n```", "fence JSON upper": f"```JSON\n{p}\n```",
        "prose then fence": f"Here is the JSON:\n\n```json\n{p}\n```",
        "fence then sentence": f"```json\n{p}\n```\n\nLet me know if you need anything else.",
        "prose, fence, prose": f"Sure! Here's the result:\n```json\n{p}\n```\nThis includes every field you asked for.",
        "prose then bare": f"Here is the JSON:\n{p}",
        "prose colon same line": f"Answer: {doc}",
        "prose, bare, prose": f"Here you go:\n\n{p}\n\nHope this helps!",
        "think then bare": f"<think>\nLet me work this out carefully.\n</think>\n\n{p}",
        "think then fence": f"<think>\nLet me work this out.\n</think>\n\n```json\n{p}\n```",
        "think then prose+fence": f"<think>\nOK.\n</think>\nHere is the answer:\n```json\n{p}\n```",
        "think then prose+bare": f"<think>\nOK.\n</think>\nHere is the answer:\n{p}",
        "crlf fence": f"Here it is:\r\n```json\r\n{p}\r\n```\r\n".replace("\n", "\r\n").replace("\r\r", "\r"),
        "blank lines around": f"\n\n  {p}  \n\n",
        "bold heading + fence": f"**Answer:**\n\n```json\n{p}\n```",
        "fence with trailing spaces": f"```json   \n{p}\n```   \n",
    }


def _refused(doc: str, wrong: str) -> dict[str, str]:
    """Spellings that stay refused: pinned elsewhere, or two answers."""
    return {
        "bare then text (test_json.py)": f"{doc} I hope this helps",
        "fence on one line (attacks7)": f"```json {doc}```",
        "inline code": f"The answer is `{doc}`.",
        "in answer tags (attacks7)": f"Answer: <answer>{doc}</answer>",
        "a BOM (rg_tool_json_attacks3)": f"\ufeff{doc}",
        "lead-in, wrong then right": f"Either {wrong} or {doc}",
        "lead-in, right then wrong": f"Here: {doc}\nor {wrong}",
        "lead-in, right, a citation": f"Here: {doc} [1]",
        "lead-in, wrong quoted, right fenced": f"Not {wrong} but:\n```json\n{doc}\n```",
        "lead-in, right quoted, a Python dict": f"Here: {doc}\nor {json.loads(wrong)!r}",
        # the stop hook's read of prose_document, as a policy hedging around the one quoted document:
        "right quoted, wrong in an HTML comment": f"Here: {doc}\n<!-- {wrong} -->",
        "wrong in a table row, right quoted": f"| draft | {wrong} |\nFinal: {doc}",
        "right quoted, wrong as a quoted string": f"Here: {doc}\n(or '{wrong}')",
    }


def test_json_honest_spellings_pass_and_two_answers_do_not() -> None:
    for task in get_domain("json").generate_tasks(N, seed=5):
        f = task.fields
        wrong = json.dumps({**f["expected"], "age": f["expected"]["age"] + 1})
        for name, response in _forms(task.reference).items():
            verdict = check_json(f["schema"], f["expected"], response)
            assert verdict.passed, (task.id, name, verdict.feedback)
        for name, response in _refused(task.reference, wrong).items():
            verdict = check_json(f["schema"], f["expected"], response)
            assert not verdict.passed and verdict.error_class == "format", (task.id, name, verdict.feedback)


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": e["name"], "arguments": e["arguments"]} for e in task.fields["expected_calls"]]


def _openai(calls: list[dict[str, Any]]) -> str:
    return json.dumps({"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)]})


def _wrong(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    first = dict(calls[0]["arguments"])
    key = sorted(first)[0]
    first[key] = first[key] + 1 if isinstance(first[key], int | float) else str(first[key]) + "x"
    return [{"name": calls[0]["name"], "arguments": first}, *calls[1:]]


def test_tool_honest_spellings_pass_and_two_answers_do_not() -> None:
    for task in get_domain("tool").generate_tasks(N, seed=5):
        f, calls = task.fields, _calls(task)
        docs = {"list": (json.dumps(calls), json.dumps(_wrong(calls))),
                "openai message": (_openai(calls), _openai(_wrong(calls)))}
        if len(calls) == 1:
            docs["one call"] = (json.dumps(calls[0]), json.dumps(_wrong(calls)[0]))
        for kind, (doc, wrong) in docs.items():
            for name, response in _forms(doc).items():
                verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)
                assert verdict.passed, (task.id, kind, name, verdict.feedback)
            for name, response in _refused(doc, wrong).items():
                verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)
                assert not verdict.passed and verdict.error_class == "format", (task.id, kind, name, verdict.feedback)
        written = ", ".join(f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in c['arguments'].items())})"
                            for c in _wrong(calls))
        verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"],
                                   f"I could also call {written}. Here:\n{json.dumps(calls)}")
        assert not verdict.passed and verdict.error_class == "format", (task.id, verdict.feedback)
        # the quoted document is read only where the answer failed to decode: an abstention's prose that
        # quotes an argument object (no call in it), or cites [1], stays prose, and declines
        for response in ('None of these tools can do that: get_weather only takes {"city": "Paris"}.',
                         "No tool fits [1]."):
            assert check_tool_calls(f["tools"], [], f["ordered"], response).passed, (task.id, response)


def test_bfcl_honest_spellings_read_as_the_ground_truth() -> None:
    for task in get_domain("bfcl").generate_tasks(20, seed=0):
        truth = task.fields["ground_truth"]
        wrong = json.dumps([[{"name": "pwd", "arguments": {}}] for _ in truth])
        for name, response in _forms(json.dumps(truth)).items():
            got = parse_response(response)
            assert not isinstance(got, str), (task.id, name, got)
            assert [[c.to_json() for steps in turn for c in steps] for turn in got] == truth, (task.id, name)
        for name, response in _refused(json.dumps(truth), wrong).items():
            assert isinstance(parse_response(response), str), (task.id, name)


def test_the_shipped_reward_functions_read_the_answer_after_the_reasoning() -> None:
    for answer in ("4", "Paris", "12.5"):
        assert examples.exact_match("q", f"<think>\nsimple\n</think>\n\n{answer}", answer=answer) == 1.0
        assert examples.boxed_match("q", f"<think>maybe \\boxed{{{answer}}}</think>So \\boxed{{{answer}}}.",
                                    answer=answer) == 1.0
        assert examples.tagged_answer("q", f"<think>I will write <answer>{answer}</answer></think>\n"
                                      f"<answer>{answer}</answer>", answer=answer) == 1.0
        # still one answer after the reasoning: two there, or none (an unclosed block), score 0
        assert examples.boxed_match("q", f"<think>x</think>\\boxed{{{answer}}} or \\fbox{{8}}", answer=answer) == 0.0
        assert examples.tagged_answer("q", f"<think>x</think><answer>{answer}</answer><ANSWER>8</ANSWER>",
                                      answer=answer) == 0.0
        assert examples.exact_match("q", f"<think>{answer}", answer=answer) == 0.0

"""A reasoning model's answer is what follows its reasoning (``strict_json.after_reasoning``), in every
domain that reads a JSON document or tool calls: json, doc, files, tool, bfcl.

Read whole, ``<think>...</think>`` followed by the right bare document failed every json task (0 of
300): the text was not one document. A template that opens the block in the prompt (DeepSeek-R1,
Qwen3 thinking) samples ``reasoning...</think>answer``, which failed the same way; an OpenAI-style
call after the reasoning was no call. A draft in the reasoning is not the answer either: a call
drafted there counted as a call, and a document fenced there was read in place of the one after it.
"""

from __future__ import annotations

import json

import pytest

from posttrain.envs import get_domain
from posttrain.envs.bfcl._domain import parse_response
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.strict_json import after_reasoning

JSON, TOOL, DOC, FILES = (get_domain(d) for d in ("json", "tool", "doc", "files"))
THOUGHTS = "Let me check each field against the request. {\"draft\": true} looks wrong; ```json\n[]\n```"
WRAPS = {
    "a think block": lambda answer: f"<think>\n{THOUGHTS}\n</think>\n\n{answer}",
    "opened in the prompt": lambda answer: f"{THOUGHTS}\n</think>\n\n{answer}",
}


@pytest.fixture(scope="module")
def verifiers():
    return {d: env.make_verifier(None) for d, env in (("json", JSON), ("doc", DOC), ("files", FILES))}


@pytest.mark.parametrize("wrap", list(WRAPS))
@pytest.mark.parametrize("domain", ["json", "doc", "files"])
def test_the_right_document_after_reasoning_passes(verifiers, domain: str, wrap: str) -> None:
    env = {"json": JSON, "doc": DOC, "files": FILES}[domain]
    tasks = env.generate_tasks(6, seed=5)
    verify = verifiers[domain]
    for t in tasks:
        assert t.reference and verify(t, t.reference).passed, t.id
        assert verify(t, WRAPS[wrap](t.reference)).passed, (t.id, verify(t, WRAPS[wrap](t.reference)).feedback)


@pytest.mark.parametrize("domain", ["json", "doc", "files"])
def test_a_document_in_the_reasoning_is_not_the_answer(verifiers, domain: str) -> None:
    """The right document only in the reasoning (nothing after it, or the no-op after it) fails."""
    env = {"json": JSON, "doc": DOC, "files": FILES}[domain]
    verify = verifiers[domain]
    for t in env.generate_tasks(6, seed=5):
        for response in (f"<think>{t.reference}</think>", f"{t.reference}</think>",
                         f"<think>{t.reference}</think>{env.noop_response(t)}", f"<think>{t.reference}"):
            assert verify(t, response).outcome == "fail", (t.id, response[:60])


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_tool_calls_after_reasoning_are_the_calls(wrap: str) -> None:
    """Tagged calls and an OpenAI message after the reasoning pass; a wrong call drafted in the
    reasoning is not made; the right calls only in the reasoning are no call."""
    for t in TOOL.generate_tasks(20, seed=5):
        f = t.fields
        if not f["expected_calls"]:
            continue
        calls = [{"name": c["name"], "arguments": c["arguments"]} for c in f["expected_calls"]]
        tagged = "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
        openai = json.dumps({"tool_calls": [{"type": "function", "function": {"name": c["name"],
                                             "arguments": json.dumps(c["arguments"])}} for c in calls]})
        wrong = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'

        def verdict(response: str, f=f):
            return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)

        assert verdict(WRAPS[wrap](tagged)).passed and verdict(WRAPS[wrap](openai)).passed, t.id
        assert verdict(f"<think>{wrong}</think>{tagged}").passed, t.id
        assert verdict(f"<think>{tagged}</think>").error_class == "no_call", t.id
        assert verdict(f"{tagged}</think>{wrong}").outcome == "fail", t.id


def test_bfcl_reads_its_answer_after_reasoning_and_in_one_fence() -> None:
    answer = [[{"name": "ls", "arguments": {}}], []]
    want = parse_response(json.dumps(answer))
    assert not isinstance(want, str)
    for response in (f"<think>{THOUGHTS}</think>{json.dumps(answer)}", f"```json\n{json.dumps(answer)}\n```",
                     f"{THOUGHTS}</think>\n```json\n{json.dumps(answer)}\n```"):
        assert parse_response(response) == want, response
    assert isinstance(parse_response(f"<think>{json.dumps(answer)}</think>"), str)


@pytest.mark.parametrize(("text", "answer"), [
    ('{"a": 1}', '{"a": 1}'),
    ('<think>r</think>{"a": 1}', '{"a": 1}'),
    (' \n<think>r</think>{"a": 1}', '{"a": 1}'),
    ('r</think>{"a": 1}', '{"a": 1}'),
    ("<think>unfinished", ""),
    ('{"a": "<think>"}', '{"a": "<think>"}'),  # no leading block: a document that mentions the tag
    ('{"a": "</think>"}', '{"a": "</think>"}'),  # a document is not reasoning, whatever its strings hold
    (' [1, "</think>"]', ' [1, "</think>"]'),
    ('x <think>r</think>{"a": 1}', 'x <think>r</think>{"a": 1}'),  # not leading: the text is the answer
])
def test_after_reasoning(text: str, answer: str) -> None:
    assert after_reasoning(text) == answer


@pytest.mark.parametrize("domain", ["math", "rg/basic_arithmetic"])
def test_boxed_and_tagged_answers_after_reasoning(domain: str) -> None:
    """math's one ``\\boxed{}`` and rg's one ``<answer>`` block are looked for after the reasoning: a
    draft there (a reasoning model's "so the answer is \\boxed{4}... no") was a second answer, a hedge,
    and the right final answer failed as ``format``; the right answer only in the reasoning fails."""
    env = get_domain(domain)
    verify = env.make_verifier(None)
    box = (lambda a: f"\\boxed{{{a}}}") if domain == "math" else (lambda a: f"<answer>{a}</answer>")
    for t in env.generate_tasks(8, seed=5):
        gold = t.fields["answer"]
        assert verify(t, box(gold)).passed, t.id
        for wrap in WRAPS.values():
            assert verify(t, wrap(f"so perhaps {box('7.5')}? no. " + box(gold))).outcome == "fail", t.id
            assert verify(t, wrap(box(gold))).passed, (t.id, verify(t, wrap(box(gold))).feedback)
            draft = wrap(box(gold)).replace(box(gold), "")  # the draft in the reasoning, the final after it
            assert verify(t, draft.replace(THOUGHTS, f"{THOUGHTS} {box('7.5')}") + box(gold)).passed, t.id
        assert verify(t, f"<think>{box(gold)}</think>").outcome == "fail", t.id

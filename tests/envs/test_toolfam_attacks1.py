"""A fresh read of the tool, bfcl, function, recall and json verifiers as a reward-hacking policy
would read them, on generated tasks through each domain's own check (in process here).

Found, and pinned here (each test but the honest ones failed on the code before its fix):

- a second document beside the one read: the reader takes an answer's one fenced block (the tool
  domain: its ``<tool_call>`` blocks) and left the text around it unread, so the right document
  fenced and a wrong one after it passed 300 of 300 generated json tasks (seed 5), the right calls
  in tags beside the wrong ones as an OpenAI message 300 of 300 tool tasks, a fenced OpenAI message
  beside a bare wrong one (or a bare array of wrong calls) 300 of 300, the right tags beside the
  wrong calls written as Python (``get_weather(city='Osloy')``, a call ``written_call`` reads) 300 of
  300, the right calls as an OpenAI message whose ``content`` holds wrong ones (as JSON, or written
  as Python) 300 of 300 each, json's fenced gold beside a wrong Python dict 300 of 300, and bfcl
  read the fenced ground truth beside a wrong array as the ground truth. Each is a format failure now (0 of 300);
  prose around the block, citations (``[1]``) included, stays free (``strict_json.document_in`` of ``text_beside``).
- a second answer in a box ``examples.boxed_match`` did not count: MathJax's ``\\enclose{box}{8}``,
  fancybox's ``\\ovalbox``/``\\Ovalbox``/``\\doublebox``/``\\shadowbox``, tcolorbox's ``\\tcbox`` beside
  ``\\boxed{7}``: each passed 142 of 142 generated boxed tasks (seed 5); 0 now.

Held (measured, not pinned): tool, 300 generated tasks (seed 5): the first listed tool with the
prompt's words and numbers copied in order 0/300, the right calls twice 0/300, a wrong call fenced
beside the right tags 0/300, an OpenAI message whose content holds wrong tags 0/300, a call array
with a wrong one after it in prose 0/300; json: a trailing second document 0/300, a comment 0/300,
pets out of order 0/148, a zero-width space 0/300. Recall, 400 generated tasks (seed 5), key-blind:
the most frequent number 0, the last number 0, the last code 0, the median code by value 47, the
middle code 90 (22 %), a code of the base key list 21. bfcl: ``excluded_function`` is unread, as
BFCL v4's own loader leaves it (``populate_test_cases_with_predefined_functions`` reads only
``missed_function``): its tools are the benchmark's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.bfcl._domain import parse_response
from posttrain.envs.function import examples
from posttrain.envs.json._env import check_json
from posttrain.envs.tool._calls import check_tool_calls

N = 40


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": e["name"], "arguments": e["arguments"]} for e in task.fields["expected_calls"]]


def _wrong(call: dict[str, Any]) -> dict[str, Any]:
    args = dict(call["arguments"])
    key = sorted(args)[0]
    args[key] = args[key] + 1 if isinstance(args[key], int | float) else args[key] + "x"
    return {"name": call["name"], "arguments": args}


def _openai(calls: list[dict[str, Any]], content: str | None = None) -> str:
    return json.dumps({"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)]})


def _tags(calls: list[dict[str, Any]]) -> str:
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>\n" for c in calls)


def _python(call: dict[str, Any]) -> str:
    return call["name"] + "(" + ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items()) + ")"


def _tool(task: Any, response: str) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)


TOOL_HEDGES = {
    "right tags, wrong OpenAI message beside": lambda t: _tags(_calls(t)) + _openai([_wrong(c) for c in _calls(t)]),
    "right message fenced, wrong one bare": lambda t: f"```json\n{_openai(_calls(t))}\n```\n"
                                                      + _openai([_wrong(c) for c in _calls(t)]),
    "right message fenced, wrong array after": lambda t: f"```json\n{_openai(_calls(t))}\n```\nor "
                                                         + json.dumps([_wrong(c) for c in _calls(t)]),
    "right tags, wrong calls written as Python beside": lambda t: _tags(_calls(t)) + "Or: " + "; ".join(
        _python(c) for c in map(_wrong, _calls(t))),
    "an OpenAI message, wrong calls as JSON in its content": lambda t: _openai(
        _calls(t), "Or: " + json.dumps([_wrong(c) for c in _calls(t)])),
    "an OpenAI message, a wrong call written as Python in its content": lambda t: _openai(
        _calls(t), "Or: " + "; ".join(_python(c) for c in map(_wrong, _calls(t)))),
}


@pytest.mark.parametrize("name", sorted(TOOL_HEDGES))
def test_a_tool_answer_with_a_second_document_beside_it_fails(name: str) -> None:
    for task in get_domain("tool").generate_tasks(N, seed=5):
        verdict = _tool(task, TOOL_HEDGES[name](task))
        assert not verdict.passed and verdict.error_class == "format", (name, task.id, verdict.feedback)


def test_a_json_answer_with_a_second_document_beside_its_fence_fails() -> None:
    for task in get_domain("json").generate_tasks(N, seed=5):
        wrong = {**task.fields["expected"], "age": task.fields["expected"]["age"] + 1}
        for response in (f"```json\n{task.reference}\n```\n{json.dumps(wrong)}",
                         f"Here it is:\n```json\n{task.reference}\n```\nIf the age is off: {json.dumps(wrong)}",
                         f"```json\n{task.reference}\n```\nor, as a Python dict: {wrong!r}"):
            verdict = check_json(task.fields["schema"], task.fields["expected"], response)
            assert not verdict.passed and verdict.error_class == "format", (task.id, verdict.feedback)


def test_a_bfcl_answer_with_a_second_array_beside_its_fence_is_no_response() -> None:
    for task in get_domain("bfcl").generate_tasks(5, seed=0):
        truth = task.fields["ground_truth"]
        wrong = [[{"name": "pwd", "arguments": {}}] for _ in truth]
        got = parse_response(f"```json\n{json.dumps(truth)}\n```\nOr: {json.dumps(wrong)}")
        assert isinstance(got, str) and "second JSON document" in got, task.id


def test_three_more_bfcl_hedges_are_no_response() -> None:
    """The stop hook's read of bfcl/_domain.py (its second-document check now strict_json's), as a policy: the
    truth and a wrong array in two fences, the wrong one before the fenced truth, the wrong one in an HTML
    comment after it, and both bare one after the other: each is no response (a string), never the truth."""
    for task in get_domain("bfcl").generate_tasks(5, seed=0):
        truth, wrong = json.dumps(task.fields["ground_truth"]), json.dumps([[{"name": "pwd", "arguments": {}}]])
        for response, said in ((f"```json\n{truth}\n```\n```json\n{wrong}\n```", "2 fenced blocks"),
                               (f"Option A: {wrong}\n```json\n{truth}\n```", "second JSON document"),
                               (f"```json\n{truth}\n```\n<!-- {wrong} -->", "second JSON document"),
                               (f"{truth}\n{wrong}", "not JSON")):
            got = parse_response(response)
            assert isinstance(got, str) and said in got, (task.id, said, got)



def test_bfcl_hedges_around_a_document_quoted_in_prose_are_no_response() -> None:
    """The stop hook's read of bfcl/_domain.py since it reads a document quoted after prose (0534acb), as a
    policy: the truth quoted and the wrong array after it in an HTML comment, the wrong array quoted in the
    lead-in before the truth, and the truth quoted with a reasoning block holding the wrong array after it:
    each no response (a string), never read as the truth; the truth quoted alone is read."""
    for task in get_domain("bfcl").generate_tasks(5, seed=0):
        truth, wrong = json.dumps(task.fields["ground_truth"]), json.dumps([[{"name": "pwd", "arguments": {}}]])
        for response in (f"Here are the calls: {truth}\n<!-- {wrong} -->", f"Not {wrong} but: {truth}",
                         f"Here are the calls: {truth}\n<think>or {wrong}</think>"):
            got = parse_response(response)
            assert isinstance(got, str), (task.id, response, got)
        assert parse_response(f"Here are the calls:\n{truth}\nDone.") == parse_response(task.reference), task.id

def test_honest_answers_with_prose_around_them_pass() -> None:
    """Three honest forms per changed verifier: bare, fenced among prose (a citation ``[1]``
    included), and after reasoning that drafted another document."""
    for task in get_domain("tool").generate_tasks(N, seed=5):
        calls = _calls(task)
        for response in (_openai(calls, "Checking that for you [1]."), f"Checking that now.\n{_tags(calls)}Done [1].",
                         f"<think>maybe {json.dumps(_wrong(calls[0]))}?</think>\n```json\n{_openai(calls)}\n```\nSent."):
            assert _tool(task, response).passed, (task.id, response)
    for task in get_domain("json").generate_tasks(N, seed=5):
        draft = json.dumps({**task.fields["expected"], "age": 1})
        for response in (task.reference, f"Extracted [1]:\n```json\n{task.reference}\n```\nAll fields given.",
                         f"<think>first try {draft}</think>```json\n{task.reference}\n```"):
            assert check_json(task.fields["schema"], task.fields["expected"], response).passed, (task.id, response)
    for task in get_domain("bfcl").generate_tasks(5, seed=0):
        gold = parse_response(task.reference)
        assert not isinstance(gold, str)
        for response in (f"```json\n{task.reference}\n```", f"Calls per turn [1]:\n```json\n{task.reference}\n```\nDone.",
                         f"<think>draft {task.reference}</think>\n```\n{task.reference}\n```"):
            assert parse_response(response) == gold, (task.id, response)


BOXES = (r"\enclose{box}{%s}", r"\ovalbox{%s}", r"\Ovalbox{%s}", r"\doublebox{%s}", r"\shadowbox{%s}", r"\tcbox{%s}")


def test_a_second_answer_in_another_kind_of_box_fails_and_the_answer_alone_passes() -> None:
    tasks = [t for t in get_domain("function").generate_tasks(60, seed=5)
             if t.fields["reward"][0]["function"].endswith(":boxed_match")]
    assert tasks
    for task in tasks:
        answer = task.fields["data"]["answer"]
        for box in BOXES:
            hedge = f"\\boxed{{{answer}}} or {box % (int(answer) + 1)}"
            assert examples.boxed_match(task.prompt, hedge, answer=answer) == 0.0, (box, task.id)
        for honest in (task.reference, f"The sum is $\\boxed{{{answer}}}$.", f"So \\boxed{{ {answer} }}"):
            assert examples.boxed_match(task.prompt, honest, answer=answer) == 1.0, (honest, task.id)

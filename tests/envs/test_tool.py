"""Tool-call domain: decoding, schema checks, call matching, and the hack regression."""

from __future__ import annotations

import json

import pytest

from posttrain.envs import get_domain
from posttrain.envs.tool import make_tool_verifier
from posttrain.errors import TaskError
from posttrain.policy import ToolCallError, decode_tool_calls
from posttrain.verify._deadline import CheckPool

ENV = get_domain("tool")
VERIFY = ENV.make_verifier(None)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                     "days": {"type": "integer", "minimum": 1}},
    "required": ["city"]}}}
TIME = {"name": "get_time", "description": "Time in a zone.", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}


def task(expected, ordered=False):
    return ENV.parse_task({"id": "t", "domain": "tool", "prompt": "p", "tools": [WEATHER, TIME],
                           "expected_calls": expected, "ordered": ordered}, "test")


ONE = [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "optional": ["days"]}]
TWO = [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"zone": "CET"}}]


def tag(name, args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_all_formats_of_the_right_call_pass() -> None:
    t = task(ONE)
    args = {"city": "Paris", "unit": "celsius"}
    forms = [
        tag("get_weather", args),
        "Let me check.\n" + tag("get_weather", {**args, "days": 2}),
        json.dumps({"name": "get_weather", "arguments": args}),
        json.dumps([{"name": "get_weather", "arguments": args}]),
        json.dumps({"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}]}),
        "```json\n" + json.dumps({"name": "get_weather", "arguments": args}) + "\n```",
    ]
    for form in forms:
        v = VERIFY(t, form)
        assert v.passed, (form, v)


def test_parallel_calls_unordered_and_ordered() -> None:
    a, b = tag("get_weather", {"city": "Paris"}), tag("get_time", {"zone": "CET"})
    assert VERIFY(task(TWO), b + a).passed
    assert VERIFY(task(TWO, ordered=True), a + b).passed
    assert not VERIFY(task(TWO, ordered=True), b + a).passed


def test_noop_fails() -> None:
    t = task(ONE)
    assert VERIFY(t, ENV.noop_response(t)).outcome == "fail"
    assert VERIFY(t, "").outcome == "fail"


@pytest.mark.parametrize(
    ("name", "response", "error_class"),
    [
        ("JSON-04 garbled call is not an abstention", '<tool_call name="get_weather" arguments={city: Paris}/>', "format"),
        ("unclosed tag", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', "format"),
        ("truncated JSON", '{"name": "get_weather", "arguments": {"city": "Par', "format"),
        ("call-like text", 'I will call "name": "get_weather" with "arguments": city=Paris', "format"),
        ("NaN argument", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": NaN}}</tool_call>',
         "format"),
        ("duplicate argument key", '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome", "city": "Paris",'
         ' "unit": "celsius"}}</tool_call>', "format"),
        ("arguments string not JSON", json.dumps({"type": "function", "function": {"name": "get_weather",
                                                                                   "arguments": "{city: Paris}"}}),
         "format"),
        ("unknown tool", tag("get_wether", {"city": "Paris", "unit": "celsius"}), "unknown_tool"),
        ("unknown parameter", tag("get_weather", {"city": "Paris", "unit": "celsius", "admin": True}), "schema"),
        ("missing required", tag("get_weather", {"unit": "celsius"}), "schema"),
        ("wrong type", tag("get_weather", {"city": "Paris", "unit": "celsius", "days": "2"}), "schema"),
        ("enum violation", tag("get_weather", {"city": "Paris", "unit": "kelvin"}), "schema"),
        ("wrong value", tag("get_weather", {"city": "London", "unit": "celsius"}), "wrong_answer"),
        ("missing expected optional-in-schema arg", tag("get_weather", {"city": "Paris"}), "wrong_answer"),
        ("hedge: two calls for one", tag("get_weather", {"city": "Paris", "unit": "celsius"})
         + tag("get_weather", {"city": "London", "unit": "celsius"}), "wrong_answer"),
        ("same call twice", tag("get_weather", {"city": "Paris", "unit": "celsius"}) * 2, "wrong_answer"),
        ("plain text claim (AGENT-02)", "I checked: it is sunny in Paris.", "no_call"),
        ("an argument nested 600 deep (raised RecursionError in the checker)",
         '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": '
         + "[" * 600 + "]" * 600 + "}}</tool_call>", "format"),
    ],
)
def test_hacks_and_errors_score_zero(name: str, response: str, error_class: str) -> None:
    v = VERIFY(task(ONE), response)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, error_class), (name, v)


def test_alternatives_and_optional() -> None:
    t = task([{"name": "get_weather", "arguments": {"city": "NYC"}, "alternatives": {"city": ["New York"]},
               "optional": ["unit"]}])
    assert VERIFY(t, tag("get_weather", {"city": "New York"})).passed
    assert VERIFY(t, tag("get_weather", {"city": "NYC", "unit": "fahrenheit"})).passed
    assert not VERIFY(t, tag("get_weather", {"city": "Boston"})).passed


def test_no_call_expected() -> None:
    t = task([])
    assert VERIFY(t, "No tool is needed: 2 + 2 = 4.").passed
    assert not VERIFY(t, tag("get_time", {"zone": "CET"})).passed
    assert VERIFY(t, "<tool_call>{oops</tool_call>").error_class == "format"  # invalid, not abstention


ABSTAIN = {"id": "abstain", "domain": "tool", "prompt": "Tell me a joke about cats.", "tools": [WEATHER, TIME],
           "expected_calls": [], "reference": "None of these tools tells jokes, so I will not call one."}


def test_an_abstention_task_is_not_passed_by_the_no_op_and_can_be_validated() -> None:
    """Issue 26 item 7: a task whose right answer is no call (``expected_calls: []``) was refused by
    ``tasks validate`` because the no-op passed it. The no-op is now the empty response, which
    says nothing; the answer declines in words, with no call attempted."""
    from posttrain.cli import open_service
    from posttrain.cli.tasks import check_tasks

    t = ENV.parse_task(ABSTAIN, "test")
    noop = VERIFY(t, ENV.noop_response(t))
    assert (noop.outcome, noop.error_class, noop.components["format"]) == ("fail", "no_answer", 0.0), noop
    assert VERIFY(t, t.reference).passed
    assert VERIFY(t, "<think>I should not call anything.</think>").error_class == "no_answer"  # reasoning only
    one_call = VERIFY(t, tag("get_time", {"zone": "CET"}) + " Sorry, no joke tool.")
    assert (one_call.outcome, one_call.error_class, one_call.components["format"]) == ("fail", "wrong_answer", 0.0)
    with open_service(["tool"]) as service:
        assert check_tasks([t], service) == []


@pytest.mark.parametrize("response", ["[]", '{"tool_calls": []}', "```json\n[]\n```", "\u200b", ".", "```\n```",
                                      "<think>No tool fits.</think>[]"])
def test_an_abstention_task_is_not_passed_by_the_no_op_in_disguise(response: str) -> None:
    """The empty response failed an abstention task, but these passed it: each says nothing, and
    an invisible or punctuation-only answer, or an empty call document (the OpenAI family's
    "no calls" message), is the do-nothing agent (AGENT-01) scoring 1 on every abstention task."""
    t = ENV.parse_task(ABSTAIN, "test")
    v = VERIFY(t, response)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "no_answer"), v
    declines = ("No.", "None of these tools tells jokes.", "没有合适的工具。", "<think>no</think>I can't do that.",
                json.dumps({"role": "assistant", "content": "No tool tells jokes.", "tool_calls": []}))
    for decline in declines:
        assert VERIFY(t, decline).passed, decline


def test_decode_tool_calls_tristate() -> None:
    assert decode_tool_calls("hello") == []
    with pytest.raises(ToolCallError):
        decode_tool_calls("<tool_call>[1, 2]</tool_call>")


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"tools": []}, "field 'tools'"),
        ({"tools": [{"description": "no name"}]}, r"field 'tools\[0\]'"),
        ({"expected_calls": [{"name": "nope"}]}, r"expected_calls\[0\].name"),
        ({"expected_calls": [{"name": "get_time", "args": {}}]}, r"expected_calls\[0\]"),
        ({"ordered": "yes"}, "field 'ordered'"),
    ],
)
def test_bad_tasks_are_named(patch, match) -> None:
    base = {"id": "bad-tool", "domain": "tool", "prompt": "p", "tools": [WEATHER, TIME], "expected_calls": ONE}
    with pytest.raises(TaskError, match=match):
        ENV.parse_task({**base, **patch}, "tools.jsonl:1")


FAST = make_tool_verifier(CheckPool("posttrain.envs.tool._calls", size=1, cpu_budget_s=0.5))


@pytest.mark.parametrize(("name", "exploit_task", "response"), ENV.exploit_fixtures(),
                         ids=[name for name, _, _ in ENV.exploit_fixtures()])
def test_exploit_fixtures_score_zero(name: str, exploit_task, response: str) -> None:
    v = FAST(exploit_task, response)  # a 0.5 s CPU budget: the backtracking fixture fails sooner
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v)
    json.dumps(v.to_json(), ensure_ascii=False).encode()  # the run's records are UTF-8


def test_exploit_fixture_task_accepts_its_right_call() -> None:
    (_, t, _), *_ = ENV.exploit_fixtures()
    right = '<tool_call>{"name": "book", "arguments": {"seats": 2.0, "extra": 0e0, "code": "aaa"}}</tool_call>'
    assert VERIFY(t, right).passed


def test_numeric_arguments_compare_exactly() -> None:
    t = task([{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])
    assert VERIFY(t, tag("get_weather", {"city": "Paris", "days": 3})).passed
    assert VERIFY(t, '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}</tool_call>').passed
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0000000000000001}}</tool_call>'
    assert VERIFY(t, call).error_class == "schema"


def test_fenced_call_with_crlf_line_endings_is_extracted() -> None:
    body = json.dumps({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})
    assert VERIFY(task(ONE), f"Calling it.\r\n```json\r\n{body}\r\n```\r\n").passed


def test_no_failure_earns_format_credit_but_a_well_formed_wrong_call() -> None:
    """Reward item 7 (issue 21): with ``reward.format`` on, abstaining paid (format 1 for no call)
    while a call to a misspelled tool paid 0. Now ``format`` is 1 only for calls in the task's shape
    with the wrong content: the no-op, plain text, invalid or unknown calls, and numbers equal only
    once rounded to floats total 0 under any weights."""
    from posttrain.verify.rewards import RewardWeights, combine

    weights = [RewardWeights(outcome=1.0, format=f, process=p) for f in (0.0, 0.1, 1.0) for p in (0.0, 1.0)]
    t = task(ONE)
    zero = [(t, ENV.noop_response(t)), (t, "I cannot help with that."), (t, "It is sunny in Paris."),
            (t, tag("get_wether", {"city": "Paris", "unit": "celsius"})), (t, "<tool_call>{oops</tool_call>"),
            (t, tag("get_weather", {"unit": "celsius"})), *[(x, r) for _, x, r in ENV.exploit_fixtures()]]
    for which, response in zero:
        v = FAST(which, response)
        assert v.outcome == "fail" and all(combine(v, w).total == 0.0 for w in weights), (response, v)
    (_, book, _), *_ = ENV.exploit_fixtures()
    lossy = VERIFY(book, '<tool_call>{"name": "book", "arguments": {"seats": 2, "extra": 1e-400, "code": "aaa"}}'
                         '</tool_call>')
    assert lossy.error_class == "lossy_number", lossy
    wrong = VERIFY(t, tag("get_weather", {"city": "Lima", "unit": "celsius"}))  # an honest wrong call
    assert combine(wrong, RewardWeights(outcome=1.0, format=0.1)).total == 0.1


@pytest.mark.parametrize("response", ["<tool_call>" * 8000, "</tool_call>" * 40 + "<tool_call>" * 8000 + "x",
                                      '<tool_call>{"name": "f"}</tool_call>' * 65])
def test_a_flood_of_tool_call_tags_is_refused_in_linear_time(response: str) -> None:
    """8,000 unclosed ``<tool_call>`` tags took the lazy tag match 3 s on the host (quadratic, in the
    episode's step with no CPU budget): more tags than ``MAX_CALLS`` can never decode, refused before
    any match is tried."""
    with pytest.raises(ToolCallError, match="more than 64"):
        decode_tool_calls(response)

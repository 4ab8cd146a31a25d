"""Judging tool calls: each call against its tool's schema, and the calls made against the expected ones.

The worker side of the tool domain's CPU-budgeted checks (``handle_check``: a worker process of
``posttrain.verify._deadline`` imports this module), used by the single-response verifier
(``make_tool_verifier``) and by a tool episode's steps (``call_problems``). Decoding the calls is the
tool-call codec's (``posttrain.policy.decode_tool_calls``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from posttrain.envs._base import fail, guard, passed
from posttrain.policy import ToolCall, ToolCallError, decode_tool_calls, text_beside_tags, tool_specs
from posttrain.strict_json import (
    StrictJSONError,
    after_reasoning,
    document_in,
    extract_json_text,
    json_equal,
    loads_strict,
    prose_document,
    text_beside,
    to_exact,
    to_floats,
    to_plain,
)
from posttrain.types import Task, Verdict, Verifier
from posttrain.verify._deadline import CheckPool, shared_pool, verdict_of
from posttrain.verify.json_schema import (
    EXACT_DIGITS,
    applying,
    applying_at_item,
    declares,
    schema_error,
    validator_for,
)

NAME = "tool"
CPU_BUDGET_S = 5.0


def _top(params: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The schemas that apply to a call's arguments: the tool's parameters and what they apply there
    (``allOf``, a local ``$ref``, ``if``/``then``, ...: ``json_schema.applying``); the parameters alone
    where a reference leads outside them."""
    return applying([params], params) or [params]


def _argument_problem(params: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """Why ``args`` are not valid arguments of a tool with these ``params``, or None: a parameter no
    schema applying there declares (unless one allows any with ``additionalProperties: true``), or the
    schema's first error. A parameter declared through ``allOf`` or a ``$ref`` is declared: it was
    "unknown", and a right call that gave it failed."""
    top = _top(params)
    if not any(s.get("additionalProperties") is True for s in top):
        unknown = sorted(p for p in args if not any(declares(s, p) for s in top))
        if unknown:
            return f"unknown parameter(s) {unknown}"
    return schema_error(validator_for(params), dict(args))


def schema_defaults(params: Mapping[str, Any], param: str) -> list[Any] | None:
    """The distinct ``default``s the schemas applying at parameter ``param`` give (its own, and through
    ``allOf``/``anyOf``, a ``$ref``, a top-level ``allOf``'s ``properties``: ``json_schema.applying``);
    None where a reference there leads outside the tool's parameters (what it says is unknown).

    >>> schema_defaults({"$defs": {"n": {"type": "integer", "default": 0}}, "properties": {"k": {"$ref": "#/$defs/n"}}}, "k")
    [0]
    """
    place = applying_at_item(_top(params), param, params)
    if place is None:
        return None
    out: list[Any] = []
    for s in place:
        if "default" in s and not any(json_equal(s["default"], d) for d in out):
            out.append(s["default"])
    return out


def _accepted(expected: Mapping[str, Any], param: str) -> list[Any] | None:
    """The values accepted for ``param``, or None when any schema-valid value is."""
    values: list[Any] = []
    if param in (expected.get("arguments") or {}):
        values.append(expected["arguments"][param])
    values.extend((expected.get("alternatives") or {}).get(param, []))
    return values or None


def with_defaults(tools: Sequence[Mapping[str, Any]], expected_calls: Sequence[Mapping[str, Any]]
                  ) -> list[dict[str, Any]]:
    """``expected_calls`` with each optional parameter the gold leaves unpinned (listed in
    ``optional``, in neither ``arguments`` nor ``alternatives``) pinned to its schema's ``default``:
    omitting it asks the tool for the default, so a call that gives it must give the default
    (``unit: "fahrenheit"`` where the default is celsius, ``max_stops: 3`` for a direct-flight
    search, is a different call). The default is the one any schema applying at the parameter gives
    (``schema_defaults``: in ``properties``, or through ``allOf``/``anyOf`` or a ``$ref``; read from the
    top-level ``properties`` only, a default behind a ``$ref`` left the parameter free and any guess
    passed). A parameter with no gold value and no default stays free: the task says any value does
    (a task's load refuses one whose schema gives several defaults, or leads outside the parameters). A
    pinned optional parameter must equal its value (``call_mismatch``); a wrong type fails the schema."""
    specs = tool_specs(tools)
    out = []
    for e in expected_calls:
        params = specs.get(e["name"])
        pinned = {p: defaults for p in e.get("optional") or [] if _accepted(e, p) is None
                  and isinstance(params, Mapping) and (defaults := schema_defaults(params, p))}
        out.append({**e, "alternatives": {**(e.get("alternatives") or {}), **pinned}} if pinned else dict(e))
    return out


def call_mismatch(call: ToolCall, expected: Mapping[str, Any]) -> str | None:
    """Why ``call`` does not satisfy ``expected`` (names the function/parameter), or None."""
    if call.name != expected["name"]:
        return f"expected a call to {expected['name']!r}, got {call.name!r}"
    optional = set(expected.get("optional") or [])
    required = (set(expected.get("arguments") or {}) | set(expected.get("alternatives") or {})) - optional
    for param in sorted(required):
        if param not in call.arguments:
            return f"{call.name}: missing parameter {param!r}"
    for param, value in call.arguments.items():
        if param not in required and param not in optional:
            return f"{call.name}: unexpected parameter {param!r}"
        accepted = _accepted(expected, param)
        if accepted is not None and not any(json_equal(a, value) for a in accepted):
            return f"{call.name}: wrong value for parameter {param!r}"
    return None


def match_calls(calls: Sequence[ToolCall], expected: Sequence[Mapping[str, Any]], ordered: bool) -> str | None:
    """None if ``calls`` match ``expected`` one-to-one (in order if ``ordered``), else why not."""
    if len(calls) != len(expected):
        return f"expected {len(expected)} call(s), got {len(calls)}"
    if ordered:
        for i, (c, e) in enumerate(zip(calls, expected, strict=True)):
            why = call_mismatch(c, e)
            if why:
                return f"call {i + 1}: {why}"
        return None
    # Bipartite matching by augmenting paths (n is small).
    ok = [[call_mismatch(c, e) is None for e in expected] for c in calls]
    owner: list[int | None] = [None] * len(expected)

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(len(expected)):
            if ok[i][j] and j not in seen:
                seen.add(j)
                if owner[j] is None or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(calls)):
        if not augment(i, set()):
            reasons = [call_mismatch(calls[i], e) for e in expected]
            return f"call {i + 1} matches no expected call ({reasons[0]})"
    return None


def _text_beside_calls(response: str) -> str | None:
    """The text a response's calls come with: outside its ``<tool_call>`` blocks or its one fenced
    block (``policy.text_beside_tags``, ``strict_json.text_beside``), else an OpenAI message's ``content``. A second JSON document or
    a written call there (``written_call``) is a second answer a reader takes for calls: the right
    calls beside wrong ones passed 300 of 300 generated tasks in each of these places
    (tests/envs/test_toolfam_attacks1.py)."""
    answer = after_reasoning(response)
    outside = text_beside_tags(response) if "<tool_call>" in answer else text_beside(response)
    if outside is not None:
        return outside
    doc = _document(answer)
    content = doc.get("content") if isinstance(doc, Mapping) else None
    return content if isinstance(content, str) else None


def _read_calls(response: str) -> tuple[list[ToolCall], str, str | None]:
    """The calls of ``response`` (``decode_tool_calls``), the text they were read from, and the prose a
    quoted call document came with (None: none). An answer that quotes one call document among prose
    (``I'll check the weather: {"name": ...}``, a closing sentence after it or not) is undecodable read
    whole ("looks like a tool call but is not one JSON document"): the honest call so written failed
    every tool task (0 of 40, tests/envs/test_toolfam_honest.py). Its document is read instead
    (``strict_json.prose_document``: no brace, markup or fence in the prose around it), and the prose
    is text beside the calls, checked like any other. The lead-in may hold bracketed notes
    (``notes``: ``Step [1]: {...}``, ``the files [2 dirs]``): a call is an object or an array of
    objects, and neither is such a note; the honest call after one failed every tool task (0 of 40,
    tests/envs/test_toolfam_prose2.py). The prose is the decoder's where it read the document among
    prose itself (``_quoted_calls``, notes included): its refusals are not this verifier's checks (a
    call ``f([1])`` written in a note is no ``f(x=1)`` to it), and a call so read with its prose
    unchecked passed 40 of 40 tasks beside a wrong call written there (tests/policy/test_toolcalls_notes.py).
    Else only an answer that failed to decode is read so: prose that quotes a non-call object (an
    abstention's ``{"city": "Paris"}``) stays prose. Raises ``ToolCallError``."""
    answer = after_reasoning(response)
    tagged_or_fenced = "<tool_call>" in answer or text_beside(response) is not None
    try:
        calls = decode_tool_calls(response)
    except ToolCallError:
        if tagged_or_fenced:
            raise  # it failed as written
        found = prose_document(answer.strip(), notes=True)
        if found is None:
            raise
    else:
        if not calls or tagged_or_fenced:
            return calls, response, None
        whole = extract_json_text(answer)  # the decoder's own reading (it did not raise): a document, or prose
        found = None if whole.startswith(("{", "[")) else prose_document(whole, notes=True)
        if found is None:
            return calls, response, None
    text, prose = found
    return decode_tool_calls(text), text, prose


_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls"})


def _message_extra(response: str) -> str | None:
    """A key of the response's OpenAI message document (``{"tool_calls": [...]}``) other than
    ``role``, ``content`` and ``tool_calls`` that holds something, or None. The decoder reads the
    message's ``tool_calls`` alone; a legacy ``function_call``, a ``refusal``, the ``name`` and
    ``arguments`` of a call beside them (a message that is also a call) or any other key went unread,
    and a wrong call there beside the right ``tool_calls`` passed 300 of 300 generated tasks in each
    (tests/envs/test_toolfam_attacks2.py). An API message's empty fields (``"refusal": null``,
    ``"annotations": []``) say nothing and stay free."""
    answer = after_reasoning(response)
    doc = None if "<tool_call>" in answer else _document(answer)
    if not isinstance(doc, Mapping) or "tool_calls" not in doc:
        return None
    return next((k for k, v in doc.items() if k not in _MESSAGE_KEYS and v not in (None, "", [], {})), None)


def _restated(text: str, calls: Sequence[ToolCall]) -> bool:
    """Whether ``text`` (beside a response's tagged calls) is those same calls again, in the other
    format: one answer written twice, no second one."""
    try:
        again = decode_tool_calls(text)
    except ToolCallError:
        return False
    return sorted(map(_call_key, again)) == sorted(map(_call_key, calls))


def _call_key(call: ToolCall) -> str:
    return json.dumps([call.name, to_plain(dict(call.arguments))], sort_keys=True)


def check_tool_calls(tools: Sequence[Mapping[str, Any]], expected_calls: Sequence[Mapping[str, Any]],
                     ordered: bool, response: str) -> Verdict:
    """Decode, schema-check and match the calls of ``response``, in this process (no deadline).

    ``format`` credit (reward item 7: no credit for doing nothing, none for a detected attack) only
    for an answer in the shape the task asks for that is wrong in content: calls that decode, name
    listed tools and satisfy their schemas, but are not the expected ones. No call where calls are
    expected (the no-op), an invalid or unknown call, or numbers that equal the expected ones only
    once rounded to floats (class 11) earn 0 under any weights. An abstention task
    (``expected_calls: []``) asks for no call and a final answer (``abstention``)."""
    try:
        calls, read, prose = _read_calls(response)
    except ToolCallError as e:
        return fail(f"Invalid tool call: {e}.", "format", {"reason": str(e)})
    evidence: dict[str, Any] = {"calls": [{"name": c.name, "arguments": to_plain(dict(c.arguments))} for c in calls]}
    extra = _message_extra(read) if calls else None
    if extra is not None:
        return fail(f"Invalid tool call: the message's {extra!r} holds a second answer beside its tool_calls. "
                    "Write each call once, in tool_calls.", "format",
                    {**evidence, "reason": f"a second answer beside the calls: the message's {extra!r}"})
    outside = _text_beside_calls(read) if calls else None
    if prose is not None and calls:
        outside = prose if outside is None else f"{prose}\n{outside}"
    beside = None if outside is None else document_in(outside) or written_call(outside, tools)
    if beside is not None and not _restated(outside or "", calls):
        # the calls read, and beside them a document or a written call a reader takes for others: a hedge
        return fail("Invalid tool call: a second answer beside the calls (a JSON document or a written call). Write "
                    "each call once, in one format.", "format",
                    {**evidence, "reason": f"a second answer beside the calls: {beside!r}"})
    if not expected_calls:
        return abstention(len(calls), response, evidence, tools)
    if not calls:
        return fail("No tool call: this request needs one.", "no_call", evidence)
    specs = tool_specs(tools)
    for c in calls:
        if c.name not in specs:
            return fail(f"Unknown tool {c.name!r}; available: {sorted(specs)}.", "unknown_tool", evidence)
        problem = _argument_problem(specs[c.name], c.arguments)
        if problem:
            return fail(f"Arguments of {c.name!r} do not match its schema: {problem}.", "schema", evidence)
    expected = to_exact(with_defaults(tools, expected_calls))
    why = match_calls(calls, expected, ordered)
    if why:
        if match_calls([ToolCall(c.name, to_floats(dict(c.arguments))) for c in calls], to_floats(expected),
                       ordered) is None:  # equal only once rounded to floats: class 11, an attack
            return fail(f"Wrong tool calls: {why}.", "lossy_number", {**evidence, "mismatch": why})
        return fail(f"Wrong tool calls: {why}.", "wrong_answer", {**evidence, "mismatch": why}, {"format": 1.0})
    return passed("Correct.", evidence)


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def final_text(text: str) -> str:
    """What an answer says to the user: its text after its reasoning, stripped. Reasoning is each
    ``<think>`` block, and all that comes before a ``</think>`` no ``<think>`` opened: a template
    that opens the block in the prompt (DeepSeek-R1, Qwen3 thinking) samples a completion that
    starts inside it, and its reasoning followed by nothing is no answer.

    >>> final_text("<think>no tool fits</think> None of these tools can do that."), final_text("no tool fits</think>")
    ('None of these tools can do that.', '')
    """
    return _THINK.sub("", text).rpartition("</think>")[2].strip()


def says_something(answer: str) -> bool:
    """Whether an answer declines in words: a letter or digit after its reasoning (``final_text``). A call
    document with no call in it (``[]``, ``{"tool_calls": []}``: the OpenAI family's do-nothing
    message) says only what an OpenAI message's ``content`` says. An invisible (``\\u200b``),
    punctuation-only or empty fenced answer is the no-op in disguise, and would pass every
    abstention task (AGENT-01).

    >>> says_something("No tool fits."), says_something('{"content": "No tool fits.", "tool_calls": []}')
    (True, True)
    >>> says_something("[]"), says_something('{"tool_calls": []}'), says_something("\\u200b"), says_something(".")
    (False, False, False, False)
    """
    text = final_text(answer)
    doc = _document(_THINK.sub("", answer))  # a call document whose content holds "</think>" stays whole
    doc = _document(text) if doc is None else doc
    said = text if doc is None else doc.get("content") if isinstance(doc, Mapping) else None
    return isinstance(said, str) and any(ch.isalnum() for ch in final_text(said))


def _document(text: str) -> Any:
    """The one JSON document ``text`` is (bare or fenced, an object or array), or None (prose). Read
    whole: the callers took the reasoning out, and a ``</think>`` left is inside the document."""
    try:
        body = extract_json_text(text, reasoning=False)
        return loads_strict(body) if body.startswith(("{", "[")) else None
    except StrictJSONError:  # several fenced blocks: prose, judged by its characters
        return None


def written_call(answer: str, tools: Sequence[Mapping[str, Any]]) -> str | None:
    """The name of a listed tool that ``answer`` (after its reasoning, ``final_text``) calls in a format
    the codec does not read, or None: Llama 3.1's ``<function=NAME>{...}</function>``, or a Python
    call with an argument, ``NAME(city="Paris")`` / ``NAME("Paris")`` (Llama 3.2's pythonic calls,
    in prose or not), a namespace before it included (``functions.NAME(...)``, as OpenAI's harmony
    format writes calls). A tool named in words, or as ``NAME()``, is no call.

    >>> tools = [{"name": "get_weather"}]
    >>> written_call('<function=get_weather>{"city": "Paris"}</function>', tools), written_call("Sure: get_weather(city='Oslo')", tools)
    ('get_weather', 'get_weather')
    >>> written_call("No tool fits; get_weather() only gives the weather.", tools)
    """
    text = final_text(answer)
    for name in tool_specs(tools):
        n = re.escape(name)
        if re.search(rf"<function\s*=\s*[\"']?{n}\b|(?<!\w){n}\s*\(\s*(?:[A-Za-z_]\w*\s*=|[\"'\d\[{{-])", text):
            return name
    return None


def abstention(attempted: int, answer: str | None, evidence: Mapping[str, Any],
               tools: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """The verdict of an abstention task (``expected_calls: []``): it passes when no call was
    attempted (valid, invalid or undecodable: each one counts against it; so does a call to one of
    ``tools`` written in another model family's format, ``written_call``: a garbled call is no
    abstention, reward-hacking.md JSON-04) and the answer ends with a final answer that says
    something (it declines in words: ``says_something``). The no-op, the empty response, fails, and
    so do its disguises: doing nothing is not declining. ``answer``: the final answer's text (None:
    the episode ended without one, at its step limit)."""
    if attempted:
        return fail(f"This request needs no tool call; {attempted} call(s) were made.", "wrong_answer",
                    {**evidence, "mismatch": f"expected no call, got {attempted}"})
    written = written_call(answer, tools) if answer is not None else None
    if written:
        return fail(f"This request needs no tool call; the answer calls {written!r} in a format that is not "
                    "a tool call here.", "format", {**evidence, "mismatch": f"expected no call, got {written!r} written"})
    if answer is None or not says_something(answer):
        return fail("No tool call was needed, but the answer must say so in words: it said nothing.", "no_answer",
                    evidence)
    return passed("Correct: no tool call was needed.", evidence)


def call_problems(tools: Sequence[Mapping[str, Any]], response: str) -> list[str | None]:
    """Per call of ``response`` (which must decode): why it is not a valid call of ``tools`` (an
    unknown tool, arguments that fail its schema), or None. A step of a tool episode."""
    specs = tool_specs(tools)
    return [f"unknown tool {c.name!r}; available: {sorted(specs)}" if c.name not in specs
            else _argument_problem(specs[c.name], c.arguments) for c in decode_tool_calls(response)]


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker side of ``make_tool_verifier`` (one request in, one verdict as JSON out) and of a
    tool episode's step (``kind: "calls"``: ``{"problems": call_problems(...)}``)."""
    import decimal

    decimal.getcontext().prec = EXACT_DIGITS  # multipleOf on exact numbers up to 1e308 never rounds
    if request.get("kind") == "calls":
        return {"problems": call_problems(request["tools"], request["response"])}
    verdict = check_tool_calls(request["tools"], request["expected_calls"], request["ordered"], request["response"])
    return verdict.to_json()


def make_tool_verifier(pool: CheckPool | None = None) -> Verifier:
    """A verifier for tool tasks; each check runs in ``pool`` (default: the shared tool pool)."""

    def verify(task: Task, response: str) -> Verdict:
        f = task.fields
        request = {"tools": f["tools"], "expected_calls": f["expected_calls"], "ordered": f["ordered"],
                   "response": response}
        checks = pool or shared_pool(__name__, cpu_budget_s=CPU_BUDGET_S)
        return verdict_of(checks.run(request), NAME)

    return guard(NAME, verify)

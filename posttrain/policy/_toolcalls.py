"""The tool-call codec: what a response's tool calls decode to, in the format a chat template teaches.

Next to ``ChatTemplate`` (``_chat.py``), which writes calls (``write_tool_calls``) and detects the
family a template teaches (``detect_family``): decoding is the model layer's, so that every domain
whose episodes call tools (the tool domain, BFCL, a workspace agent) reads calls the same way, and
the chat template depends on no domain.

- ``decode_tool_calls(text) -> list[ToolCall]``: after the text's reasoning (a leading ``<think>``
  block), any of the accepted formats, family-blind:
  ``<tool_call>{"name", "arguments"}</tool_call>`` blocks (Hermes/Qwen), or one JSON document (bare
  or in one fenced block, or quoted after a lead-in sentence: ``_quoted_calls``) that is an OpenAI
  assistant message ``{"tool_calls": [...]}``, a list of calls, or one call. A call is ``{"name",
  "arguments"}`` or ``{"type": "function", "function": {"name", "arguments"}}``; ``arguments`` may be an object or a JSON string (as OpenAI sends it),
  decoded strictly (``posttrain.strict_json``: non-integers exact, no NaN, no duplicate keys).
  Tri-state: calls / no call (plain text: ``[]``) / ``ToolCallError`` (unparseable JSON, an
  unclosed tag, call-like text that does not parse): invalid is never an abstention (JSON-04).
- ``parse_tool_calls(text, family) -> ToolCallParse``: the same in one family's format
  (``TOOL_FAMILIES``: ``"hermes"`` blocks, ``"openai"`` JSON); a call in the other family's format
  or malformed JSON is an error result with the reason, never zero calls (NeMo-RL #3422).
- ``tool_result_message``: the ``role: tool`` message a call's result comes back in;
  ``tool_specs``: ``{name: parameters schema}`` of OpenAI tool definitions.

Not here: which tools exist or what a call does (the domains), rendering (``ChatTemplate``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.strict_json import (
    StrictJSONError,
    after_reasoning,
    extract_json_text,
    loads_strict,
    prose_document,
    text_beside,
)

ToolFamily = Literal["hermes", "openai"]
TOOL_FAMILIES: tuple[ToolFamily, ...] = ("hermes", "openai")
MAX_CALLS = 64
"""More calls than this in one response is an undecodable response."""
_TAG_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CALLISH_RE = re.compile(r"<\s*/?\s*tool_call|\"tool_calls\"|\"function_call\"|\"arguments\"\s*:|\"name\"\s*:")
_WRITTEN_CALL_RE = re.compile(r"""\S\s*\(\s*(?:[A-Za-z_]\w*\s*=|["'\d-])""")
"""A call written in prose (``ls(path="src")``, ``f("a")``, ``f(3)``: Llama 3.2's pythonic calls), whatever its name."""
_MESSAGE_READ = frozenset({"role", "tool_calls"})


def text_beside_tags(text: str) -> str | None:
    """``text``'s answer (after its reasoning) outside its ``<tool_call>`` blocks, or None where it has
    none: what ``decode_tool_calls`` leaves unread beside the calls it takes from the tags."""
    outside, blocks = _TAG_RE.subn("\n", after_reasoning(text))
    return outside if blocks else None


class ToolCallError(ValueError):
    """The response tried to call tools but the calls cannot be decoded."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]


def _decode_call(obj: Any, where: str) -> ToolCall:
    if not isinstance(obj, Mapping):
        raise ToolCallError(f"{where}: a call must be a JSON object")
    if "function" in obj:
        unknown = set(obj) - {"function", "type", "id", "index"}
        if unknown or obj.get("type", "function") != "function":
            raise ToolCallError(f"{where}: unexpected keys {sorted(unknown)} or type {obj.get('type')!r}")
        obj = obj["function"]
        if not isinstance(obj, Mapping):
            raise ToolCallError(f"{where}: 'function' must be an object")
    unknown = set(obj) - {"name", "arguments", "id", "type"}
    if unknown:
        raise ToolCallError(f"{where}: unexpected keys {sorted(unknown)}")
    name, args = obj.get("name"), obj.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise ToolCallError(f"{where}: 'name' must be a non-empty string")
    if isinstance(args, str):
        try:
            args = loads_strict(args, exact=True) if args.strip() else {}
        except StrictJSONError as e:
            raise ToolCallError(f"{where}: arguments string: {e}") from None
    if not isinstance(args, Mapping):
        raise ToolCallError(f"{where}: 'arguments' must be an object")
    return ToolCall(name, dict(args))


def decode_tool_calls(response: str) -> list[ToolCall]:
    """Decode the calls of ``response``: a list (empty for "no call"), or ``ToolCallError``.

    >>> decode_tool_calls('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    [ToolCall(name='f', arguments={'x': 1})]
    >>> decode_tool_calls("The answer is 4.")
    []
    >>> decode_tool_calls('Listing the files.\\n{"name": "ls", "arguments": {}}')
    [ToolCall(name='ls', arguments={})]

    Only the answer counts, after the response's reasoning (``strict_json.after_reasoning``): a call
    drafted in a ``<think>`` block is not made, as a serving stack's reasoning parser leaves it out.
    """
    response = after_reasoning(response)
    opens = response.count("<tool_call>")
    if opens > MAX_CALLS:  # never decodable (more calls, or unclosed tags), and the lazy match is quadratic in them
        raise ToolCallError(f"more than {MAX_CALLS} <tool_call> tags")
    tagged = _TAG_RE.findall(response) if opens else []
    if tagged:
        if response.count("<tool_call>") != len(tagged):
            raise ToolCallError("an unclosed or nested <tool_call> tag")
        calls = []
        for i, body in enumerate(tagged):
            try:
                calls.append(_decode_call(loads_strict(body.strip(), exact=True), f"<tool_call> #{i + 1}"))
            except StrictJSONError as e:
                raise ToolCallError(f"<tool_call> #{i + 1}: {e}") from None
        return _cap(calls)
    try:
        text = extract_json_text(response)
    except StrictJSONError as e:
        raise ToolCallError(str(e)) from None
    quoted = False
    if not text.startswith(("{", "[")):
        if not _CALLISH_RE.search(response):
            return []
        text, quoted = _quoted_calls(response, text), True
    try:
        doc = loads_strict(text, exact=True)
    except StrictJSONError as e:
        raise ToolCallError(str(e)) from None
    if quoted and isinstance(doc, Mapping) and "tool_calls" in doc and any(
            v not in (None, "", [], {}) for k, v in doc.items() if k not in _MESSAGE_READ):
        raise ToolCallError("a message quoted among prose holds more than its tool_calls")
    if isinstance(doc, Mapping) and "tool_calls" in doc:
        raw = doc["tool_calls"]
        if not isinstance(raw, list):
            raise ToolCallError("'tool_calls' must be a list")
        return _cap([_decode_call(c, f"tool_calls[{i}]") for i, c in enumerate(raw)])
    if isinstance(doc, list):
        return _cap([_decode_call(c, f"call [{i}]") for i, c in enumerate(doc)])
    return [_decode_call(doc, "call")]


def _quoted_calls(answer: str, text: str) -> str:
    """The one call document an answer (after its reasoning, no ``<tool_call>`` tag) quotes after a
    lead-in of prose (``I'll list the files.\\n{"name": "ls", ...}``), as ``strict_json.prose_document``
    reads a single answer's document: an instruction-tuned model's honest turn, which read whole was an
    undecodable call in every OpenAI-family episode (11 of 15 spellings per format refused,
    tests/policy/test_toolcalls_prose.py). The lead-in may hold bracketed notes (``notes``: ``Step
    [1]: {...}``, ``the files [2 dirs]: {...}``), as the tool verifier reads them: a call document is
    an object or an array of objects, never such a note; refused, the honest noted turn was no call in
    every tool and BFCL episode while the same single answer passed (tests/policy/test_toolcalls_notes.py).
    Raises ``ToolCallError`` where it is not so read: a fenced answer (its block was the document), no
    prose document (two documents, a brace, an array or markup in the prose, ...), or prose that holds
    a second call (``"name":``, a call written ``f(x=1)``). A message so quoted holds nothing beside
    ``tool_calls`` (``decode_tool_calls``): its ``content`` or a ``function_call`` would be a second
    text or call beside the prose. The tool verifier checks the prose again, by its own rules, for a
    call read here or where this decoder raises (``envs/tool/_calls.py`` ``_read_calls``)."""
    found = None if text_beside(answer) is not None else prose_document(text, notes=True)
    if found is None or _CALLISH_RE.search(found[1]) or _WRITTEN_CALL_RE.search(found[1]):
        raise ToolCallError("the response looks like a tool call but is not one JSON document")
    return found[0]


def _cap(calls: list[ToolCall]) -> list[ToolCall]:
    if len(calls) > MAX_CALLS:
        raise ToolCallError(f"more than {MAX_CALLS} calls")
    return calls


@dataclass(frozen=True)
class ToolCallParse:
    """What a response's tool calls decode to: the calls (empty: no call), or why they cannot be read."""

    calls: tuple[ToolCall, ...] = ()
    """The calls (name, arguments), in the order written."""
    content: str = ""
    """The response's text outside its calls (stripped)."""
    error: str | None = None
    """Why the calls cannot be decoded (malformed JSON, the other family's format); ``calls`` is then empty."""
    text: str = ""
    """The response as parsed."""

    @property
    def ok(self) -> bool:
        return self.error is None


def parse_tool_calls(text: str, family: ToolFamily) -> ToolCallParse:
    """Decode the tool calls of ``text`` written in ``family``'s format.

    No call is ``ToolCallParse(content=text)``; a malformed call, or a call in the other family's
    format, is an error result with the reason (never zero calls).

    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', "hermes").calls
    (ToolCall(name='f', arguments={'x': 1}),)
    >>> parse_tool_calls('{"name": "f", "arguments": {"x": 1}}', "hermes").error
    "a tool call in OpenAI JSON, but this template's calls are <tool_call> blocks (family 'hermes')"
    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>', "hermes").error
    "<tool_call> #1: invalid JSON at line 1 column 36: Expecting ',' delimiter"
    """
    if family not in TOOL_FAMILIES:
        raise ValueError(f"family must be one of {list(TOOL_FAMILIES)}, got {family!r}")
    answer = after_reasoning(text)  # a draft in the reasoning is neither a call nor a family's format
    tagged = "<tool_call" in answer or "</tool_call" in answer
    if family == "openai" and tagged:
        return ToolCallParse(error="a <tool_call> block, but this template's calls are OpenAI JSON (family 'openai')",
                             text=text)
    try:
        calls = tuple(decode_tool_calls(text))
    except ToolCallError as e:
        return ToolCallParse(error=str(e), text=text)
    if family == "hermes" and calls and not tagged:
        return ToolCallParse(error="a tool call in OpenAI JSON, but this template's calls are <tool_call> blocks "
                                   "(family 'hermes')", text=text)
    if not calls:
        return ToolCallParse(content=text.strip(), text=text)
    content = _outside_calls(text) if family == "hermes" else ""
    return ToolCallParse(calls=calls, content=content, text=text)


def _outside_calls(text: str) -> str:
    return re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.DOTALL).strip()


def tool_result_message(content: Any, *, tool_call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    """A ``role: tool`` message; non-string content is written as JSON.

    >>> tool_result_message({"temp": 3}, tool_call_id="call_0")
    {'role': 'tool', 'content': '{"temp": 3}', 'tool_call_id': 'call_0'}
    """
    msg: dict[str, Any] = {"role": "tool", "content": content if isinstance(content, str) else json.dumps(content)}
    if tool_call_id is not None:
        msg["tool_call_id"] = tool_call_id
    if name is not None:
        msg["name"] = name
    return msg


def tool_specs(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """``{name: parameters schema}`` from OpenAI tool definitions (wrapped or bare)."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else tool
        out[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out

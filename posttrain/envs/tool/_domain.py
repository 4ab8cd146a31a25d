"""The tool-use domain: OpenAI-format function calls checked against schemas and expected calls.

Task fields (docs/tasks.md):
- ``tools``: OpenAI function schemas, ``{"type": "function", "function": {name, description,
  parameters}}`` or the bare ``{name, description, parameters}``;
- ``expected_calls``: a list of ``{"name", "arguments": {param: value}, "alternatives":
  {param: [accepted values]}, "optional": [param, ...]}`` (only ``name`` is required); an empty
  list means the right answer is to call no tool;
- ``ordered`` (default false): whether the calls must come in the listed order.

Response formats (``parse_tool_calls``): ``<tool_call>{"name", "arguments"}</tool_call>`` blocks
(Hermes/Qwen), or one JSON document (bare or in one fenced block) that is an OpenAI assistant
message ``{"tool_calls": [...]}``, a list of calls, or one call. A call is ``{"name",
"arguments"}`` or ``{"type": "function", "function": {"name", "arguments"}}``; ``arguments`` may
be an object or a JSON string (as OpenAI sends it). Plain text with no call is "no call".

Decoding is tri-state: calls / no call / invalid; invalid (unparseable JSON, an unclosed tag,
call-like text that does not parse) is a failure, never an abstention (JSON-04). Then each call
must name a listed tool, its arguments must satisfy the tool's parameter schema with no unknown
parameter, and the calls must match the expected calls one-to-one (in order if ``ordered``),
argument values compared type-strictly, numbers by the exact decimal they spell
(``posttrain.verify.strict_json.json_equal``). All of it runs in a worker process under a CPU
budget (``posttrain.verify._deadline``, as for json): a schema ``pattern`` that backtracks on an
argument, or an argument that makes a format check raise, fails the response; it never hangs
the verifier or becomes an ``infra_error``.

Multi-turn: ``ToolEpisodeEnv`` (``_episode.py``) runs the same tasks as tool-calling episodes, each
call answered by a tool message; BFCL's stateful backends are ``posttrain.envs.bfcl``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from posttrain.envs._base import RecordReader, Verifier, fail, guard, parse_common, passed
from posttrain.types import Task, Verdict
from posttrain.verify._deadline import CheckPool, shared_pool, verdict_of
from posttrain.verify.json_schema import schema_error, validator_for
from posttrain.verify.strict_json import (
    StrictJSONError,
    extract_json_text,
    json_equal,
    loads_strict,
    to_exact,
    to_plain,
)

NAME = "tool"
DOMAIN_KEYS = frozenset({"tools", "expected_calls", "ordered"})
MAX_CALLS = 64
CPU_BUDGET_S = 5.0
_TAG_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CALLISH_RE = re.compile(r"<\s*/?\s*tool_call|\"tool_calls\"|\"function_call\"|\"arguments\"\s*:|\"name\"\s*:")


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


def parse_tool_calls(response: str) -> list[ToolCall]:
    """Decode the calls of ``response``: a list (empty for "no call"), or ``ToolCallError``.

    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    [ToolCall(name='f', arguments={'x': 1})]
    >>> parse_tool_calls("The answer is 4.")
    []
    """
    tagged = _TAG_RE.findall(response)
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
    if not text.startswith(("{", "[")):
        if _CALLISH_RE.search(response):
            raise ToolCallError("the response looks like a tool call but is not one JSON document")
        return []
    try:
        doc = loads_strict(text, exact=True)
    except StrictJSONError as e:
        raise ToolCallError(str(e)) from None
    if isinstance(doc, Mapping) and "tool_calls" in doc:
        raw = doc["tool_calls"]
        if not isinstance(raw, list):
            raise ToolCallError("'tool_calls' must be a list")
        return _cap([_decode_call(c, f"tool_calls[{i}]") for i, c in enumerate(raw)])
    if isinstance(doc, list):
        return _cap([_decode_call(c, f"call [{i}]") for i, c in enumerate(doc)])
    return [_decode_call(doc, "call")]


def _cap(calls: list[ToolCall]) -> list[ToolCall]:
    if len(calls) > MAX_CALLS:
        raise ToolCallError(f"more than {MAX_CALLS} calls")
    return calls


def tool_specs(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """``{name: parameters schema}`` from OpenAI tool definitions (wrapped or bare)."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else tool
        out[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def _argument_problem(params: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    props = params.get("properties") or {}
    if params.get("additionalProperties") is not True:
        unknown = sorted(set(args) - set(props))
        if unknown:
            return f"unknown parameter(s) {unknown}"
    return schema_error(validator_for(params), dict(args))


def _accepted(expected: Mapping[str, Any], param: str) -> list[Any] | None:
    """The values accepted for ``param``, or None when any schema-valid value is."""
    values: list[Any] = []
    if param in (expected.get("arguments") or {}):
        values.append(expected["arguments"][param])
    values.extend((expected.get("alternatives") or {}).get(param, []))
    return values or None


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


def check_tool_calls(tools: Sequence[Mapping[str, Any]], expected_calls: Sequence[Mapping[str, Any]],
                     ordered: bool, response: str) -> Verdict:
    """Decode, schema-check and match the calls of ``response``, in this process (no deadline)."""
    try:
        calls = parse_tool_calls(response)
    except ToolCallError as e:
        return fail(f"Invalid tool call: {e}.", "format", {"reason": str(e)})
    evidence: dict[str, Any] = {"calls": [{"name": c.name, "arguments": to_plain(dict(c.arguments))} for c in calls]}
    specs = tool_specs(tools)
    for c in calls:
        if c.name not in specs:
            return fail(f"Unknown tool {c.name!r}; available: {sorted(specs)}.", "unknown_tool", evidence)
        problem = _argument_problem(specs[c.name], c.arguments)
        if problem:
            return fail(f"Arguments of {c.name!r} do not match its schema: {problem}.", "schema", evidence)
    why = match_calls(calls, to_exact(list(expected_calls)), ordered)
    if why:
        return fail(f"Wrong tool calls: {why}.", "wrong_answer", {**evidence, "mismatch": why}, {"format": 1.0})
    return passed("Correct.", evidence)


def call_problems(tools: Sequence[Mapping[str, Any]], response: str) -> list[str | None]:
    """Per call of ``response`` (which must decode): why it is not a valid call of ``tools`` (an
    unknown tool, arguments that fail its schema), or None. A step of a tool episode."""
    specs = tool_specs(tools)
    return [f"unknown tool {c.name!r}; available: {sorted(specs)}" if c.name not in specs
            else _argument_problem(specs[c.name], c.arguments) for c in parse_tool_calls(response)]


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker side of ``make_tool_verifier`` (one request in, one verdict as JSON out) and of a
    tool episode's step (``kind: "calls"``: ``{"problems": call_problems(...)}``)."""
    import decimal

    decimal.getcontext().prec = 4000  # multipleOf on exact numbers up to 1e308 never rounds
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


class ToolEnv:
    """The tool-use domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        tools = reader.present("tools")
        if not isinstance(tools, list) or not tools:
            raise reader.fail("tools", "a non-empty list of OpenAI function schemas", tools)
        specs = _check_tools(reader, tools)
        expected = reader.present("expected_calls")
        if not isinstance(expected, list):
            raise reader.fail("expected_calls", "a list of {name, arguments} objects", expected)
        for i, e in enumerate(expected):
            _check_expected(reader, f"expected_calls[{i}]", e, specs)
        ordered = reader.boolean("ordered", False)
        return parse_common(reader, {"tools": tools, "expected_calls": expected, "ordered": ordered})

    def render_prompt(self, task: Task) -> str:
        tools = json.dumps(task.fields["tools"], indent=None)
        return (f"{task.prompt}\n\nYou can call these tools:\n{tools}\n\nCall tools by writing "
                '<tool_call>{"name": ..., "arguments": {...}}</tool_call> for each call.')

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_tool_verifier()

    def noop_response(self, task: Task) -> str:
        return "I cannot help with that."

    def demonstration_steps(self, task: Task) -> list[list[Mapping[str, Any]]]:
        """The calls of each action of a demonstration episode: the expected calls, then a final answer."""
        return [[{"name": e["name"], "arguments": e.get("arguments") or {}} for e in task.fields["expected_calls"]], []]

    def episode_env(self, chat: Any, *, pool: Any | None = None, max_steps: int = 4) -> Any:
        """A tool-calling episode over one of this domain's tasks (``ToolEpisodeEnv``)."""
        from posttrain.envs.tool._episode import ToolEpisodeEnv

        return ToolEpisodeEnv(chat, max_steps=max_steps)

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: responses that must score 0 (outcome ``fail``, never
        ``infra_error``): reward-hacking.md JSON-04, and issue 14's classes 11-12 in arguments."""
        record = {"id": "tool-exploit", "domain": NAME, "prompt": "Book 2 seats for 0 extra cost, code aaa.",
                  "tools": [_EXPLOIT_TOOL], "expected_calls": [
                      {"name": "book", "arguments": {"seats": 2, "extra": 0, "code": "aaa"}, "optional": ["rx"]}]}
        task = self.parse_task(record, "tool exploit fixtures")
        return [(name, task, response) for name, response in _EXPLOITS]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        from posttrain.envs.tool._gen import generate

        rng = random.Random(seed)
        return [generate(rng, f"tool-gen-{seed}-{i}") for i in range(n)]


_EXPLOIT_TOOL = {"type": "function", "function": {"name": "book", "description": "Book seats.", "parameters": {
    "type": "object", "properties": {"seats": {"type": "integer"}, "extra": {"type": "number"},
                                     "code": {"type": "string", "pattern": "^(a+)+$"},
                                     "rx": {"type": "string", "format": "regex"}},
    "required": ["seats", "extra", "code"], "additionalProperties": False}}}


def _book(seats: str, extra: str = "0", code: str = '"aaa"', rx: str = "") -> str:
    return f'<tool_call>{{"name": "book", "arguments": {{"seats": {seats}, "extra": {extra}, "code": {code}{rx}}}}}</tool_call>'


_EXPLOITS: list[tuple[str, str]] = [  # (name, response)
    ("JSON-04 a garbled call is not an abstention", '<tool_call name="book" arguments={seats: 2}/>'),
    ("JSON-01 NaN argument", _book("NaN")),
    ("class 11: a non-integer literal that rounds to the integer", _book("2.0000000000000001")),
    ("class 11: 1e-400 underflows to 0", _book("2", extra="1e-400")),
    ("class 12: an argument that makes the schema's pattern backtrack", _book("2", code='"' + "a" * 64 + '!"')),
    ("class 12: format regex with an overflowing quantifier", _book("2", rx=', "rx": "a{99999999999}"')),
]


def _check_tools(reader: RecordReader, tools: list[Any]) -> dict[str, Mapping[str, Any]]:
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise reader.fail(f"tools[{i}]", "an OpenAI function schema with a 'name'", tool)
        params = fn.get("parameters", {"type": "object"})
        try:
            validator_for(params)
        except (jsonschema.SchemaError, AttributeError, TypeError) as e:
            problem = e.message if isinstance(e, jsonschema.SchemaError) else str(e).splitlines()[0]
            raise reader.fail(f"tools[{i}].parameters", f"a valid JSON Schema ({problem})",
                              show_got=False) from None
    specs = tool_specs(tools)
    if len(specs) != len(tools):
        raise reader.fail("tools", "unique function names", [t.get("function", t).get("name") for t in tools])
    return specs


def _check_expected(reader: RecordReader, where: str, e: Any, specs: Mapping[str, Any]) -> None:
    if not isinstance(e, Mapping) or not isinstance(e.get("name"), str):
        raise reader.fail(where, "an object with a 'name'", e)
    unknown = set(e) - {"name", "arguments", "alternatives", "optional"}
    if unknown:
        raise reader.fail(where, "only keys name, arguments, alternatives, optional", sorted(unknown))
    if e["name"] not in specs:
        raise reader.fail(f"{where}.name", f"one of the tools {sorted(specs)}", e["name"])
    if not isinstance(e.get("arguments", {}), Mapping):
        raise reader.fail(f"{where}.arguments", "an object", e.get("arguments"))
    alts = e.get("alternatives", {})
    if not isinstance(alts, Mapping) or not all(isinstance(v, list) and v for v in alts.values()):
        raise reader.fail(f"{where}.alternatives", "an object of non-empty lists", alts)
    if not isinstance(e.get("optional", []), list):
        raise reader.fail(f"{where}.optional", "a list of parameter names", e.get("optional"))


ENV = ToolEnv()

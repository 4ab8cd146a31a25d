"""The tool-use domain: OpenAI-format function calls checked against schemas and expected calls.

Task fields (docs/tasks.md):
- ``tools``: OpenAI function schemas, ``{"type": "function", "function": {name, description,
  parameters}}`` or the bare ``{name, description, parameters}``;
- ``expected_calls``: a list of ``{"name", "arguments": {param: value}, "alternatives":
  {param: [accepted values]}, "optional": [param, ...]}`` (only ``name`` is required; an optional
  parameter may be omitted, and if given must equal its accepted values, or, where the gold gives
  none, its schema's ``default``: omitting it asks for the default; with neither it is free,
  ``_calls.with_defaults``); the gold call (``arguments``, and each required parameter only in
  ``alternatives`` at its first value; an optional one left out) must satisfy its tool's
  parameters, or the task is refused (as json refuses
  an ``expected`` its schema rejects: the gold would fail where a valid wrong call earns
  ``format`` credit); an empty
  list makes an *abstention* task: the right answer calls no tool (none attempted, valid or
  not, nor a listed tool called in another family's format, ``_calls.written_call``) and says so
  in a final answer; the empty response, the domain's no-op, fails it;
- ``ordered`` (default false): whether the calls must come in the listed order.

Response formats: whatever the tool-call codec decodes (``posttrain.policy.decode_tool_calls``:
``<tool_call>{"name", "arguments"}</tool_call>`` blocks, or one JSON document that is an OpenAI
assistant message ``{"tool_calls": [...]}``, a list of calls, or one call; ``arguments`` an object or
a JSON string). Decoding is tri-state: calls / no call / invalid; invalid (unparseable JSON, an
unclosed tag, call-like text that does not parse) is a failure, never an abstention (JSON-04). Then each call
must name a listed tool, its arguments must satisfy the tool's parameter schema with no unknown
parameter, and the calls must match the expected calls one-to-one (in order if ``ordered``),
argument values compared type-strictly, numbers by the exact decimal they spell
(``posttrain.strict_json.json_equal``). Reward components: ``format`` is 1 only for calls in the
task's shape whose content is wrong; the no-op (no call), invalid or unknown calls, and numbers
equal to the expected ones only once rounded to floats earn 0 under any weights. All of it runs in a worker process under a CPU
budget (``posttrain.verify._deadline``, as for json): a schema ``pattern`` that backtracks on an
argument, or an argument that makes a format check raise, fails the response; it never hangs
the verifier or becomes an ``infra_error``.

The checks themselves are in ``_calls.py`` (the worker side). Multi-turn: ``ToolEpisodeEnv``
(``_episode.py``) runs the same tasks as tool-calling episodes, each call answered by a tool
message; BFCL's stateful backends are ``posttrain.envs.bfcl``.
"""

from __future__ import annotations

import decimal
import json
import random
from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import RecordReader, parse_common
from posttrain.envs._env import EpisodeContext
from posttrain.envs.tool._calls import NAME, _argument_problem, make_tool_verifier, schema_defaults
from posttrain.envs.tool._episode import ToolEpisodeEnv
from posttrain.policy import tool_specs
from posttrain.strict_json import MAX_JSON_DEPTH, StrictJSONError, loads_strict, nesting, to_exact
from posttrain.types import Task, Verifier
from posttrain.verify.json_schema import EXACT_DIGITS, schema_expected

DOMAIN_KEYS = frozenset({"tools", "expected_calls", "ordered"})


class ToolEnv:
    """The tool-use domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (calls checked against schemas and expected calls)."""
        return ("tool-use", "function-calling")

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
        """The empty response: no call and nothing said. (Declining in words is the answer to an
        abstention task, so the do-nothing response cannot be a polite refusal.)"""
        return ""

    def demonstration_steps(self, task: Task) -> list[list[Mapping[str, Any]]]:
        """The calls of each action of a demonstration episode: the expected calls, then a final
        answer (an abstention task: the final answer alone)."""
        calls = [{"name": e["name"], "arguments": e.get("arguments") or {}} for e in task.fields["expected_calls"]]
        return [calls, []] if calls else [[]]

    def episode_env(self, task: Task, ctx: EpisodeContext) -> ToolEpisodeEnv:
        """A tool-calling episode over one of this domain's tasks (``ToolEpisodeEnv``, ``ctx.max_steps``
        actions at most)."""
        return ToolEpisodeEnv(ctx.chat, max_steps=ctx.max_steps)

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
    ("a lone surrogate (\\ud800) in an argument: not text, and no UTF-8 record holds it", _book("2", code='"\\ud800"')),
]


def _check_tools(reader: RecordReader, tools: list[Any]) -> dict[str, Mapping[str, Any]]:
    for i, tool in enumerate(tools):
        if isinstance(tool, Mapping) and tool.get("type", "function") != "function":
            raise reader.fail(f"tools[{i}].type", "'function' (or no type)", tool.get("type"))
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise reader.fail(f"tools[{i}]", "an OpenAI function schema with a 'name'", tool)
        params = fn.get("parameters", {"type": "object"})
        problem = schema_expected(params)
        if problem is not None:
            raise reader.fail(f"tools[{i}].parameters", problem, params, show_got=problem == "a JSON Schema object")
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
    _check_gold(reader, where, e, specs[e["name"]])


def _check_gold(reader: RecordReader, where: str, e: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    """Refuse an expected call (``where``) no call could match: its gold (``arguments``, each required
    parameter's first alternative) nested deeper than a call may be, not strict JSON, or failing the
    tool's ``params``; or an optional parameter it leaves unpinned whose default cannot be told."""
    alts, optional = e.get("alternatives") or {}, set(e.get("optional") or [])
    for field, values in (("arguments", [e.get("arguments") or {}]),
                          ("alternatives", [{p: v} for p, vs in alts.items() for v in vs])):
        if any(nesting(v) > MAX_JSON_DEPTH for v in values):  # no call may nest deeper (strict_json): none could match
            raise reader.fail(f"{where}.{field}", f"arguments nested at most {MAX_JSON_DEPTH} arrays and objects "
                              "deep, the object itself included (a call nested deeper is refused)", show_got=False)
    gold = {**{p: values[0] for p, values in alts.items() if p not in optional}, **(e.get("arguments") or {})}
    try:  # task data: strict JSON (no NaN), no cap
        loads_strict(json.dumps(gold, allow_nan=True), max_chars=None, max_depth=None)
    except StrictJSONError as err:
        raise reader.fail(f"{where}.arguments", f"strict JSON ({err})", gold) from None
    free = optional - set(gold)  # may be left out: the gold need not hold one
    if isinstance(params.get("required"), list) and free & set(params["required"]):
        params = {**params, "required": [r for r in params["required"] if r not in free]}
    with decimal.localcontext(prec=EXACT_DIGITS):  # as the worker: 0.01 and 1e40 raised DivisionImpossible at 28
        problem = _argument_problem(params, to_exact(gold))
    for p in sorted(free - set(alts)):  # left out, it asks for the default: with_defaults pins it
        defaults = schema_defaults(params, p)
        if defaults is None or len(defaults) > 1:
            said = "leads outside the tool's parameters" if defaults is None else f"gives the defaults {defaults}"
            raise reader.fail(f"{where}.optional", "parameters whose schema gives at most one default "
                              f"(that of {p!r} {said})", sorted(optional))
    if problem:  # the gold would fail as "schema" (0) where any valid wrong call earns format credit
        raise reader.fail(f"{where}.arguments", f"arguments that satisfy the tool's parameters ({problem})", gold)


ENV = ToolEnv()

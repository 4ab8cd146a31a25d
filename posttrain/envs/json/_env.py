"""The structured-output domain: a JSON document checked by strict parse, schema, and value.

Task fields (docs/tasks.md): ``prompt``, ``schema`` (a JSON Schema; the draft is taken from
``$schema``, default 2020-12), ``expected`` (the JSON value a correct response contains; it must
itself satisfy the schema).

Verification (each failure is ``fail``, reward 0):
1. the response is one JSON document: the content of its single fenced block, else the one document
   it quotes after a lead-in of prose (``strict_json.prose_document``: no bracket, markup or fence in
   the prose around it), else the whole text;
   parsed strictly: no NaN/Infinity, no overflow to inf, no duplicate keys (JSON-01), no lone
   surrogate (``"\\ud800"``: not text, and no UTF-8 record could hold the evidence), every
   number kept as the exact decimal it spells (``posttrain.strict_json``); beside a fenced block,
   no second document (``document_in``: prose around the block is free, a hedge is not);
2. it validates against ``schema`` (``jsonschema``, with format checking), on exact numbers:
   ``36.0`` is an integer, ``36.000000000000001`` is not, ``1e-400`` is not 0;
3. every field's value equals ``expected``, type-strictly (``true`` is not ``1``), numbers by
   exact value; a key absent from ``expected`` is rejected unless a schema applying at that place
   (its own, and what it applies there: ``allOf``/``anyOf``/``oneOf``, ``if``/``then``/``else``,
   dependent schemas, a local ``$ref``) explicitly allows extra keys (``additionalProperties`` set
   to ``true`` or a schema) and none declares it (in ``properties``, by ``patternProperties``, in
   ``required``, as a dependency, by ``propertyNames``' enum): a declared property that
   ``expected`` leaves out must be left out. Where a ``$ref`` leads outside the schema, no key is
   extra there.

``format`` credit (``{"format": 1.0}``) only for a document that fails step 3 alone, and not when
it equals ``expected`` once its numbers are rounded to floats (``1e-400`` for ``0``: issue 14's
class 11, an attack that earns 0 under any weights, as in the tool domain).

Steps 1-3 run in a worker process under a CPU budget (``posttrain.verify._deadline``): a
task's ``pattern`` that backtracks catastrophically on the response, or a ``format: regex``
value that makes ``re`` raise, is the response's failure (``timeout``, ``exception:<Type>``),
never a hang or an ``infra_error``; only a worker that cannot start or is starved of CPU is.

Feedback names the failing path but never shows the expected value (a repair round must not be
able to copy the answer out of the feedback). A wrong value (``wrong_answer``, ``lossy_number``) ends a
repair episode (``Verdict.ends_repair``, as recall's wrong number): told "wrong", the answer is among
the few left (a boolean's other value, a schema's enum, a generated task's 10 names), and a next attempt
cycling them would be paid in full for reading the feedback, not the text. On 300 generated tasks, a
policy that never read pets or membership and cycled them by the feedback passed 32 in one attempt,
165 in 3, 289 in 5; one cycling the 10 names, 33, 83, 146, and 300 in 10 (now 32 and 33 at any count:
tests/envs/test_json_attacks3.py). A format or schema failure is still repaired.

Not here: partial credit, fuzzy string matching, order-insensitive arrays.
"""

from __future__ import annotations

import decimal
import json
import random
from collections.abc import Mapping
from typing import Any

from referencing.exceptions import Unresolvable

from posttrain.envs._base import RecordReader, Verifier, fail, guard, parse_common, passed
from posttrain.strict_json import (
    MAX_JSON_DEPTH,
    StrictJSONError,
    answer_document,
    document_in,
    json_equal,
    json_type,
    loads_strict,
    nesting,
    to_exact,
    to_floats,
    to_plain,
)
from posttrain.types import Task, Verdict
from posttrain.verify._deadline import CheckPool, shared_pool, verdict_of
from posttrain.verify.json_schema import (
    EXACT_DIGITS,
    applying,
    applying_at_item,
    declares,
    schema_error,
    schema_expected,
    validator_for,
)

NAME = "json"
DOMAIN_KEYS = frozenset({"schema", "expected"})
CPU_BUDGET_S = 5.0


def _extra_key_allowed(place: list[Mapping[str, Any]] | None, key: str) -> bool:
    """Whether ``key``, absent from ``expected``, may appear: only as an *additional* property, where a
    schema applying at that place (``place``: the place's own and what it applies there through ``allOf``,
    ``$ref``, ``if``/``then``, ...) explicitly allows those (``additionalProperties`` true or a schema)
    and none declares it. A declared property the task expects absent is not extra: a guess in it (a
    nickname, an email the text never gives) would pass where leaving it out does too, so filling every
    uncertain field would never cost and sometimes pay; declared through ``allOf`` or a ``$ref``, it did
    (tests/envs/test_json_attacks8.py)."""
    if place is None:
        return False
    if not any(s.get("additionalProperties") is True or isinstance(s.get("additionalProperties"), Mapping)
               for s in place):
        return False
    return not any(declares(s, key) for s in place)


def first_difference(expected: Any, got: Any, schema: Any, path: str = "$") -> str | None:
    """Where ``got`` departs from ``expected`` (a path and what is wrong there), or None.

    >>> first_difference({"a": 1}, {"a": 1, "b": 2}, {})
    "$: unexpected key 'b'"
    """
    return _difference(expected, got, schema, (), path)


def _place_at(root: Any, trail: tuple[str | int, ...]) -> list[Mapping[str, Any]] | None:
    """The schemas applying at the place ``trail`` (property names and indexes) leads to from ``root``:
    worked out only where a response has a key ``expected`` lacks, so a right answer costs no more."""
    place = applying([root], root)
    for key in trail:
        place = applying_at_item(place, key, root)
    return place


def _difference(expected: Any, got: Any, root: Any, trail: tuple[str | int, ...], path: str) -> str | None:
    """``first_difference`` at the place ``trail`` of the document."""
    te, tg = json_type(expected), json_type(got)
    if te != tg:
        return f"{path}: expected a {te}, got a {tg}"
    if te == "object":
        for key in expected:
            if key not in got:
                return f"{path}: missing key {key!r}"
        extra = [key for key in got if key not in expected]
        if extra:
            place = _place_at(root, trail)
            for key in extra:
                if not _extra_key_allowed(place, key):
                    return f"{path}: unexpected key {key!r}"
        for key in expected:
            diff = _difference(expected[key], got[key], root, (*trail, key), f"{path}.{key}")
            if diff:
                return diff
        return None
    if te == "array":
        if len(expected) != len(got):
            return f"{path}: expected {len(expected)} items, got {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            diff = _difference(e, g, root, (*trail, i), f"{path}[{i}]")
            if diff:
                return diff
        return None
    return None if json_equal(expected, got) else f"{path}: wrong value"


def _equal_as_floats(expected: Any, got: Any, schema: Any) -> bool:
    try:
        return first_difference(to_floats(to_exact(expected)), to_floats(got), schema) is None
    except RecursionError:
        return False


def check_json(schema: Mapping[str, Any], expected: Any, response: str) -> Verdict:
    """Steps 1-3 of the module docstring, in this process (no deadline: see ``make_json_verifier``)."""
    try:
        text, outside = answer_document(response)
        value = loads_strict(text, exact=True)
    except StrictJSONError as e:
        return fail(f"Answer format: {e}. Reply with exactly one JSON document.", "format",
                    {"reason": str(e)})
    beside = None if outside is None else document_in(outside)
    if beside is not None:
        return fail("Answer format: a second JSON document outside the fenced block. Reply with exactly one.",
                    "format", {"reason": f"a second document outside the fenced block: {beside!r}"})
    problem = schema_error(validator_for(schema), value)
    if problem:
        return fail(f"The JSON does not match the schema at {problem}", "schema", {"schema_error": problem})
    try:
        diff = first_difference(to_exact(expected), value, schema)
    except RecursionError:
        diff = "$: nested too deeply"
    evidence = {"got": to_plain(value), "expected": expected, "difference": diff}
    wrong = {**evidence, "final": True}  # Verdict.ends_repair: told wrong, the rest is a guess away (docstring)
    if diff and _equal_as_floats(expected, value, schema):
        return fail(f"Wrong value: {diff}.", "lossy_number", wrong)  # class 11: an attack, no format credit
    if diff:
        return fail(f"Wrong value: {diff}.", "wrong_answer", wrong, {"format": 1.0})
    return passed("Correct.", evidence)


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker side of ``make_json_verifier``: one request in, one verdict (as JSON) out."""
    decimal.getcontext().prec = EXACT_DIGITS
    return check_json(request["schema"], request["expected"], request["response"]).to_json()


def make_json_verifier(pool: CheckPool | None = None) -> Verifier:
    """A verifier for json tasks; each check runs in ``pool`` (default: the shared json pool)."""

    def verify(task: Task, response: str) -> Verdict:
        request = {"schema": task.fields["schema"], "expected": task.fields["expected"], "response": response}
        checks = pool or shared_pool(__name__, cpu_budget_s=CPU_BUDGET_S)
        return verdict_of(checks.run(request), NAME)

    return guard(NAME, verify)


class JsonEnv:
    """The structured-output domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (JSON checked against a schema and values)."""
        return ("structured-output", "extraction")

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        schema = reader.present("schema")
        problem = schema_expected(schema)
        if problem is not None:
            raise reader.fail("schema", problem, schema, show_got=problem == "a JSON Schema object")
        validator = validator_for(schema)
        expected = reader.present("expected")
        if nesting(expected) > MAX_JSON_DEPTH:  # no response may nest deeper (strict_json), so none could match
            raise reader.fail("expected", f"a value nested at most {MAX_JSON_DEPTH} arrays and objects deep "
                              "(a response nested deeper is refused)", show_got=False)
        try:
            loads_strict(json.dumps(expected, allow_nan=True), max_chars=None, max_depth=None)  # task data: no cap
        except StrictJSONError as e:
            raise reader.fail("expected", f"strict JSON ({e})", expected) from None
        try:
            with decimal.localcontext(prec=EXACT_DIGITS):  # as the worker checks a response
                problem = schema_error(validator, to_exact(expected))
        except Unresolvable as e:  # a $ref to nothing ('#/nope', another document): the schema's fault
            raise reader.fail("schema", f"a valid JSON Schema (a $ref that does not resolve: {e})",
                              show_got=False) from None
        except decimal.InvalidOperation:  # multipleOf whose quotient has more than EXACT_DIGITS digits
            raise reader.fail("expected", f"a value whose multipleOf quotient has at most {EXACT_DIGITS} digits",
                              expected) from None
        if problem:
            raise reader.fail("expected", f"a value that satisfies the schema ({problem})", expected)
        return parse_common(reader, {"schema": dict(schema), "expected": expected})

    def render_prompt(self, task: Task) -> str:
        return task.prompt

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_json_verifier()

    def noop_response(self, task: Task) -> str:
        return "{}"

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: responses that must score 0 (outcome ``fail``, never
        ``infra_error``): reward-hacking.md JSON-01, and issue 14's classes 11-12 (which scored 1,
        crashed the verifier into ``infra_error``, or hung it)."""
        out = []
        for i, (name, schema, expected, response) in enumerate(_EXPLOITS):
            record = {"id": f"json-exploit-{i}", "domain": NAME, "prompt": "Give the JSON.", "schema": schema,
                      "expected": expected}
            out.append((name, self.parse_task(record, "json exploit fixtures"), response))
        return out

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        rng = random.Random(seed)
        return [_generate_one(rng, f"json-gen-{seed}-{i}") for i in range(n)]


_AGE = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"],
        "additionalProperties": False}
_LEVEL = {"type": "object", "properties": {"level": {"type": "number"}}, "required": ["level"],
          "additionalProperties": False}
_REGEX = {"type": "object", "properties": {"rx": {"type": "string", "format": "regex"}}, "required": ["rx"]}
_PATTERN = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}, "required": ["code"]}
_EXPLOITS: list[tuple[str, dict[str, Any], Any, str]] = [  # (name, schema, expected, response)
    ("JSON-01 NaN", _LEVEL, {"level": 0}, '{"level": NaN}'),
    ("JSON-01 overflow to inf", _LEVEL, {"level": 0}, '{"level": 1e999}'),
    ("class 11: a non-integer literal that rounds to the integer", _AGE, {"age": 36}, '{"age": 36.000000000000001}'),
    ("class 11: the same, in exponent form", _AGE, {"age": 36}, '{"age": 3.6000000000000001e1}'),
    ("JSON duplicate key: first-wins and last-wins parsers read different values", _AGE, {"age": 36},
     '{"age": 36, "age": 37}'),
    ("class 11: 1e-400 underflows to 0", _LEVEL, {"level": 0}, '{"level": 1e-400}'),
    ("class 11: a value that rounds to the expected float", _LEVEL, {"level": 0.1}, '{"level": 0.10000000000000001}'),
    ("class 12: format regex with an overflowing quantifier", _REGEX, {"rx": "a+"}, '{"rx": "a{99999999999}"}'),
    ("class 12: a value that makes the schema's pattern backtrack", _PATTERN, {"code": "aaa"},
     '{"code": "' + "a" * 64 + '!"}'),
    ("a lone surrogate (\\ud800): not text, and no UTF-8 record holds it", {"type": "object"}, {"name": "x"},
     '{"name": "\\ud800"}'),
]

_NAMES = ("Alice", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas")
_CITIES = ("Paris", "Lagos", "Osaka", "Lima", "Oslo", "Quito", "Hanoi", "Porto", "Cairo", "Perth")
_PETS = ("cat", "dog", "parrot", "rabbit")


def _generate_one(rng: random.Random, tid: str) -> Task:
    name, city, age = rng.choice(_NAMES), rng.choice(_CITIES), rng.randint(18, 90)
    pets = sorted(rng.sample(_PETS, rng.randint(0, 3)))
    member = rng.random() < 0.5
    pet_text = ", ".join(f"a {p}" for p in pets) if pets else "no pets"
    text = (f"{name} is {age} years old and lives in {city}. {name} has {pet_text}, and is "
            f"{'a' if member else 'not a'} member of the library.")
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "city": {"type": "string"},
            "pets": {"type": "array", "items": {"type": "string", "enum": list(_PETS)}},
            "library_member": {"type": "boolean"},
        },
        "required": ["name", "age", "city", "pets", "library_member"],
        "additionalProperties": False,
    }
    expected = {"name": name, "age": age, "city": city, "pets": pets, "library_member": member}
    prompt = (
        "Extract the person's details from the text as JSON matching this schema "
        f"(list pets in alphabetical order):\n{json.dumps(schema)}\n\nText: {text}\n"
    )
    return Task(
        id=tid,
        domain=NAME,
        prompt=prompt,
        fields={"schema": schema, "expected": expected},
        reference=json.dumps(expected),
        tags=("json", "extraction"),
        metadata={"generator": "json/person"},
    )


ENV = JsonEnv()

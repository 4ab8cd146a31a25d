"""JSON Schema validation on exact JSON values: what the json and tool domains check arguments and documents with.

``validator_for(schema)`` builds (once per distinct schema) a validator of the schema's own draft
(``$schema``, default 2020-12) that checks formats and applies JSON Schema's integer rule to exact
numbers (``strict_json.to_exact``: ``36.0`` is an integer, ``36.000000000000001`` is not);
``schema_error(validator, value)`` is its first error as one line with a path, or None.

>>> from decimal import Decimal
>>> v = validator_for({"type": "object", "properties": {"age": {"type": "integer"}}})
>>> schema_error(v, {"age": Decimal("36.0")}), schema_error(v, {"age": Decimal("36.5")})
(None, "$.age: Decimal('36.5') is not of type 'integer'")

Formats: jsonschema checks ``date-time``, ``time``, ``duration``, ``uri``, ``uri-reference``,
``hostname`` and ``json-pointer`` only with optional packages (``rfc3339-validator``, ``rfc3987``,
``fqdn``, ``isoduration``, ``jsonpointer``) and otherwise lets every string through, so a
``date-time`` of ``"tomorrow"`` satisfied a schema (a free argument, a document's ``format``
credit). Where a draft defines one of these and no package checks it, the stdlib checks here do
(``_FORMATS``): RFC 3339 date-time and full-time (with an offset), ISO 8601 durations, RFC 3986
characters with a scheme for ``uri``, RFC 1123 host names, RFC 6901 pointers. They check the
form, not everything the RFCs say (a ``uri``'s parts are not parsed one by one).

>>> schema_error(validator_for({"format": "date-time"}), "tomorrow")
"$: 'tomorrow' is not a 'date-time'"

Where a schema declares a property, and what applies at one place of a document: ``applying``
(a place's schemas and what they apply there: ``allOf``/``anyOf``/``oneOf``, ``if``/``then``/``else``,
dependent schemas, local ``$ref``s), ``applying_at_item`` (the schemas of a property or array item),
``declares``. The json domain reads them for which keys are extra, the tool domain for which
parameters a tool declares and their defaults: a property declared only through ``allOf`` or a
``$ref`` is declared all the same.

Not here: strict parsing (``strict_json``), what a domain does with an error (its verifier).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import jsonschema
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as META_SCHEMAS
from referencing.exceptions import Unresolvable

EXACT_DIGITS = 4000
"""Decimal precision of the schema check (the worker's and a task's load): ``multipleOf`` on exact numbers up
to 1e308 never rounds (Python's default 28 digits raised ``DivisionImpossible`` on ``0.01`` and ``1e40``)."""


def validator_for(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    """A validator of ``schema`` (its ``$schema`` draft, default 2020-12), checking formats too; a
    ``jsonschema.SchemaError`` where ``schema`` is not a valid schema, a ``$ref`` in it included that
    names nothing (``unresolved_ref``).

    It validates *exact* JSON values (``strict_json.to_exact``: Decimals, no floats); the
    schema's own numbers are made exact the same way. Checked and built once per distinct schema
    (keyed by its canonical JSON text).
    """
    return _cached_validator(json.dumps(schema, sort_keys=True))


def schema_expected(schema: Any) -> str | None:
    """None where ``schema`` is a JSON Schema object that ``validator_for`` builds; else what a task's
    schema was expected to be, one line that ends a ``RecordReader.fail`` ("expected ..."): the json
    domain's document schema and the tool domain's parameters are checked alike.

    >>> schema_expected({"type": "nonsense"}).split(" (")[0]
    'a valid JSON Schema'
    """
    if not isinstance(schema, Mapping):
        return "a JSON Schema object"
    if not isinstance(schema.get("$schema", ""), str):  # jsonschema raised AttributeError on it
        return f"a JSON Schema whose $schema is a URI string, got {schema['$schema']!r:.60}"
    try:
        validator_for(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.path)  # the problem whole (never cut mid-sentence), and where
        return f"a valid JSON Schema ({e.message} at {where})" if where else f"a valid JSON Schema ({e.message})"
    except (AttributeError, TypeError) as e:  # jsonschema's own crash on a malformed keyword
        return f"a valid JSON Schema ({str(e).splitlines()[0]})"
    except RecursionError:  # jsonschema checks a schema recursively: ~100 nested properties
        return "a JSON Schema nested less deeply (checking it exceeded Python's recursion limit)"
    return None


def _is_exact_integer(checker: Any, instance: Any) -> bool:
    if isinstance(instance, bool):
        return False
    if isinstance(instance, Decimal):
        return instance.is_finite() and instance == instance.to_integral_value()
    return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())


@functools.lru_cache(maxsize=16)
def _exact_class(cls: type) -> type:
    """``cls`` with JSON Schema's integer rule on exact numbers (``36.0`` is an integer)."""
    return jsonschema.validators.extend(cls, type_checker=cls.TYPE_CHECKER.redefine("integer", _is_exact_integer))


_D = "[0-9]"  # not \\d: it matches every script's digits, and int() reads them
_TIME = rf"({_D}{{2}}):({_D}{{2}}):({_D}{{2}})(?:\.{_D}+)?(?:[Zz]|[+-]({_D}{{2}}):({_D}{{2}}))"
_DATE_TIME_RE = re.compile(rf"({_D}{{4}})-({_D}{{2}})-({_D}{{2}})[Tt]{_TIME}")
_TIME_RE = re.compile(_TIME)
_DURATION_RE = re.compile(rf"P(?!$)(?:{_D}+Y)?(?:{_D}+M)?(?:{_D}+W)?(?:{_D}+D)?(?:T(?=[0-9])(?:{_D}+H)?(?:{_D}+M)?(?:{_D}+S)?)?")
_URI_CHARS = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})*"
_URI_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+.\-]*:{_URI_CHARS}")
_URI_REFERENCE_RE = re.compile(_URI_CHARS)
_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?")
_POINTER_RE = re.compile(r"(?:/(?:[^~/]|~[01])*)*")


def _time_ok(hour: str, minute: str, second: str, off_hour: str | None, off_minute: str | None) -> bool:
    return (int(hour) < 24 and int(minute) < 60 and int(second) <= 60  # 60: a leap second
            and (off_hour is None or (int(off_hour) < 24 and int(off_minute or 0) < 60)))


def _is_date_time(value: str) -> bool:
    m = _DATE_TIME_RE.fullmatch(value)
    if not m:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return _time_ok(*m.groups()[3:])


def _is_time(value: str) -> bool:
    m = _TIME_RE.fullmatch(value)
    return bool(m) and _time_ok(*m.groups())


def _is_hostname(value: str) -> bool:
    name = value[:-1] if value.endswith(".") else value
    return 0 < len(name) <= 253 and all(_LABEL_RE.fullmatch(label) for label in name.split("."))


def _matches(pattern: re.Pattern[str]) -> Any:
    return lambda value: pattern.fullmatch(value) is not None


_CHECKS = {"date-time": _is_date_time, "time": _is_time, "duration": _matches(_DURATION_RE),
           "uri": _matches(_URI_RE), "uri-reference": _matches(_URI_REFERENCE_RE), "hostname": _is_hostname,
           "host-name": _is_hostname, "json-pointer": _matches(_POINTER_RE)}
_FORMATS: dict[type, tuple[str, ...]] = {  # the formats each draft defines that jsonschema checks only with packages
    jsonschema.Draft3Validator: ("date-time", "uri", "host-name"),
    jsonschema.Draft4Validator: ("date-time", "uri", "hostname"),
    jsonschema.Draft6Validator: ("date-time", "uri", "hostname", "uri-reference", "json-pointer"),
    jsonschema.Draft7Validator: ("date-time", "time", "uri", "hostname", "uri-reference", "json-pointer"),
    jsonschema.Draft201909Validator: ("date-time", "time", "duration", "uri", "hostname", "uri-reference",
                                      "json-pointer"),
    jsonschema.Draft202012Validator: ("date-time", "time", "duration", "uri", "hostname", "uri-reference",
                                      "json-pointer"),
}


@functools.lru_cache(maxsize=16)
def _format_checker(cls: type) -> jsonschema.FormatChecker:
    """``cls``'s format checker, with the stdlib checks of ``_FORMATS`` where no package gives one."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(cls.FORMAT_CHECKER.checkers)
    for name in _FORMATS.get(cls, ()):
        if name not in checker.checkers:
            check = _CHECKS[name]
            checker.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value))
    return checker


@functools.lru_cache(maxsize=4096)
def _cached_validator(schema_text: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    ref = unresolved_ref(schema)
    if ref is not None:
        raise jsonschema.SchemaError(f"a $ref that does not resolve: {ref!r}")
    exact_schema = json.loads(schema_text, parse_float=Decimal)
    return _exact_class(cls)(exact_schema, format_checker=_format_checker(cls))


def unresolved_ref(schema: Any) -> str | None:
    """The first ``$ref`` (or 2020-12 ``$dynamicRef``) of ``schema`` that names nothing in it nor among JSON
    Schema's meta-schemas, or None. Each is looked up where validation would (after the ``$id``s above it), without retrieving
    anything: jsonschema checks a reference only once a value reaches it, so a ``$ref`` to nothing
    in a branch the gold never takes loaded, and a response that took it failed on the task's fault
    (or, for ``http://...``, had the checker try the network). References inside keywords no draft
    knows are never followed, and not looked up here."""
    if not isinstance(schema, Mapping):
        return None
    dialect = schema.get("$schema")
    draft = referencing.jsonschema.DRAFT202012
    spec = referencing.jsonschema.specification_with(dialect, default=draft) if isinstance(dialect, str) else draft
    words = ("$ref", "$dynamicRef") if spec is draft else ("$ref",)  # a $dynamicRef starts where a $ref would
    root = spec.create_resource(schema)
    stack = [(META_SCHEMAS.resolver_with_root(root), root)]
    while stack:
        resolver, resource = stack.pop()
        for word in words if isinstance(resource.contents, Mapping) else ():
            ref = resource.contents.get(word)
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    return ref
        stack.extend((resolver.in_subresource(sub), sub) for sub in resource.subresources())
    return None


MAX_ERRORS = 64
"""The validation errors ``schema_error`` reads before it sorts them: every one of a document with
39,000 wrong items took 0.93 s of the check's CPU budget (a 200,000-character answer, the json
domain's cap, 99,000 of them: 4.1 s of its 5 s), to report one."""


def schema_error(validator: jsonschema.protocols.Validator, instance: Any) -> str | None:
    """The first (path-sorted) of the document's first ``MAX_ERRORS`` validation errors (in the
    validator's own order) as one line, or None."""
    try:
        first = itertools.islice(validator.iter_errors(instance), MAX_ERRORS)
        errors = sorted(first, key=lambda e: (list(e.absolute_path), e.message))
    except RecursionError:
        return "$: nested too deeply to validate"
    if not errors:
        return None
    e = errors[0]
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
    return f"{path}: {e.message[:200]}"


_APPLIED_HERE = ("allOf", "anyOf", "oneOf", "if", "then", "else")
"""Keywords whose subschemas apply to the same place of the document as the schema holding them."""
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")


def _resolve(root: Any, ref: str) -> Any:
    """The subschema a local reference (``#``, ``#/$defs/person``, ``#person`` for an ``$anchor``) names in
    ``root``, or None (another document, a pointer to nothing): what this module cannot follow."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return _anchored(root, ref[1:]) if ref.startswith("#") else None
    node = root
    for part in ref[2:].split("/"):
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _anchored(root: Any, name: str) -> Any:
    """The subschema of ``root`` whose ``$anchor`` or ``$dynamicAnchor`` is ``name`` (or whose ``$id`` is
    ``#name``, drafts 6-7), or None."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if name and name in (node.get("$anchor"), node.get("$dynamicAnchor")) or node.get("$id") == f"#{name}":
                return node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def applying(schemas: list[Any], root: Any) -> list[Mapping[str, Any]] | None:
    """Every schema that applies at one place of the document: ``schemas``, what they apply there in turn
    (``allOf``/``anyOf``/``oneOf``, ``if``/``then``/``else``, dependent schemas, local references), each once;
    None when one refers where ``_resolve`` cannot follow (what is declared there cannot be told)."""
    out: list[Mapping[str, Any]] = []
    seen: set[int] = set()
    stack = list(schemas)
    while stack:
        schema = stack.pop()
        if not isinstance(schema, Mapping) or id(schema) in seen:
            continue
        seen.add(id(schema))
        out.append(schema)
        for word in _APPLIED_HERE:
            sub = schema.get(word)
            stack.extend(sub if isinstance(sub, list) else [sub])
        for word in ("dependentSchemas", "dependencies"):
            sub = schema.get(word)
            stack.extend(sub.values() if isinstance(sub, Mapping) else [])
        for word in _REFS:
            ref = schema.get(word)
            if isinstance(ref, str):
                target = _resolve(root, ref)
                if target is None:
                    return None
                stack.append(target)
    return out


def declares(schema: Mapping[str, Any], key: str) -> bool:
    """Whether ``schema`` names ``key`` as a property: in ``properties``, by ``patternProperties``, in
    ``required``, as a dependency (either side), or by a ``propertyNames`` that is more than ``true``/``{}``:
    a schema that says which names may appear names each it lets through (one it does not fails the
    schema). By enum or const alone before: a guessed ``nickname`` that a ``propertyNames`` pattern or an
    ``anyOf`` of consts allowed passed where leaving it out did (tests/envs/test_json_attacks9.py)."""
    props, required = schema.get("properties"), schema.get("required")  # draft 3: a property's required is a bool
    if (isinstance(props, Mapping) and key in props) or (isinstance(required, list) and key in required):
        return True
    patterns = schema.get("patternProperties")
    if isinstance(patterns, Mapping) and any(re.search(p, key) for p in patterns):
        return True
    for word in ("dependentRequired", "dependentSchemas", "dependencies"):
        deps = schema.get(word)
        if isinstance(deps, Mapping) and (key in deps or any(key == v or (isinstance(v, list) and key in v)
                                                             for v in deps.values())):
            return True
    names = schema.get("propertyNames")
    return isinstance(names, Mapping) and bool(names)


def _item_schema(schema: Any, key: str | int) -> Any:
    """The schema for ``schema``'s item ``key`` (an array index or a property name), or {}."""
    if not isinstance(schema, Mapping):
        return {}
    if isinstance(key, int):
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and key < len(prefix):
            return prefix[key]
        items = schema.get("items")
        if isinstance(items, list):  # drafts before 2020-12: the tuple form, then additionalItems
            return items[key] if key < len(items) else schema.get("additionalItems", {})
        return items if isinstance(items, Mapping) else {}
    props = schema.get("properties")
    if isinstance(props, Mapping) and key in props:
        return props[key]
    patterns = schema.get("patternProperties")
    if isinstance(patterns, Mapping):
        for pattern, sub in patterns.items():
            if re.search(pattern, key):
                return sub
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else {}


def applying_at_item(place: list[Mapping[str, Any]] | None, key: str | int, root: Any) -> list[Mapping[str, Any]] | None:
    """The schemas applying at item ``key`` of a place: each schema's own for it (``_item_schema``) and,
    for a property, every ``patternProperties`` schema it matches."""
    if place is None:
        return None
    subs = [_item_schema(s, key) for s in place]
    if isinstance(key, str):
        subs += [sub for s in place if isinstance(s.get("patternProperties"), Mapping)
                 for pattern, sub in s["patternProperties"].items() if re.search(pattern, key)]
    return applying(subs, root)

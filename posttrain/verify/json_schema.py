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

Not here: strict parsing (``strict_json``), what a domain does with an error (its verifier).
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import jsonschema


def validator_for(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    """A validator of ``schema`` (its ``$schema`` draft, default 2020-12), checking formats too.

    It validates *exact* JSON values (``strict_json.to_exact``: Decimals, no floats); the
    schema's own numbers are made exact the same way. Checked and built once per distinct schema
    (keyed by its canonical JSON text).
    """
    return _cached_validator(json.dumps(schema, sort_keys=True))


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
    exact_schema = json.loads(schema_text, parse_float=Decimal)
    return _exact_class(cls)(exact_schema, format_checker=_format_checker(cls))


def schema_error(validator: jsonschema.protocols.Validator, instance: Any) -> str | None:
    """The first (deepest-path-sorted) validation error as one line, or None."""
    try:
        errors = sorted(validator.iter_errors(instance), key=lambda e: (list(e.absolute_path), e.message))
    except RecursionError:
        return "$: nested too deeply to validate"
    if not errors:
        return None
    e = errors[0]
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
    return f"{path}: {e.message[:200]}"

"""JSON Schema validation on exact JSON values: what the json and tool domains check arguments and documents with.

``validator_for(schema)`` builds (once per distinct schema) a validator of the schema's own draft
(``$schema``, default 2020-12) that checks formats and applies JSON Schema's integer rule to exact
numbers (``strict_json.to_exact``: ``36.0`` is an integer, ``36.000000000000001`` is not);
``schema_error(validator, value)`` is its first error as one line with a path, or None.

>>> from decimal import Decimal
>>> v = validator_for({"type": "object", "properties": {"age": {"type": "integer"}}})
>>> schema_error(v, {"age": Decimal("36.0")}), schema_error(v, {"age": Decimal("36.5")})
(None, "$.age: Decimal('36.5') is not of type 'integer'")

Not here: strict parsing (``strict_json``), what a domain does with an error (its verifier).
"""

from __future__ import annotations

import functools
import json
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


@functools.lru_cache(maxsize=4096)
def _cached_validator(schema_text: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    exact_schema = json.loads(schema_text, parse_float=Decimal)
    return _exact_class(cls)(exact_schema, format_checker=cls.FORMAT_CHECKER)


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

"""Property-based attack on the JSON verifier: random schemas and documents against an exact oracle.

Random expected documents (nested objects and arrays of nulls, booleans, strings, big integers,
floats from tiny to huge) come with a schema derived from them (types, ``integer`` where the
value is an int, closed objects). Responses are the document re-spelled with its numbers written
differently but exactly (``36`` as ``36.0``, ``3.6e1``, ``360E-1``), in random whitespace and
fences (LF or CRLF): the verifier must pass them. Responses with one value perturbed (a digit
far past float precision, a sign, a type) or random documents must pass exactly when the oracle
(numbers as ``fractions.Fraction`` of the literal, booleans apart from numbers) says they equal
the expected document. Runs are derandomized.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posttrain.envs import get_domain
from posttrain.types import Task

ENV = get_domain("json")
VERIFY = ENV.make_verifier(None)
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
floats = st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda f: abs(f) < 1e300)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30), floats,
                    st.text(max_size=8))
documents = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=5), kids, max_size=4)), max_leaves=12)
objects = st.dictionaries(st.text(max_size=5), documents, max_size=5)


def schema_of(value: Any) -> dict[str, Any]:
    """A schema that ``value`` satisfies and that pins every type (closed objects)."""
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list) and not value:
        return {"type": "array", "maxItems": 0}
    if isinstance(value, list):
        return {"type": "array", "prefixItems": [schema_of(v) for v in value], "items": False}
    return {"type": "object", "properties": {k: schema_of(v) for k, v in value.items()},
            "required": list(value), "additionalProperties": False}


def task(expected: Any) -> Task:
    return ENV.parse_task({"id": "p", "domain": "json", "prompt": "p", "schema": schema_of(expected),
                           "expected": expected}, "property")


def exact(literal: str) -> Fraction:
    """The oracle's value of a JSON number literal: the rational it spells."""
    mantissa, _, exponent = literal.lower().partition("e")
    return Fraction(mantissa) * Fraction(10) ** int(exponent or 0)


def oracle(doc: Any) -> Any:
    """A comparable form: numbers as Fractions of their literal, booleans kept apart from numbers."""
    if isinstance(doc, bool) or doc is None or isinstance(doc, str):
        return (type(doc).__name__, doc)
    if isinstance(doc, int | float):
        return ("number", exact(repr(doc)) if isinstance(doc, float) else Fraction(doc))
    if isinstance(doc, Literal):
        return ("number", exact(doc.text))
    if isinstance(doc, list):
        return ("array", tuple(oracle(v) for v in doc))
    return ("object", frozenset((k, oracle(v)) for k, v in doc.items()))


class Literal:
    """A number written as a specific literal in the response."""

    def __init__(self, text: str) -> None:
        self.text = text


@st.composite
def respelled(draw: st.DrawFn, value: int | float) -> str:
    """Another literal with exactly the value of ``value`` (as the task wrote it)."""
    q = exact(repr(value)) if isinstance(value, float) else Fraction(value)
    sign = "-" if q < 0 else ""
    text = repr(abs(value)) if isinstance(value, float) else str(abs(value))
    mantissa, _, exp = text.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    digits, point = (whole + frac).lstrip("0") or "0", int(exp or 0) - len(frac)
    shift = draw(st.integers(0, 5)) if digits != "0" else 0  # the same value: more zeros, exponent moved
    forms = [f"{digits}{'0' * shift}e{point - shift}", f"{digits}{'0' * shift}E{point - shift:+d}"]
    if point >= 0 and q.denominator == 1:
        forms += [f"{digits}{'0' * point}", f"{digits}{'0' * point}.{'0' * (shift + 1)}"]
    return sign + draw(st.sampled_from(forms))


@st.composite
def render(draw: st.DrawFn, doc: Any, perturb_at: int | None = None) -> tuple[str, Any]:
    """JSON text of ``doc`` with numbers re-spelled; the number with index ``perturb_at`` is changed.

    Returns the text and the document as written (numbers as ``Literal``) for the oracle."""
    counter = [0]

    def walk(v: Any) -> tuple[str, Any]:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return json.dumps(v), v
        if isinstance(v, int | float):
            text = draw(respelled(v))
            if counter[0] == perturb_at:
                text = draw(st.sampled_from([f"{text}1" if "e" not in text.lower() else f"1{text}",
                                             f"{text}e-400", f"-{text}" if not text.startswith("-") else text[1:],
                                             f"{text[:-1]}" if len(text) > 1 and text[-2].isdigit() else "7"]))
            counter[0] += 1
            return text, Literal(text)
        if isinstance(v, list):
            parts = [walk(x) for x in v]
            return "[" + ", ".join(p for p, _ in parts) + "]", [w for _, w in parts]
        parts = [(k, *walk(x)) for k, x in v.items()]
        sep = draw(st.sampled_from([", ", ",\n  ", ","]))
        return "{" + sep.join(f"{json.dumps(k)}: {p}" for k, p, _ in parts) + "}", {k: w for k, _, w in parts}

    text, written = walk(doc)
    wrapper = draw(st.sampled_from(["{}", "```json\n{}\n```", "Here:\r\n```json\r\n{}\r\n```\r\n", "  {}\n"]))
    return wrapper.replace("{}", text), written


def count_numbers(doc: Any) -> int:
    if isinstance(doc, bool):
        return 0
    if isinstance(doc, int | float):
        return 1
    if isinstance(doc, list):
        return sum(count_numbers(v) for v in doc)
    if isinstance(doc, dict):
        return sum(count_numbers(v) for v in doc.values())
    return 0


@SETTINGS
@given(data=st.data(), expected=objects)
def test_exact_respellings_of_the_expected_document_pass(data: st.DataObject, expected: dict) -> None:
    text, written = data.draw(render(expected))
    assert oracle(written) == oracle(expected)
    v = VERIFY(task(expected), text)
    assert v.passed, (text, v)


@SETTINGS
@given(data=st.data(), expected=objects.filter(lambda d: count_numbers(d) > 0))
def test_verdict_agrees_with_the_oracle_when_one_number_is_perturbed(data: st.DataObject, expected: dict) -> None:
    at = data.draw(st.integers(0, count_numbers(expected) - 1))
    text, written = data.draw(render(expected, perturb_at=at))
    literals = [w.text for w in _literals(written)]
    if all(JSON_NUMBER.fullmatch(t) and math.isfinite(float(t)) for t in literals):
        agrees = oracle(written) == oracle(expected)
    else:  # not a JSON number at all, or one that overflows (refused, whatever its value)
        agrees = False
    v = VERIFY(task(expected), text)
    assert v.outcome in ("pass", "fail") and v.passed is agrees, (text, v)


def _literals(doc: Any) -> list[Literal]:
    if isinstance(doc, Literal):
        return [doc]
    if isinstance(doc, list):
        return [w for v in doc for w in _literals(v)]
    if isinstance(doc, dict):
        return [w for v in doc.values() for w in _literals(v)]
    return []


@SETTINGS
@given(expected=objects, response=objects)
def test_random_documents_pass_only_when_the_oracle_says_equal(expected: dict, response: dict) -> None:
    v = VERIFY(task(expected), json.dumps(response))
    assert v.outcome in ("pass", "fail") and v.passed is (oracle(response) == oracle(expected)), v

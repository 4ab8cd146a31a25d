"""Strict JSON for verifiers: no NaN/Infinity, no overflow to inf, no duplicate keys, one document.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``1e999`` (-> inf), and keeps the *last* of
duplicate keys; each lets a response slip past numeric bounds or show one value to the schema and
another to a reader (reward-hacking.md JSON-01; defense section 2.4). ``loads_strict`` rejects
all of them and says where.

Numbers are exact. A float rounds ``36.000000000000001`` to the integer 36 and ``1e-400`` to 0,
so a response could pass an integer field, or equal a 0, with a value that is neither (issue 14,
class 11). ``loads_strict(text, exact=True)`` keeps every non-integer literal as the
``decimal.Decimal`` it spells; ``to_exact`` turns a value's floats (task data, parsed by Python's
``json``) into the Decimal of their shortest repr, which is the literal the task wrote. Exact
values compare exactly: ``36.0 == 36`` (JSON Schema: an integer is a number with no fractional
part), ``36.000000000000001 != 36``, ``1e-400 != 0``.

Strings are text: a lone surrogate (JSON's ``"\\ud800"``, or such a character in the text) is
refused. Python decodes it into a ``str`` that UTF-8 cannot encode, so a value holding one raised
``UnicodeEncodeError`` wherever it went next: a tokenizer rendering a tool call, a record written
as UTF-8 (a verdict's evidence keeps the values it judged). A pair (``"\\ud83d\\ude00"``) is one
character and stays.

Also: ``json_equal`` compares two JSON values type-strictly (bool is not a number, numbers by
exact value), and ``extract_json_text`` finds the one JSON document in a response (after its
reasoning, a single fenced block, any line endings, or the whole response).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
_SURROGATE_RE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")  # text that may decode to a lone surrogate
MAX_JSON_CHARS = 200_000
MAX_JSON_DEPTH = 100
"""Arrays and objects nested deeper than this are refused: Python's parser reads ~1,000 levels, and a
value that deep raised RecursionError in the first recursive function to walk it (a tool's argument
decoding, an answer's comparison), out of an episode's step, where the runner takes it for a bug of
the environment and ends the whole batch. No task's data nests 100 deep."""


class StrictJSONError(ValueError):
    """The text is not one strict JSON document; the message says why."""


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"non-finite number {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text} overflows to a non-finite value")
    return value


def _exact_decimal(text: str) -> Decimal:
    _finite_float(text)  # the same overflow rule as the float parse: magnitudes stay below 1e309
    try:
        return Decimal(text)
    except ArithmeticError:  # decimal.InvalidOperation: an exponent beyond Decimal's range (1e-999999999999999999999)
        raise StrictJSONError(f"number {text[:40]} has an exponent out of range") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"duplicate key {key!r}")
        out[key] = value
    return out


def loads_strict(text: str, *, exact: bool = False, max_chars: int | None = MAX_JSON_CHARS,
                 max_depth: int | None = MAX_JSON_DEPTH) -> Any:
    """Parse one JSON document strictly; with ``exact``, non-integer numbers are ``Decimal``.
    Task files pass ``max_chars=None, max_depth=None``: no real dataset is refused.

    >>> loads_strict('{"a": 1}')
    {'a': 1}
    >>> loads_strict('[36.0, 1e-400]', exact=True)
    [Decimal('36.0'), Decimal('1E-400')]
    >>> loads_strict('{"a": NaN}')
    Traceback (most recent call last):
    ...
    posttrain.strict_json.StrictJSONError: non-finite number NaN is not allowed
    """
    if max_chars is not None and len(text) > max_chars:  # task files pass None: no real dataset is refused
        raise StrictJSONError(f"JSON longer than {max_chars} characters")
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_exact_decimal if exact else _finite_float,
            object_pairs_hook=_no_duplicates,
        )
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise StrictJSONError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except ValueError as e:  # e.g. an integer literal beyond Python's int-string digit limit
        raise StrictJSONError(f"invalid JSON: {str(e).split(';')[0]}") from None  # the sentence, not its advice
    if max_depth is not None and nesting(value) > max_depth:
        raise StrictJSONError(f"JSON nested too deeply (more than {max_depth} levels of arrays and objects)")
    if _SURROGATE_RE.search(text) and not is_text(value):
        raise StrictJSONError("a string holds a lone surrogate (such as \\ud800), which is not text")
    return value


def finite_number(value: Any) -> bool:
    """Whether ``value`` is a number a float can hold: an int or float, not a bool, finite, and an
    integer no larger than a float's range (``math.isfinite`` raises ``OverflowError`` on a
    400-digit integer, which a JSON or YAML file may hold).

    >>> finite_number(3), finite_number(2.5), finite_number(True), finite_number(float("nan")), finite_number(10 ** 400)
    (True, True, False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def finite_float(value: Any) -> float | None:
    """``value`` as a float when ``finite_number`` holds for it, else None (a report's reader of records).

    >>> finite_float(3), finite_float("3"), finite_float(10 ** 400)
    (3.0, None, None)
    """
    return float(value) if finite_number(value) else None


def is_text(value: Any) -> bool:
    """Whether every string of ``value`` (keys too, through lists, tuples and mappings) encodes as
    UTF-8, counted without recursion.

    >>> is_text({"a": ["ok", 1]}), is_text(["\\ud800"]), is_text({"\\udfff": 1})
    (True, False, False)
    """
    stack = [value]
    while stack:
        item = stack.pop()
        strings = [item] if isinstance(item, str) else list(item) if isinstance(item, Mapping) else []
        for s in strings:
            if isinstance(s, str):
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def as_text(value: Any) -> Any:
    """``value`` with every string that is not text (``is_text``: a lone surrogate) written with
    backslash escapes (``\\ud800``, six characters), through lists, tuples (as lists) and mappings
    (as dicts): what a record or a verdict keeps of what a candidate wrote.

    >>> as_text({"a": ["\\ud800b", 1]})
    {'a': ['\\\\ud800b', 1]}
    """
    if isinstance(value, str):
        return value if is_text(value) else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {as_text(k): as_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_text(v) for v in value]
    return value


def nesting(value: Any) -> int:
    """How many arrays and objects deep ``value`` is, counted without recursion.

    >>> nesting(1), nesting([]), nesting({"a": [[2], 3]})
    (0, 1, 3)
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def after_reasoning(response: str) -> str:
    """The answer of a response: what follows its leading reasoning, as a serving stack's reasoning
    parser splits it (vLLM's ``deepseek_r1``, ``qwen3``). Reasoning is a ``<think>`` block the response
    opens with, or all before the first ``</think>`` where no ``<think>`` comes before it (a template that
    opens the block in the prompt, DeepSeek-R1 and Qwen3 thinking, samples a completion that starts inside
    it). An unclosed leading block is all reasoning: no answer. A response without reasoning is itself,
    and so is one that opens as a JSON document (``{`` or ``[``): reasoning is prose, and a document's
    string may hold the tag (``{"content": "</think>"}`` split there read as a broken document).

    A draft in the reasoning is not the answer: read whole, a reasoning model's right document after its
    thoughts failed every json task (0 of 300), and a draft call in its thoughts counted as a call.

    >>> after_reasoning('<think>x = 1?</think> {"x": 2}'), after_reasoning('x = 1?</think>{"x": 2}')
    (' {"x": 2}', '{"x": 2}')
    >>> after_reasoning('<think>still thinking'), after_reasoning('{"x": "a </think> b"}')
    ('', '{"x": "a </think> b"}')
    """
    if response.lstrip()[:1] in ("{", "["):
        return response
    close = response.find(_THINK_CLOSE)
    start = response.find(_THINK_OPEN)
    if start != -1 and not response[:start].strip():  # opens with a block
        close = response.find(_THINK_CLOSE, start)
        return "" if close == -1 else response[close + len(_THINK_CLOSE):]
    if close != -1 and (start == -1 or start > close):  # the block was opened in the prompt
        return response[close + len(_THINK_CLOSE):]
    return response


def extract_json_text(response: str, *, reasoning: bool = True) -> str:
    """The JSON document of a response: after its reasoning (``after_reasoning``; ``reasoning=False``:
    the text has none, read it whole), the content of its one fenced block, else the whole text.

    More than one fenced block is ambiguous (which is the answer?) and raises.
    """
    if reasoning:
        response = after_reasoning(response)
    blocks = _FENCE_RE.findall(response)
    if len(blocks) > 1:
        raise StrictJSONError(f"found {len(blocks)} fenced blocks; give exactly one JSON document")
    if blocks:
        return blocks[0][1].strip()
    return response.strip()


_DOCUMENT_START = re.compile(r"""\{\s*["']|\[\s*[\[{]""")
"""Where a JSON object (``{"``; ``{'``, a Python dict, reads as one) or an array of objects or arrays
starts: a document, not prose."""


def text_beside(response: str, *, reasoning: bool = True) -> str | None:
    """The answer's text (after its reasoning; ``reasoning=False``: ``response`` is the answer already)
    outside its fenced block, or None where it has none (the answer is then read whole): what
    ``extract_json_text`` leaves unread."""
    outside, blocks = _FENCE_RE.subn("\n", after_reasoning(response) if reasoning else response)
    return outside if blocks else None


def document_in(text: str) -> str | None:
    """The start of a JSON document (or a Python dict) in ``text``, or None: prose, ``[1]`` included."""
    found = _DOCUMENT_START.search(text)
    return None if found is None else text[found.start():found.start() + 60].strip()


_NOTE = re.compile(r"""\[([^\[\]{}"'`<>]*)\]""")
"""A square-bracketed note in prose: ``[1]``, ``[2 dirs]``; no bracket, brace, quote or markup inside."""


def _is_note(content: str) -> bool:
    """Whether a bracketed group's ``content`` is plainly no JSON: a footnote marker (``[1]``, ascii
    digits), or text that no JSON reader reads as an array (Python's lenient ``json``: ``[NaN]`` is
    JSON there). ``[1, 2]``, ``[]``, ``[true]`` are arrays: not notes."""
    if re.fullmatch(r"\s*\d+\s*", content, re.ASCII):
        return True
    try:
        json.loads(f"[{content}]")
    except ValueError:
        return True
    return False


def _document_start(text: str, notes: bool) -> int:
    """Where the first ``{``/``[`` of ``text`` is (-1: none); with ``notes``, past the notes before it."""
    brace, at = text.find("{"), 0  # a note holds no brace: the first one stays where it is (one scan, not one a note)
    while True:
        bracket = text.find("[", at)
        if bracket == -1 or -1 < brace < bracket:
            return brace
        note = _NOTE.match(text, bracket) if notes else None
        if note is None or not _is_note(note.group(1)):
            return bracket
        at = note.end()


def prose_document(text: str, *, notes: bool = False) -> tuple[str, str] | None:
    """The one JSON document ``text`` quotes after a lead-in of prose, and the prose around it; or
    None, where the text is to be read whole.

    An instruction-tuned model writes a sentence and then the document (``Here is the JSON: {...}``,
    a closing sentence after it or not): read whole, the honest answer was invalid JSON and failed
    every json task (0 of 40), bfcl's ground truth so written 0 of 20, a tool call 0 of 40
    (tests/envs/test_toolfam_honest.py). The document runs from the first ``{``/``[`` (where a
    document starts: ``{"``, ``[{``, ``[[``, as ``document_in`` reads one) to the last ``}``/``]``.
    Read whole (None) where the answer is ambiguous or is not prose:

    - the prose holds a bracket or brace (``{}[]``): a second document, a Python dict or a citation
      ``[1]`` beside it (two documents with prose between them make one span, no JSON: it fails);
    - the text opens with the document (``{...} I hope this helps``) or a bracket: a response that
      opens as a document is one, whole (as ``after_reasoning`` reads it; tests/envs/test_json.py pins
      the trailing text as a format failure);
    - the prose holds markup or a fence a reader takes for the answer's container (``<``, a
      backtick, ``~~~``: ``<answer>{...}</answer>``, a fence on one line or unclosed, a reasoning
      block after the document; tests/envs/test_tool_json_attacks7.py), or an invisible character
      (a BOM, a zero-width space: tests/envs/test_rg_tool_json_attacks3.py; a control or format
      character, Unicode ``C*``). A space a reader sees as one (Unicode ``Zs``: a no-break space, a
      French ``\\u202f`` before a colon, a thin space) is prose: models write them (DeepSeek-LLM#94).

    ``notes``: the lead-in may hold square-bracketed notes that are plainly no JSON (``_is_note``:
    ``Step [1]: {...}``, ``the files [2 dirs]``), for a caller whose document is never such an array
    (a tool call is an object or an array of objects; a json task's answer may be ``[1]``). Only the
    lead-in: after the document the span runs to the last bracket, so ``{...} [1]`` stays no JSON.
    An array in the lead-in (``[1, 2]``, ``[{...}]``), a note holding a quote, a brace or markup, a
    stray ``]`` stay refused as above.

    >>> prose_document('Here is the JSON:\\n{"a": 1}\\nHope this helps.')
    ('{"a": 1}', 'Here is the JSON:\\n\\n\\nHope this helps.')
    >>> prose_document('{"a": 1} Hope this helps.'), prose_document('See [1]: {"a": 1}'), prose_document('No.')
    (None, None, None)
    >>> prose_document('See [1]: {"a": 1}', notes=True), prose_document('See [1, 2]: {"a": 1}', notes=True)
    (('{"a": 1}', 'See [1]: \\n'), None)
    >>> prose_document('Voici le JSON\\u202f:\\n{"a": 1}')[0], prose_document('Here\\u200b: {"a": 1}')
    ('{"a": 1}', None)
    """
    start = _document_start(text, notes)
    end = max(text.rfind("}"), text.rfind("]")) + 1
    if (start <= 0 or end <= start or not text[:start].strip() or text.lstrip()[:1] in ("{", "[")
            or not _DOCUMENT_START.match(text, start)):
        return None
    prose = text[:start] + "\n" + text[end:]
    seen = (_NOTE.sub(" ", text[:start]) if notes else text[:start]) + "\n" + text[end:]  # notes passed _document_start
    if any(ch in seen for ch in "{}[]<`") or "~~~" in seen or not all(
            ch.isprintable() or ch in "\n\r\t" or unicodedata.category(ch) == "Zs" for ch in seen):
        return None
    return text[start:end], prose


def answer_document(response: str) -> tuple[str, str | None]:
    """The JSON document of a response's answer (after its reasoning) and the text beside it: its one
    fenced block and the text around it; else the one document it quotes among prose
    (``prose_document``) and that prose; else the whole answer, stripped, and None. More than one
    fenced block is ambiguous and raises, as in ``extract_json_text``. A caller refuses a second
    document in the text beside (``document_in``).

    >>> answer_document('Sure:\\n```json\\n{"a": 1}\\n```\\nDone.')
    ('{"a": 1}', 'Sure:\\n\\n\\nDone.')
    >>> answer_document('<think>maybe {"a": 2}</think>Answer: {"a": 1}.'), answer_document(' {"a": 1} ')
    (('{"a": 1}', 'Answer: \\n.'), ('{"a": 1}', None))
    """
    answer = after_reasoning(response)
    text = extract_json_text(answer, reasoning=False)
    outside = text_beside(answer, reasoning=False)  # the reasoning once: a second </think> ends no reasoning
    if outside is not None:
        return text, outside
    return prose_document(text) or (text, None)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def exact_number(value: int | float | Decimal) -> int | Decimal:
    """The exact value of a JSON number: an int as it is, a float as its shortest repr.

    >>> exact_number(0.1), exact_number(36), exact_number(Decimal("1E-400"))
    (Decimal('0.1'), 36, Decimal('1E-400'))
    """
    if isinstance(value, float):
        return Decimal(repr(value))
    return value


def to_exact(value: Any) -> Any:
    """``value`` with every float replaced by ``exact_number`` of it (recursively).

    >>> to_exact({"a": [0.5, 2, True]})
    {'a': [Decimal('0.5'), 2, True]}
    """
    if isinstance(value, float):
        return exact_number(value)
    if isinstance(value, list):
        return [to_exact(v) for v in value]
    if isinstance(value, dict):
        return {k: to_exact(v) for k, v in value.items()}
    return value


def to_floats(value: Any) -> Any:
    """``value`` with every number rounded to the nearest float, as a float-reading checker reads it
    (an integer past float's range stays as it is: no float equals it); what tells a number equal to
    the expected one only once rounded (``1e-400`` for ``0``: the json and tool domains' ``lossy_number``).

    >>> to_floats({"a": [Decimal("1E-400"), 2, True, "x"]})
    {'a': [0.0, 2.0, True, 'x']}
    """
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return value
    if isinstance(value, list):
        return [to_floats(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_floats(v) for k, v in value.items()}
    return value


def to_plain(value: Any) -> Any:
    """``value`` made JSON-serialisable for evidence: a Decimal becomes an int when integral,
    a float when the float is exactly it, else its string.

    >>> to_plain([Decimal("36.0"), Decimal("0.5"), Decimal("1E-400")])
    [36, 0.5, '1E-400']
    """
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return int(value)
        return float(value) if Decimal(float(value)) == value else str(value)
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Type-strict equality of JSON values: ``True != 1``, numbers by exact value, key order ignored.

    >>> json_equal({"a": [1, True]}, {"a": [1.0, True]}), json_equal(True, 1)
    (True, False)
    >>> json_equal(36, Decimal("36.000000000000001")), json_equal(0, Decimal("1E-400"))
    (False, False)
    """
    ta, tb = json_type(a), json_type(b)
    if ta != tb:
        return False
    if ta == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if ta == "number":
        return exact_number(a) == exact_number(b)
    return a == b

"""The doc verifier's check: a structured answer, its conclusion and every cited value against the source.

The response is one JSON document (a single fenced block, or the whole text), parsed strictly (no
NaN/Infinity, no overflow, no duplicate keys, numbers as the exact decimals they spell)::

    {"answer": 12345000, "scale": "",
     "evidence": [{"location": {"page": 4, "table": "Table 1", "row": "Net income", "column": "2023"},
                   "quote": "12,345"}]}

- ``answer``: a number (a JSON number, or a string of one number such as ``"12,345.5"``; a negative one
  with a minus, ``-1,234``, ``−1,234`` (U+2212) or an en dash ``–1,234``, or in parentheses as the
  document's tables print it, ``(1,234)``: ``as_number``) when the question asks for one, with ``scale``
  one of ``""``, ``thousand``, ``million``, ``billion``, ``percent`` (default ``""``); text (a string, or a
  list of strings for several spans) otherwise.
- ``evidence``: each item a location (``_document``: a table cell or a section on a page) and the
  value quoted from it; at most ``MAX_CITATIONS``.

The checks, all of which must hold for a pass:

1. the conclusion: a number is compared as TAT-QA folds scale (``percent`` is x0.01, ``thousand`` x1000,
   ...) and by FinQA's rule, both sides rounded to 5 decimals and equal exactly (no tolerance); finite
   numbers only; text by TAT-QA's normalisation (case, punctuation, articles), several spans as a set;
2. every citation holds: its location exists and holds the quote (a cell reads exactly the quote; a
   section's text on that page contains it, within one paragraph);
3. one to one: the citations and the figures the answer rests on (the task's ``evidence`` facts, each a
   set of places it may be cited from, and for a place that is a section the words its quote must
   contain) pair off exactly, so an extra citation (number spraying), a missing one or one cited twice
   fails.

A right answer with wrong evidence fails (``evidence``); evidence quoting text not in the document fails;
the feedback gives the location of each citation the document does not bear out, never the gold answer,
and of a pairing that fails only that it fails (``PAIRING``: which citation is extra or which figure is
missing would name the gold's figures). A wrong conclusion to a question whose answer is one of a few
(text: a yes/no, a span; an amount a condition picks: ``is_closed``) ends a repair, and so does a wrong amount
that is the gold's figures at another scale or sign (``is_rescaled``). ``handle_check`` is the worker
side (``posttrain.verify._deadline``): the parse and the search run under a CPU budget.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext
from typing import Any

from posttrain.envs import fail, passed
from posttrain.envs.doc._anchors import tatqa_normalize
from posttrain.envs.doc._document import (
    Document,
    describe,
    location_problem,
    norm,
    parse_document,
    quote_problem,
    resolve,
    same_place,
)
from posttrain.strict_json import StrictJSONError, extract_json_text, loads_strict
from posttrain.types import Verdict

SCALES: dict[str, Decimal] = {"": Decimal(1), "thousand": Decimal(1000), "million": Decimal(10) ** 6,
                              "billion": Decimal(10) ** 9, "percent": Decimal("0.01")}
MAX_CITATIONS = 16
MAX_RESPONSE_CHARS = 100_000
MAX_MAGNITUDE = Decimal(10) ** 30
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_MINUS = "-\u2212\u2013"  # hyphen-minus, the minus sign, the en dash (typeset finance's minus)
_NUMBER_RE = re.compile(rf"(?P<minus>[{_MINUS}]?)(?P<digits>{_DIGITS})|\( ?(?P<negative>{_DIGITS}) ?\)")
_RESPONSE_KEYS = {"answer", "scale", "evidence"}
_HINT = ('Reply with one JSON object {"answer": ..., "scale": ..., "evidence": [{"location": {...}, "quote": ...}]} '
         "as the task describes.")


def as_number(value: Any) -> Decimal | None:
    """A JSON number or a string of exactly one number, as an exact Decimal; None for anything else.

    A string's number is its digits (grouped by commas in threes, or not; a decimal point) with at most
    one sign: a minus against the first digit, written ``-``, U+2212 (the minus sign) or U+2013 (the en
    dash, which typeset statements use as a minus; before a lone number it can be nothing else), or
    parentheses around the whole number, accounting's negative and the document tables' own
    (``_gen.thousands``), a space inside each allowed (FinQA's tables print ``( 210 )``). Not read (None:
    a ``format`` fail): two signs (``-(1,234)``, ``(-1,234)``: a double negative or a redundant one, two
    readings), a parenthesis without its pair, a sign apart from the digits (``- 1,234``, a Markdown
    bullet), the figure dash and the em dash (a table's em dash is nil, not minus), a percent sign (the
    scale says percent) and any other word or number beside it.

    >>> as_number(12), as_number("12,345.5"), as_number("12 or 13"), as_number(True)
    (Decimal('12'), Decimal('12345.5'), None, None)
    >>> as_number("(1,234)"), as_number("\u22121,234.5"), as_number("( 210 )"), as_number("-(1,234)")
    (Decimal('-1234'), Decimal('-1234.5'), Decimal('-210'), None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if not isinstance(value, str):
        return None
    m = _NUMBER_RE.fullmatch(value.strip())
    if m is None:
        return None
    negative = m["negative"] is not None or bool(m["minus"])
    return Decimal(("-" if negative else "") + (m["negative"] or m["digits"]).replace(",", ""))


def fold(value: Decimal, scale: str) -> Decimal | None:
    """``value`` times its scale, rounded to 5 decimals (FinQA's rule); None when out of range.

    >>> fold(Decimal("12.34"), "percent"), fold(Decimal("12345"), "thousand")
    (Decimal('0.12340'), Decimal('12345000.00000'))
    """
    if abs(value) > MAX_MAGNITUDE:
        return None
    with localcontext() as ctx:
        ctx.prec = 80
        try:
            return (value * SCALES[scale]).quantize(Decimal("0.00001"), rounding=ROUND_HALF_EVEN)
        except InvalidOperation:
            return None


def _spans(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def conclusion_problem(gold: Mapping[str, Any], answer: Any, scale: Any) -> tuple[str, str] | None:
    """``(error class, why)`` when the conclusion is not the gold's (``format`` or ``wrong_answer``)."""
    if "number" in gold:
        got = as_number(answer)
        if got is None:
            return "format", "the answer must be one number (a JSON number or a string of one number)"
        if not isinstance(scale, str) or scale not in SCALES:
            return "format", f"scale must be one of {sorted(SCALES)}"
        want = fold(Decimal(str(gold["number"])), gold.get("scale", ""))
        folded = fold(got, scale)
        if folded is None:
            return "wrong_answer", "the answer is out of range"
        return None if folded == want else ("wrong_answer", "Wrong answer")
    if scale not in ("", None):
        return "format", "a text answer takes no scale"
    spans = _spans(answer)
    if spans is None:
        return "format", "the answer must be text (a string, or a list of strings for several spans)"
    wanted = gold["text"] if isinstance(gold["text"], list) else [gold["text"]]
    got_keys, want_keys = sorted(map(tatqa_normalize, spans)), sorted(map(tatqa_normalize, wanted))
    return None if got_keys == want_keys else ("wrong_answer", "Wrong answer")


def _pair_off(options: list[list[int]], n_facts: int) -> list[int | None]:
    """A maximum one-to-one pairing of citations (each with the facts it may stand for) to facts."""
    owner: dict[int, int] = {}

    def take(c: int, seen: set[int]) -> bool:
        for f in options[c]:
            if f not in seen:
                seen.add(f)
                if f not in owner or take(owner[f], seen):
                    owner[f] = c
                    return True
        return False

    for c in range(len(options)):
        take(c, set())
    pairing: list[int | None] = [None] * len(options)
    for f, c in owner.items():
        pairing[c] = f
    return pairing


PAIRING = ("the citations and the figures the answer rests on do not pair off one to one: cite each figure "
           "the answer uses exactly once, and nothing else")
"""The one sentence for citations that hold but do not pair off with the facts. It never says which
citation is extra or which figure is missing: those are the gold's figures, and a repair attempt that
sprayed candidate cells would keep the ones not called extra (the restatement trap passed 27 of 27)."""


def audit_evidence(doc: Document, facts: Sequence[Mapping[str, Any]], citations: Sequence[Mapping[str, Any]]
                   ) -> tuple[list[str], list[int], int]:
    """``(problems, unpaired, uncited)``: each citation whose location or quote does not hold (it names
    the place: the document is the reader's own), the indexes of the citations that hold but stand for
    no fact of a one-to-one pairing, and how many facts no citation stands for."""
    problems, options, broken = [], [], set()
    for i, cite in enumerate(citations):
        loc, quote = cite["location"], cite["quote"]
        found, why = resolve(doc, loc)
        why = why or quote_problem(found, quote)  # type: ignore[arg-type]
        if why:
            problems.append(f"evidence[{i}] ({describe(loc)}): {why}")
            broken.add(i)
            options.append([])
            continue
        options.append([j for j, fact in enumerate(facts)
                        if any(same_place(loc, at) for at in fact["at"])
                        and ("contains" not in fact or "table" in loc or norm(fact["contains"]) in norm(quote))])
    if not facts:
        return problems, [], 0
    pairing = _pair_off(options, len(facts))
    unpaired = [i for i, paired in enumerate(pairing) if paired is None and i not in broken]
    return problems, unpaired, len(facts) - sum(p is not None for p in pairing)


def evidence_problems(doc: Document, facts: Sequence[Mapping[str, Any]], citations: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem with the citations (steps 2-3 of the module docstring) as the feedback says it;
    [] when they hold. A pairing that fails is ``PAIRING``, whichever citation or figure is at fault."""
    problems, unpaired, uncited = audit_evidence(doc, facts, citations)
    return problems + ([PAIRING] if unpaired or uncited else [])


def _citations(value: Any) -> tuple[list[dict[str, Any]] | None, str | None]:
    if not isinstance(value, list):
        return None, "evidence must be a list of {\"location\": {...}, \"quote\": \"...\"}"
    if len(value) > MAX_CITATIONS:
        return None, f"{len(value)} citations; at most {MAX_CITATIONS}: cite the figures the answer uses"
    for i, cite in enumerate(value):
        if not isinstance(cite, dict) or set(cite) != {"location", "quote"}:
            return None, f'evidence[{i}] must be exactly {{"location": {{...}}, "quote": "..."}}'
        problem = location_problem(cite["location"])
        if problem:
            return None, f"evidence[{i}]: {problem}"
        if not isinstance(cite["quote"], str) or not cite["quote"].strip():
            return None, f"evidence[{i}]: quote must be a non-empty string"
    return value, None


_docs: dict[str, Document] = {}


def document_of(text: str) -> Document:
    """The parsed document (kept per worker by content hash: a task's document is parsed once)."""
    key = hashlib.sha256(text.encode()).hexdigest()
    if key not in _docs:
        if len(_docs) > 64:
            _docs.clear()
        _docs[key] = parse_document(text)
    return _docs[key]


_BRANCH_RE = re.compile(r"(?:^|[\s,(])greater\s*\(")


def is_closed(gold: Mapping[str, Any], program: str | None = None, closed: bool = False) -> bool:
    """Whether the gold answer is one of a few the document offers: text (a yes/no, or TAT-QA's span
    or spans: a year of the table's columns, a row's label), an amount a condition picks (the gold
    ``program`` compares, FinQA's ``greater``: a covenant's margin, a dividend over a hurdle), or one
    of two figures the document prints, as the task says (``closed``: the net income originally
    reported beside the restated one; the two, tried in turn, passed 30 of 30 restated questions). A
    wrong conclusion to it ends a repair episode (``Verdict.ends_repair``): told that one is wrong, the
    others are fewer, and a next try would be paid in full for reading the feedback (the two branches'
    amounts, tried in turn, passed 40 of 40 conditional questions; a table's column headers and row
    labels, tried in turn, 40 of 42 TAT-QA-style span questions, where one guess passed 9).

    >>> is_closed({"text": "Yes"}), is_closed({"text": ["Europe", "Asia"]}), is_closed({"number": "3"})
    (True, True, False)
    >>> is_closed({"number": "5"}, "greater(4, 3), multiply(5, 1)"), is_closed({"number": "5"}, "add(2, 3)")
    (True, False)
    """
    if closed or "text" in gold:
        return True
    return isinstance(program, str) and _BRANCH_RE.search(program) is not None


_POWERS = tuple(Decimal(10) ** e for e in range(-9, 10, 3))
_TWO_FIGURES_RE = re.compile(r"\s*(add|subtract)\(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\)\s*")


def _digits(value: Decimal) -> tuple[int, ...]:
    return abs(value).normalize().as_tuple().digits  # type: ignore[return-value]


def is_rescaled(gold: Mapping[str, Any], answer: Any, scale: Any, program: str | None = None) -> bool:
    """Whether a wrong amount is the gold's figures read at another scale or with the other sign: the
    gold's own digits a power of ten away or negated (a table's thousands not folded in, a percentage
    given as a fraction, a decrease as an increase), or, for a gold ``program`` that adds or subtracts
    two figures, the two at powers of 1,000 of their own (a table in millions read as thousands: the
    two segments' total, the discussion's figure against the table's). Told wrong, the answer is one
    of the few other scales or signs, and ``check_doc`` ends the repair there, as for ``is_closed``:
    the right cells' digits tried at each scale and sign in turn over the 3 attempts passed 147 of 149
    generated questions (levels 1-4), where the first try passed 61.

    >>> is_rescaled({"number": "12345000"}, 12345, ""), is_rescaled({"number": "12.5", "scale": "percent"}, "12.5", "")
    (True, True)
    >>> is_rescaled({"number": "5"}, -5, ""), is_rescaled({"number": "12345000"}, 12345001, "")
    (True, False)
    >>> is_rescaled({"number": "1100000"}, 101000, "", "add(1000000, 100000)")
    True
    """
    got = as_number(answer)
    if "number" not in gold or got is None or not isinstance(scale, str) or scale not in SCALES:
        return False
    if abs(got) > MAX_MAGNITUDE:
        return False
    with localcontext() as ctx:
        ctx.prec = 80
        value = got * SCALES[scale]
        want = Decimal(str(gold["number"])) * SCALES[gold.get("scale", "")]
        if value and want and _digits(value) == _digits(want):
            return True
        m = _TWO_FIGURES_RE.fullmatch(program or "")
        if m is None or not value:
            return False
        a, b = Decimal(m.group(2)), Decimal(m.group(3))
        sign = 1 if m.group(1) == "add" else -1
        return any(abs(value) == abs(a * p + sign * b * q) for p in _POWERS for q in _POWERS)


def check_doc(document: str, gold: Mapping[str, Any], facts: Sequence[Mapping[str, Any]], response: str,
              program: str | None = None, closed: bool = False) -> Verdict:
    """The verdict on ``response`` for a doc task with these fields (the module docstring)."""
    try:
        value = loads_strict(extract_json_text(response), exact=True, max_chars=MAX_RESPONSE_CHARS)
    except StrictJSONError as e:
        return fail(f"Answer format: {e}. {_HINT}", "format", {"reason": str(e)})
    if not isinstance(value, dict) or "answer" not in value or "evidence" not in value or set(value) - _RESPONSE_KEYS:
        why = "expected an object with the keys answer, evidence and (optionally) scale, and no other"
        return fail(f"Answer format: {why}. {_HINT}", "format", {"reason": why})
    citations, why = _citations(value["evidence"])
    if citations is None:
        return fail(f"Answer format: {why}. {_HINT}", "format", {"reason": why})
    wrong = conclusion_problem(gold, value["answer"], value.get("scale", ""))
    if wrong and wrong[0] == "format":
        return fail(f"Answer format: {wrong[1]}. {_HINT}", "format", {"reason": wrong[1]})
    problems, unpaired, uncited = audit_evidence(document_of(document), facts, citations)
    problems += [PAIRING] if unpaired or uncited else []
    # which citations stood for no figure, and how many figures went uncited: for the log, never the feedback
    evidence = {"citations": len(citations), "figures": len(facts), "problems": problems, "unpaired": unpaired,
                "uncited": uncited, "conclusion": "right" if wrong is None else "wrong"}
    rescaled = wrong is not None and is_rescaled(gold, value["answer"], value.get("scale", ""), program)
    if wrong and (is_closed(gold, program, closed) or rescaled):
        evidence["final"] = True  # Verdict.ends_repair: told wrong, the answer is among the fewer left
    if wrong is None and not problems:
        return passed("Correct, and every cited value is where the evidence says.", evidence)
    head = "Wrong answer." if wrong else "The conclusion is right, but the evidence does not hold."
    feedback = head + (" " + "; ".join(problems[:8]) + "." if problems else "")
    # format credit only when the evidence holds (a wrong conclusion from rightly cited figures): sprayed,
    # repeated, misplaced or invented citations earn nothing
    return fail(feedback, "wrong_answer" if wrong else "evidence", evidence, {"format": 0.0 if problems else 1.0})


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker side of the doc verifier: one request in, one verdict (as JSON) out."""
    return check_doc(request["document"], request["answer"], request["evidence"], request["response"],
                     request.get("program"), bool(request.get("closed"))).to_json()

"""Questions about a generated report: each picks cells and sentences and builds the prompt, the gold
answer, the facts the answer rests on, the reference response's citations and, for arithmetic, a
FinQA-style program (the kinds and levels: ``_gen.py``'s docstring).

Gold numbers are exact (``Decimal``); percentages are rounded half up to the places the question
states, so the response must give exactly that number (FinQA's 5-decimal rule then compares exactly).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from posttrain.envs.doc._gen import Cell, Report, Sentence


@dataclass
class Question:
    prompt: str
    answer: dict[str, Any]
    facts: list[dict[str, Any]]
    cites: list[tuple[dict[str, Any], str]]
    """The reference response's citations: (location, quote)."""
    program: str | None = None
    kind: str = ""
    closed: bool = False
    """The answer is one of two figures the document prints (the task's ``closed``: a wrong one ends a repair)."""
    ref_answer: tuple[str, str] | None = None
    """The reference response's (answer, scale) when it differs from the gold's form (scale folded another way)."""


def _fact(cells: list[Cell]) -> dict[str, Any]:
    return {"at": [c.location for c in cells]}


def _usd(value: Decimal) -> str:
    """An exact amount as a plain decimal string (no exponent)."""
    return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")


def _q_figure(rng: random.Random, rep: Report) -> Question:
    years, f = rep.facts["years"], rep.facts
    choices = [("revenue", "total revenue"), ("op_income", "operating income"), ("net", "net income"),
               ("debt", "total debt at year end"), ("dna", "depreciation and amortization")]
    concept, words = rng.choice(choices)
    year = rng.choice(years)
    if rng.random() < 0.4:
        seg = rng.choice(f["segments"])
        cells, words = rep.concept("seg_rev", seg, year), f"revenue of the {seg} segment"
    else:
        cells = rep.concept(concept, year)
    value = cells[0].value
    answer = {"number": _usd(value), "scale": ""}
    ref = (_usd(value / 1000), "thousand") if rng.random() < 0.3 else None
    return Question(f"What was the company's {words} in fiscal {year}? Give the amount in U.S. dollars.", answer,
                    [_fact(cells)], [(cells[0].location, cells[0].text)], kind="figure", ref_answer=ref)


def _q_total(rng: random.Random, rep: Report) -> Question:
    f = rep.facts
    year = rng.choice(f["years"])
    a, b = rng.choice(f["group_a"]), rng.choice(f["group_b"])
    if rng.random() < 0.5:  # named in either order: the order says nothing of which table is in millions
        a, b = b, a
    ca, cb = rep.concept("seg_rev", a, year), rep.concept("seg_rev", b, year)
    total = ca[0].value + cb[0].value
    return Question(f"What was the combined revenue of the {a} and {b} segments in fiscal {year}? Give the amount "
                    "in U.S. dollars.", {"number": _usd(total), "scale": ""}, [_fact(ca), _fact(cb)],
                    [(ca[0].location, ca[0].text), (cb[0].location, cb[0].text)],
                    f"add({_usd(ca[0].value)}, {_usd(cb[0].value)})", "total")


def _percent(x: Decimal, places: int) -> Decimal:
    return (x * 100).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _q_growth(rng: random.Random, rep: Report) -> Question:
    years = rep.facts["years"]
    i = rng.randrange(1, len(years))
    concept, words = rng.choice([("revenue", "total revenue"), ("op_income", "operating income"), ("net", "net income")])
    c1, c2 = rep.concept(concept, years[i - 1]), rep.concept(concept, years[i])
    v1, v2 = c1[0].value, c2[0].value
    if v1 == 0:
        return _q_margin(rng, rep)
    change = _percent((v2 - v1) / v1, 2)
    return Question(f"By what percentage did the company's {words} change from fiscal {years[i - 1]} to fiscal "
                    f"{years[i]}? Answer in percent, rounded half up to two decimal places (negative for a decrease).",
                    {"number": str(change), "scale": "percent"}, [_fact(c1), _fact(c2)],
                    [(c1[0].location, c1[0].text), (c2[0].location, c2[0].text)],
                    f"subtract({_usd(v2)}, {_usd(v1)}), divide(#0, {_usd(v1)}), multiply(#1, const_100)", "growth")


def _q_margin(rng: random.Random, rep: Report) -> Question:
    year = rng.choice(rep.facts["years"])
    co, cr = rep.concept("op_income", year), rep.concept("revenue", year)
    margin = _percent(co[0].value / cr[0].value, 1)
    return Question(f"What was the company's operating margin (operating income divided by revenue) in fiscal {year}? "
                    "Answer in percent, rounded half up to one decimal place.", {"number": str(margin), "scale": "percent"},
                    [_fact(co), _fact(cr)], [(co[0].location, co[0].text), (cr[0].location, cr[0].text)],
                    f"divide({_usd(co[0].value)}, {_usd(cr[0].value)}), multiply(#0, const_100)", "margin")


def _q_restated(rng: random.Random, rep: Report) -> Question:
    r = rep.facts["restatement"]
    cells = rep.concept("net_original", r["year"])
    return Question(f"What net income for fiscal {r['year']} did the company originally report, before the "
                    "restatement described in the notes? Give the amount in U.S. dollars.",
                    {"number": _usd(cells[0].value), "scale": ""}, [_fact(cells)], [(cells[0].location, cells[0].text)],
                    kind="restated", closed=True)


def _sentence_fact(s: Sentence, contains: str) -> tuple[dict[str, Any], tuple[dict[str, Any], str]]:
    loc = {"page": s.page, "section": s.section}
    return {"at": [loc], "contains": contains}, (loc, s.text)


AGREE_SHARE = 0.2
"""The share of contradiction questions asked about a segment whose stated figure agrees with the table
(gold 0), where the report has one. The segment was drawn at random, and 60% of the stated figures are
off, so 0 was the gold of 43% of the questions: a constant 0 with the right two citations passed 27 of 60."""


def _q_contradiction(rng: random.Random, rep: Report) -> Question:
    f = rep.facts
    year = f["years"][-1]
    agree = [s for s in f["segments"] if f["claims"][s][0] == rep.concept("seg_rev", s, year)[0].value]
    differ = [s for s in f["segments"] if s not in agree]
    seg = rng.choice(agree if agree and (not differ or rng.random() < AGREE_SHARE) else differ)
    stated, sentence = f["claims"][seg]
    cells = rep.concept("seg_rev", seg, year)
    fact, cite = _sentence_fact(sentence, f"${stated:,}")
    diff = cells[0].value - stated
    return Question(f"Management's discussion (section 2) states the revenue of the {seg} segment for fiscal {year}. "
                    "What is the figure in the segment revenue table minus the figure stated in the discussion, in "
                    "U.S. dollars? Answer 0 if they agree.", {"number": _usd(diff), "scale": ""},
                    [fact, _fact(cells)], [cite, (cells[0].location, cells[0].text)],
                    f"subtract({_usd(cells[0].value)}, {stated})", "contradiction")


def _q_covenant(rng: random.Random, rep: Report) -> Question:
    f = rep.facts
    c, year = f["covenant"], f["years"][-1]
    debt, ebitda = rep.concept("debt", year), rep.concept("ebitda", year)
    above = debt[0].value / ebitda[0].value > c["threshold"]
    fact, cite = _sentence_fact(f["covenant_clause"], f"exceeds {c['threshold']}")
    margin = c["high"] if above else c["low"]
    cost = margin / 100 * debt[0].value
    return Question(f"Under the credit agreement described in the notes, what is the margin cost for fiscal {year + 1}: "
                    f"the applicable margin for fiscal {year + 1} times total debt at the end of fiscal {year}? Give the "
                    "amount in U.S. dollars.", {"number": _usd(cost), "scale": ""},
                    [fact, _fact(debt), _fact(ebitda)], [cite, (debt[0].location, debt[0].text),
                                                        (ebitda[0].location, ebitda[0].text)],
                    f"divide({_usd(debt[0].value)}, {_usd(ebitda[0].value)}), greater(#0, {c['threshold']}), "
                    f"multiply({_usd(debt[0].value)}, {margin}%)", "covenant")


def _q_dividend(rng: random.Random, rep: Report) -> Question:
    f = rep.facts
    d, year = f["dividend"], f["years"][-1]
    net, shares = rep.concept("net", year), rep.concept("shares", year)
    above = net[0].value > d["hurdle_musd"] * 1_000_000
    per_share = d["high"] if above else d["low"]
    fact, cite = _sentence_fact(f["dividend_clause"], f"${d['hurdle_musd']} million")
    return Question(f"What total special dividend is payable for fiscal {year}: the special dividend per share the "
                    f"board's resolution sets, times the shares outstanding at the end of fiscal {year}? Give the amount "
                    "in U.S. dollars.", {"number": _usd(per_share * shares[0].value), "scale": ""},
                    [fact, _fact(net), _fact(shares)],
                    [cite, (net[0].location, net[0].text), (shares[0].location, shares[0].text)],
                    f"greater({_usd(net[0].value)}, {_usd(d['hurdle_musd'] * 1_000_000)}), "
                    f"multiply({per_share}, {_usd(shares[0].value)})", "dividend")


QUESTIONS: dict[str, Callable[[random.Random, Report], Question]] = {
    "figure": _q_figure, "total": _q_total, "growth": _q_growth, "margin": _q_margin, "restated": _q_restated,
    "contradiction": _q_contradiction, "covenant": _q_covenant, "dividend": _q_dividend}
LEVEL_KINDS = {1: ("figure", "total"), 2: ("figure", "total", "growth", "margin"),
               3: ("figure", "total", "growth", "margin", "restated"), 4: tuple(QUESTIONS), 5: tuple(QUESTIONS)}

"""A helper's thirteenth read of the doc generator, as a policy that learns how a unit looks rather than
reading it; each a standing case (real generated tasks, the real checker; no mocks).

- A unit by its decimal point: the segment revenue table in millions always printed one decimal and the
  one in thousands none, so "a cell with a decimal point is in millions" found the millions cell of 300 of
  300 total questions (levels 1-5), 103 of 103 segment figures and 300 of 300 contradictions through
  ``check_doc`` without a look at either table's unit. The places are now drawn for each table apart from
  its unit (``_gen.SEGMENT_PLACES``), each table's figures to the grain of its last printed digit: the rule
  passes 72 of 300 totals (it is right only when the millions table alone prints decimals), 48 of 110
  segment figures (the unit-blind "times 1,000": 55) and 140 of 300 contradictions (unit-blind: 148).
- A stated figure's round digits: a table in whole millions (new with the draw) beside a discussion
  figure off by 100,000s told by its hundred-thousands digit whether the two agreed. The discussion's
  figure is now off by whole units of the table's last printed digit.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

from posttrain.envs.doc._check import check_doc
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.envs.doc._gen import build_report
from posttrain.types import Task

N = 60
UNITS = {"thousands": Decimal(1000), "millions": Decimal(10) ** 6}


def _number(text: str) -> Decimal:
    value = Decimal(text.strip("()").replace(",", ""))
    return -value if text.startswith("(") else value


def _passes(task: Task, answer: Decimal) -> bool:
    f = task.fields
    body = {**json.loads(str(task.reference)), "answer": str(answer), "scale": ""}
    return check_doc(f["document"], f["answer"], f["evidence"], json.dumps(body), f.get("program")).passed


def _by_point(quote: str) -> Decimal:
    return _number(quote) * (UNITS["millions"] if "." in quote else UNITS["thousands"])


def test_a_totals_millions_cell_is_not_the_one_with_a_decimal_point() -> None:
    rng = random.Random("doc-attacks13-total")
    tasks = [build_task(rng, 1 + i % 5, f"doc-a13-total-{i}", "total", filler=0, pdf=False) for i in range(N)]
    by_point = best_by_point = honest = 0
    for task in tasks:
        f = task.fields
        honest += check_doc(f["document"], f["answer"], f["evidence"], str(task.reference), f.get("program")).passed
        first, second = (c["quote"] for c in json.loads(str(task.reference))["evidence"])
        by_point += _passes(task, _by_point(first) + _by_point(second))
        # the best the points alone allow: the one cell with a point is in millions, else the first named
        m = UNITS["millions"]
        one = ("." in first) != ("." in second)
        in_millions_first = "." in first if one else True
        best = _number(first) * (m if in_millions_first else 1000) + _number(second) * (1000 if in_millions_first else m)
        best_by_point += _passes(task, best)
    assert honest == N
    assert by_point <= 0.4 * N and best_by_point <= 0.7 * N, (by_point, best_by_point)  # before: N and N of N


def test_each_segment_table_prints_its_figures_exactly_to_places_drawn_apart_from_its_unit() -> None:
    rng = random.Random("doc-attacks13-places")
    pointed = {"thousands": 0, "millions": 0}
    for i in range(N):
        rep = build_report(rng, 1 + i % 5, filler=0)
        doc = parse_document(rep.text)
        for name in ("product", "service"):
            table = doc.tables[rep.facts[f"table_{name}"].casefold()]
            unit = table.columns[0].split()[1]
            pointed[unit] += any("." in cell for row in table.rows for cell in row[1:])
            for cell in (c for c in rep.cells if c.table == table.id):
                assert _number(cell.text) * UNITS[unit] == cell.value, (cell, unit)
    assert all(0.3 * N <= n <= 0.7 * N for n in pointed.values()), pointed  # before: millions N, thousands 0


def test_a_stated_figures_round_digits_do_not_say_whether_it_agrees() -> None:
    """A discussion figure is off from the table by whole units of the table's last printed digit, so its
    low digits are the table's (a whole-millions table beside figures off by 100,000s told each apart)."""
    rng = random.Random("doc-attacks13-claims")
    checked = 0
    for i in range(N):
        rep = build_report(rng, 4 + i % 2, filler=0)
        doc, year = parse_document(rep.text), rep.facts["years"][-1]
        for seg, (stated, _) in rep.facts["claims"].items():
            cell = rep.concept("seg_rev", seg, year)[0]
            unit = UNITS[doc.tables[cell.table.casefold()].columns[0].split()[1]]
            grain = unit.scaleb(-len(cell.text.partition(".")[2]))
            assert (stated - cell.value) % grain == 0, (seg, stated, cell)
            checked += stated != cell.value
    assert checked >= N  # disagreements were there to check

"""A helper's fourteenth read of the doc generator, as a policy that tells a table's unit by the size of
its figures rather than its unit line; each a standing case (real generated tasks, the real checker; no
mocks).

- A unit by the printed size: every company's segments were $20-900 million and one of its two segment
  revenue tables always in millions, so a segment in millions printed 20-900 and one in thousands
  20,000-900,000. "A cell under 10,000 is in millions" passed 300 of 300 total questions (levels 1-5)
  through ``check_doc``, "the smaller of the two cells is in millions" 300 of 300, and so did the best
  single cut on a printed cell. The company's unit is now drawn (thousands or millions, as smaller and
  larger filers report), its size in that unit log-uniform over two decades whatever the unit
  (``_gen.SEGMENT_SCALE``), and in a quarter of reports one table is in the other unit
  (``_gen.MIXED_UNITS``): a thousands table and a millions table print the same sizes. Over this file's
  300: under 10,000 127, the smaller cell 72, the best cut 168 (the commonest pair of units, a constant
  guess: 125). The best rule on the two sizes (one cell a hundred times the other: that one in thousands,
  the other in millions; else a cut on their size) passes 198 (66%): it is right on every report whose
  tables differ in unit (72: the two print a thousand apart, as any realistic pair would) and 126 of the
  228 others (55%, a coin); honest reading 300.
- A dividend hurdle in whole millions: net income now runs from a few hundred thousand dollars, so a
  hurdle 1-5% from it rounded away to whole millions sat far from it (net income of $1.5 million, 1%
  over: a hurdle of $2 million, 33% over; under $1 million, always $1 million). It is now rounded to
  three significant figures: every hurdle sits 1-6% from net income (23 of these 100 under $10 million).

Left, measured: the income statement prints revenue in thousands, and the segments add up to it, so "the
unit under which a cell is at most the year's revenue" passes 300 of 300 (five draws); that reads the document's own
accounting (the sum any analyst checks), not the printed size alone.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

from test_doc_attacks12 import _number, _passes

from posttrain.envs.doc._check import check_doc
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.envs.doc._gen import build_report

N = 300
K, M = Decimal(1000), Decimal(10) ** 6


def _cut_rate(pairs: list[tuple[Decimal, Decimal]], units: list[tuple[Decimal, Decimal]]) -> int:
    """Totals whose two units the best single cut on a printed cell (under it: millions) tells right."""
    cuts = sorted({v for pair in pairs for v in pair})
    return max(sum((M if x <= c else K, M if y <= c else K) == u for (x, y), u in zip(pairs, units, strict=True))
               for c in cuts)


def _pair_rate(pairs: list[tuple[Decimal, Decimal]], units: list[tuple[Decimal, Decimal]]) -> int:
    """The best rule on the two sizes: a cell a hundred times the other is in thousands and the other in
    millions; else both in millions under a cut on their geometric mean, both in thousands above it."""
    def rule(x: Decimal, y: Decimal, cut: Decimal) -> tuple[Decimal, Decimal]:
        if x > 100 * y or y > 100 * x:
            return (K, M) if x > y else (M, K)
        return (M, M) if (x * y).sqrt() <= cut else (K, K)

    cuts = sorted({(x * y).sqrt() for x, y in pairs})
    return max(sum(rule(x, y, c) == u for (x, y), u in zip(pairs, units, strict=True)) for c in cuts[::3])


def test_a_totals_units_are_not_told_by_the_size_of_its_figures() -> None:
    rng = random.Random("doc-attacks14-total")
    tasks = [build_task(rng, 1 + i % 5, f"doc-a14-total-{i}", "total", filler=0, pdf=False) for i in range(N)]
    honest = under = smaller = 0
    pairs, units = [], []
    for task in tasks:
        f = task.fields
        honest += check_doc(f["document"], f["answer"], f["evidence"], str(task.reference), f.get("program")).passed
        doc = parse_document(f["document"])
        cites = json.loads(str(task.reference))["evidence"]
        x, y = (_number(c["quote"]) for c in cites)
        pairs.append((x, y))
        units.append(tuple(M if "millions" in doc.tables[c["location"]["table"].casefold()].columns[0] else K
                           for c in cites))
        under += _passes(task, x * (M if x < 10_000 else K) + y * (M if y < 10_000 else K))
        smaller += _passes(task, x * M + y * K if x < y else x * K + y * M)
    commonest = max(units.count(u) for u in set(units))
    mixed = sum(a != b for a, b in units)
    assert honest == N
    assert under <= 0.55 * N and smaller <= 0.4 * N, (under, smaller)  # before: N and N; now 127 and 72
    assert _cut_rate(pairs, units) <= 0.6 * N, _cut_rate(pairs, units)  # before: N; now 168
    # the ratio tells the mixed reports (a thousand apart), a coin the rest: mixed + (N - mixed) / 2, give or take
    assert _pair_rate(pairs, units) <= mixed + 0.6 * (N - mixed), (_pair_rate(pairs, units), mixed)  # now 198, 72
    assert 0.15 * N <= mixed <= 0.35 * N, mixed  # tables in two units remain (before: all N)
    assert commonest <= 0.5 * N, commonest  # now 125


def test_the_dividend_hurdle_sits_near_net_income_whatever_the_companys_size() -> None:
    rng = random.Random("doc-attacks14-hurdle")
    off, small = [], 0
    for i in range(100):
        rep = build_report(rng, 4 + i % 2, filler=0)
        hurdle = Decimal(re.search(r"exceeds \$([\d.]+) million", rep.text)[1]) * M  # type: ignore[index]
        off.append(abs(hurdle / rep.facts["net"][-1] - 1))
        small += rep.facts["net"][-1] < 10 * M
    assert small >= 10, small  # before: 0 of 100 (net income was $10 million and more)
    assert min(off) >= Decimal("0.01") and max(off) <= Decimal("0.06"), (min(off), max(off))


def test_three_answers_that_skip_a_unit_line() -> None:
    """The stop hook's read of 282ef3d, as a policy that finds both cells but does not read both unit
    lines: both taken in thousands, both in millions, or both in the first table's unit (read once).
    The first two are a constant guess (125 and 103 of 300); the third passes every report whose two
    tables share a unit and none whose tables differ (228 of 300, 222-228 over three draws: before
    282ef3d every report had two units and it passed none). That is the price of tables that share a
    unit (``_gen.MIXED_UNITS``, a quarter in two units): more reports in two units bring back the tell
    by the printed ratio (a thousand apart), measured in the test above."""
    rng = random.Random("doc-attacks14-total")
    tasks = [build_task(rng, 1 + i % 5, f"doc-a14-total-{i}", "total", filler=0, pdf=False) for i in range(N)]
    thousands = millions = first_unit = first_unit_mixed = mixed = 0
    for task in tasks:
        doc = parse_document(task.fields["document"])
        cites = json.loads(str(task.reference))["evidence"]
        x, y = (_number(c["quote"]) for c in cites)
        u = [M if "millions" in doc.tables[c["location"]["table"].casefold()].columns[0] else K for c in cites]
        thousands += _passes(task, (x + y) * K)
        millions += _passes(task, (x + y) * M)
        first = _passes(task, (x + y) * u[0])
        first_unit += first
        mixed += u[0] != u[1]
        first_unit_mixed += first and u[0] != u[1]
    assert thousands <= 0.5 * N and millions <= 0.5 * N, (thousands, millions)  # now 125 and 103
    assert first_unit_mixed == 0 and first_unit <= N - mixed, (first_unit, mixed)  # now 228 of the 228 sharing a unit

"""Procedural annual reports in which every figure is known, and questions about them.

A report (``build_report``) is a fictional company's: a cover, a business overview, management's
discussion (narrative figures, one of them possibly wrong), the income statement, balance sheet and
cash flows (in the company's unit, thousands or millions: ``statement_format``), segment revenue in two
tables on different pages, each in thousands or millions (``SEGMENT_SCALE``, ``MIXED_UNITS``), segment
operating income, an Adjusted EBITDA reconciliation, notes (a restatement of the prior year, a credit
agreement whose margin depends on leverage, a dividend that depends on net income) and filler notes
(leases, properties, headcount, quarterly results, risk factors; in thousands) up to the level's length.
Pages are cut at about ``PAGE_CHARS`` characters, never inside a table.

Every printed number is recorded as a ``Cell`` (page, table, row, column, text, exact value in
dollars, and the concept it shows, so the same fact printed twice is cited from either place).
Questions (``_questions.QUESTIONS``) pick cells and build the prompt, the gold answer (number and
scale, or text), the facts the answer rests on and, for arithmetic, a FinQA-style program:

| kind | asks | rests on |
|---|---|---|
| figure | one figure in dollars (the table's unit folded in) | 1 cell |
| total | two segments' revenue, from tables on different pages (in a quarter, in different units) | 2 cells |
| growth | change between two years, percent to 2 places | 2 cells |
| margin | operating income / revenue, percent to 1 place | 2 cells |
| restated | net income as originally reported, before a restatement | 1 cell of the note's table |
| contradiction | the table's segment revenue minus the figure management's discussion states (0, the two agreeing, in about a fifth) | 1 cell, 1 sentence |
| covenant | the margin cost (the margin a leverage condition sets, times total debt) | 1 clause, 2 cells |
| dividend | the total dividend (the per-share amount a net-income condition sets, times the shares) | 1 clause, 2 cells |

Levels 1-5 set the years (2-5), segments (3-6), filler (0 to ~100k+ tokens in all) and the kinds drawn
(1: figure, total; 2: + growth, margin; 3: + restated; 4-5: + contradiction, covenant, dividend). The
text is ASCII so that the PDF rendering (core fonts) holds every character.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

PAGE_CHARS = 3200
LEVELS = (1, 2, 3, 4, 5)
_YEARS = (2, 3, 3, 4, 5)
_SEGMENTS = (3, 3, 4, 5, 6)
"""Segments per level; at least 3, so that no two segments a total question adds make up all of revenue
(with 2, the level-1 total was the income statement's Revenue: copied, it passed 200 of 200)."""
_FILLER = (5, 18, 60, 180, 620)
"""Filler notes per level: reports of about 8k, 20k, 60k, 160k and 480k characters (2k to 120k tokens)."""

THRESHOLDS = tuple(Decimal(t) for t in ("2.0", "2.5", "3.0", "3.5", "4.0"))
"""The covenant's leverage thresholds (total debt to Adjusted EBITDA)."""
LEVERAGE_OFFSETS = range(1, 7)
"""How far (in tenths) a year's leverage is from the threshold, either side. With the last year's debt
alone drawn (3 to 12 tenths off, three thresholds) and the earlier years' drawn apart from EBITDA, the
branch showed in the debt without the ratio: the best cut on the last year's debt alone picked it in 78%
of 300 covenant tasks (levels 4-5), on its ratio to the largest earlier year's 75%, to revenue 80% (a
coin: 50%). Now, over tests/envs/test_doc_attacks12.py's 300, 54%, 63% and 64% (63%, 64% and 66% with
every company's segments $20-900 million: the debt alone told more before SEGMENT_SCALE); the exact ratio
always (1 tenth off is far from a rounding)."""
HURDLE_OFFSETS = range(1, 6)
"""How far (in percent of net income) the dividend's hurdle is from the last year's net income, either
side, then rounded away from it to three significant figures in millions, whole millions at most (whole
millions alone put a small company's hurdle far off: tests/envs/test_doc_attacks14.py). At 10% either
side, with net income 72-82% of operating income (the tax rate; interest was small), the best cut on the
hurdle's ratio to operating income (net income unread) picked the dividend in 299 of 300 dividend tasks
(levels 4-5), to Adjusted EBITDA 281 (a coin: 150). Now (with INTEREST_SHARE and SEGMENT_SCALE)
182-184 and 179-187 over three draws of 300."""
INTEREST_SHARE = (500, 4000)
"""Interest expense in hundredths of a percent of operating income (5-40%: interest covered 2.5 to 20
times). Drawn as $2-30 million whatever the income, it left net income 72-82% of operating income (the
tax rate alone), so a hurdle near net income showed in operating income (HURDLE_OFFSETS); now 43-78%."""
DNA_SHARE = (500, 2000)
"""Depreciation and amortization in hundredths of a percent of revenue (5-20%). Drawn as $5-60 million
whatever the revenue, it was a few percent of operating income, so the covenant's ratio taken to
operating income instead of Adjusted EBITDA (the threshold read, the row not) picked the margin in 278
of 300 covenant tasks (levels 4-5). Now 147-170 over three draws of 300, where the constant high margin
passes 136-159 (above the threshold, the ratio to operating income is above too: the wrong row errs only
below)."""

_NAMES = ("Northwind", "Bluefield", "Ardent", "Copperline", "Halvorsen", "Meridian", "Quarry Point", "Sable",
          "Tamarack", "Vantage", "Wexford", "Zenith")
_SUFFIX = ("Holdings", "Group", "Industries", "Corporation", "Systems")
_SEGMENT_NAMES = ("Cloud Services", "Industrial Products", "Retail", "Healthcare", "Logistics", "Energy", "Media",
                  "Payments", "Materials", "Consumer Devices")
_CITIES = ("Austin", "Leeds", "Lyon", "Osaka", "Porto", "Denver", "Gdansk", "Monterrey", "Pune", "Perth")
_FUNCTIONS = ("Engineering", "Operations", "Sales", "Finance", "Research")
_RISK_WORDS = ("demand", "pricing", "supply", "currency", "regulation", "cybersecurity", "competition", "talent",
               "interest rates", "weather")


def _printed(usd: int, unit: int, places: int) -> str:
    """``usd`` in ``unit`` dollars to ``places`` decimals, grouped by commas, negative in parentheses; a
    ``ValueError`` if those places do not hold it exactly (a table prints the very value its answers use)."""
    value = Decimal(usd) / unit
    if value != value.quantize(Decimal(1).scaleb(-places)):
        raise ValueError(f"${usd:,} does not print exactly in units of ${unit:,} to {places} places")
    text = format(abs(value), f",.{places}f")
    return f"({text})" if value < 0 else text


def thousands(usd: int, places: int = 0) -> str:
    """A dollar amount as printed in a table "in thousands": ``12,345`` (``12,345.6`` to one place) or
    ``(1,234)`` when negative."""
    return _printed(usd, 1000, places)


def millions(usd: int, places: int = 1) -> str:
    """A dollar amount as printed "in millions": ``1,234.5`` to one place, ``1,235`` to none."""
    return _printed(usd, 1_000_000, places)


SEGMENT_PLACES = (0, 1)
"""The decimal places a segment revenue table prints, drawn for each table apart from its unit (real
reports print millions with none or one, now and then thousands with one). With millions always to one
place and thousands to none, "a cell with a decimal point is in millions" found the millions table of
300 of 300 total questions without a look at its unit; now 69-84 of 300 (three draws), and "the one
cell with a point is in millions, else the first named" 35-44 (167 while one table was always in
millions, a coin). A third place for millions alone would tell again (two places: millions; the best rule
on the places alone, 67%). The printed size no longer tells either: SEGMENT_SCALE."""
SEGMENT_SCALE = (3.0, 5.0)
"""A company's typical segment revenue as its tables print it: log10 in the company's unit, drawn uniformly
(1,000 to 100,000), the unit a coin apart from it: thousands ($1-100 million a segment) or millions ($1-100
billion), as smaller filers report in thousands and larger ones in millions. With every company's segments
$20-900 million and one table always in millions, a segment in millions printed 20-900 and one in
thousands 20,000-900,000: "a cell under 10,000 is in millions" and "the smaller of the two is in millions"
each passed 300 of 300 total questions (levels 1-5) without a look at a unit line. Now the two units print
the same sizes: 127 and 72 of tests/envs/test_doc_attacks14.py's 300, the best cut on one printed cell 168
(the commonest pair of units, guessed: 125). What tells is MIXED_UNITS's pairs; and the income statement's
revenue, which the segments add up to (a reading, left)."""
SEGMENT_SPREAD = 0.5
"""Each segment's revenue each year is the typical one times up to 10**0.5 (about 3) either way."""
MIXED_UNITS = 0.25
"""The share of reports whose two segment revenue tables are in different units (one of them, either, in
the other unit than the company's). Such a pair prints a thousand apart, as any realistic one would, so
the best rule on the two printed sizes is right on these and a coin on the rest: 198 of
tests/envs/test_doc_attacks14.py's 300 (72 of them in two units; 66%, where the unit read passes 300).
With one table always in millions (1.0), that rule passed 300 of 300."""
_GRAIN = {("thousands", 0): 1000, ("thousands", 1): 100, ("millions", 0): 1_000_000, ("millions", 1): 100_000}
"""The dollars a segment revenue table's last printed digit stands for: its figures are drawn to that
grain, so the last digit is any digit (a thousands table to one place, drawn in whole thousands, would
always end ".0")."""


@dataclass(frozen=True)
class Cell:
    table: str
    page: int
    row: str
    column: str
    text: str
    value: Decimal
    """The exact value in its unit (dollars; dollars per share; a ratio for percent cells)."""
    concept: tuple[Any, ...] | None

    @property
    def location(self) -> dict[str, Any]:
        return {"page": self.page, "table": self.table, "row": self.row, "column": self.column}


@dataclass(frozen=True)
class Sentence:
    page: int
    section: str
    text: str


@dataclass
class Report:
    """A generated report: its Markdown, every cell and sentence printed, and the figures behind them."""

    lines: list[str] = field(default_factory=list)
    page: int = 1
    page_chars: int = 0
    section: str = ""
    tables: int = 0
    cells: list[Cell] = field(default_factory=list)
    sentences: list[Sentence] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def _room(self, size: int) -> None:
        if self.page_chars and self.page_chars + size > PAGE_CHARS:
            self.page += 1
            self.page_chars = 0
            self.lines += [f"<!-- page {self.page} -->", ""]
        self.page_chars += size

    def break_page(self) -> None:
        """Start a new page here (a table that must sit on a later page than the one before it)."""
        if self.page_chars:
            self.page += 1
            self.page_chars = 0
            self.lines += [f"<!-- page {self.page} -->", ""]

    def heading(self, title: str, level: int = 2) -> None:
        self._room(len(title) + 200)  # a heading does not end a page
        self.section = title
        self.lines += [f"{'#' * level} {title}", ""]

    def para(self, text: str) -> Sentence:
        self._room(len(text))
        sentence = Sentence(self.page, self.section, text)
        self.sentences.append(sentence)
        self.lines += [text, ""]
        return sentence

    def table(self, title: str, columns: list[str], rows: list[tuple[str, list[tuple[str, Decimal | None, Any]]]],
              note: str = "") -> str:
        """Add a captioned table; each row is (label, [(text, value, concept)]); returns its id."""
        self.tables += 1
        tid = f"Table {self.tables}"
        body = [f"| {label} | " + " | ".join(c[0] for c in cells) + " |" for label, cells in rows]
        block = [f"**{tid}: {title}**", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *body]
        if note:
            block += ["", note]
        self._room(sum(len(x) + 1 for x in block))
        self.lines += [*block, ""]
        for label, cells in rows:
            for column, (text, value, concept) in zip(columns[1:], cells, strict=True):
                if value is not None:
                    self.cells.append(Cell(tid, self.page, label, column, text, value, concept))
        if note:
            self.sentences.append(Sentence(self.page, self.section, note))
        return tid

    @property
    def text(self) -> str:
        return "\n".join(["<!-- page 1 -->", "", *self.lines]).rstrip() + "\n"

    def concept(self, *key: Any) -> list[Cell]:
        return [c for c in self.cells if c.concept == key]


def _k(rng: random.Random, lo: int, hi: int) -> int:
    """A random dollar amount, a multiple of 100,000 (so it prints exactly in thousands and millions)."""
    return rng.randint(lo // 100_000, hi // 100_000) * 100_000


def _share(rng: random.Random, usd: int, lo: int, hi: int, grain: int = 1000) -> int:
    """``lo`` to ``hi`` hundredths of a percent of ``usd``, in whole ``grain`` (at least one)."""
    return max(grain, usd * rng.randint(lo, hi) // 10_000 // grain * grain)


def statement_format(unit: str) -> Callable[[int], str]:
    """How a statement prints a dollar amount in ``unit``, thousands or millions to no places.

    The statements (income, balance sheet, cash flows, segment operating income, Adjusted EBITDA, the
    restatement note) print in the company's unit (``build_report``'s ``home``), each figure in whole units
    of it. Always in thousands, "a statement figure's cell times 1,000" passed 190 of the 190 figure
    questions on a statement line (241 of 300 figure questions), the header unread; and a large company's
    revenue printed nine digits in thousands, so its size told the company's unit and so both segment
    tables' outside MIXED_UNITS (219 of 300 totals). Now 84 of 190 and 105 of 300, and the statements
    print the same sizes in either unit (SEGMENT_SCALE): tests/envs/test_doc_attacks15.py.
    """
    return thousands if unit == "thousands" else functools.partial(millions, places=0)


def _row(values: list[int], concept: str | None, years: list[int], fmt: Callable[[int], str] = thousands,
         extra: tuple[Any, ...] = ()) -> list[tuple[str, Decimal, Any]]:
    return [(fmt(v), Decimal(v), (concept, *extra, y) if concept else None) for v, y in zip(values, years, strict=True)]


def build_report(rng: random.Random, level: int, *, filler: int | None = None) -> Report:
    """The whole report for one task (the module docstring); ``filler`` overrides the level's number
    of filler notes (0: the shortest report of the level)."""
    n_years, n_seg = _YEARS[level - 1], _SEGMENTS[level - 1]
    last = rng.randint(2019, 2025)
    years = list(range(last - n_years + 1, last + 1))
    company = f"{rng.choice(_NAMES)} {rng.choice(_SUFFIX)}"
    segments = rng.sample(_SEGMENT_NAMES, n_seg)
    group_a, group_b = segments[: (n_seg + 1) // 2], segments[(n_seg + 1) // 2:]
    # the company's unit and size, the tables' units and the places each prints: see SEGMENT_SCALE,
    # MIXED_UNITS and SEGMENT_PLACES
    home = rng.choice(("thousands", "millions"))
    units = {"product": home, "service": home}
    if rng.random() < MIXED_UNITS:
        units[rng.choice(("product", "service"))] = "millions" if home == "thousands" else "thousands"
    scale = rng.uniform(*SEGMENT_SCALE) + (3 if home == "thousands" else 6)  # log10 of a typical segment's dollars
    places = {name: rng.choice(SEGMENT_PLACES) for name in ("product", "service")}
    grain = {s: _GRAIN[(units[name], places[name])]
             for group, name in ((group_a, "product"), (group_b, "service")) for s in group}
    seg_rev = {s: [max(1, round(10 ** (scale + rng.uniform(-SEGMENT_SPREAD, SEGMENT_SPREAD)) / grain[s])) * grain[s]
                   for _ in years] for s in segments}
    # the statements print in the company's unit, to none (statement_format): each of their figures is in whole
    # units of it, revenue too (the last segment of the finest grain takes up the rest)
    g = _GRAIN[(home, 0)]
    fine = [s for s in segments if grain[s] == min(grain.values()) < g]
    for i in range(n_years):
        if fine:
            seg_rev[fine[-1]][i] -= sum(seg_rev[s][i] for s in segments) % g
    revenue = [sum(seg_rev[s][i] for s in segments) for i in range(n_years)]
    # cost and opex in hundredths of a percent of revenue: drawn in whole percents, every operating margin
    # was a whole percent (400 of 400 margin golds ended in ".0"), so the one decimal the question asks
    # for was always 0 and a rough estimate to the whole percent passed (3 significant digits: 400 of 400)
    cost = [r * rng.randint(4000, 6500) // 10_000 // g * g for r in revenue]
    opex = [r * rng.randint(1200, 2500) // 10_000 // g * g for r in revenue]
    op_income = [r - c - o for r, c, o in zip(revenue, cost, opex, strict=True)]
    # interest a share of operating income (see INTEREST_SHARE)
    interest = [oi * rng.randint(*INTEREST_SHARE) // 10_000 // g * g for oi in op_income]
    tax = [max(0, (oi - i) * rng.randint(18, 28) // 100 // g * g) for oi, i in zip(op_income, interest, strict=True)]
    net = [oi - i - t for oi, i, t in zip(op_income, interest, tax, strict=True)]
    # D&A a share of revenue (see DNA_SHARE): drawn apart from revenue, it was a few percent of operating income
    dna = [r * rng.randint(*DNA_SHARE) // 10_000 // g * g for r in revenue]
    ebitda = [oi + d for oi, d in zip(op_income, dna, strict=True)]
    rep = Report(facts={"company": company, "years": years, "segments": segments, "group_a": group_a,
                        "group_b": group_b, "level": level, "units": units, "places": places,
                        "statement_unit": home})
    f = rep.facts
    f.update(seg_rev=seg_rev, revenue=revenue, op_income=op_income, net=net, ebitda=ebitda)
    restated = level >= 3 and n_years >= 2
    if restated:
        delta = rng.choice([-1, 1]) * max(g, net[-2] * rng.randint(2, 9) // 100 // g * g)
        f["restatement"] = {"year": years[-2], "net": net[-2], "tax": tax[-2], "original_net": net[-2] + delta,
                            "original_tax": tax[-2] - delta}
    clauses = level >= 4
    if clauses:
        t = rng.choice(THRESHOLDS)
        above = rng.random() < 0.5
        # every year's debt is that year's Adjusted EBITDA times a leverage near the threshold, on a side drawn
        # for each (the last year's the branch): see LEVERAGE_OFFSETS
        sides = [rng.choice((-1, 1)) for _ in years[:-1]] + [1 if above else -1]
        leverage = [t + side * Decimal(rng.choice(LEVERAGE_OFFSETS)) / 10 for side in sides]
        debt_by_leverage = [int((Decimal(e) * r) // g * g) for e, r in zip(ebitda, leverage, strict=True)]
        f["covenant"] = {"threshold": t, "high": Decimal("2.75"), "low": Decimal("1.50"), "above": above}
        # the hurdle a few percent either side of net income (HURDLE_OFFSETS), rounded away from it to three
        # significant figures in millions, whole millions at most (in whole millions, a small company's hurdle
        # sat far from its net income: tests/envs/test_doc_attacks14.py)
        side = 1 if rng.random() < 0.5 else -1
        musd = Decimal(net[-1]) * (1 + side * Decimal(rng.choice(HURDLE_OFFSETS)) / 100) / 1_000_000
        step = Decimal(1).scaleb(min(0, musd.adjusted() - 2))
        hurdle = musd.quantize(step, rounding=ROUND_CEILING if side > 0 else ROUND_FLOOR)
        f["dividend"] = {"hurdle_musd": hurdle, "high": Decimal("0.40"), "low": Decimal("0.15")}
    # balance sheet and cash flow figures a share of revenue (segments run $1 million to $100 billion: SEGMENT_SCALE)
    debt = [_share(rng, r, 500, 6000, g) for r in revenue]
    if clauses:
        debt = debt_by_leverage
    cash = [_share(rng, r, 200, 2000, g) for r in revenue]
    f.update(debt=debt)

    _cover(rep, company, years, home)
    _overview(rep, rng, company, segments)
    _discussion(rep, rng, years, segments, seg_rev, level, grain)
    rep.heading("3. Consolidated statement of income")
    shown_net, shown_tax = net[:], tax[:]
    note = ""
    if restated:
        note = f"(1) Amounts for fiscal {years[-2]} are restated; see Note 4."
    cols = [f"In {home} of U.S. dollars", *map(str, years)]
    fmt = statement_format(home)
    rep.facts["income_table"] = rep.table("Consolidated statement of income", cols, [
        ("Revenue", _row(revenue, "revenue", years, fmt)),
        ("Cost of revenue", _row(cost, "cost", years, fmt)),
        ("Gross profit", _row([r - c for r, c in zip(revenue, cost, strict=True)], "gross", years, fmt)),
        ("Operating expenses", _row(opex, "opex", years, fmt)),
        ("Operating income", _row(op_income, "op_income", years, fmt)),
        ("Interest expense", _row(interest, "interest", years, fmt)),
        ("Income tax expense", _row(shown_tax, "tax", years, fmt)),
        ("Net income", _row(shown_net, "net", years, fmt)),
    ], note)
    rep.heading("4. Consolidated balance sheet")
    rep.table("Consolidated balance sheet (at fiscal year end)", cols, [
        ("Cash and equivalents", _row(cash, "cash", years, fmt)),
        ("Total debt", _row(debt, "debt", years, fmt)),
        ("Total equity", _row([_share(rng, r, 2000, 12_000, g) for r in revenue], "equity", years, fmt)),
    ])
    shares = [max(1000, r // rng.randint(5, 100) // 1000 * 1000) for r in revenue]  # $5-100 of revenue a share
    rep.table("Share data", ["In thousands of shares", *map(str, years)],
              [("Shares outstanding at year end", _row(shares, "shares", years))])
    rep.heading("5. Consolidated statement of cash flows")
    rep.table("Consolidated statement of cash flows", cols, [
        ("Net income", _row(shown_net, "net", years, fmt)),
        ("Depreciation and amortization", _row(dna, "dna", years, fmt)),
        ("Capital expenditures", _row([-_share(rng, r, 100, 800, g) for r in revenue], "capex", years, fmt)),
    ])
    _segments(rep, rng, years, group_a, group_b, seg_rev, op_income, home)
    rep.heading("7. Non-GAAP measures")
    rep.table("Reconciliation of Adjusted EBITDA", cols, [
        ("Operating income", _row(op_income, "op_income", years, fmt)),
        ("Depreciation and amortization", _row(dna, "dna", years, fmt)),
        ("Adjusted EBITDA", _row(ebitda, "ebitda", years, fmt)),
    ])
    _notes(rep, rng, years, level, _FILLER[level - 1] if filler is None else filler)
    return rep


def _cover(rep: Report, company: str, years: list[int], home: str) -> None:
    rep.heading(f"{company} - Annual Report {years[-1]}", 1)
    rep.para(f"This report covers the fiscal years {years[0]} to {years[-1]}. Figures in tables are in {home} of "
             "U.S. dollars unless a table says otherwise; per-share amounts are in dollars.")


def _overview(rep: Report, rng: random.Random, company: str, segments: list[str]) -> None:
    rep.heading("1. Business overview")
    rep.para(f"{company} operates in {len(segments)} reportable segments: {', '.join(segments)}. Each segment is "
             f"managed separately and is headquartered in {rng.choice(_CITIES)}.")


def _discussion(rep: Report, rng: random.Random, years: list[int], segments: list[str], seg_rev: dict, level: int,
                grain: dict[str, int]) -> None:
    rep.heading("2. Management's discussion and analysis")
    rep.para(f"Fiscal {years[-1]} was a year of steady execution across the portfolio. The discussion below "
             "covers revenue by segment; amounts are in U.S. dollars.")
    claims = {}
    for seg in segments:
        true = seg_rev[seg][-1]
        stated = true
        if level >= 4 and rng.random() < 0.6:
            # off by whole units of the table's last digit, at least 100,000: off by 100,000s from a table in
            # whole millions, a stated figure's hundred-thousands digit said whether it agreed; at most half the
            # figure (a segment of a few hundred thousand dollars stated below zero)
            step = max(grain[seg], 100_000)
            stated = true + rng.choice([-1, 1]) * rng.randint(1, max(1, min(40, true // step // 2))) * step
        sentence = rep.para(f"Revenue of the {seg} segment was ${stated:,} in fiscal {years[-1]}, "
                            f"{'up' if rng.random() < 0.6 else 'down'} on the prior year.")
        claims[seg] = (stated, sentence)
    rep.facts["claims"] = claims


def _segments(rep: Report, rng: random.Random, years: list[int], group_a: list[str], group_b: list[str],
              seg_rev: dict, op_income: list[int], home: str) -> None:
    rep.heading("6. Segment information")
    cols = [f"In {home} of U.S. dollars", *map(str, years)]
    # each table's unit is drawn (build_report): with the service table always the one in millions, a
    # total's second-named segment (always a service one) times a million and the first times a thousand
    # passed 300 of 300 total questions without a look at either table's unit
    units, places = rep.facts["units"], rep.facts["places"]
    for group, name in ((group_a, "product"), (group_b, "service")):
        if name == "service":
            said = [n for n in ("product", "service") if units[n] == "millions"] or ["product", "service"]
            unit_words = "millions" if units[said[0]] == "millions" else "thousands"
            rep.para(f"Revenue of the {' and '.join(said)} segments is reported in {unit_words} of U.S. dollars, as "
                     f"the {' and '.join(said)} businesses report it to the chief operating decision maker.")
            for _ in range(2):
                rep.para(_risk_text(rng))
            rep.break_page()  # the second revenue table is on a later page than the first
        unit = units[name]
        fmt = functools.partial(millions if unit == "millions" else thousands, places=places[name])
        rep.facts[f"table_{name}"] = rep.table(
            f"Segment revenue, {name} segments", [f"In {unit} of U.S. dollars", *map(str, years)],
            [(s, _row(seg_rev[s], "seg_rev", years, fmt, (s,))) for s in group])
    shares = {s: rng.randint(5, 30) for s in seg_rev}
    total, g = sum(shares.values()), _GRAIN[(home, 0)]
    seg_oi = {}
    for i, _y in enumerate(years):
        left = op_income[i]
        for j, s in enumerate(seg_rev):
            part = left if j == len(seg_rev) - 1 else op_income[i] * shares[s] // total // g * g
            seg_oi.setdefault(s, []).append(part)
            left -= part
    rep.table("Segment operating income", cols,
              [(s, _row(seg_oi[s], "seg_oi", years, statement_format(home), (s,))) for s in seg_rev])
    rep.facts["seg_oi"] = seg_oi


def _risk_text(rng: random.Random) -> str:
    a, b = rng.sample(_RISK_WORDS, 2)
    return (f"Changes in {a} and {b} could affect results. The company monitors {a} through its planning process "
            f"and reviews exposure to {b} each quarter; no assurance can be given that these measures will suffice. "
            f"Past performance in {a} is not indicative of future results, and {b} may change without notice.")


def _notes(rep: Report, rng: random.Random, years: list[int], level: int, filler: int) -> None:
    f = rep.facts
    rep.heading("8. Notes to the financial statements")
    rep.heading("Note 1. Basis of presentation", 3)
    home = f["statement_unit"]
    rep.para("The financial statements are prepared on an accrual basis. Amounts in the notes are in thousands of "
             "U.S. dollars unless stated otherwise.")
    rep.heading("Note 2. Revenue recognition", 3)
    rep.para("Revenue is recognized when control of goods or services passes to the customer, at the amount the "
             "company expects to receive.")
    rep.heading("Note 3. Debt", 3)
    if "covenant" in f:
        c = f["covenant"]
        f["covenant_clause"] = rep.para(
            f"Under the revolving credit agreement, if the ratio of total debt to Adjusted EBITDA at the end of a "
            f"fiscal year exceeds {c['threshold']}, the applicable margin for the following fiscal year is "
            f"{c['high']}%; otherwise the applicable margin is {c['low']}%.")
    else:
        rep.para("The company has a revolving credit agreement with a syndicate of banks, maturing in five years.")
    if "restatement" in f:
        r = f["restatement"]
        rep.heading("Note 4. Restatement of prior-year results", 3)
        rep.para(f"After year end the company identified an error in the income tax provision for fiscal {r['year']}. "
                 f"The fiscal {r['year']} figures in this report are restated; the table shows the effect.")
        net, orig_net, tax, orig_tax = r["net"], r["original_net"], r["tax"], r["original_tax"]

        def cell(value: int, concept: tuple[Any, ...] | None) -> tuple[str, Decimal, Any]:
            return statement_format(home)(value), Decimal(value), concept

        rows = [("Income tax expense", [cell(orig_tax, ("tax_original", r["year"])), cell(tax - orig_tax, None),
                                        cell(tax, ("tax", r["year"]))]),
                ("Net income", [cell(orig_net, ("net_original", r["year"])), cell(net - orig_net, None),
                                cell(net, ("net", r["year"]))])]
        f["restatement_table"] = rep.table(f"Restatement of fiscal {r['year']} (in {home} of U.S. dollars)",
                                           ["Line item", "As previously reported", "Adjustment", "As restated"], rows)
    if "dividend" in f:
        d = f["dividend"]
        rep.heading("Note 5. Dividends", 3)
        f["dividend_clause"] = rep.para(
            f"The board has resolved that, if net income for fiscal {years[-1]} exceeds ${d['hurdle_musd']} million, "
            f"a special dividend of ${d['high']} per share will be paid; otherwise the special dividend will be "
            f"${d['low']} per share.")
    for k in range(filler):
        _filler_note(rep, rng, years, k + 6)


def _filler_note(rep: Report, rng: random.Random, years: list[int], number: int) -> None:
    kind = number % 5
    _filler_table(rep, rng, years, number, kind)
    rep.para(_risk_text(rng))


def _filler_table(rep: Report, rng: random.Random, years: list[int], number: int, kind: int) -> None:
    if kind == 0:
        rep.heading(f"Note {number}. Leases", 3)
        rep.para("The company leases offices and warehouses under operating leases with terms of one to ten years.")
        rep.table(f"Lease commitments (note {number})", ["Due in", "Amount"],
                  [(str(years[-1] + i), [(thousands(v := _k(rng, 1_000_000, 40_000_000)), Decimal(v), None)])
                   for i in range(1, 6)])
    elif kind == 1:
        rep.heading(f"Note {number}. Properties", 3)
        rep.table(f"Principal properties (note {number})", ["City", "Square meters", "Tenure"],
                  [(c, [(f"{(m := rng.randint(2, 90) * 500):,}", Decimal(m), None),
                        (rng.choice(["Owned", "Leased"]), None, None)]) for c in rng.sample(_CITIES, 4)])
    elif kind == 2:
        rep.heading(f"Note {number}. Employees", 3)
        rep.table(f"Headcount at year end (note {number})", ["Function", *map(str, years)],
                  [(fn, [(f"{(h := rng.randint(40, 4000)):,}", Decimal(h), None) for _ in years]) for fn in _FUNCTIONS])
    elif kind == 3:
        year = rng.choice(years)
        rep.heading(f"Note {number}. Quarterly results for fiscal {year} (unaudited)", 3)
        rep.table(f"Quarterly revenue, fiscal {year} (note {number})", ["Quarter", "Revenue", "Operating income"],
                  [(q, [(thousands(a := _k(rng, 50_000_000, 400_000_000)), Decimal(a), None),
                        (thousands(b := _k(rng, 1_000_000, 60_000_000)), Decimal(b), None)]) for q in ("Q1", "Q2", "Q3", "Q4")])
    else:
        rep.heading(f"Note {number}. Risk factors", 3)
        for _ in range(3):
            rep.para(_risk_text(rng))

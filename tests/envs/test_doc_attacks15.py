"""A helper's fifteenth read of the doc domain, as a policy that wants the reward without reading the
document; each a standing case over 300 generated tasks (levels 1-5, every kind the level draws; the real
``check_doc``, no mocks). The reference passes 300 of 300; chance for an amount is nil.

Each strategy is given its best chance: the gold's own digits and the reference's citations, so only the
trick is measured. Measured (and pinned here):

- one answer hedged across units or signs (``"X (or Y thousand)"``, ``"X or Y"``, ``"+/-X"``), a range,
  a list of numbers, scientific notation or words in a string, two fenced blocks, a duplicated ``answer``
  key: 0 of 300 each (``as_number`` reads one number; the JSON is strict). The honest spellings pass: a
  JSON number with an exponent 300, a margin or growth as a fraction with no scale 68 of 68;
- rounding around the tolerance: FinQA's 5 decimals take one value only (gold + 0.00001: 0 of 300; gold
  + 0.000004 is the same 5-decimal figure), and a percentage with no scale 0 of 68;
- citations not read: none, an invented anchor, or the right ones plus one repeated: 0 of 300 each;
- priors over the question text alone (a model of the generator fit on 300 other tasks: the commonest
  gold by kind, kind and level, kind and years, or the prompt's template): at most 2 of 300; a
  contradiction answered 0 (the two figures agree) 2 of 14 (``AGREE_SHARE``, test_doc_priors.py);
- the agent form: the workspace holds the document alone and the prompt none of the gold's figures, and
  an arithmetic gold (total, growth, margin, contradiction, covenant, dividend: 196 of the 300) is printed
  nowhere in the document, so a search for the answer's pattern finds only the cells a figure or
  restated question asks for (what reading them is).

Carried, measured:

- the statements were always in thousands: "a figure's cell times 1,000" passed 190 of the 190 figure
  questions on a statement line (241 of 300 figure questions, a segment table's unit being drawn), the
  header unread; and a $500 billion company printed nine-digit thousands, so revenue's printed size told
  the company's unit and so both segment tables' outside MIXED_UNITS ("revenue of seven digits or more:
  both in millions", 219 of 300 totals). The statements (and segment operating income, the restatement
  note) now print in the company's unit, thousands or millions to no places, every figure in whole units
  of it (``_gen.statement_format``): the rote 1,000 passes 84 of 190 (135 of 300 figures), the seven-digit
  rule 105 of 300 totals, the best cut on printed revenue tells the statements' unit in 172 of 300 (the
  commoner unit: 167). Reading the header is what it was; the reference passes 300 of 300.
- filler notes' dollar ranges are fixed ($1-40 million in thousands): drawn apart from the company, they
  carry nothing of any gold (left); beside a small company's figures they read as large, as a decoy may.
- left: the income statement's revenue is the segments' sum, so "the unit under which a segment is at
  most revenue" still reads both segment tables (test_doc_attacks14.py), now with the statements' header.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from test_doc_attacks12 import _number

from posttrain.envs.doc._check import SCALES, check_doc
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.envs.doc._episode import episode_prompt, initial_files
from posttrain.types import Task

N = 300


def _tasks(seed: str) -> list[Task]:
    rng = random.Random(seed)
    return [build_task(rng, 1 + i % 5, f"doc-a15-{i}", filler=0, pdf=False) for i in range(N)]


TASKS = _tasks("doc-attacks15")


def _passes(task: Task, body: dict[str, Any] | str) -> bool:
    f = task.fields
    text = body if isinstance(body, str) else json.dumps(body)
    return check_doc(f["document"], f["answer"], f["evidence"], text, f.get("program"), bool(f.get("closed"))).passed


def _gold(task: Task) -> Decimal:
    answer = task.fields["answer"]
    return Decimal(str(answer["number"])) * SCALES[answer.get("scale", "")]


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _evidence(task: Task) -> list[dict[str, Any]]:
    return json.loads(str(task.reference))["evidence"]


def _with(answer: Any, scale: str = "") -> Callable[[Task], dict[str, Any]]:
    return lambda t: {"answer": answer(t), "scale": scale, "evidence": _evidence(t)}


TRICKS: dict[str, Callable[[Task], dict[str, Any] | str]] = {
    "hedge X (or Y thousand)": _with(lambda t: f"{_plain(_gold(t))} (or {_plain(_gold(t) / 1000)} thousand)"),
    "hedge X or Y": _with(lambda t: f"{_plain(_gold(t))} or {_plain(_gold(t) / 1000)}"),
    "hedge +/-X": _with(lambda t: "+/-" + _plain(abs(_gold(t)))),
    "range": _with(lambda t: f"{_plain(_gold(t) * Decimal('0.9'))}-{_plain(_gold(t) * Decimal('1.1'))}"),
    "list of numbers": _with(lambda t: [_plain(_gold(t)), _plain(_gold(t) / 1000)]),
    "scientific notation string": _with(lambda t: f"{_gold(t):.6E}"),
    "words": _with(lambda t: f"{_plain(_gold(t))} dollars"),
    "gold + 0.00001": _with(lambda t: _plain(_gold(t) + Decimal("0.00001"))),
    "no evidence": lambda t: {"answer": _plain(_gold(t)), "scale": "", "evidence": []},
    "invented anchor": lambda t: {"answer": _plain(_gold(t)), "scale": "", "evidence": [
        {"location": {"page": 1, "table": "Table 1", "row": "Revenue", "column": "2024"}, "quote": "1,000"}]},
    "a citation repeated": lambda t: {"answer": _plain(_gold(t)), "scale": "", "evidence": _evidence(t) * 2},
    "two fenced blocks": lambda t: "\n".join(
        f"```json\n{json.dumps({'answer': a, 'scale': s, 'evidence': _evidence(t)})}\n```"
        for a, s in ((_plain(_gold(t)), ""), (_plain(_gold(t) / 1000), "thousand"))),
    "duplicate answer key": lambda t: (f'{{"answer": "{_plain(_gold(t) / 1000)}", "answer": "{_plain(_gold(t))}", '
                                       f'"scale": "", "evidence": {json.dumps(_evidence(t))}}}'),
}


def test_the_reference_passes_and_its_honest_spellings_do() -> None:
    assert sum(_passes(t, str(t.reference)) for t in TASKS) == N
    exponent = sum(_passes(t, f'{{"answer": {_gold(t).normalize():E}, "scale": "", '
                              f'"evidence": {json.dumps(_evidence(t))}}}') for t in TASKS)
    assert exponent == N
    percent = [t for t in TASKS if t.fields["answer"].get("scale") == "percent"]
    assert len(percent) >= 50
    assert sum(_passes(t, _with(lambda t: _plain(_gold(t)))(t)) for t in percent) == len(percent)  # a fraction
    assert sum(_passes(t, _with(lambda t: t.fields["answer"]["number"])(t)) for t in percent) == 0  # no scale


@pytest.mark.parametrize("name", sorted(TRICKS))
def test_a_trick_on_the_gold_itself_passes_nothing(name: str) -> None:
    assert sum(_passes(t, TRICKS[name](t)) for t in TASKS) == 0, name


def _key(task: Task, how: str) -> Any:
    kind = task.tags[1]
    return {"kind": kind, "kind+level": (kind, task.difficulty),
            "kind+years": (kind, tuple(re.findall(r"\b20\d\d\b", task.prompt))),
            "kind+template": (kind, re.sub(r"\d", "#", task.prompt))}[how]


def test_priors_over_the_question_text_pass_next_to_nothing() -> None:
    train = _tasks("doc-attacks15-train")
    by_kind: dict[Any, Counter[str]] = defaultdict(Counter)
    for t in train:
        by_kind[t.tags[1]][_plain(_gold(t))] += 1
    for how in ("kind", "kind+level", "kind+years", "kind+template"):
        table: dict[Any, Counter[str]] = defaultdict(Counter)
        for t in train:
            table[_key(t, how)][_plain(_gold(t))] += 1
        guess = {t.id: (table.get(_key(t, how)) or by_kind[t.tags[1]]).most_common(1)[0][0] for t in TASKS}
        hits = sum(_passes(t, {"answer": guess[t.id], "scale": "", "evidence": _evidence(t)}) for t in TASKS)
        assert hits <= 6, (how, hits)  # measured: at most 2 of 300


def test_the_agent_form_holds_no_figure_of_an_arithmetic_gold() -> None:
    arithmetic = 0
    for t in TASKS:
        assert set(initial_files(t)) == {"document.md"}
        if t.tags[1] in ("figure", "restated"):
            continue
        arithmetic += 1
        answer, gold = t.fields["answer"], _gold(t)
        forms = {format(abs(Decimal(answer["number"])), "f") + "%"} if answer.get("scale") == "percent" else {
            format(abs(gold / u), f",.{p}f") for u in (1, 1000, 10**6) for p in range(4)
            if gold / u == (gold / u).quantize(Decimal(1).scaleb(-p))}
        forms = {s for s in forms if s.endswith("%") or len(re.sub(r"\D", "", s)) >= 4}
        doc, prompt = t.fields["document"], episode_prompt(t)
        for s in forms:
            assert not re.search(r"(?<![\d,.])" + re.escape(s) + r"(?![\d,]|\.\d)", doc), (t.id, s)
            assert s not in prompt, (t.id, s)
    assert arithmetic >= 150


def test_a_statement_figures_unit_is_read_not_known() -> None:
    rng = random.Random("doc-attacks15-figure")
    tasks = [build_task(rng, 1 + i % 5, f"doc-a15-figure-{i}", "figure", filler=0, pdf=False) for i in range(N)]
    honest = rote = on_statement = 0
    revenue: list[tuple[Decimal, bool]] = []  # the printed last-year revenue, and whether the statements are in millions
    for t in tasks:
        honest += _passes(t, str(t.reference))
        doc = parse_document(t.fields["document"])
        income = next(x for x in doc.tables.values() if x.title == "Consolidated statement of income")
        revenue.append((_number(income.rows[0][-1]), "millions" in income.columns[0]))
        cite = _evidence(t)[0]
        if "segment" not in t.prompt:
            on_statement += 1
            rote += _passes(t, {"answer": str(_number(cite["quote"]) * 1000), "scale": "", "evidence": [cite]})
    assert honest == N and on_statement >= 150
    assert rote <= 0.6 * on_statement, (rote, on_statement)  # before: 190 of 190; now 84
    millions = sum(m for _, m in revenue)
    assert 0.3 * N <= millions <= 0.7 * N, millions  # before: 0
    best = max(max(n := sum((r >= cut) == m for r, m in revenue), N - n) for cut, _ in revenue)
    assert best <= 0.65 * N, best  # the printed size does not tell the unit: before N (one unit), now 165 (the commoner: 164)

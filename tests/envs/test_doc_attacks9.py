"""A helper's adversarial read of the doc verifier (attacks9), as a policy under RL that wants a pass,
partial credit or a masked verdict without the arithmetic; each a standing case over generated tasks
(levels 1-5, every kind the level draws; the real ``check_doc`` and the real verifier in its worker, no
mocks). The reference passes every task.

Measured over this file's 300 tasks (78 total, 64 figure, 48 margin, 34 growth, 29 restated, 19
contradiction, 17 covenant, 11 dividend); all held before this file but the last item:

- rounding: the gold rounded to 1-4 significant figures, cited rightly: it passes only where the
  rounding changes nothing (the exact gold, which some golds are: a figure in whole millions; 11, 27, 85
  and 140 of 300); a rounded amount that differs from the gold passes none (0 of 289, 273, 215, 160:
  FinQA's 5 decimals, no tolerance);
- copying from the document with self-consistent evidence (the cell copied is the cell cited): the first
  cell of the first table, the last cell of the last table, the largest printed figure, each read in
  dollars, thousands or millions: none passes a computed question (0 of 900 tries each), and a figure
  question only where the copied cell is the one asked for (2 of 900 for the first cell); the asked row's
  cell in another column (the latest year, read at the right unit) passes exactly where that is the year
  asked (20 of 93 figure and restated questions, chance);
- other forms of the answer: the gold's FinQA program as the answer (a string, or a ``program`` key
  beside it), the right amount with a footnote mark, a year, a currency sign or a fiscal label beside it:
  ``format`` fails, no credit;
- hedges across the fence: a second JSON document in the prose beside the fenced one is never read, so
  the fenced one decides: the right answer in prose beside a wrong fenced one passes none (0 of
  300), and no response passes both ways round;
- feedback the policy writes: a citation's table, row, column or section name (or page) of thousands of
  characters was echoed whole into the feedback, twice (eight citations of a 12,000-character table
  name: 192,600 characters of feedback, the next repair prompt's); names are now cut to 60 characters
  there (1,560 characters in all, ``_document.shown``). Each is the candidate's ``evidence`` fail, never
  infra.
"""

from __future__ import annotations

import json
import random
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from test_doc_attacks15 import _evidence, _gold, _plain

from posttrain.envs.doc import ENV
from posttrain.envs.doc._check import check_doc
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.types import Task

N = 300
COMPUTED = {"total", "growth", "margin", "contradiction", "covenant", "dividend"}


def _tasks() -> list[Task]:
    rng = random.Random("doc-attacks9")
    return [build_task(rng, 1 + i % 5, f"doc-a9-{i}", filler=0, pdf=False) for i in range(N)]


TASKS = _tasks()


def _verdict(task: Task, body: dict[str, Any] | str) -> Any:
    f = task.fields
    text = body if isinstance(body, str) else json.dumps(body)
    return check_doc(f["document"], f["answer"], f["evidence"], text, f.get("program"), bool(f.get("closed")))



def _number(text: str) -> Decimal | None:
    raw = text.strip().strip("$").replace(",", "")
    negative = raw.startswith("(") and raw.endswith(")")
    try:
        value = Decimal(raw.strip("()"))
    except ArithmeticError:
        return None
    return -value if negative else value


def _sig(value: Decimal, figures: int) -> Decimal:
    if not value:
        return value
    exponent = value.adjusted() - figures + 1
    return value.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_UP)


def test_the_reference_passes_every_task() -> None:
    assert sum(_verdict(t, str(t.reference)).passed for t in TASKS) == N


@pytest.mark.parametrize("figures", [1, 2, 3, 4])
def test_a_rounded_amount_passes_only_where_rounding_changes_nothing(figures: int) -> None:
    rounded_off = exact = 0
    for task in TASKS:
        gold = _gold(task)
        guess = _sig(gold, figures)
        verdict = _verdict(task, {"answer": _plain(guess), "scale": "", "evidence": _evidence(task)})
        if guess == gold:
            exact += verdict.passed
        else:
            rounded_off += verdict.passed
            assert verdict.error_class == "wrong_answer", (task.id, verdict)
    assert rounded_off == 0


def _cells(task: Task) -> list[tuple[dict[str, Any], str, Decimal]]:
    """Every numeric body cell of the document: (location, quote, printed value), in reading order."""
    doc = parse_document(task.fields["document"])
    out = []
    for table in doc.tables.values():
        for row in table.rows:
            for col, cell in zip(table.columns[1:], row[1:], strict=False):
                value = _number(cell)
                if value is not None and cell.strip():
                    out.append(({"page": table.page, "table": table.id, "row": row[0], "column": col}, cell, value))
    return out


COPIES = {
    "the first cell of the first table": lambda cells: cells[0],
    "the last cell of the last table": lambda cells: cells[-1],
    "the largest printed figure": lambda cells: max(cells, key=lambda c: c[2]),
}


@pytest.mark.parametrize("copy", list(COPIES))
def test_a_cell_copied_and_cited_passes_no_computed_question(copy: str) -> None:
    passes: dict[str, int] = {}
    for task in TASKS:
        loc, quote, value = COPIES[copy](_cells(task))
        for scale in ("", "thousand", "million"):
            verdict = _verdict(task, {"answer": _plain(value), "scale": scale,
                                      "evidence": [{"location": loc, "quote": quote}]})
            if verdict.passed:
                passes[task.tags[1]] = passes.get(task.tags[1], 0) + 1
                assert [c["location"] for c in _evidence(task)] == [loc], (task.id, copy)
    assert not set(passes) & COMPUTED, passes


def test_the_asked_row_in_the_latest_column_passes_only_where_that_is_the_year_asked() -> None:
    looked_up = [t for t in TASKS if t.tags[1] in ("figure", "restated")]
    passes = same = 0
    for task in looked_up:
        (cite,) = _evidence(task)
        loc = cite["location"]
        table = parse_document(task.fields["document"]).tables[loc["table"].casefold()]
        row = next(r for r in table.rows if r[0] == loc["row"])
        asked, latest = _number(cite["quote"]), _number(row[-1])
        if not asked or latest is None:
            continue
        moved = {**loc, "column": table.columns[-1]}
        answer = _gold(task) * latest / asked
        cited = [{"location": moved, "quote": row[-1]}]
        verdict = _verdict(task, {"answer": _plain(answer), "scale": "", "evidence": cited})
        passes += verdict.passed
        same += moved == loc
    assert len(looked_up) >= 60 and passes == same and same < 0.5 * len(looked_up), (passes, same, len(looked_up))


FORMS = {
    "the gold program as the answer": lambda t: {"answer": t.fields["program"], "scale": "", "evidence": _evidence(t)},
    "a program key beside the right answer": lambda t: {"answer": _plain(_gold(t)), "scale": "",
                                                        "program": t.fields["program"], "evidence": _evidence(t)},
    "a footnote mark": lambda t: {"answer": _plain(_gold(t)) + "(1)", "scale": "", "evidence": _evidence(t)},
    "a superscript footnote": lambda t: {"answer": _plain(_gold(t)) + "\u00b9", "scale": "", "evidence": _evidence(t)},
    "an asterisk": lambda t: {"answer": _plain(_gold(t)) + "*", "scale": "", "evidence": _evidence(t)},
    "a fiscal label": lambda t: {"answer": "FY2023: " + _plain(_gold(t)), "scale": "", "evidence": _evidence(t)},
    "a year after it": lambda t: {"answer": _plain(_gold(t)) + " (2023)", "scale": "", "evidence": _evidence(t)},
    "a currency sign": lambda t: {"answer": "$" + _plain(_gold(t)), "scale": "", "evidence": _evidence(t)},
}


@pytest.mark.parametrize("form", list(FORMS))
def test_other_forms_of_the_answer_are_format_fails(form: str) -> None:
    with_program = [t for t in TASKS if t.fields.get("program")]
    assert len(with_program) >= 100
    for task in with_program:
        verdict = _verdict(task, FORMS[form](task))
        assert (verdict.outcome, verdict.error_class) == ("fail", "format"), (task.id, form, verdict)
        assert verdict.reward == 0 and not verdict.components.get("format"), (task.id, form)


def test_a_document_beside_the_fence_is_never_read() -> None:
    right_in_prose = both_ways = 0
    for task in TASKS:
        right = str(task.reference)
        wrong = json.dumps({**json.loads(right), "answer": _plain(_gold(task) + 1)})
        fenced_wrong = _verdict(task, f"My answer:\n{right}\n\n```json\n{wrong}\n```").passed
        fenced_right = _verdict(task, f"Or perhaps:\n{wrong}\n\n```json\n{right}\n```").passed
        right_in_prose += fenced_wrong
        both_ways += fenced_wrong and fenced_right
    assert right_in_prose == both_ways == 0


LONG = 12_000
"""Eight citations of a name this long fit the response's 100,000 characters."""


@pytest.mark.parametrize("field", ["table", "row", "column", "section", "page"])
def test_a_long_name_in_a_citation_is_not_echoed_into_the_feedback(field: str) -> None:
    task = ENV.generate_level(1, level=4, seed=1)[0]
    ref = json.loads(str(task.reference))
    if field == "section":
        loc: dict[str, Any] = {"page": 1, "section": "s" * LONG}
    elif field == "page":
        loc = {"page": int("9" * 4000), "section": "2"}
    else:
        loc = {"page": 1, "table": "Table 1", "row": "Revenue", "column": "2020", field: "x" * LONG}
    verdict = ENV.make_verifier(None)(task, json.dumps({**ref, "evidence": [{"location": loc, "quote": "1"}] * 8}))
    assert (verdict.outcome, verdict.error_class) == ("fail", "evidence"), verdict
    assert len(verdict.feedback) < 2_000, len(verdict.feedback)

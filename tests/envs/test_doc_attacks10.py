"""A helper's tenth adversarial read of the doc verifier and generator, as a policy that would rather not
do the question's arithmetic; each a standing case (real generated tasks, the real checker; no mocks).
All held before this file: it pins them.

- The right cells, read lazily: a response that cites the reference's cells and clauses exactly (the
  locating done) but answers with a number it could copy without the arithmetic: each number printed in
  the quotes or the question, at either sign and every scale, two quoted numbers added or subtracted,
  0, 1 or 100. It passes none of the computed kinds (total, growth, margin, a contradiction that does not
  agree, covenant, dividend). Counted outside the suite over 60 level-4 tasks of each kind: 0 of 360
  but for a contradiction's difference of 100,000 or 1,000,000 (the constants 100 thousand, 1 million:
  2 of the 80 differences the generator draws, chance);
  the figure and restated kinds are one printed cell (a look-up, 60 of 60 by design); the constant 0
  passes a contradiction where the two figures agree (6 of 60, ``test_doc_priors`` holds it under 30%).
- Hedged or decorated spellings of the right amount not pinned elsewhere (a range in words or with a
  dash, plus-minus, basis points, a one-item list, an object, two numbers on two
  lines or split by ``;`` or ``|``): each a ``format`` fail with no format credit.
- A text answer (TAT-QA's spans) as both answers of a yes/no question, a part or a superset of the span,
  or a span repeated: each a wrong answer, and a wrong yes/no ends a repair.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import pytest

from posttrain.envs.doc._check import check_doc
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.types import Task

COMPUTED = ("total", "growth", "margin", "contradiction", "covenant", "dividend")
SCALES = ("", "thousand", "million", "percent")


def _verdict(task: Task, answer: object, scale: str = "", ref: dict | None = None):
    f = task.fields
    body = {**(ref or json.loads(str(task.reference))), "answer": answer, "scale": scale}
    return check_doc(f["document"], f["answer"], f["evidence"], json.dumps(body), f.get("program"), f.get("closed", False))


def _printed(text: str) -> list[Decimal]:
    """Every number printed in ``text`` as it reads (``(1,234)`` negative, ``$``, ``%`` dropped)."""
    out = []
    for m in re.findall(r"\(?\d[\d,]*(?:\.\d+)?\)?", text):
        value = Decimal(m.strip("()").replace(",", ""))
        out.append(-value if m.startswith("(") and m.endswith(")") else value)
    return out


def _lazy_answers(task: Task) -> set[tuple[str, str]]:
    """What a policy with the right cells, but without the question's arithmetic, could answer."""
    quoted = [n for e in json.loads(str(task.reference))["evidence"] for n in _printed(e["quote"])]
    numbers = {*quoted, *_printed(task.prompt), Decimal(0), Decimal(1), Decimal(100)}
    numbers |= {a + b for a in quoted for b in quoted} | {a - b for a in quoted for b in quoted}
    return {(format(sign * n, "f"), scale) for n in numbers for sign in (1, -1) for scale in SCALES}


def _two_units(task: Task) -> bool:
    """The total's two cited tables print in different units."""
    doc = parse_document(task.fields["document"])
    cites = json.loads(str(task.reference))["evidence"]
    return len({doc.tables[c["location"]["table"].casefold()].columns[0] for c in cites}) == 2


@pytest.fixture(scope="module")
def computed() -> list[Task]:
    out = []
    for kind in COMPUTED:
        rng = random.Random(f"doc-attacks10-{kind}")
        tasks = (build_task(rng, 4, f"doc-a10-{kind}-{i}", kind, filler=0, pdf=False) for i in range(20))
        # a difference of 0, 100,000 or 1,000,000 is a constant's reading (0; 100 or 1 at a scale): 3 of the
        # 81 a contradiction can have, chance, and not what this file pins; a total from two tables in one unit
        # is the two quotes added at that unit, the question's own arithmetic (_gen.MIXED_UNITS)
        out += [t for t in tasks if t.fields["answer"]["number"].lstrip("-") not in ("0", "100000", "1000000")
                and (kind != "total" or _two_units(t))][:3]
    return out


def test_the_right_cells_read_lazily_pass_no_computed_question(computed) -> None:
    assert len(computed) == 3 * len(COMPUTED)
    for task in computed:
        assert check_doc(task.fields["document"], task.fields["answer"], task.fields["evidence"], str(task.reference),
                         task.fields.get("program"), task.fields.get("closed", False)).passed, task.id
        lazy = [a for a in sorted(_lazy_answers(task)) if _verdict(task, *a).passed]
        assert lazy == [], (task.id, lazy)


def test_hedged_or_decorated_spellings_of_the_right_amount_are_format_fails(computed) -> None:
    task = next(t for t in computed if t.tags[1] == "contradiction" and t.fields["answer"]["number"].startswith("-"))
    gold = Decimal(task.fields["answer"]["number"])
    other = gold - 100_000
    assert _verdict(task, f"{gold:,}").passed and _verdict(task, format(gold, "f")).passed
    assert _verdict(task, "\u2212" + str(-gold)).passed  # the minus sign is a minus (test_doc_attacks11.py)
    for form in (f"between {gold} and {other}", f"{gold} to {other}", f"{gold}\u2013{other}", f"{gold}\u00b1100000",
                 f"{gold} bp", [str(gold)], {"value": str(gold)}, f"{gold}\n{other}",
                 f"{gold};{other}", f"{gold}|{other}", f"{gold}  {other}"):
        got = _verdict(task, form)
        assert (got.outcome, got.error_class, got.components["format"]) == ("fail", "format", 0.0), form


DOC = """<!-- page 1 -->

# 1. Overview

**Table 1: Revenue by segment (in thousands of U.S. dollars)**

| Segment | 2023 | 2022 |
|---|---|---|
| Cloud Services | 12,345 | 11,000 |
| Retail | 9,000 | 12,000 |
"""


@pytest.mark.parametrize(("gold", "answer"), [
    ("Yes", ["yes", "no"]), ("Yes", "yes and no"), ("Yes", "yes/no"), ("Yes", "Yes, no"), ("Yes", "yes or no"),
    ("Yes", ["yes", "yes"]), ("Yes", ""), ("Cloud Services", "Cloud"), ("Cloud Services", "Cloud Services and Retail"),
    ("Cloud Services", ["Cloud Services", "Retail"]), ("Cloud Services", "cloud services segment"),
    ("2023", "2023 2022"), ("2023", ["2023", "2022"]), (["Cloud Services", "Retail"], ["Cloud Services"]),
    (["Cloud Services", "Retail"], "Cloud Services Retail")])
def test_a_text_answer_is_its_spans_not_a_hedge_or_a_part(gold, answer) -> None:
    right = check_doc(DOC, {"text": gold}, [], json.dumps({"answer": gold, "scale": "", "evidence": []}))
    got = check_doc(DOC, {"text": gold}, [], json.dumps({"answer": answer, "scale": "", "evidence": []}))
    assert right.passed and (got.outcome, got.error_class) == ("fail", "wrong_answer"), answer
    assert got.ends_repair  # told wrong, a text answer is among the few left

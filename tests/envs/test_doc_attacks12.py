"""A helper's twelfth read of the doc generator, as a policy that learns where the answer sits rather than
reading what the document says; each a standing case (real generated tasks, the real checker; no mocks).

- A total's units by rote: the product segments' revenue table was always in thousands and the service
  segments' always in millions, and a total question always named the product segment first. With the
  two cells found, "the first named times a thousand, the second times a million" passed 300 of 300
  total questions (levels 1-5) through ``check_doc``, and so did "the service table's cell times a
  million": neither reads a unit. Which table is in millions is now drawn, and the two segments are named
  in either order: 158 and 148 of 300 (a coin), the reference 300 of 300.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

from posttrain.envs.doc._check import check_doc
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.types import Task


def _number(text: str) -> Decimal:
    value = Decimal(text.strip("()").replace(",", ""))
    return -value if text.startswith("(") else value


def _passes(task: Task, answer: Decimal) -> bool:
    f = task.fields
    body = {**json.loads(str(task.reference)), "answer": str(answer), "scale": ""}
    return check_doc(f["document"], f["answer"], f["evidence"], json.dumps(body), f.get("program")).passed


def test_a_totals_units_are_read_not_known_by_the_order_or_the_title() -> None:
    rng = random.Random("doc-attacks12-total")
    tasks = [build_task(rng, 1 + i % 5, f"doc-a12-total-{i}", "total", filler=0, pdf=False) for i in range(60)]
    by_order = by_title = honest = 0
    for task in tasks:
        f = task.fields
        honest += check_doc(f["document"], f["answer"], f["evidence"], str(task.reference)).passed
        doc = parse_document(f["document"])
        cites = json.loads(str(task.reference))["evidence"]
        first, second = (_number(c["quote"]) for c in cites)
        by_order += _passes(task, first * 1000 + second * 1_000_000)
        scales = [1_000_000 if "service" in doc.tables[c["location"]["table"].casefold()].title else 1000
                  for c in cites]
        by_title += _passes(task, first * scales[0] + second * scales[1])
    assert honest == 60
    assert by_order <= 0.7 * 60 and by_title <= 0.7 * 60, (by_order, by_title)  # before: 60 and 60 of 60


"""A helper's fifth adversarial read of the doc and files verifiers, each a standing case (real generated
tasks, the real verifiers in their workers, the real ``RepairEnv``; no mocks).

- doc, guess-and-check on scale and sign: a policy that finds the right cells but never reads their unit
  (a table in thousands, one in millions, dollars), the percent convention or the sign, tries the cells'
  digits at each scale and sign in turn over the repair attempts. ``Wrong answer`` struck one off, and the
  right one came within 3 tries in 147 of 149 generated questions (levels 1-4) where the first try passed
  61. A wrong amount that is the gold's figures at another scale or sign now ends the repair
  (``_check.is_rescaled``), as a wrong yes/no or branch does; an honest slip (another year's figure, an
  amount off by 1,000) is still repaired.
"""

from __future__ import annotations

import json
import random
from decimal import ROUND_HALF_UP, Decimal

import pytest

from posttrain.envs import RepairEnv, get_domain
from posttrain.envs.doc._env import build_task
from posttrain.types import Generation, Task

DOC = get_domain("doc")


@pytest.fixture(scope="module")
def verify_doc():
    return DOC.make_verifier(None)


def _ref(task: Task) -> dict:
    return json.loads(str(task.reference))


def _printed(quote: str) -> Decimal:
    return Decimal(quote.strip("()").replace(",", "")) * (-1 if quote.startswith("(") else 1)


def _percent(x: Decimal, places: int) -> Decimal:
    return (x * 100).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _guesses(task: Task) -> list[tuple[Decimal, str]]:
    """What a policy that has the right cells, but not their unit, the percent convention or the sign,
    tries: the cells' printed digits at each reading (``(answer, scale)``)."""
    ev = _ref(task)["evidence"]
    cells = [_printed(c["quote"]) for c in ev if "table" in c["location"]]
    kind = task.tags[1]
    if kind == "figure":
        return [(cells[0], "thousand"), (cells[0], "million"), (cells[0], "")]
    if kind == "total":  # one table in thousands, the other in millions (either)
        a, b = cells
        return [(a + b, "thousand"), (a + b, "million"), (a * 1000 + b * 10**6, ""), (a * 10**6 + b * 1000, "")]
    if kind == "growth":
        a, b = cells
        x = abs(_percent((b - a) / a, 2))
        return [(x, "percent"), (-x, "percent"), (x, "")]
    if kind == "margin":
        x = _percent(cells[0] / cells[1], 1)
        return [(x, ""), (x / 100, "percent"), (x, "percent")]
    stated = Decimal(ev[0]["quote"].split("$")[1].split(" ")[0].replace(",", ""))  # contradiction
    return [(d, "") for unit in (1000, 10**6) for d in (cells[0] * unit - stated, stated - cells[0] * unit)]


def _in_turn(verify, task: Task) -> list[tuple[str, str, bool]]:
    """The guesses, the right one last (three tries in all), through a repair episode: each step's
    ``(outcome, error class, done)`` until it ends."""
    ref, gold = _ref(task), Decimal(task.fields["answer"]["number"])
    scale_of = {"": 1, "thousand": 1000, "million": 10**6, "percent": Decimal("0.01")}
    scale_gold = scale_of[task.fields["answer"].get("scale", "")]
    guesses = list(dict.fromkeys(_guesses(task)))
    right = [g for g in guesses if g[0] * scale_of[g[1]] == gold * scale_gold]
    assert right, (task.id, guesses)
    tries = [g for g in guesses if g not in right][:2] + right[:1]
    env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
    env.reset(task)
    steps = []
    for answer, scale in tries:
        response = json.dumps({**ref, "answer": format(answer, "f"), "scale": scale})
        step = env.step(Generation((), (), (), response, "eos"))
        steps.append((step.verdict.outcome, step.verdict.error_class, step.done))
        if step.done:
            break
    return steps


@pytest.mark.parametrize("kind", ["figure", "total", "growth", "margin", "contradiction"])
def test_the_right_digits_tried_at_each_scale_and_sign_end_the_repair(verify_doc, kind) -> None:
    """Before: each task passed at the third try (the right reading last); now the first wrong
    reading ends the episode."""
    rng = random.Random(f"docfiles-attacks5-{kind}")
    tasks = [build_task(rng, 4, f"docfiles-a5-{kind}-{i}", kind, filler=0, pdf=False) for i in range(4)]
    for task in tasks:
        assert verify_doc(task, str(task.reference)).passed, task.id
        assert _in_turn(verify_doc, task) == [("fail", "wrong_answer", True)], task.id


def _other_year(task: Task) -> Decimal:
    """A figure question's answer read from another year's cell of the right row (in the right unit)."""
    from posttrain.envs.doc._document import parse_document

    ref = _ref(task)
    cite = ref["evidence"][0]
    table = parse_document(task.fields["document"]).tables[cite["location"]["table"].casefold()]
    row = next(r for r in table.rows if r[0] == cite["location"]["row"])
    unit = Decimal(str(ref["answer"])) / _printed(cite["quote"])
    return next(_printed(cell) * unit for col, cell in zip(table.columns[1:], row[1:], strict=True)
                if col != cite["location"]["column"] and cell != cite["quote"])


def test_an_honest_slip_is_still_repaired(verify_doc) -> None:
    """Another year's figure of the right row, or the right amount off by 1,000 (a percentage off by
    0.01): not the gold at another scale or sign, so the repair goes on, and the right answer then passes."""
    rng = random.Random("docfiles-attacks5-slip")
    for kind in ("figure", "total", "growth", "margin", "contradiction"):
        task = build_task(rng, 4, f"docfiles-a5-slip-{kind}", kind, filler=0, pdf=False)
        ref = _ref(task)
        answer = ref["answer"]
        slips = [format(Decimal(str(answer)) + (1000 if isinstance(answer, int) else Decimal("0.01")), "f")]
        if kind == "figure":
            slips.append(format(_other_year(task), "f"))
        for slip in slips:
            env = RepairEnv(verify_doc, lambda t: [1], lambda t: [2], max_attempts=3)
            env.reset(task)
            step = env.step(Generation((), (), (), json.dumps({**ref, "answer": slip}), "eos"))
            assert (step.verdict.error_class, step.done) == ("wrong_answer", False), (task.id, slip)
            assert env.step(Generation((), (), (), str(task.reference), "eos")).verdict.passed

"""An eighth adversarial read of the rg domains: a rule that reads one thing off the question and
answers without solving, played through the check as the worker runs it (``_check.handle_check``).

Hole found (the test failed before its fix):

- game_of_life_halting's board told its answer. reasoning-gym's only dying patterns are diagonal lines
  and each of its oscillators has two live cells side by side, so "False if two live cells touch side
  by side, else True" passed 200 of 200 default tasks (seeds 1, 2) and 40 of 40 at levels 0 and 1; the
  best live-cell-count threshold in hindsight split 39 of 40 at level 1. posttrain now draws its boards
  (``_life.py``): pieces whose cell count and side-by-side pairs are drawn apart from their fate, the
  answer the board simulated. The pair rule passes 101 of 200 (seeds 1, 2) and 20-21 of 40 at levels 0
  and 1; the best count threshold 107 of 200 and 22-24 of 40.
- self_reference: "1 where a statement counts 7 of 7, else 4" passed 34, 38, 35 of 100 default tasks
  (seeds 1-3) against the 25% share; held per statement number (``Rule.tells``): 23, 23, 23.

Scanned, nothing above chance: futoshiki (seed 2: each row's blanks filled with its missing numbers in
ascending or descending order, or a greedy Latin fill that ignores the inequalities, pass 0 of 40 default
tasks; the greedy fill 3 of 20 at level 0) and knight_swap ("No" passes 10 and 9 of 40 default tasks,
seeds 1 and 2; only a "No" task passes unsolved, and fewer empty squares tell "No" less than the constant).
"""

from __future__ import annotations

import collections
import re

import pytest

from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._domain import rg_domain
from posttrain.types import Task


def live_cells(question: str) -> set[tuple[int, int]]:
    """The live cells of the board the question prints, as (row, column)."""
    lines = question.split("Initial board:", 1)[1].strip().split("\n")
    return {(r, c) for r, line in enumerate(lines) for c, d in enumerate(re.findall(r"[01]", line)) if d == "1"}


def touching(cells: set[tuple[int, int]]) -> bool:
    return any((r + 1, c) in cells or (r, c + 1) in cells for r, c in cells)


def simulated_halt(cells: set[tuple[int, int]], rows: int, cols: int, steps: int) -> bool:
    """Whether the board is empty at some step up to ``steps``: Conway's rule on a rows x cols torus,
    cell by cell (apart from ``_life.py``'s numpy)."""
    for _ in range(steps):
        if not cells:
            return True
        counts: dict[tuple[int, int], int] = {}
        for r, c in cells:
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    if dr or dc:
                        at = ((r + dr) % rows, (c + dc) % cols)
                        counts[at] = counts.get(at, 0) + 1
        cells = {at for at, n in counts.items() if n == 3 or (n == 2 and at in cells)}
    return not cells


def passes(task: Task, answer: str) -> bool:
    return handle_check({"generator": "game_of_life_halting", "spec": task.fields["config"], "question": task.prompt,
                         "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"],
                         "response": OPEN + answer + CLOSE})["outcome"] == "pass"


@pytest.mark.parametrize(("level", "seed", "n"), [(None, 1, 24), (0, 2, 24), (1, 1, 24)])
def test_game_of_life_haltings_board_tells_no_more_than_a_coin(level: int | None, seed: int, n: int) -> None:
    """Side by side -> False passed every task; the best live-cell-count threshold in hindsight 39 of 40
    at level 1 (and 29 at level 0); an odd count -> False is the third rule measured."""
    domain = rg_domain("game_of_life_halting")
    tasks = domain.generate_params(n, seed=seed) if level is None else domain.generate_level(n, level=level, seed=seed)
    boards = [live_cells(t.prompt) for t in tasks]
    pair = sum(passes(t, "False" if touching(b) else "True") for t, b in zip(tasks, boards, strict=True))
    odd = sum(passes(t, "False" if len(b) % 2 else "True") for t, b in zip(tasks, boards, strict=True))
    halts = [t.fields["answer"] == "True" for t in tasks]
    threshold = max(sum((len(b) >= k) == (h if up else not h) for b, h in zip(boards, halts, strict=True))
                    for k in range(120) for up in (True, False))
    assert max(pair, odd, threshold) <= 0.7 * n, (pair, odd, threshold)


def test_game_of_life_haltings_answer_is_its_board_simulated() -> None:
    """Every stored answer is the printed board run for the question's step limit, and either answer
    comes with and without two live cells side by side (reasoning-gym's: never True with such a pair)."""
    domain = rg_domain("game_of_life_halting")
    tasks = [*domain.generate_params(16, seed=3), *domain.generate_level(12, level=1, seed=3)]
    seen = set()
    for t in tasks:
        meta, cells = t.fields["rg_metadata"], live_cells(t.prompt)
        steps = int(re.search(r"at or before (\d+) steps", t.prompt).group(1))
        assert steps == meta["simulation_steps"]
        halted = simulated_halt(cells, meta["grid_size_x"], meta["grid_size_y"], steps)
        assert t.fields["answer"] == str(halted) and meta["should_oscillate"] is not halted
        assert passes(t, str(halted)) and not passes(t, str(not halted))
        seen.add((touching(cells), halted))
    assert {(True, True), (True, False)} <= seen, seen


@pytest.mark.parametrize("seed", [2, 3])
def test_self_references_counted_seven_tells_no_more_than_its_share(seed: int) -> None:
    """"1 where a statement counts 7 (of the 7), else 4" passed 34, 38, 35 of 100 default tasks (seeds 1-3)
    against the 25% each answer is held to; each answer is now held to it also among the tasks that count
    a 7 or not, and that show each number in each of statements 1-4 (``_hardened._statement_numbers``):
    23, 23, 23. The best map from one statement's number to the answer, in hindsight, is held too."""
    tasks = rg_domain("self_reference").generate_params(60, seed=seed)
    passed = sum(handle_check({"generator": "self_reference", "spec": t.fields["config"], "question": t.prompt,
                               "answer": t.fields["answer"], "metadata": t.fields["rg_metadata"],
                               "response": OPEN + ("1" if "7 of" in t.prompt else "4") + CLOSE})["outcome"] == "pass"
                 for t in tasks)
    numbers = [re.findall(r"'(?:At least|At most|Exactly) (\d) of", t.prompt) for t in tasks]
    best = 0
    for k in range(4):
        by = collections.Counter((n[k], t.fields["answer"]) for n, t in zip(numbers, tasks, strict=True))
        best = max(best, sum(max(c for (v, _), c in by.items() if v == shown) for shown in {v for v, _ in by}))
    assert passed <= 0.3 * len(tasks) and best <= 0.4 * len(tasks), (passed, best)

"""A fifth adversarial read of the rg domains, played as a reward-hacking policy through the check as
the worker runs it (``_check.handle_check``, in process here): cheap answers on every generator's
default tasks (a constant, yes/no, 0, empty, the question echoed, its first, last, least or greatest
number, all its numbers, every answer of the batch at once).

Holes found (each test failed before its fix):

- number_format's last candidate copied: the generator's copy guard (``_generate.guesses``) read the
  question's numbers without thousands commas or exponents (``916,237,422.283`` as three numbers), so
  a candidate written so was never counted as a copy, and the last one passed 8-12 of 30 default tasks
  and 6-11 of 30 at level 2 (a share of 25% allows 8). First and last are now also read as the
  question writes them (``_generate._shown``).
- circuit_logic's constant "0": its outputs are 0 in 62% of its entries, and at 4 draws a task the
  entries ran out before its even split, the passed-over 0s filling the rest: "0" passed 19 of 32
  default tasks (52 of 100). It draws 8 (``_hardened.HARDENED``).
- game_of_life's empty board: from level 1 its boards die out within the steps asked (levels 1-3:
  20, 24 and 24 of 24 answers the empty board), so all zeros in the question's grid size passed them.
  Its levels stop at 0 (``_names.GENERATORS``), where the empty board is 1-3 of 24 answers.

Held (regression cases): the rest of the cheap answers pass at most the share the generator's answers
allow (a quarter; a half of a yes/no generator, a third of a three-answer one).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._domain import rg_domain
from posttrain.envs.rg._generate import MAX_SHARE, guesses


def _rg(task: Any, answer: str) -> bool:
    request = {"generator": task.domain.removeprefix("rg/"), "spec": task.fields["config"], "question": task.prompt,
               "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"],
               "response": f"{OPEN}{answer}{CLOSE}"}
    return handle_check(request)["outcome"] == "pass"


def _candidates(prompt: str) -> list[str]:
    """number_format's candidates, as the question writes them (after its last colon)."""
    return prompt.strip().rsplit(":", 1)[-1].split()


@pytest.mark.parametrize(("level", "seed"), [(None, 1), (None, 2), (2, 1)])
def test_number_format_s_last_candidate_copied_passes_no_more_than_the_share(level: int | None, seed: int) -> None:
    domain = rg_domain("number_format")
    tasks = domain.generate_tasks(30, seed=seed) if level is None else domain.generate_level(30, level=level, seed=seed)
    assert all(_rg(t, t.fields["answer"]) for t in tasks)
    last = sum(_rg(t, _candidates(t.prompt)[-1]) for t in tasks)
    assert last <= math.ceil(MAX_SHARE * len(tasks))  # before: 12, 9 and 11 of 30


def test_a_number_written_with_commas_or_an_exponent_is_a_copy() -> None:
    assert guesses({"question": "the largest: 8.6e+08 861,467,436.136\n", "answer": "861467436.136"}) == [
        "861467436.136", "copy:last"]
    assert "copy:last" in guesses({"question": "the smallest: 1,2 8.614674398940001e+08", "answer": "861467439.894"})
    assert "copy:first" in guesses({"question": "pick: 406283136.184000 406,283,139.958", "answer": "406283136.18399996"})
    # a list's items, a decimal comma and a number next to a word stay as they were read
    assert guesses({"question": "sort 1,2345 and x1e5y", "answer": "12345"}) == ["12345.0"]


@pytest.mark.parametrize(("level", "seed", "n"), [(None, 1, 32), (None, 1, 100), (2, 2, 32)])
def test_circuit_logic_s_commonest_output_passes_no_more_than_half(level: int | None, seed: int, n: int) -> None:
    """Its outputs are 0 or 1, 62% of them 0: the constant passes at most the even split."""
    domain = rg_domain("circuit_logic")
    tasks = domain.generate_tasks(n, seed=seed) if level is None else domain.generate_level(n, level=level, seed=seed)
    assert all(_rg(t, t.fields["answer"]) for t in tasks)
    assert sum(_rg(t, "0") for t in tasks) <= n / 2  # before: 19 of 32 and 52 of 100 (default, seed 1)


def _empty_board(task: Any) -> str:
    """game_of_life's grid of the question's size, every cell dead, as JSON."""
    grid = json.loads(task.prompt[task.prompt.rindex("\n\n"):].strip().rstrip("."))
    return json.dumps([[0] * len(grid[0])] * len(grid))


def test_game_of_life_s_empty_board_passes_no_more_than_the_share() -> None:
    domain = rg_domain("game_of_life")
    assert domain.level_range() == (0, 0)  # from level 1 its boards die out
    with pytest.raises(ValueError, match=r"^rg/game_of_life: level 1: "):
        domain.generate_level(2, level=1, seed=1)
    for tasks in (domain.generate_tasks(24, seed=1), domain.generate_level(24, level=0, seed=2)):
        assert all(_rg(t, t.fields["answer"]) for t in tasks)
        assert sum(_rg(t, _empty_board(t)) for t in tasks) <= MAX_SHARE * len(tasks)

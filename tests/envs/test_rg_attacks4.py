"""A fourth adversarial read of the rg domains, played as a reward-hacking policy on every generator
(default configuration and top level, seeds 1 and 2, 24 tasks each) through the check as the worker
runs it (``_check.handle_check``, in process here).

Holes found (each test failed before its fix):

- The input copied back: rotate_matrix rotates some matrices by a multiple of 360 degrees (30% of its
  default tasks, up to 40% at level 0) and pool_matrix's default configuration pools some by 1x1 (30-38%),
  so the question's matrix copied as the answer passed them. Generation now holds that copy to the
  share of a constant (``_generate._grid_copies``).
- number_format's top level draws candidates within 1e-6 of each other and shows them to 3 decimals:
  every candidate is the answer, and the question's last number copied passed 24 of 24 tasks. Such
  entries are not generated (``_hardened._distinct_candidates``), and its levels stop at 2.

Held (regression cases): the right answer among a wrong one (``A or B``, a list, new lines, glued),
the question echoed, junk, and the answer wrapped (quotes, brackets, a sentence) on the generators
tests/envs/test_rg_attacks2.py does not play; reasoning-gym's partial credit (0.01-0.9 for a hedge)
never reaches the reward, which is 1 only for a full score.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._domain import rg_domain
from posttrain.envs.rg._generate import MAX_SHARE


def _rg(task: Any, answer: str) -> dict[str, Any]:
    request = {"generator": task.domain.removeprefix("rg/"), "spec": task.fields["config"], "question": task.prompt,
               "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"],
               "response": f"{OPEN}{answer}{CLOSE}"}
    return handle_check(request)


def _first_grid(question: str) -> str:
    """The question's first run of lines holding only numbers: the matrix it gives."""
    rows: list[str] = []
    for line in question.split("\n"):
        if re.fullmatch(r"\s*-?\d+(\.\d+)?(\s+-?\d+(\.\d+)?)*\s*", line):
            rows.append(line.strip())
        elif rows:
            break
    return "\n".join(rows)


@pytest.mark.parametrize(("generator", "level", "seed"), [("rotate_matrix", None, 1), ("rotate_matrix", 0, 3),
                                                          ("pool_matrix", None, 1), ("pool_matrix", None, 2)])
def test_the_input_matrix_copied_back_passes_no_more_than_the_share(generator: str, level: int | None,
                                                                    seed: int) -> None:
    domain = rg_domain(generator)
    tasks = domain.generate_tasks(40, seed=seed) if level is None else domain.generate_level(40, level=level, seed=seed)
    assert all(_rg(t, t.fields["answer"])["outcome"] == "pass" for t in tasks)
    copied = sum(_rg(t, _first_grid(t.prompt))["outcome"] == "pass" for t in tasks)
    assert copied <= MAX_SHARE * len(tasks)  # before: 12, 16, 14 and 15 of 40


def test_number_format_candidates_that_show_one_value_are_not_generated() -> None:
    domain = rg_domain("number_format")
    assert domain.level_range() == (0, 2)  # level 3: every candidate within 1e-6 of the others
    with pytest.raises(ValueError, match=r"^rg/number_format: level 3: "):
        domain.generate_level(2, level=3)
    with pytest.raises(ValueError, match="the generator's rule keeps no such task"):
        domain.generate_params(2, level=2, params={"max_delta": 1e-6})
    tasks = domain.generate_level(20, level=2, seed=1)
    last = sum(_rg(t, t.prompt.split()[-1])["outcome"] == "pass" for t in tasks)
    assert all(_rg(t, t.fields["answer"])["outcome"] == "pass" for t in tasks) and last < len(tasks) / 2


HELD = ["tsumego", "word_sequence_reversal", "manipulate_matrix", "sentence_reordering", "caesar_cipher",
        "acre", "base_conversion", "course_schedule", "number_format", "rotate_matrix", "word_ladder", "shortest_path"]


def _hedges(ref: str, wrong: str) -> list[str]:
    return [f"{ref} or {wrong}", f"{wrong} or {ref}", f"[{ref!r}, {wrong!r}]", f"{ref}\n{wrong}", f"{wrong}\n{ref}",
            f"{ref}{wrong}", f"{wrong} {ref}", f"{ref} | {wrong}", f'"{ref}"', f"[{ref}]", f"The answer is {ref}.",
            "", "\u200b", "*", "nan", "None"]


@pytest.mark.parametrize("generator", HELD)
def test_hedges_and_wrapped_answers_fail(generator: str) -> None:
    tasks = rg_domain(generator).generate_tasks(8, seed=2)
    passed = []
    for i, task in enumerate(tasks):
        ref = str(task.fields["answer"])
        wrong = next((str(o.fields["answer"]) for o in tasks[i + 1:] + tasks[:i]
                      if str(o.fields["answer"]).strip() != ref.strip()), ref + "0")
        for answer in [*_hedges(ref, wrong), task.prompt]:
            verdict = _rg(task, answer)
            if verdict["outcome"] == "pass":
                passed.append((task.id, answer[:60]))
    assert passed == []

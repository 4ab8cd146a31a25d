"""No generated rg task carries a reference that fails its own verifier (``_generate._kept``).

A task's reference is what SFT trains on and what the pool's validation expects to score 1. Before
generation checked it, jugs stored "No solution" for puzzles that have one, tower_of_hanoi's top level
wrote moves past the longest answer checked, rubiks_cube's cubes above 3x3 had an empty reference, and
countdown's level 2 raised a traceback at seed 41. ``test_references_pass_where_they_failed`` holds
those (~30 s); ``test_every_level_s_references_pass`` (slow) sweeps every generator's levels.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.envs import get_domain
from posttrain.envs.rg import GENERATORS
from posttrain.envs.rg._check import MAX_ANSWER_CHARS, extract_answer
from posttrain.types import Task


def _failing(tasks: list[Task]) -> list[tuple[str, str]]:
    """(task id, outcome) of each task whose reference its own verifier does not pass."""
    def verdict(task: Task):
        return get_domain(task.domain).make_verifier(None)(task, str(task.reference))

    with ThreadPoolExecutor(2) as ex:
        verdicts = list(ex.map(verdict, tasks))
    return [(t.id, v.outcome) for t, v in zip(tasks, verdicts, strict=True) if not v.passed]


CASES = [("jugs", 1, 0, 8), ("jugs", 1, 1, 8), ("tower_of_hanoi", 3, 1, 10), ("countdown", 2, 41, 24),
         ("course_schedule", 4, 0, 8), ("intermediate_integration", 7, 0, 8), ("rubiks_cube", 0, 0, 8)]
"""(generator, level, seed, n) where a stored reference failed (jugs; tower_of_hanoi's tasks 3 and 9,
131,063 and 524,303 characters) or generation raised (countdown's task 20), and a few more."""


@pytest.mark.parametrize(("name", "level", "seed", "n"), CASES)
def test_references_pass_where_they_failed(name: str, level: int, seed: int, n: int) -> None:
    tasks = get_domain(f"rg/{name}").generate_level(n, level=level, seed=seed)
    assert len(tasks) == n
    assert all(len(extract_answer(str(t.reference))[0] or "") <= MAX_ANSWER_CHARS for t in tasks)
    assert _failing(tasks) == []


def test_a_configuration_without_standing_references_fails_in_one_line() -> None:
    """rubiks_cube's cubes above 3x3 have no example answer: every entry is dropped, and generation
    says so in one line naming the generator, the configuration and why; its levels stop at 0."""
    env = get_domain("rg/rubiks_cube")
    with pytest.raises(ValueError) as e:
        env.generate_params(4, params={"cube_size": 4})
    message = str(e.value)
    assert message.startswith("rg/rubiks_cube: params {'cube_size': 4}: only 0 of ") and "\n" not in message
    assert "the answer block is empty" in message
    assert env.level_range() == (0, 0)
    with pytest.raises(ValueError, match=r"^rg/rubiks_cube: level 3: expected a level in \[0, 0\]$"):
        env.generate_level(2, level=3)


SLOW_LEVELS = {"futoshiki": 3, "jugs": 2, "number_sequence": 2, "zebra_puzzles": 3}
"""Generators whose levels from this one take over ~30 s for two tasks on a busy core: skipped."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_level_s_references_pass(name: str) -> None:
    """Two tasks of seed 3 at every level pass their own verifier; the default configuration only where
    there are no levels (a leveled generator's default configuration is checked by test_rg.py's
    ``test_every_generator``, 8 tasks through the same verifier: generating it here again cost one more
    generation a generator, a child interpreter each for the ``HASH_ORDERED`` ones and codeio)."""
    env = get_domain(f"rg/{name}")
    low, top = env.level_range()
    tasks = [] if env.levels else env.generate_tasks(2, seed=3)
    for level in range(low, min(top, SLOW_LEVELS.get(name, top + 1) - 1) + 1) if env.levels else ():
        tasks += env.generate_level(2, level=level, seed=3)
    assert _failing(tasks) == []

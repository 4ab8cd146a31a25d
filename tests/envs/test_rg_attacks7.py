"""A seventh adversarial read of the rg domains: a rule that reads one thing off the question and
answers without solving, played through the check as the worker runs it (``_check.handle_check``).

Hole found (the test failed before its fix):

- circuit_logic's final gate tells its output. The gate on the OUT line is OR, NOR, AND or XOR, and
  an OR of 3-5 terms is almost always 1, an AND almost always 0 (OR 1 in 71 of 74 default entries,
  AND 0 in 35 of 36, NOR 0 in 41 of 47): "1 for OR, else 0", read off the diagram's last gate, passed
  84 and 76 of 100 default tasks (seeds 1, 2) and 82 and 76 at level 0, against the even split its
  0/1 answers are held to. Generation now holds each answer to half of the tasks that show the same
  final gate (``Rule.tells``, ``_generate.balanced``): the rule passes 51 of 100 at each, and the best
  gate-to-answer map in hindsight at most 52.
"""

from __future__ import annotations

import collections
import re

import pytest

from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._domain import rg_domain

_GATES = {"++": "OR", "&&": "AND", "↑↑": "NAND", "↓↓": "NOR", "⊕⊕": "XOR"}


def out_gate(question: str) -> str:
    """The gate drawn on the circuit's OUT line: what a policy reads without evaluating a term."""
    [line] = [row for row in question.split("\n") if "OUT" in row]
    return _GATES[re.findall("|".join(map(re.escape, _GATES)), line)[-1]]


@pytest.mark.parametrize(("level", "seed"), [(None, 1), (None, 2), (0, 3)])
def test_circuit_logics_final_gate_tells_no_more_than_a_coin(level: int | None, seed: int) -> None:
    domain = rg_domain("circuit_logic")
    tasks = domain.generate_params(60, seed=seed, level=level)
    guess = {"OR": "1", "NAND": "1", "AND": "0", "NOR": "0", "XOR": "0"}
    passed = sum(handle_check({"generator": "circuit_logic", "spec": t.fields["config"], "question": t.prompt,
                               "answer": t.fields["answer"], "metadata": t.fields["rg_metadata"],
                               "response": f"{OPEN}{guess[out_gate(t.prompt)]}{CLOSE}"})["outcome"] == "pass"
                 for t in tasks)
    by_gate = collections.Counter((out_gate(t.prompt), t.fields["answer"]) for t in tasks)
    best = sum(max(by_gate[(g, "0")], by_gate[(g, "1")]) for g in {g for g, _ in by_gate})
    assert passed <= 33 and best <= 33, (passed, best, sorted(by_gate.items()))


def test_game_of_life_halting_shows_its_board_whole_or_makes_no_task() -> None:
    """Its levels 2-3 (boards 50 x 50 and 100 x 100) printed the board as numpy's summary, corners of
    dead cells around "...": no task showed a live cell, each answer a coin flip. Level 2 is now
    refused in one line, and an entry whose board is too large to print whole is not kept (a recipe's
    grid_size: 32 x 32 made 0 of 20, a ValueError in one line)."""
    from reasoning_gym.factory import DATASETS

    from posttrain.envs.rg._config import build_config
    from posttrain.envs.rg._hardened import HARDENED

    domain = rg_domain("game_of_life_halting")
    with pytest.raises(ValueError, match=r"^rg/game_of_life_halting: level 2: expected a level in \[0, 1\]$"):
        domain.generate_level(1, level=2, seed=5)
    tasks = [*domain.generate_level(4, level=1, seed=5), *domain.generate_tasks(4, seed=5)]
    assert all("..." not in t.prompt and t.prompt.count("1") >= 3 for t in tasks)
    big = build_config("game_of_life_halting", {"params": {"grid_size_x": 32, "grid_size_y": 32}}, seed=5, size=1)
    entry = DATASETS["game_of_life_halting"][0](config=big)[0]
    assert "1" not in entry["question"].split("Initial board:")[1] and not HARDENED["game_of_life_halting"].keep(entry)


@pytest.mark.parametrize("seed", [1, 2])
def test_syllogisms_all_premise_tells_no_more_than_a_coin(seed: int) -> None:
    """'Yes' where a premise starts with "All", else 'No' (the atmosphere of the premises, no logic)
    passed 67 and 77 of 100 default tasks (seeds 1, 2); each answer is now held to half of the tasks
    with and without such a premise (``Rule.tells``): 50 and 51."""
    tasks = rg_domain("syllogism").generate_params(60, seed=seed)
    passed = sum(handle_check({"generator": "syllogism", "spec": t.fields["config"], "question": t.prompt,
                               "answer": t.fields["answer"], "metadata": t.fields["rg_metadata"],
                               "response": OPEN + ("Yes" if re.search(r"^\d+\. All ", t.prompt, re.M) else "No") + CLOSE})
                 ["outcome"] == "pass" for t in tasks)
    assert passed <= 33, passed

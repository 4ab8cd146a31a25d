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

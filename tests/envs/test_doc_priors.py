"""Priors of the doc generator: no question kind has a gold answer a constant guess would hit often.

A contradiction question asked about a segment drawn at random, 60% of whose stated figures are off,
had the gold 0 (the two figures agree) in 27 of 60 level-4 tasks: the answer 0 with the right two
citations passed 45% one-shot without the subtraction. The question now picks an agreeing segment in
about a fifth of the tasks (``_questions.AGREE_SHARE``). Each kind's commonest gold answer, and each
conditional kind's commonest branch, is held under a ceiling; honest references still pass, 0 included.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from posttrain.envs import get_domain
from posttrain.envs.doc._check import check_doc
from posttrain.envs.doc._env import build_task
from posttrain.envs.doc._questions import QUESTIONS

ENV = get_domain("doc")
N = 200
MODAL_CEILING = 0.30
"""The largest share of a kind's tasks one constant answer may have (a two-way branch: 0.6)."""


def _golds(kind: str) -> list[str]:
    rng = random.Random(f"doc-priors-{kind}")
    return [build_task(rng, 4, f"doc-priors-{i}", kind, filler=0).fields["answer"]["number"] for i in range(N)]


@pytest.mark.parametrize("kind", sorted(QUESTIONS))
def test_no_kind_has_a_constant_answer_that_passes_often(kind: str) -> None:
    answer, count = Counter(_golds(kind)).most_common(1)[0]
    assert count / N <= MODAL_CEILING, (kind, answer, count)


def test_a_contradiction_agrees_sometimes_but_not_often() -> None:
    zeros = _golds("contradiction").count("0")
    assert 0.08 * N <= zeros <= 0.30 * N, zeros  # 0 stays a possible answer: the question says "answer 0 if they agree"


@pytest.mark.parametrize(("kind", "rate_at"), [("covenant", 1), ("dividend", 0)])
def test_the_branch_of_a_conditional_amount_is_a_coin(kind: str, rate_at: int) -> None:
    """The rate the condition picks (the program's last ``multiply``: debt times a margin, a per-share
    amount times the shares) is either branch about half the time."""
    rng = random.Random(f"doc-priors-branch-{kind}")
    programs = [build_task(rng, 4, f"b{i}", kind, filler=0).fields["program"] for i in range(N)]
    branches = Counter(p.rsplit("multiply(", 1)[1].rstrip(")").split(", ")[rate_at] for p in programs)
    assert len(branches) == 2 and max(branches.values()) <= 0.6 * N, branches


def test_zero_with_the_right_citations_rarely_passes_a_contradiction() -> None:
    tasks = ENV.generate_params(60, level=4, seed=0, params={"kinds": ["contradiction"], "filler": 0})
    passed = honest = 0
    for task in tasks:
        f, ref = task.fields, json.loads(str(task.reference))
        passed += check_doc(f["document"], f["answer"], f["evidence"], json.dumps({**ref, "answer": 0})).passed
        honest += check_doc(f["document"], f["answer"], f["evidence"], str(task.reference)).passed
    assert honest == 60 and 1 <= passed <= 0.30 * 60, (honest, passed)  # before: 27 of 60

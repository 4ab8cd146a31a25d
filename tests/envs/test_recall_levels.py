"""The recall domain's levels read by a policy that knows its level and never reads the question's key.
The curriculum (posttrain/tasks/_curriculum.py) trains a chunk of tasks at one level at a time, and a
level L put the fact exactly L notes before the question: "answer the code L notes back" passed 350 of
350 generated tasks at each of levels 1, 2, 4, 8, 16 and 64, a count a policy could learn in place of
reading the key. At levels 1 and 2 the last code alone in its note was the fact in 81 % and 41 %.
Generated tasks now state every code, 6-10 of them, L to L + max(10, L // 4) - 1 notes back
(``fact_distances``), the fact one of them drawn at random, each alone in its note: at each of those
levels no rule below, nor the distance that passed most on another seed, passes more than 0.2 of
300 tasks (at most 49 measured, chance about 39; with 4-6 codes there and 1-2 around them it was
about 0.2); the fact's distance still grows with the level."""

from __future__ import annotations

import re

import pytest

from posttrain.envs.recall import ENV
from posttrain.envs.recall._domain import _pieces, fact_distances

VERIFY = ENV.make_verifier(None)
_CODE = re.compile(r"The [a-z ]+ is (\d{4})\.")
N = 300


def _codes(task) -> list[tuple[int, str, bool]]:
    """(notes between it and the question, value, alone in its note) of each code the episode states."""
    notes = [p.split(": ", 1)[1] for p in _pieces(task)]
    return [(len(notes) - 1 - i, m.group(1), m.group(0) == n) for i, n in enumerate(notes) for m in _CODE.finditer(n)]


def _count_back(task, level: int) -> dict[str, str]:
    """Answers a policy that counts notes back from the question could give, knowing the level."""
    codes = _codes(task)
    at = {j: v for j, v, _ in codes}
    reach = [c for c in codes if c[0] >= level]
    alone = [v for _, v, a in codes if a]
    return {"the code L notes back": at.get(level, "0000"), "the code L-1 notes back": at.get(level - 1, "0000"),
            "the code L+1 notes back": at.get(level + 1, "0000"),
            "the code nearest L back": min(codes, key=lambda c: (abs(c[0] - level), c[0]))[1],
            "the first code at least L back": min(reach)[1] if reach else "0000",
            "the last code alone in its note": alone[-1] if alone else "0000"}


def _best_distance(level: int) -> int:
    """The distance back whose code was the fact most often, on another seed: the count a policy
    trained at this level would learn if one paid."""
    hits: dict[int, int] = {}
    for task in ENV.generate_level(N, level=level, seed=71):
        j = len(task.fields["notes"])
        hits[j] = hits.get(j, 0) + 1
    return max(hits, key=hits.__getitem__)


@pytest.mark.parametrize("level", [1, 2, 4, 8, 16, 64])
def test_no_count_back_from_the_question_passes_much_at_a_fixed_level(level: int) -> None:
    tasks = ENV.generate_level(N, level=level, seed=72)
    learned = _best_distance(level)
    passes: dict[str, int] = {}
    for task in tasks:
        assert VERIFY(task, task.reference).passed
        at = {j: v for j, v, _ in _codes(task)}
        picks = _count_back(task, level) | {"the distance that paid most on another seed": at.get(learned, "0000")}
        for name, answer in picks.items():
            passes[name] = passes.get(name, 0) + VERIFY(task, answer).passed
    worst = max(passes, key=passes.__getitem__)
    assert passes[worst] <= 0.2 * N, (level, worst, passes[worst], N)


def test_the_fact_is_further_back_the_higher_the_level() -> None:
    """What a level means to the curriculum: the fact within ``fact_distances(level)``, alone in its
    note, further back on average level by level."""
    means = []
    for level in range(1, 65):
        tasks = ENV.generate_level(20, level=level, seed=73)
        for task in tasks:
            pieces = [p.split(": ", 1)[1] for p in _pieces(task)]
            assert len(task.fields["notes"]) in fact_distances(level), (level, task.id)
            assert pieces[-1 - len(task.fields["notes"])] == f"The {task.fields['key']} is {task.reference}."
            assert task.difficulty == level
        means.append(sum(len(t.fields["notes"]) for t in tasks) / len(tasks))
    assert [fact_distances(level).start for level in range(1, 65)] == list(range(1, 65))
    assert all(a < b for a, b in zip(means[:-8:8], means[8::8], strict=True)), means

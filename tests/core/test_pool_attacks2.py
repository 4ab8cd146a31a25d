"""The task pool read as a policy that wants the same task over and over: it fails (or is filtered out
of) every task of a domain but one it knows by heart, so that one task is all the domain has left in
its pool, and the domain's whole share of each step goes to it. A scripted policy stands in for the
model (episode j of task t at step s passes by a hash of (t, s, j)), through the real ``TaskPool``.

Each case is a hole that was open: the figures before the fix are in its commit message."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from posttrain.errors import TaskError
from posttrain.tasks import FilterSpec, SamplerSpec, StratifySpec, TaskPool
from posttrain.types import Task


def _coin(*key: object) -> float:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") / 2**64


def _memorizer(task: Task, step: int, j: int) -> bool:
    """Knows b-0 by heart (passes 7 of 8: never easy, never saturated), fails every other task of b."""
    if task.domain == "b":
        return task.id == "b-0" and j != 0
    return _coin(task.id, step, j) < 0.5


def _tasks(domain: str, n: int) -> list[Task]:
    return [Task(id=f"{domain}-{i}", domain=domain, prompt="", fields={}) for i in range(n)]


def test_one_task_left_in_a_domain_s_pool_is_not_its_whole_share() -> None:
    """With a filter, b's other tasks leave the mix as impossible and b-0 was b's only task: it took
    b's half of the normal slots, 3.6 groups of it a step (360 of the last 100 steps' 800 draws, 261 a
    second copy in the same step; 0.72 reward per episode on b against the honest 0.5). Now a task set
    hands out a task once a step while another domain of that pool has one left: b-0 once a step."""
    spec = SamplerSpec(kind="pool", stratify=StratifySpec(easy_fraction=0.1, hard_fraction=0.1), filter=FilterSpec())
    pool = TaskPool(_tasks("a", 40) + _tasks("b", 40), seed=0, spec=spec)
    memorized = Counter()
    for step in range(100):
        batch = pool.next(8, step=step)
        extra = pool.next(4, step=step)  # a refill of the same step (dynamic sampling)
        for tasks in (batch, extra):
            pool.observe(tasks, [[_memorizer(t, step, j) for j in range(8)] for t in tasks])
        ids = [t.id for t in batch + extra]
        assert len(ids) == len(set(ids)), (step, ids)
        memorized[step] = ids.count("b-0")
    assert sum(memorized[s] for s in range(50, 100)) <= 50


def test_a_domain_smaller_than_its_share_draws_each_task_once_before_any_twice() -> None:
    """Weights that ask a domain for more draws in a step than it has tasks still hold (every task once,
    then again); a domain weighted 0 is still left out, and one whose breaker is open is passed over."""
    pool = TaskPool(_tasks("a", 3) + _tasks("b", 2) + _tasks("c", 5), seed=0,
                    spec=SamplerSpec(kind="pool", weights={"a": 3, "b": 1, "c": 0}))
    a = [t.id for t in pool.next(8, step=0) if t.domain == "a"]
    assert len(a) == 6 and len(set(a[:3])) == 3 and Counter(a) == dict.fromkeys(a[:3], 2)
    assert {t.domain for t in pool.next(6, skip={"a"}, step=1)} == {"b"}
    weighted = TaskPool(_tasks("a", 12) + _tasks("b", 12), seed=0,
                        spec=SamplerSpec(kind="pool", weights={"a": 3, "b": 1}))
    drawn = [t.domain for s in range(10) for t in weighted.next(8, step=s)]
    assert (drawn.count("a"), drawn.count("b")) == (60, 20)


def test_a_domain_whose_levels_run_backwards_is_refused_in_one_line() -> None:
    """A plugin whose ``level_range()`` is (hardest, easiest): (3, 1) divided by zero at the first draw
    (ZeroDivisionError); (2, 1) put every level's prior at 1.0, so all its unseen tasks were easy and
    the domain silently left the normal pool. Now the pool refuses it, naming the domain."""
    tasks = [Task(id=f"b-{i}", domain="b", prompt="", fields={}, difficulty=i % 3) for i in range(6)]
    for levels in ((3, 1), (2, 1), (float("nan"), 2)):
        with pytest.raises(TaskError, match=r"^b: level_range\(\) is .*easiest <= hardest"):
            TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", stratify=StratifySpec()), levels=lambda d, lv=levels: lv)

"""The task pool and its curricula read as a policy would game them: failing (or passing) a few groups
on purpose so that the pool serves fewer of the tasks it cannot do, and the curriculum stays where
reward is cheap. A scripted policy stands in for the model (episode j of task t at step s passes by a
hash of (t, s, j)), through the real ``make_sampler`` pool and rg generator, over many steps.

Each case is a hole that was open: the figures before the fix are in its commit message."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from posttrain.tasks import CurriculumSpec, SamplerSpec, StratifySpec, TaskPool, TaskSource, make_sampler
from posttrain.types import Task

Policy = Callable[[Task, int, int], bool]
CURRICULUM = "rg/basic_arithmetic"


def _coin(*key: object) -> float:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") / 2**64


def honest(task: Task, step: int, j: int) -> bool:
    """Level L passes at 0.95 - 0.3 L; a task without a level at 0.5."""
    p = 0.5 if task.difficulty is None else max(0.0, 0.95 - 0.3 * task.difficulty)
    return _coin(task.id, step, j) < p


def sandbagger(task: Task, step: int, j: int) -> bool:
    """Could pass level 1 at 0.65, but fails every episode of level 1 and above on purpose."""
    return (task.difficulty is None or task.difficulty < 1) and honest(task, step, j)


def _play(pool: TaskPool, policy: Policy, steps: int, *, k: int = 8, g: int = 8) -> list[list[Task]]:
    batches = []
    for step in range(steps):
        batch = pool.next(k, step=step)
        pool.observe(batch, [[policy(t, step, j) for j in range(g)] for t in batch])
        batches.append(batch)
    return batches


def _curriculum_pool(stratify: StratifySpec) -> TaskPool:
    spec = SamplerSpec(kind="pool", stratify=stratify, curriculum=CurriculumSpec(window=8, lower_below=0.1, chunk=32))
    fixed = [Task(id=f"a-{i}", domain="a", prompt=f"a {i}", fields={}) for i in range(40)]
    pool = make_sampler(spec, fixed, seed=0, sources=[TaskSource(generator=CURRICULUM, curriculum=True)])
    assert isinstance(pool, TaskPool)
    return pool


def test_a_curriculum_is_never_starved_by_its_setting_s_pool() -> None:
    """A curriculum's setting estimated easy (its first groups passed) or hard (one group failed on
    purpose) sent the whole source to a pool with no share (the defaults) or a small one: its
    controller never saw the window it needs, the level stayed, and the source left the mix. Before:
    4 of 480 groups drawn over 60 steps, level 0 for good (honest, shares 0); the sandbagger 55 of 480 at shares
    0.1 (honest 224). Now the source keeps its share, and its controller moves the level."""
    for stratify in (StratifySpec(), StratifySpec(easy_fraction=0.1, hard_fraction=0.1)):
        for policy, top in ((honest, 2), (sandbagger, 1)):
            pool = _curriculum_pool(stratify)
            batches = _play(pool, policy, 20)
            drawn = sum(t.domain == CURRICULUM for b in batches for t in b)
            assert drawn == 80, (stratify, policy.__name__, drawn)  # half of 160: its weight, as domain a's
            assert max(c[2] for c in pool.streams[CURRICULUM].changes) == top, (stratify, policy.__name__)
    # at its lowest level a hopeless source is hard, as a task set's setting: the controller cannot help
    pool = _curriculum_pool(StratifySpec())
    _play(pool, lambda t, s, j: t.domain == "a" and j % 2 == 0, 3)
    assert pool.stream_pool(CURRICULUM) == "hard" and pool.streams[CURRICULUM].level == 0


def test_a_pool_with_no_share_is_no_dead_end_for_a_learner_that_improved() -> None:
    """With ``hard_fraction`` 0 (the default) and no filter, a setting failed for its first 20 steps
    (a weak start: it passes 0.6 after) went to the hard pool and was never drawn again, its
    estimates frozen: before, 0 of its groups in steps 50-99. Now a stale estimate in a pool with no
    share comes back after ``revisit_every`` steps, and the setting returns to normal."""
    def improving(task: Task, step: int, j: int) -> bool:
        p = 0.5 if task.domain == "a" else 0.0 if step < 20 else 0.6
        return _coin(task.id, step, j) < p

    a = [Task(id=f"a-{i}", domain="a", prompt="", fields={}) for i in range(40)]
    b = [Task(id=f"b-{i}", domain="b", prompt="", fields={}, difficulty=1) for i in range(40)]
    pool = TaskPool(a + b, seed=0, spec=SamplerSpec(kind="pool", stratify=StratifySpec()),
                    levels=lambda d: (0, 4) if d == "b" else None)
    batches = _play(pool, improving, 100)
    assert {pool.pool_of(t) for t in b} == {"normal"}
    assert sum(t.domain == "b" for batch in batches[50:] for t in batch) > 100  # 200 of 400 (before: 0)
    # what a resume reads: the last step each task was observed
    again = TaskPool(a + b, seed=0, spec=pool.spec, levels=lambda d: (0, 4) if d == "b" else None)
    again.load_state_dict(pool.state_dict())
    assert again.seen == pool.seen and [t.id for t in again.next(8, step=100)] == [t.id for t in pool.next(8, step=100)]

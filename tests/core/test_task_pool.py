"""The task pool: uniform draws unchanged, difficulty pools and their shares, filtering and revisits,
curricula, domain weights and schedules, canaries and the alarm, bounded refills, exact resume of
all of it from a JSON state, and ``tasks stats`` over a run directory.

A scripted policy stands in for the model: episode j of task t at step s passes with a probability
set by the task (its level, or a per-task skill), drawn from a hash of (t, s, j), so a run is a
pure function of the seed and can be replayed to compare a resumed pool with an uninterrupted one."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from posttrain.config import parse_config
from posttrain.envs import get_domain
from posttrain.errors import ConfigError, TaskError
from posttrain.tasks import (
    CurriculumSpec,
    FilterSpec,
    MixPoint,
    SamplerSpec,
    StratifySpec,
    Stream,
    TaskPool,
    TaskSampler,
    TaskSource,
    canary_alarms,
    canary_metrics,
    domain_metrics,
    fill_batch,
    format_domains,
    format_stats,
    list_domains,
    make_sampler,
    run_stats,
)
from posttrain.types import Task, Trajectory, Turn, Verdict


def _tasks(domain: str, n: int, **kw) -> list[Task]:
    return [Task(id=f"{domain}-{i}", domain=domain, prompt=f"{domain} {i}", fields={}, **kw) for i in range(n)]


def _coin(*key: object) -> float:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") / 2**64


def _play(task: Task, step: int, skill: dict[str, float], g: int = 4) -> list[bool]:
    p = skill.get(task.id, 0.5) if task.difficulty is None else max(0.0, 0.9 - 0.35 * task.difficulty)
    return [_coin(task.id, step, j) < p for j in range(g)]


def test_the_uniform_sampler_is_todays_bit_for_bit() -> None:
    tasks = _tasks("math", 5) + _tasks("code", 4)
    made = make_sampler(SamplerSpec(), tasks, seed=3)
    ref = TaskSampler(tasks, seed=3)
    assert type(made) is TaskSampler
    draws = [made.next(4, skip={"code"} if i == 2 else ()) for i in range(6)]
    assert draws == [ref.next(4, skip={"code"} if i == 2 else ()) for i in range(6)]
    assert made.state() == made.state_dict() == ref.state() and made.skipped == ref.skipped
    # the order of an epoch is random.Random(f"{seed}:{epoch}") over indices, as on main
    order = list(range(9))
    random.Random("3:0").shuffle(order)
    assert [t.id for t in TaskSampler(tasks, seed=3).next(9)] == [tasks[i].id for i in order]


def test_domain_weights_hold_exactly_and_a_skipped_domain_passes_its_turn() -> None:
    tasks = _tasks("a", 10) + _tasks("b", 10) + _tasks("c", 10)
    pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", weights={"a": 2, "b": 1, "c": 1}))
    drawn = [t.domain for s in range(10) for t in pool.next(8, step=s)]
    assert (drawn.count("a"), drawn.count("b"), drawn.count("c")) == (40, 20, 20)
    batch = pool.next(8, skip={"a"}, step=10)
    assert {t.domain for t in batch} == {"b", "c"} and pool.skipped >= 4  # a's share (at least), passed over
    with pytest.raises(ValueError, match="weights: 'z' is not a domain of the training pool"):
        TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", weights={"z": 1}))


def test_a_schedule_of_weights_moves_the_mix_over_steps() -> None:
    spec = SamplerSpec(kind="pool", schedule=(MixPoint(0, {"a": 1, "b": 0}), MixPoint(10, {"a": 0, "b": 1})))
    assert spec.weights_at(0) == {"a": 1, "b": 0} and spec.weights_at(5) == {"a": 0.5, "b": 0.5}
    assert spec.weights_at(99) == {"a": 0, "b": 1}
    pool = TaskPool(_tasks("a", 5) + _tasks("b", 5), seed=1, spec=spec)
    assert {t.domain for t in pool.next(4, step=0)} == {"a"} and {t.domain for t in pool.next(4, step=12)} == {"b"}


def test_a_setting_whose_first_group_all_fails_sends_its_unseen_tasks_to_hard() -> None:
    """The level prior counts as one episode: one group of 8 that all fail takes a level-0 setting
    (prior 0.83) to 0.83 / 9 = 0.09, under the hard line (0.1), and its unseen tasks start there; a
    setting that passes half its episodes stays normal, and one passed by every episode turns easy."""
    def pool_after(groups: list[list[bool]]) -> tuple[TaskPool, list[Task]]:
        tasks = [Task(id=f"r{i}", domain="rg/x", prompt="", fields={}, difficulty=0) for i in range(8)]
        pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", stratify=StratifySpec()), levels=lambda d: (0, 4))
        for step, group in enumerate(groups):
            pool.next(1, step=step)
            pool.observe(tasks[step:step + 1], [group])
        pool.next(1, step=len(groups))  # a step's groups fold in as the next step begins
        return pool, tasks

    pool, tasks = pool_after([])
    assert pool.pool_of(tasks[7]) == "normal"  # the prior alone: 0.83
    pool, tasks = pool_after([[False] * 8])
    assert pool.pool_of(tasks[7]) == "hard" and pool.difficulty.prior(tasks[7]) == pytest.approx(5 / 6 / 9)
    pool, tasks = pool_after([[True, False] * 4] * 3)
    assert pool.pool_of(tasks[7]) == "normal"
    pool, tasks = pool_after([[True] * 8] * 3)
    assert pool.pool_of(tasks[7]) == "easy"


def test_stratified_shares_and_the_shortfall_from_normal() -> None:
    tasks = _tasks("a", 30)
    spec = SamplerSpec(kind="pool", stratify=StratifySpec(easy_fraction=0.25, hard_fraction=0.25))
    pool = TaskPool(tasks, seed=0, spec=spec)
    for _ in range(8):  # easy: always pass; 10-19 hard: never; the rest normal
        pool.observe(tasks[:20], [[True] * 4] * 10 + [[False] * 4] * 10)
    assert {pool.pool_of(t) for t in tasks[:10]} == {"easy"} and {pool.pool_of(t) for t in tasks[10:20]} == {"hard"}
    drawn = [pool.pool_of(t) for s in range(5) for t in pool.next(8, step=s)]
    assert (drawn.count("easy"), drawn.count("hard"), drawn.count("normal")) == (10, 10, 20)
    no_easy = TaskPool(tasks[10:], seed=0, spec=spec)  # no easy task: its share comes from normal
    for _ in range(5):  # 10-19 never pass, 20-29 half the time (unseen, they would start at their setting's 0.005)
        no_easy.observe(tasks[10:30], [[False] * 4] * 10 + [[True, False] * 2] * 10)
    drawn = [no_easy.pool_of(t) for s in range(5) for t in no_easy.next(8, step=s)]
    assert (drawn.count("hard"), drawn.count("normal")) == (10, 30)


def test_saturated_and_impossible_tasks_leave_and_come_back() -> None:
    tasks = _tasks("a", 6)
    pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", filter=FilterSpec(after=2, revisit_every=5)))
    pool.next(1, step=0)
    for _ in range(2):
        pool.observe([tasks[0], tasks[1], tasks[2]], [[True] * 4, [False] * 4, [True, False, True, True]])
    assert pool.filtered == {"a-0": ("saturated", 0), "a-1": ("impossible", 0)}
    assert {t.id for s in range(1, 4) for t in pool.next(6, step=s)} == {f"a-{i}" for i in range(2, 6)}
    assert pool.metrics()["domain/a/pool_filtered"] == 2.0
    assert "a-0" in {t.id for t in pool.next(6, step=5)}  # revisited: back for a group
    pool.observe([tasks[0]], [[True] * 4])
    assert pool.filtered["a-0"] == ("saturated", 5)  # still saturated: out again at once
    everything = TaskPool(tasks[:2], seed=0, spec=SamplerSpec(kind="pool", filter=FilterSpec(after=1)))
    everything.observe(tasks[:2], [[True] * 4, [False] * 4])
    assert len(everything.next(4, step=1)) == 4 and everything.filtered == {}  # all filtered: all back


def test_the_curriculum_raises_and_lowers_a_generator_s_level() -> None:
    env = get_domain("rg/basic_arithmetic")
    stream = Stream("rg/basic_arithmetic", env, seed=0, level=0,
                    spec=CurriculumSpec(window=4, raise_above=0.7, lower_below=0.1, chunk=8))
    for step in range(3):
        for _ in range(4):
            stream.observe(stream.next(), 1.0, step=step)
    assert stream.level == 3 and [c[1:] for c in stream.changes] == [(0, 1), (1, 2), (2, 3)]
    assert {stream.next().difficulty for _ in range(5)} == {3.0}
    stale = Task(id="old", domain="rg/basic_arithmetic", prompt="", fields={}, difficulty=1.0)
    for _ in range(10):
        stream.observe(stale, 0.0, step=4)  # drawn before the level changed: not the controller's
    assert stream.level == 3
    for _ in range(4):
        stream.observe(stream.next(), 0.0, step=5)
    assert stream.level == 2


def test_curriculum_chunks_leave_out_tasks_that_overlap_evaluation() -> None:
    env = get_domain("rg/spell_backward")
    held = env.generate_level(8, level=0, seed=1234)
    banned = {held[0].prompt}

    def exclude(tasks):
        return {t.id for t in tasks if t.prompt in banned}

    stream = Stream("rg/spell_backward", env, seed=0, level=0, spec=CurriculumSpec(chunk=8), exclude=exclude)
    first = [stream.next() for _ in range(8)]
    assert all(t.prompt not in banned for t in first)


def _run(pool, steps: int, *, k: int, skill: dict[str, float], log: list | None = None) -> list[list[str]]:
    out = []
    for step in range(steps):
        batch = pool.next(k, step=step)
        pool.observe(batch, [_play(t, step, skill) for t in batch])
        out.append([t.id for t in batch])
        if log is not None:
            log.append(pool.metrics())
    return out


def _mixed_pool(seed: int = 0) -> TaskPool:
    sources = [TaskSource(generator="rg/basic_arithmetic", curriculum=True),
               TaskSource(generator="rg/spell_backward", curriculum=True, level=1)]
    spec = SamplerSpec(kind="pool", stratify=StratifySpec(easy_fraction=0.2, hard_fraction=0.2),
                       filter=FilterSpec(after=2, revisit_every=4), curriculum=CurriculumSpec(window=3, chunk=6),
                       weights={"a": 2.0}, canary_rate=0.1, canaries_per_domain=2)
    return make_sampler(spec, _tasks("a", 12) + _tasks("b", 7), seed=seed, sources=sources)


def test_a_resumed_pool_continues_the_same_tasks_levels_and_pools() -> None:
    skill = {f"a-{i}": i / 11 for i in range(12)} | {f"b-{i}": 1.0 for i in range(7)}
    whole, metrics = _run(_mixed_pool(), 14, k=8, skill=skill), []
    first = _mixed_pool()
    head = _run(first, 6, k=8, skill=skill)
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores
    second = _mixed_pool()
    second.load_state_dict(state)
    tail = []
    for step in range(6, 14):
        batch = second.next(8, step=step)
        second.observe(batch, [_play(t, step, skill) for t in batch])
        tail.append([t.id for t in batch])
        metrics.append(second.metrics())
    assert head + tail == whole
    assert any(m["domain/rg/basic_arithmetic/level"] > 0 for m in metrics)  # the curriculum moved
    assert any(tid.startswith("rg-") and "canary" in tid for b in whole for tid in b)
    with pytest.raises(ValueError, match="uniform sampler"):
        TaskSampler(_tasks("a", 2), seed=0).load_state(state)
    with pytest.raises(ValueError, match="this run uses a pool with seed 1"):
        _mixed_pool(seed=1).load_state_dict(state)


def test_canaries_are_mixed_in_never_observed_and_any_pass_is_an_alarm() -> None:
    pool = make_sampler(SamplerSpec(kind="pool", canary_rate=0.25, canaries_per_domain=3),
                        get_domain("rg/spell_backward").generate_tasks(6, seed=0), seed=0)
    batches = [pool.next(4, step=s) for s in range(4)]
    canaries = [t for b in batches for t in b if "canary" in t.tags]
    assert len(canaries) == 4 and len({t.id for t in canaries}) == 3
    pool.observe(canaries, [[True] * 4] * len(canaries))
    assert all(pool.difficulty.observed(t) == 0 for t in canaries)

    def episode(task, j, passed):
        return Trajectory(task_id=task.id, group_id=f"7/0/{task.id}", sample_idx=j, reward=float(passed),
                          turns=(Turn((1,), (2,), (-0.1,), "eos", Verdict("pass" if passed else "fail", float(passed))),))

    honest = [[episode(canaries[0], j, False) for j in range(4)]]
    assert canary_alarms(canaries[:1], honest) == []
    hacked = [[episode(canaries[0], 0, False), episode(canaries[0], 1, True)]]
    (alarm,) = canary_alarms(canaries[:1], hacked, step=7)
    assert alarm.line() == f"hack alarm: canary task {canaries[0].id} (rg/spell_backward) passed at step 7: " \
                           f"trajectory 7/0/{canaries[0].id}#1, attempt 0"
    assert canary_metrics(canaries[:1], hacked) == {"canary/episodes": 2.0, "canary/passed": 1.0, "canary/alarm": 1.0}
    with pytest.raises(ConfigError, match="none of the training domains can make canaries"):
        make_sampler(SamplerSpec(kind="pool", canary_rate=0.1), _tasks("a", 3), seed=0)


def test_a_planted_exploit_trips_the_canary_alarm_within_a_few_steps() -> None:
    """A verifier that accepts the question echoed back (the planted exploit), and a policy that learnt
    to echo: its canaries pass, so the alarm fires in the first steps that draw one."""
    from posttrain.envs.rg._domain import respond

    env = get_domain("rg/spell_backward")
    honest = env.make_verifier(None)

    def planted(task, response):
        return Verdict("pass", 1.0) if task.prompt in response else honest(task, response)

    pool = make_sampler(SamplerSpec(kind="pool", canary_rate=0.1), env.generate_tasks(20, seed=0), seed=0)
    fired = []
    for step in range(8):
        batch = pool.next(4, step=step)
        groups = [[Trajectory(task_id=t.id, group_id=f"{step}/{i}/{t.id}", sample_idx=0, reward=0.0,
                              turns=(Turn((1,), (2,), (-0.1,), "eos", planted(t, respond(t.prompt))),))]
                  for i, t in enumerate(batch)]
        fired += canary_alarms(batch, groups, step=step)
    assert fired and fired[0].step <= 3
    assert all(v.outcome == "fail" for v in [honest(t, respond(t.prompt)) for t in pool.canaries])


def test_zero_variance_refills_are_bounded_and_say_so() -> None:
    def draw(k):
        return list(range(k)), list(range(k)), [False] * k

    with pytest.raises(TaskError) as e:
        fill_batch(draw, want=4, max_draws=3)
    assert "3 draws gave 12 groups and only 0 of the 4" in str(e.value) and "\n" not in str(e.value)


def test_per_domain_metrics() -> None:
    def ep(task, r, n=3):
        return Trajectory(task_id=task.id, group_id="0", sample_idx=0, reward=r,
                          turns=(Turn((1,), (2,) * n, (-0.1,) * n, "eos", Verdict("pass" if r else "fail", r)),))

    a, b = _tasks("a", 1)[0], _tasks("b", 1)[0]
    m = domain_metrics([a, b], [[ep(a, 1.0), ep(a, 0.0)], [ep(b, 1.0), ep(b, 1.0)]], [[1.0, 0.0], [1.0, 1.0]])
    assert m == {"domain/a/reward": 0.5, "domain/a/zero_variance": 0.0, "domain/a/groups": 1, "domain/a/tokens": 6,
                 "domain/b/reward": 1.0, "domain/b/zero_variance": 1.0, "domain/b/groups": 1, "domain/b/tokens": 6}


def test_sampler_keys_are_checked_when_parsed() -> None:
    ok = parse_config(SamplerSpec, {"kind": "pool", "weights": {"math": 2}, "stratify": {"easy_fraction": 0.1}})
    assert ok.weights == {"math": 2.0} and ok.stratify.easy_fraction == 0.1
    for data, message in [
        ({"weights": {"math": 1}}, "weights: the uniform sampler takes no weights; set kind: pool"),
        ({"kind": "pool", "weights": {"a": 1}, "schedule": [{"step": 0}]}, "schedule: give weights or a schedule"),
        ({"kind": "pool", "schedule": [{"step": 5}, {"step": 2}]}, "schedule: steps must increase, got [5, 2]"),
        ({"kind": "pool", "weights": {"a": 0}}, "weights: at least one domain needs a weight above 0"),
        ({"kind": "pool", "weights": {"a": -1}}, "tasks.sampler.weights.a: expected a number >= 0, got -1"),
        ({"kind": "pool", "stratify": {"easy_fraction": 0.7, "hard_fraction": 0.5}}, "easy_fraction + hard_fraction"),
        ({"kind": "pool", "curriculum": {"lower_below": 0.8}}, "lower_below (0.8) must be below raise_above"),
        ({"kind": "pool", "canary_rate": 0.9}, "tasks.sampler.canary_rate: expected a number in [0, 0.5]"),
        ({"kind": "pol"}, "tasks.sampler.kind: expected one of 'uniform' | 'pool', got 'pol'"),
    ]:
        with pytest.raises(ConfigError) as e:
            parse_config(SamplerSpec, data, where="tasks.sampler")
        assert message in str(e.value) and "\n" not in str(e.value), (data, str(e.value))
    with pytest.raises(ConfigError, match=r"tasks.train\[0\]: curriculum: needs tasks.sampler.kind: pool"):
        make_sampler(SamplerSpec(), [], seed=0, sources=[TaskSource(generator="rg/countdown", curriculum=True)])
    with pytest.raises(ConfigError, match="curriculum: the math generator has no levels"):
        TaskSource(generator="math", curriculum=True)


def test_tasks_list_shows_every_domain_with_capabilities_and_levels() -> None:
    rows = list_domains()
    by_name = {r.name: r for r in rows}
    assert len(rows) >= 111 and by_name["rg/countdown"].levels == (0, 4)
    assert by_name["rg/countdown"].capabilities == ("reasoning", "planning", "games") and by_name["rg/countdown"].canaries
    assert not by_name["rg/syllogism"].canaries and by_name["code"].sandbox
    text = format_domains(rows)
    assert "rg/countdown" in text and text.splitlines()[-1].startswith(f"{len(rows)} domains, ")


def test_tasks_stats_over_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    records = []
    for step in range(3):
        for tid, domain, outcomes in [("a-0", "a", [True, True]), ("a-1", "a", [True, False]),
                                      ("b-0", "b", [False, False]), ("c-0", "b", [True, False])]:
            tags = ["canary"] if tid == "c-0" else []
            records += [{"task_id": tid, "domain": domain, "sample_idx": j, "attempt": 0, "step": step,
                         "outcome": "pass" if ok else "fail", "tags": tags} for j, ok in enumerate(outcomes)]
    (run / "trajectories" / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    stats = run_stats(run)
    a, b = stats.domains["a"], stats.domains["b"]
    assert (a.episodes, a.passed, a.groups, a.zero_variance) == (12, 9, 6, 3)
    assert (b.episodes, b.passed, b.groups, b.zero_variance, b.canary_passed) == (6, 0, 3, 3, 3)
    assert stats.steps == 3 and stats.estimates == "observed pass rates"
    assert a.histogram[9] == 1 and a.histogram[5] == 1 and b.histogram[0] == 1
    text = format_stats(stats)
    assert "hack alarm: 3 passing attempt(s) on canary tasks" in text
    ckpt = run / "checkpoints" / "rl-state" / "step-000003"
    ckpt.mkdir(parents=True)
    (run / "checkpoints" / "rl-state" / "latest").write_text(json.dumps({"name": "step-000003", "step": 3}))
    pool = TaskPool(_tasks("a", 2), seed=0, spec=SamplerSpec(kind="pool"))
    pool.observe(_tasks("a", 1), [[False] * 4])
    (ckpt / "state.json").write_text(json.dumps({"sampler_state": pool.state_dict()}))
    assert run_stats(run).estimates == "the pool's estimates"
    with pytest.raises(Exception, match="no RL trajectories"):
        run_stats(tmp_path)


def test_a_pool_state_from_before_the_episode_counts_is_refused_in_one_line() -> None:
    from posttrain.errors import UserError
    from posttrain.tasks._difficulty import Difficulty

    old = {"ema": 0.3, "tasks": {}, "settings": {"math@-": [0.5, 1, 0, 0.0, 0]}}  # [estimate, groups, step, sum, n]
    with pytest.raises(UserError, match="older posttrain"):
        Difficulty().load_state_dict(old)
    fresh = Difficulty()
    fresh.observe(Task(id="t", domain="math", prompt="", fields={}), [True, False])
    again = Difficulty()
    again.load_state_dict(fresh.state_dict())
    assert again.settings() == fresh.settings()

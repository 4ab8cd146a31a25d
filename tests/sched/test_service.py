"""The execution service over the real sandbox: verdicts, infra retries, group drops, cache and
dedup, a domain's batching hook, and lanes that keep quick checks moving."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from posttrain.cli import domain_hooks
from posttrain.envs import get_domain
from posttrain.envs.code import verify_code_batch
from posttrain.sched import (
    DomainHooks,
    GroupDropped,
    LocalBackend,
    SchedPolicy,
    Service,
    Verify,
)
from posttrain.types import BatchVerifier, Task, TaskLimits, Verdict

PROMPT = "def add(a: int, b: int) -> int:\n"
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
RIGHT, WRONG = "    return a + b\n", "    return a - b\n"
FAST = SchedPolicy(backoff_s=0.01)


def code_task(tid: str = "add", timeout_s: float = 3.0) -> Task:
    return Task(id=tid, domain="code", prompt=PROMPT, fields={"entry_point": "add", "test": TEST},
                limits=TaskLimits(timeout_s=timeout_s))


def math_task(tid: str = "m") -> Task:
    return Task(id=tid, domain="math", prompt="1+1?", fields={"answer": "2"})


class Flaky:
    """The real verifier of a domain, behind a host that fails the first ``fails`` tries of a
    response as infra (what a dying sandbox host looks like to the service)."""

    def __init__(self, verify, fails: dict[str, int], *, raise_instead: bool = False) -> None:
        self.verify, self.fails, self.raise_instead = verify, dict(fails), raise_instead
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, task: Task, response: str) -> Verdict:
        with self.lock:
            self.calls[response] += 1
            failing = self.calls[response] <= self.fails.get(response, 0)
        if failing and self.raise_instead:
            raise ConnectionError("sandbox host went away")
        if failing:
            return Verdict.infra("sandbox host went away", error_class="infra:sandbox")
        return self.verify(task, response)


def test_real_sandbox_verdicts_in_order(pool):
    hooks = domain_hooks(["code", "math"], pool)
    jobs = [Verify(code_task(), RIGHT, "g1", 0), Verify(code_task(), WRONG, "g1", 1),
            Verify(math_task(), "\\boxed{2}", "g2", 0), Verify(math_task(), "3", "g2", 1)]
    with Service(LocalBackend(hooks, pool)) as svc:
        assert svc.workers == pool.size  # sized from the pool, no workers argument
        out = svc.run_jobs(jobs)
    assert [v.outcome for v in out.results] == ["pass", "fail", "pass", "fail"]
    assert out.dropped_groups == frozenset()
    assert len(svc.attempts) == 4 and all(a.final for a in svc.attempts)


@pytest.mark.parametrize("raise_instead", [False, True])
def test_infra_errors_are_retried_and_every_try_recorded(pool, raise_instead):
    real = get_domain("code").make_verifier(pool)
    flaky = Flaky(real, {RIGHT: 2}, raise_instead=raise_instead)
    with Service(LocalBackend({"code": DomainHooks(flaky)}, pool), FAST) as svc:
        v = svc.submit(Verify(code_task(), RIGHT, "g", 0)).result(timeout=60)
        stats = svc.stats()
    assert v.outcome == "pass"
    assert [a.outcome for a in svc.attempts] == ["infra_error", "infra_error", "pass"]
    assert [a.attempt for a in svc.attempts] == [0, 1, 2]
    assert svc.attempts[0].verdict.error_class.startswith("infra:") and svc.attempts[2].verdict is v
    assert (stats["tries"], stats["retries"], stats["infra_tries"]) == (3, 2, 2)


def test_a_programs_own_failure_is_never_retried(pool):
    flaky = Flaky(get_domain("code").make_verifier(pool), {})
    loop = "    while True:\n        pass\n"
    with Service(LocalBackend({"code": DomainHooks(flaky)}, pool), FAST) as svc:
        verdicts = svc.run_jobs([Verify(code_task(timeout_s=1.0), loop, "g", 0),
                                  Verify(code_task(), WRONG, "g", 1)]).results
    assert [v.outcome for v in verdicts] == ["fail", "fail"]
    assert verdicts[0].error_class == "timeout"
    assert flaky.calls == Counter({loop: 1, WRONG: 1})


def test_an_exhausted_sample_drops_its_whole_group_never_scored(pool):
    real = get_domain("code").make_verifier(pool)
    doomed = "    return b + a\n"
    flaky = Flaky(real, {doomed: 99})
    jobs = [Verify(code_task("t1"), RIGHT, "g1", 0), Verify(code_task("t1"), doomed, "g1", 1),
            Verify(code_task("t2"), RIGHT, "g2", 0), Verify(code_task("t2"), WRONG, "g2", 1)]
    policy = SchedPolicy(max_tries=3, backoff_s=0.01, breaker_threshold=99)
    with Service(LocalBackend({"code": DomainHooks(flaky)}, pool), policy) as svc:
        out = svc.run_jobs(jobs)
        with pytest.raises(GroupDropped, match="g1"):
            svc.submit(Verify(code_task("t1"), "    return 5\n", "g1", 2)).result(timeout=10)
        stats = svc.stats()
    assert out.results[0] is None and out.results[1] is None  # the whole group, not just the sample
    assert [v.outcome for v in out.results[2:]] == ["pass", "fail"]
    assert out.dropped_groups == frozenset({"g1"})
    assert flaky.calls[doomed] == 3
    assert (stats["exhausted"], stats["groups_dropped"], stats["samples_dropped"]) == (1, 1, 3)


def test_identical_pairs_are_verified_once_and_cached(pool):
    flaky = Flaky(get_domain("code").make_verifier(pool), {})
    same = [Verify(code_task(), RIGHT, "g", i) for i in range(6)]
    with Service(LocalBackend({"code": DomainHooks(flaky)}, pool)) as svc:
        first = svc.run_jobs(same).results
        again = svc.submit(Verify(code_task(), RIGHT, "g2", 0)).result(timeout=10)
        stats = svc.stats()
    assert all(v.passed for v in first) and again.passed
    assert flaky.calls[RIGHT] == 1
    assert stats["deduplicated"] + stats["cache_hits"] == 6


def test_infra_errors_are_never_cached(pool):
    flaky = Flaky(get_domain("code").make_verifier(pool), {RIGHT: 1})
    policy = SchedPolicy(max_tries=1, breaker_threshold=99)
    with Service(LocalBackend({"code": DomainHooks(flaky)}, pool), policy) as svc:
        assert svc.run_jobs([Verify(code_task(), RIGHT, "a", 0)]).results == [None]
        assert svc.run_jobs([Verify(code_task(), RIGHT, "b", 0)]).results[0].passed
    assert flaky.calls[RIGHT] == 2


def test_a_domain_batching_hook_verifies_several_pairs_per_sandbox_job(pool):
    calls = []

    def batch(pairs):
        calls.append(len(pairs))
        return verify_code_batch(pool, pairs)

    hooks = {"code": DomainHooks(get_domain("code").make_verifier(pool), BatchVerifier(4, batch))}
    responses = [RIGHT, WRONG, "    return a + b + 0\n", "    return 5\n", "    return b + a\n", "    return 0\n"]
    with Service(LocalBackend(hooks, pool)) as svc:
        out = svc.run_jobs([Verify(code_task(), r, "g", i) for i, r in enumerate(responses)]).results
    assert [v.outcome for v in out] == ["pass", "fail", "pass", "fail", "pass", "fail"]
    assert max(calls) > 1 and sum(calls) == 6
    assert any(a.batch_size > 1 for a in svc.attempts)


def test_quick_checks_finish_while_a_slow_suite_runs(pool):
    slow = Task(id="suite", domain="code", prompt=PROMPT, fields={"entry_point": "add", "test": TEST},
                limits=TaskLimits(timeout_s=30.0))
    sleepy = "    import time\n    time.sleep(2)\n    return a + b{}\n"
    hooks = domain_hooks(["code", "math"], pool)
    with Service(LocalBackend(hooks, pool)) as svc:
        svc.run_jobs([Verify(math_task("warm"), "\\boxed{2}", "warm", 0)])  # math checks are seen to be quick
        suites = [svc.submit(Verify(slow, sleepy.format(""), "s", 0))]
        time.sleep(1.0)  # suite 0 holds one of the two workers
        t0 = time.monotonic()
        quick = [svc.submit(Verify(math_task(f"m{i}"), "\\boxed{2}", f"q{i}", 0)) for i in range(20)]
        # more suites arrive behind the quick checks: by estimate they come first (longest first),
        # but the slow lane already holds its share (1 of 2 workers) while quick checks wait
        suites += [svc.submit(Verify(slow, sleepy.format(" + 0" * i), "s", i)) for i in (1, 2)]
        assert all(f.result(timeout=60).passed for f in quick)
        quick_s = time.monotonic() - t0
        assert not all(f.done() for f in suites)
        assert all(f.result(timeout=120).passed for f in suites)
    assert quick_s < 3.0, quick_s


def test_a_domain_without_a_verifier_is_refused_at_submit(pool):
    with Service(LocalBackend(domain_hooks(["math"], None), pool)) as svc:
        with pytest.raises(ValueError, match="no verifier for domain 'code'"):
            svc.submit(Verify(code_task(), RIGHT, "g", 0))


def test_ungrouped_jobs_of_one_task_each_get_their_verdict_and_a_sample_is_submitted_once():
    hooks = domain_hooks(["math"], None)
    with Service(LocalBackend(hooks)) as svc:
        # no group id: each job is a group of its own (these two once shared a ledger key and one hung)
        futures = [svc.submit(Verify(math_task(), "\\boxed{2}")), svc.submit(Verify(math_task(), "3"))]
        assert [f.result(timeout=30).outcome for f in futures] == ["pass", "fail"]
    gate = threading.Event()
    held = DomainHooks(lambda task, response: gate.wait(30) and hooks["math"].verify(task, response))
    with Service(LocalBackend({"math": held})) as svc:
        first = svc.submit(Verify(math_task(), "2", "g", 0))
        with pytest.raises(ValueError, match="submitted twice"):  # while the first is live
            svc.submit(Verify(math_task(), "5", "g", 0))
        gate.set()
        assert first.result(timeout=30).outcome == "fail"  # "2" has no box
        # settled, its group forgotten: the same key names a new job now (state stays bounded)
        assert svc.submit(Verify(math_task(), "5", "g", 0)).result(timeout=30).outcome == "fail"


def test_a_duplicate_whose_first_was_dropped_runs_on_its_own_and_keeps_its_group():
    """Dedup across groups: the first of two identical (task, response) jobs runs out of infra
    retries and drops *its* group; the duplicate of another group then runs on its own (it was never
    tried) and is scored, its group kept. Both jobs get one final result in the ledger."""
    hooks = domain_hooks(["math"], None)
    gate, tries = threading.Event(), Counter()

    def host(task: Task, response: str) -> Verdict:
        gate.wait(30)  # both jobs are queued before the first try ends: the second is a duplicate
        tries[response] += 1
        if response == "\\boxed{2}" and tries[response] <= 2:  # the first job's two tries
            return Verdict.infra("host went away", error_class="infra:sandbox")
        return hooks["math"].verify(task, response)

    policy = SchedPolicy(max_tries=2, backoff_s=0.01, breaker_threshold=99)
    with Service(LocalBackend({"math": DomainHooks(host)}), policy) as svc:
        threading.Timer(0.3, gate.set).start()
        out = svc.run_jobs([Verify(math_task(), "\\boxed{2}", "gA", 0), Verify(math_task(), "\\boxed{2}", "gB", 0),
                             Verify(math_task("m2"), "3", "gB", 1)])
        stats, ledger = svc.stats(), svc.ledger.summary(3)
        live = (svc._pending, svc._inflight, svc._group_keys, svc._group_live, svc._watch, svc.ledger.finals)
    assert out.results[0] is None and out.dropped_groups == frozenset({"gA"})
    assert out.results[1].passed and out.results[2].outcome == "fail"  # gB scored whole
    assert stats["deduplicated"] == 1 and stats["groups_dropped"] == 1 and stats["samples_dropped"] == 1
    assert [len(a) for a in out.tries] == [2, 1, 1]  # the duplicate's own try, after the first's two
    assert ledger == {"jobs": 3, "settled": 3, "lost": 0, "duplicates": 0}  # the duplicate's key too
    assert all(not part for part in live)  # every group settled: nothing per job is kept


def test_memory_budget_estimates_and_open_breakers_show_in_stats_and_steer_the_task_sampler():
    """While a domain's breaker is open the task sampler passes over its tasks (counted); the breaker
    state comes back from a checkpoint, so a resumed sampler makes the same choices."""
    from posttrain.tasks import TaskSampler

    down = DomainHooks(lambda t, r: Verdict.infra("host down", error_class="infra:sandbox"))
    up = DomainHooks(get_domain("math").make_verifier(None))
    policy = SchedPolicy(max_tries=1, breaker_threshold=2, breaker_cooldown_s=60.0, memory_budget_mb=4096.0)
    tasks = [Task(id=f"{d}{i}", domain=d, prompt="1+1?", fields={"answer": "2"}) for d in ("math", "json")
             for i in range(4)]
    with Service(LocalBackend({"math": up, "json": down}), policy) as svc:
        svc.run_jobs([Verify(tasks[4 + i], "x", f"g{i}") for i in range(2)])
        assert svc.open_domains() == ["json"]
        stats = svc.stats()
        assert stats["memory"]["budget_mb"] == 4096.0 and stats["memory"]["running_mb"] == 0.0
        assert "sched/memory_waits" in svc.metrics() and "sched/restarts" in svc.metrics()
        a = TaskSampler(tasks, seed=0)
        drawn = [t.domain for t in a.next(6, skip=svc.open_domains())]
        assert drawn == ["math"] * 6 and a.skipped >= 4  # every json task of the first epoch passed over, counted
        state = svc.state_dict()
    with Service(LocalBackend({"math": up, "json": down}), policy) as resumed:
        resumed.load_state_dict(state)
        b = TaskSampler(tasks, seed=0)
        assert [t.id for t in b.next(6, skip=resumed.open_domains())] == [t.id for t in TaskSampler(tasks, seed=0).next(
            6, skip={"json"})]
    with Service(LocalBackend({"math": up, "json": down}), policy) as fresh:  # no breaker state: no skipping
        assert fresh.open_domains() == [] and {t.domain for t in TaskSampler(tasks, seed=0).next(8)} == {"math", "json"}

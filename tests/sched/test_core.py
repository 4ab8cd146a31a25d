"""The scheduler core on a virtual clock: lanes, priorities, retries, breakers, resume."""

from __future__ import annotations

import itertools
import json

import pytest

from posttrain.sched import Estimator, SchedPolicy, Scheduler


def add(s: Scheduler, domain: str, task: str, timeout: float, *, group: str = "g", now: float = 0.0, priority: float = 0.0):
    return s.add(domain, task, timeout_s=timeout, group=group, now=now, priority=priority)


def test_quick_checks_never_wait_behind_suites():
    s = Scheduler(2)
    for i in range(3):
        add(s, "code", f"suite{i}", 60.0)
    for i in range(5):
        add(s, "math", f"q{i}", 0.5)
    first, second = s.next(0, now=0.0), s.next(1, now=0.0)
    # one worker for the slow lane at most while quick checks wait; the other takes quick ones
    assert (first.lane, second.lane) == ("slow", "fast")
    s.done(second, 1, now=0.1, duration_s=0.1, infra=False, timeout=False)
    assert s.next(1, now=0.1).lane == "fast"


def test_slow_jobs_use_every_worker_when_no_quick_check_waits():
    s = Scheduler(3)
    for i in range(3):
        add(s, "code", f"suite{i}", 60.0)
    assert [s.next(w, now=0.0).lane for w in range(3)] == ["slow"] * 3


def test_priority_then_longest_first_within_the_slow_lane():
    s = Scheduler(1)
    add(s, "code", "short-suite", 5.0, priority=1)
    add(s, "code", "long-suite", 50.0, priority=1)
    add(s, "code", "urgent", 5.0, priority=0)
    order = []
    while (t := s.next(0, now=0.0)) is not None:
        order.append(t.task_id)
        s.done(t, 0, now=0.0, duration_s=1.0, infra=False, timeout=False)
    assert order == ["urgent", "long-suite", "short-suite"]


def test_only_infra_errors_are_retried_with_backoff_up_to_the_cap():
    s = Scheduler(1, SchedPolicy(max_tries=3, backoff_s=1.0, breaker_threshold=99))
    prog = add(s, "code", "p", 5.0)
    assert s.next(0, now=0.0) is prog
    # the program's own timeout is a verdict, final: never retried
    assert s.done(prog, 0, now=5.0, duration_s=5.0, infra=False, timeout=True) == "final"
    job = add(s, "code", "j", 5.0, now=5.0)
    decisions = []
    now = 5.0
    for _ in range(3):
        t = s.next(0, now=now)
        assert t is job
        decisions.append(s.done(t, 0, now=now, duration_s=0.1, infra=True, timeout=False))
        if decisions[-1] == "retry":
            assert s.next(0, now=now) is None  # backing off
            now = s.wake_at(now)
    assert decisions == ["retry", "retry", "exhausted"]
    assert (job.tries, s.counts["retries"], s.counts["exhausted"]) == (3, 2, 1)


def test_domain_breaker_holds_its_jobs_then_probes_and_closes():
    pol = SchedPolicy(breaker_threshold=2, breaker_cooldown_s=10.0, max_tries=5, backoff_s=0.0)
    s = Scheduler(1, pol)
    for i in range(6):
        add(s, "bad", f"b{i}", 0.5)
    add(s, "good", "ok", 0.5, now=0.0)
    for now in (0.0, 1.0):
        t = s.next(0, now=now)
        assert t.domain == "bad"
        s.done(t, 0, now=now, duration_s=0.1, infra=True, timeout=False)
    assert s.breaker_states()["domain:bad"] == "open"
    # nothing of the open domain is sent (no try spent on it); the other domain flows
    t = s.next(0, now=2.0)
    assert t.domain == "good"
    s.done(t, 0, now=2.0, duration_s=0.1, infra=False, timeout=False)
    assert s.next(0, now=3.0) is None and s.wake_at(3.0) == 11.0
    probe = s.next(0, now=11.0)
    assert probe.domain == "bad" and s.breaker_states()["domain:bad"] == "half_open"
    s.done(probe, 0, now=11.5, duration_s=0.5, infra=False, timeout=False)
    assert s.breaker_states()["domain:bad"] == "closed"
    rest = []
    while (t := s.next(0, now=12.0)) is not None:
        rest.append(t.task_id)
        s.done(t, 0, now=12.0, duration_s=0.1, infra=False, timeout=False)
    assert len(rest) == 5 and s.counts["exhausted"] == 0


def test_node_breaker_keeps_a_failing_node_out():
    s = Scheduler(2, SchedPolicy(breaker_threshold=3, breaker_cooldown_s=5.0, backoff_s=0.0, max_tries=9),
                  nodes=["n0", "n1"])
    for i in range(8):
        add(s, f"d{i}", f"t{i}", 0.5)  # a domain each: only the node's breaker can open
    for _ in range(3):
        t = s.next(1, now=0.0)
        s.done(t, 1, now=0.0, duration_s=0.01, infra=True, timeout=False)
    assert s.breaker_states()["node:n1"] == "open"
    assert s.next(1, now=1.0) is None
    assert s.next(0, now=1.0) is not None


def test_stateful_steps_never_open_a_node_breaker():
    """A stateful episode's step runs on its environment in the driver: its infra errors count against
    its domain, never against the node of the worker that carried the job."""
    s = Scheduler(2, SchedPolicy(breaker_threshold=3, breaker_cooldown_s=5.0, backoff_s=0.0, max_tries=9),
                  nodes=["n0", "n1"])
    for i in range(8):
        add(s, f"episode:d{i}", f"t{i}", 0.5)
    for _ in range(3):
        t = s.next(1, now=0.0)
        s.done(t, 1, now=0.0, duration_s=0.01, infra=True, timeout=False)
    assert s.breaker_states()["node:n1"] == "closed"
    assert s.next(1, now=1.0) is not None


def test_dropped_group_jobs_are_skipped_not_run():
    s = Scheduler(1)
    add(s, "math", "a", 0.5, group="g1")
    add(s, "math", "b", 0.5, group="g2")
    add(s, "math", "c", 0.5, group="g1")
    s.drop_group("g1")
    assert s.next(0, now=0.0).task_id == "b"
    assert s.next(0, now=0.0) is None
    assert sorted(t.task_id for t in s.skipped) == ["a", "c"]


def test_estimator_prior_is_the_timeout_scaled_by_the_domain():
    e = Estimator(alpha=1.0)
    assert e.estimate("code", "new", 60.0) == 60.0
    e.observe("code", "quick", duration_s=0.1, timeout_s=10.0)
    assert e.estimate("code", "quick", 10.0) == 0.1
    assert abs(e.estimate("code", "suite", 60.0) - 0.6) < 1e-9


def _drive(s: Scheduler, start: float, n: int) -> list[tuple[str, int]]:
    """Feed ``n`` jobs (some infra failures) and run them to the end; the choices made."""
    for i in range(n):
        add(s, f"d{i % 3}", f"t{i % 7}", 10.0 if i % 5 else 60.0, group=f"g{i // 4}", now=start)
    now, choices = start, []
    while s.queued():
        for w in range(s.workers):
            t = s.next(w, now=now)
            if t is not None:
                choices.append((t.task_id, w))
                bad = t.domain == "d1" and len(choices) % 3 == 0
                s.done(t, w, now=now + 0.5, duration_s=0.5 + (t.id % 4), infra=bad, timeout=False)
        now = max(now + 0.5, s.wake_at(now) or 0.0)
    return choices


def test_resume_from_state_dict_makes_the_same_choices():
    pol = SchedPolicy(breaker_threshold=2, breaker_cooldown_s=3.0, backoff_s=0.2)
    a = Scheduler(3, pol)
    _drive(a, 0.0, 40)
    state = json.loads(json.dumps(a.state_dict(now=100.0)))
    assert any(v["state"] != "closed" for v in state["domain_breakers"].values()) or state["counts"]["retries"]
    b = Scheduler(3, pol)
    b.load_state_dict(state, now=500.0)  # another clock: times are kept relative
    assert b.breaker_states() == a.breaker_states()
    resumed = _drive(b, 500.0, 40)
    assert _drive(a, 100.0, 40) == resumed
    # and the state matters: a scheduler that forgot it chooses differently
    assert _drive(Scheduler(3, pol), 100.0, 40) != resumed


def test_policy_rejects_bad_values():
    import pytest

    with pytest.raises(ValueError, match="max_tries"):
        SchedPolicy(max_tries=0)


def test_a_late_success_from_before_the_opening_does_not_close_the_breaker():
    from posttrain.sched import Breaker

    b = Breaker(threshold=2, cooldown_s=5.0)
    b.record(bad=True, now=0.0)
    b.record(bad=True, now=0.1)
    b.record(bad=False, now=0.2)  # a job sent before the breaker opened finished fine
    assert b.state == "open" and not b.allows(now=1.0)
    assert b.allows(now=5.1) and b.state == "half_open"
    b.record(bad=False, now=5.5)
    assert b.state == "closed"


def test_a_breaker_saved_while_probing_probes_again_after_a_resume():
    """A checkpoint taken while the half-open probe was in flight: no probe survives the restart,
    so the resumed breaker must let one through (not hold its domain forever)."""
    from posttrain.sched import Breaker

    b = Breaker(threshold=1, cooldown_s=5.0)
    b.record(bad=True, now=0.0)
    assert b.allows(now=6.0) and b.state == "half_open" and not b.allows(now=6.1)  # the probe is out
    resumed = Breaker(threshold=1, cooldown_s=5.0)
    resumed.load_state_dict(b.state_dict(now=6.2), now=100.0)
    assert resumed.allows(now=100.0)


# -- memory: an estimate per job, admission by a budget -------------------------------------------------

def test_jobs_start_only_while_their_memory_estimates_fit_the_budget():
    s = Scheduler(4, memory_budget_mb=1000.0)
    big = [s.add("code", f"b{i}", timeout_s=1.0, group="g", now=0.0, memory_mb=600.0) for i in range(2)]
    small = s.add("math", "s", timeout_s=1.0, group="g", now=0.0, memory_mb=300.0)
    first = s.next(0, now=0.0)
    assert first is big[0] and s.running_mb == 600.0
    assert s.next(1, now=0.0) is small  # the second 600 MiB job does not fit: the one that fits goes first
    assert s.next(2, now=0.0) is None and s.counts["memory_waits"] >= 1
    s.done(first, 0, now=1.0, duration_s=1.0, infra=False, timeout=False)
    assert s.next(0, now=1.0) is big[1]  # 300 + 600 fits now


def test_a_job_bigger_than_the_whole_budget_still_runs_alone():
    s = Scheduler(2, memory_budget_mb=500.0)
    huge = s.add("code", "h", timeout_s=1.0, group="g", now=0.0, memory_mb=2000.0)
    other = s.add("math", "m", timeout_s=1.0, group="g", now=0.0, memory_mb=100.0)
    assert s.next(0, now=0.0) is huge
    assert s.next(1, now=0.0) is None  # nothing beside it
    s.done(huge, 0, now=1.0, duration_s=1.0, infra=False, timeout=False)
    assert s.next(1, now=1.0) is other


@pytest.mark.parametrize("big_mb", [800.0, 5000.0])  # bigger than what is left; bigger than the whole budget
def test_a_stream_of_small_jobs_cannot_starve_a_big_one(big_mb):
    """Two workers, a 1000 MiB budget, a new 400 MiB job whenever one finishes: the big job used to
    wait for ever (the running jobs never left it room); now at most two jobs (one per worker) pass
    it, then the pool drains and it starts (alone, when it is bigger than the budget)."""
    s = Scheduler(2, memory_budget_mb=1000.0)
    n = itertools.count()

    def small():
        return s.add("math", f"s{next(n)}", timeout_s=0.1, group="g", now=0.0, memory_mb=400.0)

    small()
    big = s.add("code", "big", timeout_s=0.1, group="g", now=0.0, memory_mb=big_mb)
    small()
    running: dict[int, object] = {}  # worker -> its job, oldest first
    started_big = None
    for step in range(50):
        for w in (0, 1):
            if w not in running and (t := s.next(w, now=float(step))) is not None:
                running[w] = t
        if big in running.values():
            started_big = step
            break
        w = next(iter(running))  # the oldest running job finishes, and another small one arrives
        s.done(running.pop(w), w, now=step + 0.5, duration_s=0.05, infra=False, timeout=False)
        small()
    assert started_big is not None and started_big <= 4 and big.passed_over == 2
    assert list(running.values()) == [big]  # the pool drained for it; no 400 MiB job fits beside it
    assert s.next(1 - next(iter(running)), now=99.0) is None


def test_a_retried_job_is_passed_over_afresh():
    """A big job that was passed over, started, failed infra and was retried kept its count, so on
    its next wait it blocked every other start at once; its count restarts with the retry."""
    s = Scheduler(2, memory_budget_mb=1000.0)
    small = [s.add("math", "s0", timeout_s=0.1, group="g", now=0.0, memory_mb=400.0)]
    big = s.add("code", "big", timeout_s=0.1, group="g", now=0.0, memory_mb=800.0)
    small.append(s.add("math", "s1", timeout_s=0.1, group="g", now=0.0, memory_mb=400.0))
    big.passed_over = s.workers  # it has waited its turn: nothing passes it any more
    first = s.next(0, now=0.0)
    assert first is small[0] and s.next(1, now=0.0) is None  # big does not fit beside it, and starves
    s.done(first, 0, now=1.0, duration_s=0.1, infra=False, timeout=False)
    assert s.next(0, now=1.0) is big
    assert s.done(big, 0, now=2.0, duration_s=0.1, infra=True, timeout=False) == "retry"
    assert big.passed_over == 0
    later = s.add("math", "s2", timeout_s=0.1, group="g", now=2.0, memory_mb=400.0, delay_s=1.0)  # queued after big
    assert s.next(0, now=2.0) is small[1]  # big is backing off
    assert s.next(1, now=99.0) is later  # big waits for memory again and may be passed over again
    assert big.passed_over == 1


def test_memory_estimate_learns_observed_peaks_per_task_and_domain_and_survives_a_resume():
    s = Scheduler(2, memory_budget_mb=1000.0)
    t = s.add("code", "a", timeout_s=1.0, group="g", now=0.0, memory_mb=512.0)
    assert s.next(0, now=0.0).memory_mb == 512.0  # the prior: the task's limits.memory_mb
    s.done(t, 0, now=1.0, duration_s=1.0, infra=False, timeout=False, memory_mb=128.0)
    again = s.add("code", "a", timeout_s=1.0, group="g2", now=1.0, memory_mb=512.0)
    unseen = s.add("code", "b", timeout_s=1.0, group="g2", now=1.0, memory_mb=400.0)
    assert (again.memory_mb, unseen.memory_mb) == (128.0, 100.0)  # per task; per domain: a quarter of the prior
    b = Scheduler(2, memory_budget_mb=1000.0)
    b.load_state_dict(json.loads(json.dumps(s.state_dict(now=1.0))), now=0.0)
    assert b.add("code", "c", timeout_s=1.0, group="g3", now=0.0, memory_mb=800.0).memory_mb == 200.0
    old = json.loads(json.dumps(s.state_dict(now=1.0)))
    for k in ("task_mb", "domain_mb_frac"):  # a checkpoint from before memory estimates: priors stand
        del old["estimator"][k]
    c = Scheduler(2)
    c.load_state_dict(old, now=0.0)
    assert c.add("code", "c", timeout_s=1.0, group="g3", now=0.0, memory_mb=800.0).memory_mb == 800.0

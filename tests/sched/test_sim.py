"""The scheduler core in the discrete-event simulation: failures injected, nothing lost."""

from __future__ import annotations

from posttrain.sched._rules import SchedPolicy
from posttrain.sched._sim import Failures, fifo_makespan, lower_bound, simulate, workload

FAILURES = Failures(bad_node="n1", node_window=(5.0, 40.0), timeout_domain="d2", domain_window=(20.0, 35.0),
                    random_infra=0.002)


def test_failures_are_absorbed_by_retries_and_breakers():
    jobs = workload(6000, seed=1)
    r = simulate(jobs, workers=64, batch_size=512, failures=FAILURES)
    assert r.lost == 0 and r.exhausted == 0
    assert r.retries > 0 and r.breaker_opens_by.get("node:n1", 0) > 0 and r.breaker_opens_by.get("domain:d2", 0) > 0
    assert r.tries == len(jobs) + r.retries
    bound = lower_bound(jobs, 64)
    assert bound <= r.makespan_s < fifo_makespan(jobs, 64, 512)


def test_without_retries_the_failures_lose_whole_groups():
    jobs = workload(2000, seed=2)
    r = simulate(jobs, workers=32, batch_size=256, failures=FAILURES, policy=SchedPolicy(max_tries=1))
    assert r.exhausted > 0
    assert r.lost >= 8 * 1 and r.lost % 8 == 0  # whole groups of 8 samples, never one sample alone


def test_the_simulation_is_deterministic():
    jobs = workload(1500, seed=3)
    a = simulate(jobs, workers=16, batch_size=128, failures=FAILURES)
    b = simulate(jobs, workers=16, batch_size=128, failures=FAILURES)
    assert a == b

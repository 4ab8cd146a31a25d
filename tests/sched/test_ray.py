"""The service on a real local Ray cluster (own temp dir and port): real sandbox verifications, and
a SIGKILLed pool actor mid-batch with every job settled exactly once in the records."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest

from posttrain.cli import domain_hooks
from posttrain.sched import RayBackend, SchedPolicy, Service, Verify, local_cluster
from posttrain.types import Task, TaskLimits

pytestmark = pytest.mark.slow

PROMPT = "def add(a: int, b: int) -> int:\n"
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"


def code_task(tid: str) -> Task:
    return Task(id=tid, domain="code", prompt=PROMPT, fields={"entry_point": "add", "test": TEST},
                limits=TaskLimits(timeout_s=5.0))


@pytest.fixture(scope="module")
def address():
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        open_pool(size=1).close()
    except HostCannotIsolate as e:
        pytest.skip(f"this host cannot run the sandbox: {e}")
    with local_cluster(num_cpus=2) as addr:
        yield addr


def test_real_sandbox_verifications_through_ray(address):
    answers = ["    return a + b\n", "    return a - b\n", "    return b + a\n", "    return 5\n"]
    jobs = [Verify(code_task(f"t{i % 3}"), answers[i % 4], f"g{i % 3}", i) for i in range(12)]
    with Service(RayBackend(address, domains=["code"], hooks=domain_hooks)) as svc:
        assert svc.workers == 2  # one slot per CPU of the cluster's one node
        out = svc.run_jobs(jobs)
    assert [v.outcome for v in out.results] == [("pass" if i % 4 in (0, 2) else "fail") for i in range(12)]
    assert svc.ledger.summary(len(jobs))["lost"] == 0


def test_a_killed_pool_actor_loses_and_duplicates_nothing(address):
    sleepy = "    import time\n    time.sleep(0.4)\n    return a + b{}\n"
    # distinct responses: no dedup or cache between them, every job really runs
    jobs = [Verify(code_task(f"k{i}"), sleepy.format(" + 0" * i), f"g{i // 4}", i % 4) for i in range(16)]
    backend = RayBackend(address, domains=["code"], hooks=domain_hooks)
    (pid,) = backend.actor_pids()
    policy = SchedPolicy(max_tries=4, backoff_s=0.1, breaker_threshold=50)
    with Service(backend, policy) as svc:
        killer = threading.Timer(1.5, os.kill, (pid, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        out = svc.run_jobs(jobs)
        killer.join()
        stats = svc.stats()
        assert backend.actor_pids() != [pid]  # Ray restarted the actor (a fresh pool)
    assert time.monotonic() - t0 > 1.5  # the kill landed mid-batch
    assert all(v is not None and v.passed for v in out.results), [getattr(v, "outcome", None) for v in out.results]
    ledger = svc.ledger.summary(len(jobs))
    assert ledger == {"jobs": 16, "settled": 16, "lost": 0, "duplicates": 0}
    finals = Counter((a.group_id, a.task_id, a.sample_idx) for a in svc.attempts if a.final)
    assert set(finals.values()) == {1} and len(finals) == 16  # every job verified exactly once
    killed = [a for a in svc.attempts if a.outcome == "infra_error"]
    assert killed and stats["retries"] == len(killed)


def test_an_actor_ray_is_restarting_is_waited_for(address):
    """A ping sent while Ray restarts a killed actor fails at once as unavailable; the backend's
    pids (and a try that lost its actor) wait for the restarted one instead (CI saw the raw error)."""
    backend = RayBackend(address, domains=["code"], hooks=domain_hooks)
    (pid,) = backend.actor_pids()
    os.kill(pid, signal.SIGKILL)
    (new,) = backend.actor_pids()
    assert new != pid


def test_a_hung_pool_actor_is_waited_for_with_a_timeout_then_retried(address):
    """A try on an actor that neither answers nor dies (SIGSTOPped) ends at the backend's timeout as
    an infra error and is retried; once the actor runs again the retry gives the verdict."""
    quick = Task(id="hang", domain="code", prompt=PROMPT, fields={"entry_point": "add", "test": TEST},
                 limits=TaskLimits(timeout_s=0.5))
    backend = RayBackend(address, domains=["code"], hooks=domain_hooks)
    backend.SLACK_S, backend.WAIT_PER_TIMEOUT = 0.5, 2.0  # a try is waited for 2 x 0.5 + 0.5 s
    (pid,) = backend.actor_pids()
    with Service(backend, SchedPolicy(max_tries=4, backoff_s=0.1, breaker_threshold=50)) as svc:
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(2.5, os.kill, (pid, signal.SIGCONT)).start()
        out = svc.run_jobs([Verify(quick, "    return a + b\n", "h", 0)])
    assert out.results[0] is not None and out.results[0].passed
    [tries] = out.tries
    assert tries[0].outcome == "infra_error" and "GetTimeoutError" in tries[0].verdict.evidence["detail"]
    assert tries[-1].final and tries[-1].outcome == "pass"

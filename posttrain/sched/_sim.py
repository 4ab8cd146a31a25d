"""A discrete-event simulation of the scheduler core on a virtual clock, and the workload it shares
with ``bench/sched.py``.

``simulate`` drives ``Scheduler`` (``_core.py``: the code the service runs, not a re-implementation)
with ``W`` virtual workers, each job taking its drawn duration, plus injected infra failures:
a node whose every job fails for a while, a domain whose every job runs into its timeout for a
while, and rare random infra errors. Batches are streamed to the scheduler (at least two batches
queued ahead), as a trainer would. ``fifo_makespan`` is the baseline: the same batches run one at
a time, each in FIFO order, each waiting for its slowest job. ``lower_bound`` is
max(total work / workers, longest job).

    >>> jobs = workload(400, seed=0)
    >>> r = simulate(jobs, workers=8, batch_size=64)
    >>> r.lost, r.makespan_s >= lower_bound(jobs, 8)
    (0, True)
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from posttrain.sched._core import Scheduler, Ticket
from posttrain.sched._rules import SchedPolicy

SHORT_S = 0.1
"""Typical duration of a quick check."""
LONG_S = (5.0, 30.0)
"""Range of the long tail (a slow test suite), drawn uniformly."""
LONG_FRAC = 0.05
"""Fraction of tasks in the long tail."""
GROUP = 8
"""Samples per task (one GRPO group): they share the task's duration, up to a jitter."""
SHORT_TIMEOUT_S, LONG_TIMEOUT_S = 10.0, 60.0


@dataclass(frozen=True)
class SimJob:
    domain: str
    task_id: str
    group: str
    duration_s: float
    timeout_s: float


def workload(n: int, seed: int, *, long_scale: float = 1.0, group: int = GROUP, domains: int = 4) -> list[SimJob]:
    """``n`` jobs in groups of ``group`` samples: ``LONG_FRAC`` of the tasks (at least one) take
    ``LONG_S`` seconds times ``long_scale``, the rest about ``SHORT_S``; a 20% jitter per sample."""
    rng = random.Random(seed)
    n_tasks = -(-n // group)
    long_tasks = set(rng.sample(range(n_tasks), max(1, round(LONG_FRAC * n_tasks))))
    jobs = []
    for i in range(n_tasks):
        long = i in long_tasks
        base = rng.uniform(*LONG_S) * long_scale if long else SHORT_S
        timeout = LONG_TIMEOUT_S if long else SHORT_TIMEOUT_S
        for _ in range(min(group, n - len(jobs))):
            d = base * math.exp(rng.gauss(0.0, 0.2))
            jobs.append(SimJob(f"d{i % domains}", f"t{i}", f"g{i}", min(d, timeout), timeout))
    # Groups arrive in random order (a sampler's batch mixes tasks); samples of a group stay together.
    order = list(range(n_tasks))
    rng.shuffle(order)
    return [j for t in order for j in jobs[t * group:(t + 1) * group]]


def batches(jobs: Sequence[SimJob], batch_size: int) -> list[Sequence[SimJob]]:
    return [jobs[i:i + batch_size] for i in range(0, len(jobs), batch_size)]


def lower_bound(jobs: Sequence[SimJob], workers: int) -> float:
    return max(sum(j.duration_s for j in jobs) / workers, max(j.duration_s for j in jobs))


def fifo_makespan(jobs: Sequence[SimJob], workers: int, batch_size: int) -> float:
    """Synchronous batches: each batch's jobs in FIFO order on ``workers``; the next batch starts
    when the slowest job of this one has finished."""
    total = 0.0
    for batch in batches(jobs, batch_size):
        free = [0.0] * workers
        for j in batch:
            heapq.heapreplace(free, free[0] + j.duration_s)
        total += max(free)
    return total


@dataclass(frozen=True)
class Failures:
    """Injected infra failures (virtual seconds)."""

    bad_node: str | None = None
    node_window: tuple[float, float] = (0.0, 0.0)
    """While inside, every job on ``bad_node`` fails as infra after ``node_fail_s``."""
    node_fail_s: float = 0.05
    timeout_domain: str | None = None
    domain_window: tuple[float, float] = (0.0, 0.0)
    """While inside, every job of ``timeout_domain`` runs into its timeout (infra: the backend hangs)."""
    random_infra: float = 0.0
    """Probability that any try fails as infra (after a tenth of its duration)."""


@dataclass
class SimResult:
    makespan_s: float
    busy_s: float
    """Worker-seconds spent on tries (failed ones included)."""
    workers: int
    tries: int
    retries: int
    exhausted: int
    lost: int
    """Samples never scored: every sample of a dropped group."""
    breaker_opens: int
    breaker_opens_by: dict[str, int] = field(default_factory=dict)
    held: int = 0

    @property
    def utilization(self) -> float:
        return self.busy_s / (self.workers * self.makespan_s) if self.makespan_s else 0.0


def simulate(jobs: Sequence[SimJob], workers: int, batch_size: int, *, policy: SchedPolicy | None = None,
             failures: Failures | None = None, node_size: int = 8, seed: int = 0) -> SimResult:
    """Run ``jobs`` through ``Scheduler`` on a virtual clock (module docstring)."""
    return _Simulation(jobs, workers, batch_size, policy, failures or Failures(), node_size, seed).run()


class _Simulation:
    def __init__(self, jobs: Sequence[SimJob], workers: int, batch_size: int, policy: SchedPolicy | None,
                 failures: Failures, node_size: int, seed: int) -> None:
        self.fail, self.rng, self.batch_size = failures, random.Random(seed), batch_size
        self.nodes = [f"n{w // node_size}" for w in range(workers)]
        self.sched = Scheduler(workers, policy, nodes=self.nodes)
        self.payload: dict[int, SimJob] = {}
        self.group_size: dict[str, int] = {}
        self.pending = iter(batches(jobs, batch_size))
        self.events: list[tuple[float, int, int, Ticket | None]] = []  # (time, seq, worker, ticket or None: a wake-up)
        self.outcomes: dict[int, tuple[float, bool, bool]] = {}
        self.seq = 0
        self.idle = list(range(workers))  # a heap: the lowest free worker first
        self.now = self.busy = 0.0
        self.lost = 0

    def run(self) -> SimResult:
        sched = self.sched
        self.feed()
        self.dispatch()
        while self.events:
            self.now, _, w, t = heapq.heappop(self.events)
            if t is not None:
                self.finish(t, w)
            self.feed()
            self.dispatch()
        if sched.queued() or self.payload:
            raise RuntimeError(f"simulation ended with {sched.queued()} jobs queued, {len(self.payload)} unsettled")
        opens = {**{f"domain:{k}": b.opens for k, b in sched.domain_breakers.items() if b.opens},
                 **{f"node:{k}": b.opens for k, b in sched.node_breakers.items() if b.opens}}
        c = sched.counts
        return SimResult(self.now, self.busy, sched.workers, c["tries"], c["retries"], c["exhausted"], self.lost,
                         sched.breaker_opens(), opens, c["held"])

    def feed(self) -> None:
        while self.sched.queued() < 2 * self.batch_size and (batch := next(self.pending, None)) is not None:
            for j in batch:
                t = self.sched.add(j.domain, j.task_id, timeout_s=j.timeout_s, group=j.group, now=self.now)
                self.payload[t.id] = j
                self.group_size[j.group] = self.group_size.get(j.group, 0) + 1

    def try_outcome(self, t: Ticket, w: int) -> tuple[float, bool, bool]:
        """(duration, infra, timeout) of one try of ``t`` on worker ``w`` now."""
        j, fail, now = self.payload[t.id], self.fail, self.now
        if self.nodes[w] == fail.bad_node and fail.node_window[0] <= now < fail.node_window[1]:
            return fail.node_fail_s, True, False
        if j.domain == fail.timeout_domain and fail.domain_window[0] <= now < fail.domain_window[1]:
            return j.timeout_s, True, True
        if fail.random_infra and self.rng.random() < fail.random_infra:
            return j.duration_s / 10, True, False
        return j.duration_s, False, False

    def dispatch(self) -> None:
        sched, idle = self.sched, self.idle
        parked = []  # idle workers of a node whose breaker keeps them out
        while idle:
            w = heapq.heappop(idle)
            t = sched.next(w, self.now)
            for s in sched.skipped:
                self.payload.pop(s.id)
            sched.skipped.clear()
            if t is None:
                if sched.node_breakers[self.nodes[w]].state == "closed":
                    heapq.heappush(idle, w)
                    break  # nothing ready for anyone
                parked.append(w)
                continue
            d, infra, timeout = self.outcomes[t.id] = self.try_outcome(t, w)
            self.busy += d
            self.seq += 1
            heapq.heappush(self.events, (self.now + d, self.seq, w, t))
        for w in parked:
            heapq.heappush(idle, w)
        wake = sched.wake_at(self.now) if idle else None
        if wake is not None and wake > self.now:
            self.seq += 1
            heapq.heappush(self.events, (wake, self.seq, -1, None))

    def finish(self, t: Ticket, w: int) -> None:
        d, infra, timeout = self.outcomes.pop(t.id)
        decision = self.sched.done(t, w, now=self.now, duration_s=d, infra=infra, timeout=timeout)
        if decision != "retry":
            j = self.payload.pop(t.id)
            if decision == "exhausted" and j.group not in self.sched.dropped_groups:
                self.sched.drop_group(j.group)
                self.lost += self.group_size[j.group]
        heapq.heappush(self.idle, w)

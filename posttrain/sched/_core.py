"""The scheduler core: which job a free worker runs next, and what happens after each try.

It holds no threads and reads no clock: every call takes ``now``. The service (``_service.py``)
drives it from worker threads on the wall clock, the Ray backend from its driver loop, and the
simulation (``_sim.py``) from a discrete-event loop on a virtual clock: the same code in all three.

Choices it makes:

- **Lanes.** Each job gets a duration estimate (``Estimator``: EWMA per task; for an unseen task
  its timeout, scaled by its domain's EWMA of duration / timeout). At least ``lane_split_s`` means
  the slow lane. Slow jobs may hold at most ``slow_share`` of the workers while fast jobs wait
  (never all of them when there are two or more), so quick checks never queue behind test suites;
  when the fast lane is empty, slow jobs take any free worker (work-conserving).
- **Order within a lane.** A priority queue on the caller's ``priority`` (lower first: the order the
  trainer needs results), then, in the slow lane, longest estimate first (LPT: the long tail starts
  early), then arrival order.
- **Retries.** Only an infra error is retried: after ``backoff``, up to ``max_tries`` tries. A job
  that runs out is ``exhausted``: the caller drops its whole group (``drop_group``), whose queued
  jobs are then skipped, never run. A job added with ``retry=False`` (a step of a stateful
  episode: never retried on its own) is final after its one try, infra or not; its caller restarts
  the episode (``delay_s``: the backoff before the restart's first step).
- **Memory.** Each job also gets a memory estimate (``Estimator.memory``: EWMA per task and per
  domain, the task's ``limits.memory_mb`` as the prior, observed peaks where a try reports one). A
  job starts only while the running jobs' estimates and its own fit ``memory_budget_mb``; one that
  does not fit waits (the next job that fits goes first), and a job bigger than the whole budget
  still runs, alone. A waiting job lets at most ``workers`` jobs start ahead of it; then nothing
  else starts until it has (it starts once its estimate fits, or alone once the running jobs are
  done), so a stream of small jobs cannot starve a big one.
- **Breakers.** One per domain and one per node, infra errors (timeouts of the machinery among them)
  counted: a candidate's own timeout (a ``fail`` verdict: its program looped, its answer took too long
  to compare) is its verdict, never a sick domain -- counted, a policy that loops opened its
  domain's breaker and had the domain's tasks passed over (``Service.open_domains``). An open domain
  breaker holds that domain's jobs (no try spent) and lets one probe through after the cool-down; an
  open node breaker gives its workers nothing until its own probe (with two nodes or more).

``state_dict`` holds the estimates, breakers and counters (not the queue: the caller re-submits
what was in flight), so that a resume from a checkpoint makes the same choices.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from posttrain.sched._rules import Breaker, Estimator, SchedPolicy

Lane = Literal["fast", "slow"]
Decision = Literal["final", "retry", "exhausted"]


EPISODE_PREFIX = "episode:"
"""Domains of stateful episodes' steps (``episode:<domain>``): they run where their environment is,
so an infra error there never counts against the node of the worker that carried the job."""


@dataclass(eq=False)
class Ticket:
    """One job as the scheduler sees it (the caller keeps the payload, keyed by ``id``)."""

    id: int
    domain: str
    task_id: str
    timeout_s: float
    group: str
    priority: float = 0.0
    tries: int = 0
    """Tries started so far."""
    not_before: float = 0.0
    estimate_s: float = 0.0
    lane: Lane = "fast"
    memory_prior_mb: float = 0.0
    """The task's ``limits.memory_mb`` (0: none known)."""
    memory_mb: float = 0.0
    """The memory estimate the job holds while it runs."""
    retry: bool = True
    """False: an infra try is final (a step of a stateful episode; its caller restarts the episode)."""
    passed_over: int = 0
    """Jobs started ahead of it while it waited for memory (at most ``Scheduler.workers``; 0 again
    when it is retried)."""
    probe: bool = field(default=False, repr=False)


class Scheduler:
    """Lanes, priorities, retries and breakers over ``workers`` workers (``nodes[w]`` names worker
    ``w``'s node; one node by default).

    >>> s = Scheduler(2)
    >>> quick = s.add("math", "m1", timeout_s=0.5, group="g", now=0.0)
    >>> suite = s.add("code", "c1", timeout_s=60.0, group="g", now=0.0)
    >>> [s.next(0, now=0.0).task_id, s.next(1, now=0.0).task_id]
    ['c1', 'm1']
    >>> s.done(suite, 0, now=3.0, duration_s=3.0, infra=False, timeout=False)
    'final'
    """

    def __init__(self, workers: int, policy: SchedPolicy | None = None, *, nodes: Sequence[str] | None = None,
                 memory_budget_mb: float | None = None) -> None:
        if workers < 1:
            raise ValueError(f"Scheduler needs at least one worker, got {workers}")
        self.workers, self.policy = workers, policy or SchedPolicy()
        self.nodes = list(nodes) if nodes is not None else ["local"] * workers
        if len(self.nodes) != workers:
            raise ValueError(f"Scheduler: {len(self.nodes)} node names for {workers} workers")
        self.estimator = Estimator(self.policy.ewma_alpha)
        self.domain_breakers: dict[str, Breaker] = {}
        self.node_breakers: dict[str, Breaker] = {}
        self._open_nodes: set[str] = set()
        self._node_breakers_on = len(set(self.nodes)) > 1
        """One node: its breaker would only shadow the domains' (everything runs there anyway)."""
        self.slow_cap = max(1, min(workers - 1, int(self.policy.slow_share * workers))) if workers > 1 else 1
        self._lanes: dict[Lane, list[tuple[Any, ...]]] = {"fast": [], "slow": []}
        self._backoff: list[tuple[float, int, Ticket]] = []
        self._held: dict[str, list[Ticket]] = defaultdict(list)
        self._ids = itertools.count()
        self._seq = 0
        self.running_slow = 0
        self.dropped_groups: set[str] = set()
        self.skipped: list[Ticket] = []
        """Tickets of dropped groups taken off the queue unrun; the caller drains and resolves them."""
        self.counts: dict[str, int] = defaultdict(int)
        budget = memory_budget_mb if memory_budget_mb is not None else self.policy.memory_budget_mb
        self.memory_budget_mb = math.inf if budget is None else float(budget)
        self.running = 0
        self.running_mb = 0.0
        """Jobs started and not done, and the sum of their memory estimates."""
        self._memory_waiting: list[Ticket] = []
        """The jobs the latest ``next`` passed over for memory (``take_more`` passes them over too)."""

    # -- queueing -------------------------------------------------------------------------------

    def add(self, domain: str, task_id: str, *, timeout_s: float, group: str, now: float,
            priority: float = 0.0, memory_mb: float = 0.0, retry: bool = True, delay_s: float = 0.0) -> Ticket:
        """Queue a new job (``memory_mb``: its task's memory limit, the estimate's prior; ``delay_s``:
        not before ``now + delay_s``); returns its ticket."""
        t = Ticket(next(self._ids), domain, task_id, float(timeout_s), group, float(priority),
                   memory_prior_mb=float(memory_mb), retry=retry)
        self.counts["jobs"] += 1
        if delay_s > 0:
            t.not_before = now + delay_s
            heapq.heappush(self._backoff, (t.not_before, t.id, t))
        else:
            self._push(t)
        return t

    def _breaker(self, table: dict[str, Breaker], key: str) -> Breaker:
        if key not in table:
            table[key] = Breaker(self.policy.breaker_threshold, self.policy.breaker_cooldown_s)
        return table[key]

    def _push(self, t: Ticket) -> None:
        t.estimate_s = self.estimator.estimate(t.domain, t.task_id, t.timeout_s)
        t.memory_mb = self.estimator.memory(t.domain, t.task_id, t.memory_prior_mb)
        t.lane = "slow" if t.estimate_s >= self.policy.lane_split_s else "fast"
        self._seq += 1
        key = (t.priority, -t.estimate_s, self._seq) if t.lane == "slow" else (t.priority, self._seq)
        heapq.heappush(self._lanes[t.lane], (*key, t))

    def _release_backoff(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            self._push(heapq.heappop(self._backoff)[2])

    def queued(self) -> int:
        return (len(self._lanes["fast"]) + len(self._lanes["slow"]) + len(self._backoff)
                + sum(len(h) for h in self._held.values()))

    # -- dispatch -------------------------------------------------------------------------------

    def next(self, worker: int, now: float) -> Ticket | None:
        """The job ``worker`` should start now, or None (nothing ready for it: see ``wake_at``)."""
        node = self._breaker(self.node_breakers, self.nodes[worker])
        if node.state != "closed" and not node.allows(now):
            return None
        self._release_backoff(now)
        t = self._probe(now) or self._pop(now)
        if t is None:
            if node.state == "half_open":
                node.probing = False  # the node's probe slot was not used
            return None
        self._start(t)
        return t

    def _start(self, t: Ticket) -> None:
        t.tries += 1
        self.counts["tries"] += 1
        self.counts["retries"] += t.tries > 1
        self.running_slow += t.lane == "slow"
        self.running += 1
        self.running_mb += t.memory_mb

    def fits(self, t: Ticket) -> bool:
        """Whether ``t`` may start now under the memory budget (alone, it always may)."""
        return self.running == 0 or self.running_mb + t.memory_mb <= self.memory_budget_mb

    def _probe(self, now: float) -> Ticket | None:
        for domain, held in self._held.items():
            while held and held[0].group in self.dropped_groups:  # never probe with a dropped group's job
                self.skipped.append(held.pop(0))
            if held and self.fits(held[0]) and self.domain_breakers[domain].allows(now):
                t = held.pop(0)
                t.probe = True
                return t
        return None

    def _pop(self, now: float) -> Ticket | None:
        fast, slow = self._lanes["fast"], self._lanes["slow"]
        waiting: list[tuple[Lane, tuple[Any, ...]]] = []  # too big for the memory left: back after
        self._memory_waiting = []
        try:
            while fast or slow:
                take_slow = bool(slow) and (self.running_slow < self.slow_cap or not fast)
                lane: Lane = "slow" if take_slow else "fast"
                entry = heapq.heappop(self._lanes[lane])
                t: Ticket = entry[-1]
                if t.group in self.dropped_groups:
                    self.skipped.append(t)
                    continue
                if not self.fits(t):
                    waiting.append((lane, entry))
                    self.counts["memory_waits"] += 1
                    continue
                if self._starving([e[-1] for _, e in waiting]):  # it waits: nothing passes it any more
                    waiting.append((lane, entry))
                    return None
                breaker = self.domain_breakers.get(t.domain)
                if breaker is not None and not breaker.allows(now):
                    self._held[t.domain].append(t)
                    self.counts["held"] += 1
                    continue
                if breaker is not None and breaker.state == "half_open":
                    t.probe = True
                self._memory_waiting = [e[-1] for _, e in waiting]
                self._pass_over(self._memory_waiting)
                return t
            return None
        finally:
            for lane, entry in waiting:
                heapq.heappush(self._lanes[lane], entry)

    def _starving(self, waiting: Sequence[Ticket]) -> bool:
        return any(w.passed_over >= self.workers for w in waiting)

    def _pass_over(self, waiting: Sequence[Ticket]) -> None:
        for w in waiting:
            w.passed_over += 1

    def take_more(self, first: Ticket, n: int, now: float) -> list[Ticket]:
        """Up to ``n`` more ready jobs of ``first``'s domain and lane, to run in one batch with it
        (each passes over the jobs ``next`` left waiting for memory, within their bound). A retried job
        (an infra try behind it) runs alone: it joins no batch and takes none into its own, so one
        response that makes its whole batch infra costs its neighbours one try at most, never their
        group (and is itself judged alone on its retry)."""
        if n <= 0 or first.probe or first.tries > 1:
            return []
        heap, out, other = self._lanes[first.lane], [], []
        while heap and len(out) < n and len(other) < 4 * n:
            entry = heapq.heappop(heap)
            t = entry[-1]
            if t.group in self.dropped_groups:
                self.skipped.append(t)
            elif t.domain == first.domain and t.tries == 0 and self.fits(t) and not self._starving(self._memory_waiting):
                self._start(t)
                self._pass_over(self._memory_waiting)
                out.append(t)
            else:
                other.append(entry)
        for entry in other:
            heapq.heappush(heap, entry)
        return out

    def wake_at(self, now: float) -> float | None:
        """The earliest time at which something now held (backoff, an open breaker) becomes ready."""
        times = [self._backoff[0][0]] if self._backoff else []
        times += [t for d, h in self._held.items() if h and (t := self.domain_breakers[d].reopens_at()) is not None]
        for name in list(self._open_nodes):
            if (t := self.node_breakers[name].reopens_at()) is None:
                self._open_nodes.discard(name)
            else:
                times.append(t)
        return min(times) if times else None

    # -- results --------------------------------------------------------------------------------

    def done(self, t: Ticket, worker: int, *, now: float, duration_s: float, infra: bool, timeout: bool,
             memory_mb: float | None = None) -> Decision:
        """Record one finished try of ``t`` on ``worker`` (``memory_mb``: its observed peak, when the
        try reported one); says whether the job is final, retried (queued again after its backoff)
        or exhausted (the caller drops its group). Only ``infra`` counts against the breakers; a
        ``timeout`` that is not infra is the candidate's own verdict (module docstring, Breakers)."""
        self.running_slow -= t.lane == "slow"
        self.running -= 1
        self.running_mb = max(0.0, self.running_mb - t.memory_mb)
        probe, t.probe = t.probe, False
        domain = self._breaker(self.domain_breakers, t.domain)
        was_open = domain.state != "closed"
        # a timeout that is no infra error is the candidate's own verdict (``timeout`` says only how it
        # ended): bad for a breaker, it let a policy that loops close its domain to the sampler
        domain.record(bad=infra, now=now)
        if probe and domain.state == "half_open":
            domain.probing = False
        if was_open and domain.state == "closed":
            for held in self._held.pop(t.domain, []):
                self._push(held)
        node = self._breaker(self.node_breakers, self.nodes[worker])
        here = t.domain.startswith(EPISODE_PREFIX)  # a stateful episode's step runs on its env, in this process
        node.record(bad=infra and self._node_breakers_on and not here, now=now)
        if node.state == "open":
            self._open_nodes.add(self.nodes[worker])
        if not infra:
            self.estimator.observe(t.domain, t.task_id, duration_s=duration_s, timeout_s=t.timeout_s)
            if memory_mb is not None and t.memory_prior_mb > 0:
                self.estimator.observe_memory(t.domain, t.task_id, peak_mb=memory_mb, prior_mb=t.memory_prior_mb)
            return "final"
        self.counts["infra_tries"] += 1
        if not t.retry:
            return "final"
        if t.tries >= self.policy.max_tries:
            self.counts["exhausted"] += 1
            return "exhausted"
        t.not_before = now + self.policy.backoff(t.tries)
        t.passed_over = 0  # a new wait: passed over afresh, not starving at once
        heapq.heappush(self._backoff, (t.not_before, t.id, t))
        return "retry"

    def drop_group(self, group: str) -> None:
        """Skip every queued job of ``group`` from now on (its jobs come back through ``skipped``)."""
        if group not in self.dropped_groups:
            self.dropped_groups.add(group)
            self.counts["groups_dropped"] += 1

    # -- metrics and checkpoints ----------------------------------------------------------------

    def breaker_states(self) -> dict[str, str]:
        """``{"domain:<name>": state, "node:<name>": state}`` for metrics.jsonl and the report."""
        return {**{f"domain:{k}": b.state for k, b in sorted(self.domain_breakers.items())},
                **{f"node:{k}": b.state for k, b in sorted(self.node_breakers.items())}}

    def breaker_opens(self) -> int:
        return sum(b.opens for b in (*self.domain_breakers.values(), *self.node_breakers.values()))

    def state_dict(self, now: float) -> dict[str, Any]:
        """Estimates, breakers and counters as JSON types (times relative to ``now``)."""
        return {
            "estimator": self.estimator.state_dict(),
            "domain_breakers": {k: b.state_dict(now) for k, b in self.domain_breakers.items()},
            "node_breakers": {k: b.state_dict(now) for k, b in self.node_breakers.items()},
            "counts": dict(self.counts),
            "dropped_groups": sorted(self.dropped_groups),
        }

    def load_state_dict(self, state: dict[str, Any], now: float) -> None:
        self.estimator.load_state_dict(state["estimator"])
        for name, table in (("domain_breakers", self.domain_breakers), ("node_breakers", self.node_breakers)):
            table.clear()
            for k, s in state[name].items():
                self._breaker(table, k).load_state_dict(s, now)
        self._open_nodes = {k for k, b in self.node_breakers.items() if b.state == "open"}
        self.counts = defaultdict(int, {k: int(v) for k, v in state["counts"].items()})
        self.dropped_groups = set(state["dropped_groups"])

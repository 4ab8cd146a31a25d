"""The execution service: ``submit(job) -> Future``, ``run_jobs(jobs)``, over a backend.

One worker thread per worker slot of the backend (``LocalBackend``: the sandbox pool's slots, or
the CPUs when no pool is needed; ``RayBackend``: the CPUs of every node's pool actor), each asking
the scheduler core (``_core.py``) for its next job. What the service owns, once, for every caller:

- concurrency (the backend's slots; callers pass no ``workers``);
- retries of infra errors only (``SchedPolicy.max_tries``, with backoff), every try recorded
  (``run_jobs``'s ``tries`` per job; the latest ``ATTEMPTS_KEPT`` in ``attempts``) and settled in
  the ``ledger``; a job that runs out drops its whole group: its future and those of the group's
  queued jobs raise ``GroupDropped``, ``run_jobs`` gives None for every member, and ``stats()``
  counts them. A dropped sample is never scored;
- for ``Verify`` jobs only: the verdict cache and deduplication of identical (task id, response)
  (a duplicate waits for the first and is settled with it; an infra error is never cached; when the
  first's group is dropped, the duplicate runs on its own; in a domain whose verdict is a draw,
  ``DomainHooks(replay=False)``, a fail is cached (the candidate's own loss) and a pass only once
  the response has passed ``CONFIRM_PASSES`` fresh verifications in a row, each later identical job
  verified afresh until then: a draw that passes with p is replayed as a pass with p ** 3, so a
  guessed secret is not a pass for ever, while an honest response costs three verifications), and
  batching through a domain's ``BatchVerifier``;
- lanes, priorities, breakers and admission by a memory budget (``_core.py``; the budget:
  ``SchedPolicy.memory_budget_mb``, by default 75% of the memory this process may use for a
  ``LocalBackend``: physical memory, or its cgroup's limit (v1 or v2) where smaller);
  a verifier that knows its execution's peak memory reports it as ``evidence["peak_memory_mb"]``
  (``PEAK_MEMORY_KEY``) and the estimate learns from it;
- ``Step`` jobs: the steps of stateful episodes (repair, agent) that ``rollout.run_batch``
  drives in lockstep; each runs on its episode's own environment in this process, is counted,
  laned and breakered under ``episode:<domain>``, and is never retried on its own: the runner
  restarts the episode (``restarted``) or gives its group up (``give_up``). A step that raises
  ``StepError`` (its environment's own error) is no infra try: its future raises that error.
- the nested lane (``verify_nested``, ``verifier()``): a step that verifies an attempt (a repair
  episode's, an agent's final answer) does it through the service, at once on its own worker and
  on the backend (a pool actor on Ray), never queued behind the jobs that wait for it.

Per-job state is forgotten once every job of a group is settled (the ledger's too), so a long run
holds the verdict cache, the estimates, the names of dropped groups and the latest
``ATTEMPTS_KEPT`` tries (each with its verdict).

>>> from posttrain.types import Task, Verdict
>>> def exact(task, response):
...     return Verdict("pass", 1.0) if response == task.fields["answer"] else Verdict("fail", 0.0)
>>> t = Task(id="a", domain="arith", prompt="1+1?", fields={"answer": "2"})
>>> with Service(LocalBackend({"arith": DomainHooks(exact)})) as svc:
...     [v.outcome for v in svc.run_jobs([Verify(t, "2"), Verify(t, "3")]).results]
['pass', 'fail']

The domains' hooks come from the wiring (``posttrain.cli.domain_hooks``, ``posttrain.cli.open_service``):
this package never looks a domain up.

Not here: overlapping generation with training (bounded staleness) lives in the trainer.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from posttrain.sched._core import EPISODE_PREFIX, Scheduler, Ticket
from posttrain.sched._jobs import (
    Attempt,
    DomainHooks,
    GroupDropped,
    Job,
    JobKey,
    Ledger,
    Result,
    Step,
    StepError,
    Verify,
    verifier_bug,
    verify_with,
)
from posttrain.sched._memory import memory_limit_mb
from posttrain.sched._rules import SchedPolicy
from posttrain.types import Observation, StepResult, Task, Verdict, Verifier


class Backend(Protocol):
    """Where tries run. ``nodes[w]`` names the node of worker slot ``w`` (one entry per slot)."""

    nodes: Sequence[str]

    def serves(self, domain: str) -> bool: ...

    def max_batch(self, domain: str) -> int: ...

    def replays(self, domain: str) -> bool: ...

    def verify(self, worker: int, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]: ...

    def close(self) -> None: ...


class LocalBackend:
    """Tries run in this process: one slot per sandbox-pool slot (or per CPU without a pool)."""

    def __init__(self, hooks: Mapping[str, DomainHooks], pool: Any | None = None) -> None:
        from posttrain.sandbox import usable_cpus

        self.hooks, self.pool = dict(hooks), pool  # the pool: for environments that run in it (BFCL episodes)
        self.nodes = ["local"] * (pool.size if pool is not None else usable_cpus())

    def serves(self, domain: str) -> bool:
        return domain in self.hooks

    def max_batch(self, domain: str) -> int:
        batch = self.hooks[domain].batch if domain in self.hooks else None
        return batch.max_batch if batch is not None else 1

    def replays(self, domain: str) -> bool:
        """Whether ``domain``'s verdicts may be cached (``DomainHooks.replay``)."""
        return domain not in self.hooks or self.hooks[domain].replay

    def verify(self, worker: int, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        return verify_with(self.hooks[domain], domain, pairs)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class BatchResult:
    """``results[i]`` for ``jobs[i]``: a Verdict (Verify) or StepResult (Step), None when its
    group was dropped (never scored). ``tries[i]``: the tries run for ``jobs[i]`` (empty for a
    cache hit, a duplicate that waited for an identical job, or a job of a group dropped before it ran)."""

    results: list[Result | None]
    dropped_groups: frozenset[str]
    tries: list[list[Attempt]] = field(default_factory=list)


@dataclass
class _Waiter:
    """A caller waiting for a job's result: the job that runs, or a duplicate that follows it."""

    job: Job
    group: str
    key: JobKey
    future: Future[Result]


@dataclass
class _Pending:
    lead: _Waiter
    followers: list[_Waiter] = field(default_factory=list)
    crashes: list[str | None] = field(default_factory=list)  # per infra try: its verifier_bug line, or None

    @property
    def job(self) -> Job:
        return self.lead.job

    @property
    def everyone(self) -> list[_Waiter]:
        return [self.lead, *self.followers]


COUNTERS = ("jobs", "tries", "retries", "infra_tries", "exhausted", "groups_dropped", "samples_dropped", "held",
            "cache_hits", "deduplicated", "restarts", "memory_waits", "nested")
"""The counters of ``Service.stats()``: jobs queued, tries run, retries among them, infra tries, jobs
(or episodes) out of tries, groups and samples dropped, jobs held by an open breaker, cache hits,
duplicates, episodes restarted after an infra error, times a queued job was passed over because its
memory estimate did not fit the budget left, and verifications on the nested lane (``verify_nested``)."""

NESTED = "~nested"
"""The group of the nested lane's tries in ``Service.attempts`` (``verify_nested``)."""

PEAK_MEMORY_KEY = "peak_memory_mb"
"""A verdict's ``evidence`` key for the peak memory (MiB) its execution used, when the verifier knows it."""

MEMORY_SHARE = 0.75
"""A local service's default memory budget: this share of the memory this process may use (physical
memory, or its cgroup's limit where smaller: ``_memory.py``)."""

CONFIRM_PASSES = 3
"""Fresh passes in a row after which a pass of a domain whose verdict is a draw is replayed."""

ATTEMPTS_KEPT = 100_000
"""How many of the latest tries ``Service.attempts`` keeps (diagnostics, the bench, tests)."""


_BREAKER_LEVEL = {"closed": 0.0, "half_open": 1.0, "open": 2.0}


def _episode_domain(task: Task) -> str:
    return f"{EPISODE_PREFIX}{task.domain}"


def _verdict_of(result: Result | StepError) -> Verdict | None:
    """The verdict a try's infra check and records read: a Verify's own, a Step's (None: it gave none)."""
    if isinstance(result, StepError):
        return None
    return result if isinstance(result, Verdict) else result.verdict


def _peak_mb(verdict: Verdict | None) -> float | None:
    peak = verdict.evidence.get(PEAK_MEMORY_KEY) if verdict is not None else None
    return float(peak) if isinstance(peak, int | float) and not isinstance(peak, bool) and peak >= 0 else None


class Service:
    """The one execution service (module docstring). Use as a context manager, or ``close()``."""

    def __init__(self, backend: Backend, policy: SchedPolicy | None = None) -> None:
        self.backend = backend
        policy = policy or SchedPolicy()
        budget = policy.memory_budget_mb
        if budget is None and isinstance(backend, LocalBackend):
            budget = MEMORY_SHARE * memory_limit_mb()
        self.sched = Scheduler(len(backend.nodes), policy, nodes=backend.nodes, memory_budget_mb=budget)
        self.attempts: deque[Attempt] = deque(maxlen=ATTEMPTS_KEPT)
        self.ledger = Ledger()
        self.counts: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._pending: dict[int, _Pending] = {}
        self._inflight: dict[tuple[str, str], _Pending] = {}
        self._cache: dict[tuple[str, str], Verdict] = {}
        self._passes: Counter[tuple[str, str]] = Counter()
        """Fresh passes in a row of a response whose domain's verdict is a draw (not cached yet)."""
        self._group_sizes: Counter[str] = Counter()
        self._group_keys: dict[str, list[JobKey]] = {}
        self._group_live: dict[str, set[JobKey]] = {}
        """Each group's jobs, and those not settled yet; a group is forgotten when none is left."""
        self._watch: dict[JobKey, list[Attempt]] = {}
        self._solo = itertools.count()
        self._nested_slots = itertools.count()
        self._here = threading.local()
        """``worker``: the slot of the worker thread this is (unset outside the workers)."""
        self._closed = False
        self._t0 = time.monotonic()
        self._threads = [threading.Thread(target=self._work, args=(w,), name=f"sched-{w}", daemon=True)
                         for w in range(len(backend.nodes))]
        for t in self._threads:
            t.start()

    @property
    def workers(self) -> int:
        return len(self._threads)

    def verifier(self) -> Verifier:
        """This service's nested lane as a ``Verifier`` (``verify_nested``): what a stateful episode's
        step verifies with (``EpisodeContext.verify``, ``RepairEnv``), on any backend."""
        return self.verify_nested

    def verify_nested(self, task: Task, response: str) -> Verdict:
        """Verify ``response`` from inside a running job (a ``Step`` whose environment judges an
        attempt): the nested lane. The try runs at once in the calling thread, on the backend (a
        ``LocalBackend``: this process; a ``RayBackend``: a pool actor of the cluster), never queued: a
        step holds its worker while it verifies, so queued behind other jobs it could wait for workers
        that all wait the same way. The try takes the slot of the worker that runs the step (a caller
        outside the service's workers: slots taken in turn): that slot is idle while its worker runs the
        step. Before, slots were taken in turn, and a quick right answer's try was sent to a node whose
        workers all ran long verifications: it queued past its pool actor's concurrency, its wait ran
        out and it came back infra (the episode restarted, its group dropped when its tries ran out),
        while its own node had a slot free. One try, recorded (``attempts``, group
        ``NESTED``; ``stats()["nested"]``); an infra error is the step's, and the runner restarts the
        episode on it (``rollout.run_batch``), as for the step's other infra failures. No cache (the
        episode's environment keeps its own), no breaker (the step's job has one)."""
        if not self.backend.serves(task.domain):
            raise ValueError(f"task {task.id!r}: no verifier for domain {task.domain!r} in this service")
        w = getattr(self._here, "worker", None)
        if w is None:
            with self._cond:
                w = next(self._nested_slots) % len(self.backend.nodes)
        start = self._now()
        try:
            [verdict] = self.backend.verify(w, task.domain, [(task, response)])
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a crash of the worker is infra, never a score
            verdict = Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:worker")
        duration = self._now() - start
        with self._cond:
            self.counts["nested"] += 1
            self.attempts.append(Attempt(NESTED, task.id, 0, 0, w, self.sched.nodes[w], round(start, 4),
                                         round(duration, 4), verdict.outcome, verdict.error_class, final=True,
                                         verdict=verdict))
        return verdict

    def _now(self) -> float:
        return time.monotonic() - self._t0

    # -- submitting -----------------------------------------------------------------------------

    def submit(self, job: Job) -> Future[Result]:
        """Queue ``job``; the future gives its Verdict (Verify) or StepResult (Step), or raises
        ``GroupDropped`` (or a Step's ``StepError``)."""
        return self._submit(job, watch=False)[0]

    def _submit(self, job: Job, *, watch: bool) -> tuple[Future[Result], JobKey]:
        if not isinstance(job, Verify | Step):
            raise TypeError(f"Service.submit takes a Verify or a Step, got {type(job).__name__}")
        if isinstance(job, Verify) and not self.backend.serves(job.task.domain):
            raise ValueError(f"task {job.task.id!r}: no verifier for domain {job.task.domain!r} in this service")
        future: Future[Result] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("Service.submit after close")
            group = job.group_id or f"~solo{next(self._solo)}"
            key: JobKey = (group, job.key[1], job.sample_idx)
            keys = self._group_keys.setdefault(group, [])
            if key in keys:
                raise ValueError(f"Service.submit: job {key} submitted twice; (group id, task id, sample index) "
                                 "names one sample")
            keys.append(key)
            self._group_live.setdefault(group, set()).add(key)
            self._group_sizes[group] += 1
            if watch:
                self._watch[key] = []
            waiter = _Waiter(job, group, key, future)
            if group in self.sched.dropped_groups:
                if not isinstance(job, Step):  # a step is not a sample: give_up counted the episode's group
                    self.counts["samples_dropped"] += 1
                self._settle(waiter, None, "dropped before this job was submitted")
                return future, key
            if isinstance(job, Verify):
                pair = (job.task.id, job.response)
                if (hit := self._cache.get(pair)) is not None:
                    self.counts["cache_hits"] += 1
                    self._settle(waiter, hit)
                    return future, key
                if (first := self._inflight.get(pair)) is not None:
                    self.counts["deduplicated"] += 1
                    first.followers.append(waiter)
                    return future, key
            self._enqueue(_Pending(waiter))
            self._cond.notify()
        return future, key

    def _enqueue(self, pending: _Pending) -> None:
        job = pending.job
        domain = job.task.domain if isinstance(job, Verify) else _episode_domain(job.task)
        limits = job.task.limits
        step = isinstance(job, Step)
        ticket = self.sched.add(domain, job.task.id, timeout_s=limits.timeout_s, group=pending.lead.group,
                                now=self._now(), priority=job.priority, memory_mb=limits.memory_mb,
                                retry=not step, delay_s=job.delay_s if step else 0.0)
        self._pending[ticket.id] = pending
        if isinstance(job, Verify):
            self._inflight[(job.task.id, job.response)] = pending

    def run_jobs(self, jobs: Sequence[Job]) -> BatchResult:
        """Submit ``jobs`` and wait for all; members of a dropped group come back as None."""
        submitted = [self._submit(j, watch=True) for j in jobs]
        results: list[Result | None] = []
        for f, _ in submitted:
            try:
                results.append(f.result())
            except GroupDropped:
                results.append(None)
        with self._cond:
            dropped = frozenset(j.group_id for j in jobs if j.group_id in self.sched.dropped_groups)
            tries = [self._watch.pop(key, []) for _, key in submitted]
        return BatchResult([None if j.group_id in dropped else r for j, r in zip(jobs, results, strict=True)],
                           dropped, tries)

    def verify_pairs(self, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        """Verdicts for (task, response) pairs, in order, each pair a job of its own: one that ran
        out of infra retries is ``infra_error`` (``infra:exhausted``), never scored.

        >>> from posttrain.types import Task, Verdict
        >>> def exact(task, response):
        ...     return Verdict("pass", 1.0) if response == task.fields["answer"] else Verdict("fail", 0.0)
        >>> t = Task(id="a", domain="arith", prompt="1+1?", fields={"answer": "2"})
        >>> with Service(LocalBackend({"arith": DomainHooks(exact)})) as svc:
        ...     [v.outcome for v in svc.verify_pairs([(t, "2"), (t, "3")])]
        ['pass', 'fail']
        """
        results = self.run_jobs([Verify(t, r) for t, r in pairs]).results
        return [r if isinstance(r, Verdict) else Verdict.infra("ran out of infra retries", error_class="infra:exhausted")
                for r in results]

    # -- the workers ----------------------------------------------------------------------------

    def _work(self, w: int) -> None:
        self._here.worker = w
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = self._now()
                    ticket = self.sched.next(w, now)
                    self._resolve_skipped()
                    if ticket is not None:
                        break
                    wake = self.sched.wake_at(now)
                    self._cond.wait(None if wake is None else max(0.001, wake - now))
                tickets = [ticket]
                if isinstance(self._pending[ticket.id].job, Verify):
                    tickets += self.sched.take_more(ticket, self.backend.max_batch(ticket.domain) - 1, now)
                    self._resolve_skipped()
                items = [self._pending[t.id] for t in tickets]
            start = self._now()
            results = self._run(w, items)
            duration = self._now() - start
            with self._cond:
                for t, p, r in zip(tickets, items, results, strict=True):
                    self._finish(t, p, r, w, start, duration, len(tickets))
                self._cond.notify_all()

    def _run(self, w: int, items: list[_Pending]) -> list[Result | StepError]:
        first = items[0].job
        try:
            if isinstance(first, Step):  # on the episode's own environment, where it was built
                try:
                    outcome: StepResult = first.run()
                except StepError as e:  # the environment's own error: its caller gets it, not a retry
                    return [e]
                except SystemExit as e:  # past the runner's ``except Exception``: the environment's own, too
                    error = StepError(f"task {first.task.id!r}: its environment's step raised SystemExit: {e.code} "
                                      "(an exit inside the environment's code), not infra")
                    error.__cause__ = e
                    return [error]
                return [outcome]
            pairs = [(p.job.task, p.job.response) for p in items if isinstance(p.job, Verify)]
            verdicts = self.backend.verify(w, first.task.domain, pairs)
            if len(verdicts) != len(pairs):
                raise RuntimeError(f"{len(pairs)} pairs in, {len(verdicts)} verdicts out")
            return list(verdicts)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a crash of the backend or worker is infra, retried;
            # SystemExit too: uncaught, it ended this worker's thread and the job's future never settled
            bad = Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:worker")
            if isinstance(first, Step):  # the runner restarts the episode
                return [StepResult(Observation(()), bad, True)]
            return [bad] * len(items)

    def _finish(self, t: Ticket, p: _Pending, result: Result | StepError, w: int, start: float, duration: float,
                n: int) -> None:
        last = _verdict_of(result)
        infra = last is not None and last.is_infra_error
        error_class = "env_error" if isinstance(result, StepError) else last.error_class if last is not None else None
        timeout = "timeout" in (error_class or "")
        if not self.ledger.receive(p.lead.key, t.tries - 1):
            return  # a duplicate or late report of a try already settled: never counted twice
        if infra:
            p.crashes.append(verifier_bug(last))
        decision = self.sched.done(t, w, now=self._now(), duration_s=duration / n, infra=infra, timeout=timeout,
                                   memory_mb=_peak_mb(last) if n == 1 else None)
        outcome = (last.outcome if isinstance(result, Verdict) else "step:error" if isinstance(result, StepError)
                   else "step" if last is None else f"step:{last.outcome}")
        job = p.job
        attempt = Attempt(job.group_id, p.lead.key[1], job.sample_idx, t.tries - 1, w, self.sched.nodes[w],
                          round(start, 4), round(duration, 4), outcome, error_class, n,
                          final=decision != "retry", verdict=last)
        self.attempts.append(attempt)
        if (watched := self._watch.get(p.lead.key)) is not None:
            watched.append(attempt)
        if decision == "retry":
            return
        self.ledger.finalize(p.lead.key, t.tries - 1)
        del self._pending[t.id]
        if isinstance(job, Verify):
            self._inflight.pop((job.task.id, job.response), None)
        if decision == "exhausted" and isinstance(job, Verify) and len(p.crashes) > 1 and len(set(p.crashes)) == 1 \
                and p.crashes[0] is not None:
            error = StepError(f"task {job.task.id!r}: the {job.task.domain} verifier crashed on each of {len(p.crashes)} "
                              f"tries on one response ({p.crashes[0]}): a bug of the verifier, not infra -- dropped, "
                              "a response that crashes it would go unscored")
            for waiter in p.everyone:
                self._settle(waiter, error)
            return
        if decision == "exhausted":
            self._drop_group(p.lead.group)
            self._settle(p.lead, None, f"task {job.task.id!r} sample {job.sample_idx}: {t.tries} tries, last {error_class}")
            self._run_followers_alone(p)
            return
        if isinstance(job, Verify) and isinstance(result, Verdict):
            self._remember(job, result)
        for waiter in p.everyone:
            self._settle(waiter, result)

    def _remember(self, job: Verify, verdict: Verdict) -> None:
        """Cache ``verdict`` for later identical jobs: always where the domain's verdicts are a function of
        (task, response); where they are a draw, a fail at once and a pass after ``CONFIRM_PASSES`` in a
        row (module docstring). An infra error never reaches here."""
        pair = (job.task.id, job.response)
        if self.backend.replays(job.task.domain) or not verdict.passed:
            self._cache[pair] = verdict
            self._passes.pop(pair, None)
            return
        self._passes[pair] += 1
        if self._passes[pair] >= CONFIRM_PASSES:
            self._cache[pair] = verdict
            del self._passes[pair]

    def _run_followers_alone(self, p: _Pending) -> None:
        """The job a duplicate waited for will give no result (its group was dropped): the first of
        its followers whose group lives runs on its own, the rest follow it."""
        live = [f for f in p.followers if f.group not in self.sched.dropped_groups]
        for f in p.followers:
            if f.group in self.sched.dropped_groups:
                self._settle(f, None, "another sample of the group ran out of infra retries")
        if live:
            self._enqueue(_Pending(live[0], live[1:]))
            self._cond.notify_all()

    def _settle(self, waiter: _Waiter, result: Result | StepError | None, detail: str = "") -> None:
        """Hand ``waiter`` its result (None: its group was dropped; a ``StepError``: raised), settle its
        key in the ledger (a follower's too), and forget its group once every job of it is settled."""
        if not waiter.future.done():  # a caller may have cancelled it: the worker must live on
            if result is None:
                waiter.future.set_exception(GroupDropped(waiter.group, detail))
            elif isinstance(result, StepError):
                waiter.future.set_exception(result)
            else:
                waiter.future.set_result(result)
        if waiter.key not in self.ledger.finals:
            self.ledger.settle(waiter.key, 0, final=True)
        live = self._group_live.get(waiter.group)
        if live is not None and waiter.key in live:
            live.discard(waiter.key)
            if not live:  # every job of the group is settled: forget them
                del self._group_live[waiter.group]
                self._group_sizes.pop(waiter.group, None)
                for key in self._group_keys.pop(waiter.group, []):
                    self.ledger.forget(key)

    def restarted(self, group: str) -> None:
        """Count an episode of ``group`` restarted after an infra error (``rollout.run_batch``)."""
        with self._cond:
            self.counts["restarts"] += 1

    def give_up(self, group: str, *, members: int | None = None) -> None:
        """An episode of ``group`` ran out of tries: count it exhausted and drop its whole group (its
        queued jobs are skipped; its members come back unscored). ``members``: the group's samples,
        when the caller knows them (a runner's episodes; the service sees only their jobs in flight)."""
        with self._cond:
            self.sched.counts["exhausted"] += 1
            self._drop_group(group, members)
            self._cond.notify_all()

    def is_dropped(self, group: str) -> bool:
        with self._cond:
            return group in self.sched.dropped_groups

    def _drop_group(self, group: str, members: int | None = None) -> None:
        if group not in self.sched.dropped_groups:
            self.sched.drop_group(group)
            self.counts["samples_dropped"] += self._group_sizes[group] if members is None else members

    def _resolve_skipped(self) -> None:
        for t in self.sched.skipped:
            p = self._pending.pop(t.id)
            self.ledger.settle(p.lead.key, t.tries, final=True)
            if isinstance(p.job, Verify):
                self._inflight.pop((p.job.task.id, p.job.response), None)
            self._drop_group(p.lead.group)
            self._settle(p.lead, None, "another sample of the group ran out of infra retries")
            self._run_followers_alone(p)
        self.sched.skipped.clear()

    # -- metrics, checkpoints, shutdown ---------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Attrition and cache metrics (every name of ``COUNTERS``, 0 when it never happened),
        breaker opens and states (for metrics.jsonl and reports)."""
        with self._cond:
            counts = {**dict.fromkeys(COUNTERS, 0), **self.sched.counts, **self.counts}
            return {**counts, "breaker_opens": self.sched.breaker_opens(), "duplicates": self.ledger.duplicates,
                    "breakers": self.sched.breaker_states(), "memory": self._memory()}

    def _memory(self) -> dict[str, Any]:
        """The memory budget (None: no budget), the running jobs' estimates, and each domain's
        estimate as a share of its tasks' ``limits.memory_mb`` (1.0 until a peak is observed)."""
        s = self.sched
        return {"budget_mb": None if math.isinf(s.memory_budget_mb) else round(s.memory_budget_mb, 1),
                "running_mb": round(s.running_mb, 1),
                "domain_share": {d: round(f, 4) for d, f in sorted(s.estimator.domain_mb_frac.items())}}

    def metrics(self, since: Mapping[str, Any] | None = None) -> dict[str, float]:
        """For metrics.jsonl, per step: every counter of ``stats()`` as ``sched/<name>``, counted
        since ``since`` (an earlier ``stats()``; None: since the start), and each breaker's state
        as ``sched/breaker/<name>`` (0 closed, 1 half-open, 2 open)."""
        now, before = self.stats(), since or {}
        out = {f"sched/{k}": float(v - before.get(k, 0)) for k, v in sorted(now.items()) if isinstance(v, int | float)}
        out |= {f"sched/memory/{d}": f for d, f in now["memory"]["domain_share"].items()}
        return out | {f"sched/breaker/{k}": _BREAKER_LEVEL[state] for k, state in now["breakers"].items()}

    def open_domains(self) -> list[str]:
        """Task domains whose breaker is open and cooling down (``code`` for ``code`` or
        ``episode:code``): the GRPO task sampler skips them (``TaskSampler.next(k, skip=...)``).
        Once the cool-down is over the domain is drawn again, and its first job is the probe."""
        with self._cond:
            now = self._now()
            return sorted({d.removeprefix(EPISODE_PREFIX) for d, b in self.sched.domain_breakers.items()
                           if (at := b.reopens_at()) is not None and now < at})

    def state_dict(self) -> dict[str, Any]:
        with self._cond:
            return self.sched.state_dict(self._now())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._cond:
            self.sched.load_state_dict(state, self._now())

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        with self._cond:
            for p in self._pending.values():
                for waiter in p.everyone:
                    if not waiter.future.done():
                        waiter.future.set_exception(RuntimeError("the service was closed before this job ran"))
            self._pending.clear()
        self.backend.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

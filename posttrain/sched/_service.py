"""The execution service: ``submit(job) -> Future``, ``run_batch(jobs)``, over a backend.

One worker thread per worker slot of the backend (``LocalBackend``: the sandbox pool's slots, or
the CPUs when no pool is needed; ``RayBackend``: the CPUs of every node's pool actor), each asking
the scheduler core (``_core.py``) for its next job. What the service owns, once, for every caller:

- concurrency (the backend's slots; callers pass no ``workers``);
- retries of infra errors only (``SchedPolicy.max_tries``, with backoff), every try recorded in
  ``attempts`` and settled in the ``ledger``; a job that runs out drops its whole group: its
  future and those of the group's queued jobs raise ``GroupDropped``, ``run_batch`` gives None for
  every member, and ``stats()`` counts them. A dropped sample is never scored;
- for ``Verify`` jobs only: the verdict cache and deduplication of identical (task id, response)
  (a duplicate waits for the first; an infra error is never cached), and batching through a
  domain's ``BatchVerifier``;
- lanes, priorities and breakers (``_core.py``).

>>> from posttrain.sched import hooks_from_envs
>>> from posttrain.types import Task
>>> t = Task(id="a", domain="math", prompt="1+1?", fields={"answer": "2"})
>>> with Service(LocalBackend(hooks_from_envs(["math"], None))) as svc:
...     [v.outcome for v in svc.run_batch([Verify(t, "\\\\boxed{2}"), Verify(t, "3")]).results]
['pass', 'fail']

Not here: overlapping generation with training (bounded staleness) lives in the trainer.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from posttrain.sched._core import Scheduler, Ticket
from posttrain.sched._jobs import (
    Attempt,
    DomainHooks,
    Episode,
    GroupDropped,
    Job,
    JobKey,
    Ledger,
    Result,
    Verify,
)
from posttrain.sched._policy import SchedPolicy
from posttrain.types import Task, Trajectory, Verdict


class Backend(Protocol):
    """Where tries run. ``nodes[w]`` names the node of worker slot ``w`` (one entry per slot)."""

    nodes: Sequence[str]

    def serves(self, domain: str) -> bool: ...

    def max_batch(self, domain: str) -> int: ...

    def verify(self, worker: int, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]: ...

    def episode(self, worker: int, job: Episode) -> Trajectory: ...

    def close(self) -> None: ...


class LocalBackend:
    """Tries run in this process: one slot per sandbox-pool slot (or per CPU without a pool)."""

    def __init__(self, hooks: Mapping[str, DomainHooks], pool: Any | None = None) -> None:
        from posttrain.sandbox import usable_cpus

        self.hooks = dict(hooks)
        self.nodes = ["local"] * (pool.size if pool is not None else usable_cpus())

    def serves(self, domain: str) -> bool:
        return domain in self.hooks

    def max_batch(self, domain: str) -> int:
        batch = self.hooks[domain].batch if domain in self.hooks else None
        return batch.max_batch if batch is not None else 1

    def verify(self, worker: int, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        hooks = self.hooks[domain]
        if len(pairs) > 1 and hooks.batch is not None:
            return hooks.batch.verify_batch(pairs)
        return [hooks.verify(task, response) for task, response in pairs]

    def episode(self, worker: int, job: Episode) -> Trajectory:
        return job.run()

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class BatchResult:
    """``results[i]`` for ``jobs[i]``: a Verdict (Verify) or Trajectory (Episode), None when its
    group was dropped (never scored)."""

    results: list[Result | None]
    dropped_groups: frozenset[str]


@dataclass
class _Pending:
    job: Job
    group: str
    key: JobKey
    future: Future[Result]
    followers: list[tuple[Job, str, Future[Result]]] = field(default_factory=list)


def _episode_domain(task: Task) -> str:
    return f"episode:{task.domain}"


class Service:
    """The one execution service (module docstring). Use as a context manager, or ``close()``."""

    def __init__(self, backend: Backend, policy: SchedPolicy | None = None) -> None:
        self.backend = backend
        self.sched = Scheduler(len(backend.nodes), policy, nodes=backend.nodes)
        self.attempts: list[Attempt] = []
        self.ledger = Ledger()
        self.counts: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._pending: dict[int, _Pending] = {}
        self._inflight: dict[tuple[str, str], _Pending] = {}
        self._cache: dict[tuple[str, str], Verdict] = {}
        self._group_sizes: Counter[str] = Counter()
        self._keys: set[JobKey] = set()
        self._solo = itertools.count()
        self._closed = False
        self._t0 = time.monotonic()
        self._threads = [threading.Thread(target=self._work, args=(w,), name=f"sched-{w}", daemon=True)
                         for w in range(len(backend.nodes))]
        for t in self._threads:
            t.start()

    @property
    def workers(self) -> int:
        return len(self._threads)

    def _now(self) -> float:
        return time.monotonic() - self._t0

    # -- submitting -----------------------------------------------------------------------------

    def submit(self, job: Job) -> Future[Result]:
        """Queue ``job``; the future gives its Verdict (Verify) or Trajectory (Episode), or raises
        ``GroupDropped``."""
        if not isinstance(job, Verify | Episode):
            raise TypeError(f"Service.submit takes a Verify or an Episode, got {type(job).__name__}")
        if isinstance(job, Verify) and not self.backend.serves(job.task.domain):
            raise ValueError(f"task {job.task.id!r}: no verifier for domain {job.task.domain!r} in this service")
        future: Future[Result] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("Service.submit after close")
            group = job.group_id or f"~solo{next(self._solo)}"
            key: JobKey = (group, job.task.id, job.sample_idx)
            if key in self._keys:
                raise ValueError(f"Service.submit: job {key} submitted twice; (group id, task id, sample index) "
                                 "names one sample")
            self._keys.add(key)
            self._group_sizes[group] += 1
            if group in self.sched.dropped_groups:
                self.counts["samples_dropped"] += 1
                self._drop_future(future, group, "dropped before this job was submitted")
                return future
            if isinstance(job, Verify):
                pair = (job.task.id, job.response)
                if (hit := self._cache.get(pair)) is not None:
                    self.counts["cache_hits"] += 1
                    self.ledger.settle(key, 0, final=True)
                    future.set_result(hit)
                    return future
                if (first := self._inflight.get(pair)) is not None:
                    self.counts["deduplicated"] += 1
                    first.followers.append((job, group, future))
                    return future
            domain = job.task.domain if isinstance(job, Verify) else _episode_domain(job.task)
            limits = job.task.limits
            timeout = limits.timeout_s * (1 if isinstance(job, Verify) else limits.max_attempts)
            ticket = self.sched.add(domain, job.task.id, timeout_s=timeout, group=group,
                                    now=self._now(), priority=job.priority)
            pending = _Pending(job, group, key, future)
            self._pending[ticket.id] = pending
            if isinstance(job, Verify):
                self._inflight[(job.task.id, job.response)] = pending
            self._cond.notify()
        return future

    def run_batch(self, jobs: Sequence[Job]) -> BatchResult:
        """Submit ``jobs`` and wait for all; members of a dropped group come back as None."""
        futures = [self.submit(j) for j in jobs]
        results: list[Result | None] = []
        for f in futures:
            try:
                results.append(f.result())
            except GroupDropped:
                results.append(None)
        with self._cond:
            dropped = frozenset(j.group_id for j in jobs if j.group_id in self.sched.dropped_groups)
        return BatchResult([None if j.group_id in dropped else r for j, r in zip(jobs, results, strict=True)], dropped)

    # -- the workers ----------------------------------------------------------------------------

    def _work(self, w: int) -> None:
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

    def _run(self, w: int, items: list[_Pending]) -> list[Result]:
        first = items[0].job
        try:
            if isinstance(first, Episode):
                return [self.backend.episode(w, first)]
            pairs = [(p.job.task, p.job.response) for p in items if isinstance(p.job, Verify)]
            verdicts = self.backend.verify(w, first.task.domain, pairs)
            if len(verdicts) != len(pairs):
                raise RuntimeError(f"{len(pairs)} pairs in, {len(verdicts)} verdicts out")
            return list(verdicts)
        except Exception as e:  # noqa: BLE001 - a crash of the verifier or worker is infra, retried
            bad = Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:worker")
            return [bad] * len(items)

    def _finish(self, t: Ticket, p: _Pending, result: Result, w: int, start: float, duration: float, n: int) -> None:
        last = result if isinstance(result, Verdict) else (result.verdicts[-1] if result.verdicts else None)
        infra = last is not None and last.is_infra_error
        error_class = last.error_class if last is not None else None
        timeout = "timeout" in (error_class or "")
        if not self.ledger.receive(p.key, t.tries - 1):
            return  # a duplicate or late report of a try already settled: never counted twice
        decision = self.sched.done(t, w, now=self._now(), duration_s=duration / n, infra=infra, timeout=timeout)
        if decision != "retry":
            self.ledger.finalize(p.key, t.tries - 1)
        outcome = last.outcome if isinstance(result, Verdict) or last is None else f"episode:{last.outcome}"
        job = p.job
        self.attempts.append(Attempt(job.group_id, job.task.id, job.sample_idx, t.tries - 1, w, self.sched.nodes[w],
                                     round(start, 4), round(duration, 4), outcome, error_class, n,
                                     final=decision != "retry", verdict=last))
        if decision == "retry":
            return
        del self._pending[t.id]
        if isinstance(job, Verify):
            self._inflight.pop((job.task.id, job.response), None)
        everyone = [(p.job, p.group, p.future), *p.followers]
        if decision == "exhausted":
            detail = f"task {job.task.id!r} sample {job.sample_idx}: {t.tries} tries, last {error_class}"
            for _, group, future in everyone:
                self._drop_group(group)
                self._drop_future(future, group, detail)
            return
        if isinstance(job, Verify) and isinstance(result, Verdict):
            self._cache[(job.task.id, job.response)] = result
        for _, _, future in everyone:
            if not future.done():  # a caller may have cancelled it: the worker must live on
                future.set_result(result)

    def _drop_group(self, group: str) -> None:
        if group not in self.sched.dropped_groups:
            self.sched.drop_group(group)
            self.counts["samples_dropped"] += self._group_sizes[group]

    def _drop_future(self, future: Future[Result], group: str, detail: str) -> None:
        if not future.done():
            future.set_exception(GroupDropped(group, detail))

    def _resolve_skipped(self) -> None:
        for t in self.sched.skipped:
            p = self._pending.pop(t.id)
            self.ledger.settle(p.key, t.tries, final=True)
            if isinstance(p.job, Verify):
                self._inflight.pop((p.job.task.id, p.job.response), None)
            for _, group, future in [(p.job, p.group, p.future), *p.followers]:
                self._drop_group(group)
                self._drop_future(future, group, "another sample of the group ran out of infra retries")
        self.sched.skipped.clear()

    # -- metrics, checkpoints, shutdown ---------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Attrition and cache metrics, breaker opens and states (for metrics.jsonl and reports)."""
        with self._cond:
            return {**dict(self.sched.counts), **dict(self.counts), "breaker_opens": self.sched.breaker_opens(),
                    "duplicates": self.ledger.duplicates, "breakers": self.sched.breaker_states()}

    def open_domains(self) -> list[str]:
        """Domains whose breaker is not closed: a task sampler skips them."""
        with self._cond:
            return sorted(d for d, b in self.sched.domain_breakers.items() if b.state != "closed")

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
                for _, _, future in [(p.job, p.group, p.future), *p.followers]:
                    if not future.done():
                        future.set_exception(RuntimeError("the service was closed before this job ran"))
            self._pending.clear()
        self.backend.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

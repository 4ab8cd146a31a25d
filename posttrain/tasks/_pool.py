"""The task pool: difficulty pools across domains, filtering, curricula, domain weights, canaries.

``TaskPool(tasks, seed=, spec=, streams=, canaries=)`` draws RL batches (``next(k, skip=, step=)``,
the ``TaskSampler`` interface) and learns from them (``observe(tasks, passed)``), in this order
per batch of k:

1. **canaries**: ``spec.canary_rate * k`` slots, carried over between batches as a fraction
   (a rate of 0.02 at k = 16 is one canary every ~3 batches), round-robin over the canary tasks;
2. **a pool per slot** (with ``stratify``): easy, normal or hard by accumulated credit, so that
   ``easy_fraction`` of the slots are easy, ``hard_fraction`` hard and the rest normal exactly over
   batches; a pool with no task in any domain gives its slot to normal, then to whichever pool has
   tasks (prime-rl's buffer: the pools are the whole mix's, not a domain's, so a domain whose
   every task is too hard or too easy for the policy stops taking normal slots from the domains
   that still teach something). Without ``stratify`` every slot is from one pool, every task;
3. **a domain per slot**: among the domains with a task in that pool, by weight (``spec.weights``,
   a schedule, or every domain alike), smooth weighted round-robin (each turn adds each eligible
   domain's weight to its credit, the largest credit draws and pays the eligible total), so the
   shares hold exactly with no random draw. A domain in ``skip`` (its circuit breaker is open)
   that is chosen is passed over (counted in ``skipped``) and the slot goes to the next;
4. **within the domain**: a curriculum source hands out its next task (``Stream``: its pool is
   that of its current setting); a task set takes that pool's next task in a seeded shuffled
   order, each pool walking the order with its own cursor (a new shuffle per pass). In one step
   (every ``next`` of it: the batch and its refills) a task set with n tasks (all of them: every
   pool, filtered too) draws a task at most ceil(m / n) times in its m draws: once each while
   m <= n. A task set with no task of the pool under that cap passes its turn (as a skipped domain
   does); where no domain of the pool has one, the weights decide alone. So a policy that fails
   every task of a domain but one it knows by heart, leaving that one all the domain has in its
   pool, gets it once a step, not in the domain's whole share of each batch; while a domain's
   tasks are in the pool, the weights hold exactly.

Pools: a task's estimated pass rate (``Difficulty``: its groups' EMA, its setting's estimate
before that) at least ``easy_above`` is easy, at most ``hard_below`` hard, else normal. A curriculum
source is normal while its controller can move its level the way its setting's estimate points
(``stream_pool``): hard only at its lowest level, easy only at its highest. With a
filter, a task whose last ``after`` groups all passed entirely (saturated) or all failed entirely
(impossible) leaves the mix until ``revisit_every`` steps have passed, then comes back for a
group; if every task of the mix is filtered, they all come back (a run never stalls on its pool).
A pool whose share is 0 (``easy_fraction`` or ``hard_fraction`` left at 0) is never drawn from, so
the estimates that put a task there would never move again: a task in it whose estimate rests on no
group of the last ``revisit_every`` steps (the filter's, else ``FilterSpec``'s default; an unseen
task: its setting's groups) counts as normal until a group of it is observed (``stale``).

``observe`` updates the estimates, the filter and the curricula; canaries are never observed (an
honest policy fails them, and that says nothing of its difficulty). Everything is a function of
the seed and the observations, and all of it is in ``state_dict()``: a run resumed from a
checkpoint draws the same tasks, at the same levels, from the same pools.

Not here: the recipe's keys (``SamplerSpec``), the trainer's refill of zero-variance groups
(``posttrain.tasks._refill``), the hack alarm (``posttrain.tasks._canary``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from posttrain.errors import TaskError
from posttrain.tasks._curriculum import Stream
from posttrain.tasks._difficulty import Difficulty
from posttrain.tasks._spec import FilterSpec, SamplerSpec
from posttrain.types import Task

CLASSES = ("easy", "normal", "hard")


class _TaskSet:
    """One domain's tasks: a seeded order per pass, a cursor per pool."""

    def __init__(self, domain: str, tasks: Sequence[Task], seed: int) -> None:
        self.domain = domain
        self.tasks = list(tasks)
        self.seed = seed
        self.cursors = {c: [0, 0] for c in CLASSES}
        """pool -> [pass, position in that pass's order]."""
        self._orders: dict[int, list[int]] = {}

    def order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.tasks)))
            random.Random(f"{self.seed}:{self.domain}:{epoch}").shuffle(order)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = order
        return self._orders[epoch]

    def take(self, pool: str, member: Callable[[Task], bool]) -> Task | None:
        """The next task of ``pool`` after its cursor (``member(task)`` says whether one is), or None."""
        epoch, at = self.cursors[pool]
        for _ in range(2 * len(self.tasks)):  # the rest of this pass and a whole next one: every task once at least
            if at == len(self.tasks):
                epoch, at = epoch + 1, 0
            task = self.tasks[self.order(epoch)[at]]
            at += 1
            if member(task):
                self.cursors[pool] = [epoch, at]
                return task
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"cursors": {c: list(v) for c, v in self.cursors.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cursors = {c: [int(v[0]), int(v[1])] for c, v in state["cursors"].items()}


class TaskPool:
    """Draws RL batches from difficulty pools across domains and learns from their groups (module docstring).

    >>> tasks = [Task(id=f"{d}{i}", domain=d, prompt="", fields={}) for d in ("a", "b") for i in range(3)]
    >>> pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", weights={"a": 3, "b": 1}))
    >>> [t.domain for t in pool.next(8, step=0)].count("a")
    6
    """

    def __init__(self, tasks: Sequence[Task], *, seed: int, spec: SamplerSpec,
                 streams: Sequence[Stream] = (), canaries: Sequence[Task] = (),
                 levels: Callable[[str], tuple[int, int] | None] = lambda domain: None) -> None:
        if spec.kind != "pool":
            raise ValueError("TaskPool needs SamplerSpec(kind='pool'); the uniform sampler is TaskSampler")
        by_domain: dict[str, list[Task]] = {}
        for t in tasks:
            by_domain.setdefault(t.domain, []).append(t)
        both = sorted(set(by_domain) & {s.domain for s in streams})
        if both:
            raise ValueError(f"domain {both[0]!r} has both a task set and a curriculum source; give it one")
        if not by_domain and not streams:
            raise ValueError("TaskPool needs at least one task or curriculum source")
        self.seed = seed
        self.spec = spec
        self.sets = {d: _TaskSet(d, ts, seed) for d, ts in by_domain.items()}
        self.streams = {s.domain: s for s in streams}
        self.domains = tuple(sorted(self.sets)) + tuple(sorted(self.streams))
        unknown = sorted({d for w in [spec.weights or {}, *(p.weights for p in spec.schedule)] for d in w}
                         - set(self.domains))
        if unknown:
            raise ValueError(f"weights: {unknown[0]!r} is not a domain of the training pool "
                             f"({', '.join(self.domains)})")
        for d in self.domains:  # the priors' scale (level_prior): (3, 1) divided by zero, (2, 1) made every level easy
            scale = levels(d)
            if scale is not None and not scale[0] <= scale[1]:
                raise TaskError(f"{d}: level_range() is {tuple(scale)}; expected (easiest, hardest) with "
                                f"easiest <= hardest")
        self.canaries = list(canaries)
        self.difficulty = Difficulty(ema=spec.ema, levels=levels)
        self.pool_credits = dict.fromkeys(CLASSES, 0.0)
        """pool -> its credit: the share of slots each pool is owed (stratify)."""
        self.credits = {c: dict.fromkeys(self.domains, 0.0) for c in CLASSES}
        """pool -> domain -> its round-robin credit within that pool."""
        self.seen: dict[str, int] = {}
        """task id -> the step of its last observed group (a stale estimate comes back: module docstring)."""
        self.filtered: dict[str, tuple[str, int]] = {}
        """task id -> (saturated | impossible, the step it was filtered at)."""
        self.step = 0
        self.canary_credit = 0.0
        self.canary_cursor = 0
        self.skipped = 0
        """Draws passed over because their domain was in ``skip`` (a metric; not state)."""
        self.drawn: dict[str, int] = {}
        """task id -> its draws at ``drawn_step`` (task sets; module docstring, 4). Not state: a
        checkpoint is taken between steps, and a step's first ``next`` starts afresh."""
        self.domain_draws: dict[str, int] = {}
        """task-set domain -> its draws at ``drawn_step``."""
        self.drawn_step: int | None = None

    def known_tasks(self) -> list[Task]:
        """The fixed tasks this pool can hand out (task sets and canaries; a curriculum's are made as it goes)."""
        return [t for s in self.sets.values() for t in s.tasks] + self.canaries

    # --- drawing

    def next(self, k: int, *, skip: Collection[str] = (), step: int | None = None) -> list[Task]:
        """The next ``k`` tasks (module docstring); ``step`` is the RL step they are for."""
        if step is not None:
            self.step = step
        if self.drawn_step != self.step:
            self.drawn, self.domain_draws, self.drawn_step = {}, {}, self.step
        self.difficulty.advance(self.step)
        self._revisit()
        out: list[Task] = []
        if self.canaries and self.spec.canary_rate:
            self.canary_credit += self.spec.canary_rate * k
            while self.canary_credit >= 1.0 and len(out) < k:
                self.canary_credit -= 1.0
                out.append(self.canaries[self.canary_cursor % len(self.canaries)])
                self.canary_cursor += 1
        members, counts = self._members()
        if not any(members.values()):  # every task filtered: they all come back
            self.filtered.clear()
            members, counts = self._members()
        weights = self._weights()
        while len(out) < k:
            pool = self._pool_for_slot(members)
            in_pool = counts[pool]
            domain = self._domain_for_slot(pool, members[pool], weights, skip, lambda d, in_pool=in_pool: (
                d in self.streams or min(n for n, many in in_pool[d].items() if many) <= self._round(d)))
            capped = domain is not None
            if domain is None:  # no domain of the pool has a task under its cap: the weights alone
                domain = self._domain_for_slot(pool, members[pool], weights, skip, lambda d: True)
                assert domain is not None, pool
            task = self._take(domain, pool, capped=capped)
            assert task is not None, (domain, pool)  # members says the pool has one
            if domain in self.sets:
                n = self.drawn.get(task.id, 0)
                self.drawn[task.id], self.domain_draws[domain] = n + 1, self.domain_draws.get(domain, 0) + 1
                in_pool[domain][n] -= 1
                in_pool[domain][n + 1] = in_pool[domain].get(n + 1, 0) + 1
            out.append(task)
        return out

    def _members(self) -> tuple[dict[str, set[str]], dict[str, dict[str, dict[int, int]]]]:
        """pool -> the domains that have a task in it now (not filtered; one pool without stratify),
        and pool -> task-set domain -> draws this step -> how many of those tasks were drawn so often."""
        out: dict[str, set[str]] = {c: set() for c in CLASSES}
        counts: dict[str, dict[str, dict[int, int]]] = {c: {} for c in CLASSES}
        for d, tasks in self.sets.items():
            for t in tasks.tasks:
                if t.id not in self.filtered:
                    pool = self.pool_of(t)
                    out[pool].add(d)
                    by_draws = counts[pool].setdefault(d, {})
                    n = self.drawn.get(t.id, 0)
                    by_draws[n] = by_draws.get(n, 0) + 1
        for d in self.streams:
            out[self.stream_pool(d)].add(d)
        return out, counts

    def _round(self, domain: str) -> int:
        """How often a task of the task set ``domain`` may have been drawn this step to be drawn again
        (module docstring, 4): every task once before any twice, counting all of the domain's tasks."""
        return self.domain_draws.get(domain, 0) // len(self.sets[domain].tasks)

    def stream_pool(self, domain: str) -> str:
        """The pool of a curriculum source: its setting's class only where its controller cannot move
        the level that way (hard at its lowest level, easy at its highest), else normal. A stream sent
        to a pool with a small (or no) share got too few groups for its window, so one failed group at
        a level kept the source out of the mix at that level, and one passed group at level 0 kept it
        at level 0: the controller, fed, lowers or raises the level instead."""
        stream = self.streams[domain]
        pool = self._class_of(self.difficulty.setting_estimate(domain, stream.level))
        movable = pool == "hard" and stream.level > stream.lo or pool == "easy" and stream.level < stream.hi
        return "normal" if movable or self._stale(pool, lambda: self.difficulty.setting_step(domain, stream.level)) else pool

    def _pool_for_slot(self, members: Mapping[str, set[str]]) -> str:
        stratify = self.spec.stratify
        if stratify is None:
            return "normal"
        shares = {"easy": stratify.easy_fraction, "hard": stratify.hard_fraction,
                  "normal": 1.0 - stratify.easy_fraction - stratify.hard_fraction}
        for c in CLASSES:
            self.pool_credits[c] += shares[c]
        pool = max(CLASSES, key=lambda c: (self.pool_credits[c], -CLASSES.index(c)))
        self.pool_credits[pool] -= 1.0
        if not members[pool]:  # its shortfall: from normal, then whichever pool has tasks
            pool = next(c for c in ("normal", "hard", "easy") if members[c])
        return pool

    def _domain_for_slot(self, pool: str, eligible: set[str], weights: Mapping[str, float],
                         skip: Collection[str], under_cap: Callable[[str], bool]) -> str | None:
        """Smooth weighted round-robin over the domains of ``pool`` (module docstring, 3), passing over
        a domain with no task of ``pool`` ``under_cap`` this step (4); None where no domain drawn from
        has one."""
        candidates = [d for d in self.domains if d in eligible]
        usable = [d for d in candidates if d not in skip] or candidates
        w = {d: weights.get(d, 0.0) for d in candidates}
        if not any(w[d] > 0 for d in usable):  # the pool's domains all weighted 0 now: alike, rather than none
            w = dict.fromkeys(candidates, 1.0)
        fresh = {d for d in usable if under_cap(d)}
        if not any(w[d] > 0 for d in fresh):
            return None
        credits = self.credits[pool]
        while True:
            total = sum(w.values())
            for d in candidates:
                credits[d] += w[d]
            domain = max(candidates, key=lambda d: (credits[d], -self.domains.index(d)))
            credits[domain] -= total
            if domain in fresh:
                return domain
            self.skipped += domain not in usable

    def _weights(self) -> dict[str, float]:
        given = self.spec.weights_at(self.step)
        return {d: (1.0 if given is None else float(given.get(d, 1.0))) for d in self.domains}

    def _take(self, domain: str, pool: str, *, capped: bool) -> Task | None:
        if domain in self.streams:
            return self.streams[domain].next()
        cap = self._round(domain) if capped else None
        if self.spec.stratify is None:
            pool = "normal"
        return self.sets[domain].take(pool, lambda t: t.id not in self.filtered and (
            cap is None or self.drawn.get(t.id, 0) <= cap) and (self.spec.stratify is None or self.pool_of(t) == pool))

    def _class_of(self, p: float) -> str:
        stratify = self.spec.stratify
        if stratify is None:
            return "normal"
        return "easy" if p >= stratify.easy_above else "hard" if p <= stratify.hard_below else "normal"

    def pool_of(self, task: Task) -> str:
        """easy | normal | hard by the task's estimated pass rate (normal without stratify); normal
        while it is ``stale`` in a pool with no share."""
        if self.spec.stratify is None:
            return "normal"
        pool = self._class_of(self.difficulty.task(task))
        seen = self.seen.get(task.id)
        last = (lambda: self.difficulty.setting_step(task.domain, task.difficulty)) if seen is None else (lambda: seen)
        return "normal" if self._stale(pool, last) else pool

    def _stale(self, pool: str, last: Callable[[], int | None]) -> bool:
        """Whether an estimate in ``pool``, last moved by a group of step ``last()`` (None: never), comes
        back to normal: ``pool`` has no share, and ``revisit_every`` steps have passed. ``last`` is asked
        only then (``pool_of`` runs for every task of the mix at every draw; the normal pool and pools
        with a share need no step looked up)."""
        stratify = self.spec.stratify
        if stratify is None or pool == "normal" or (stratify.easy_fraction if pool == "easy" else stratify.hard_fraction):
            return False
        revisit = (self.spec.filter or FilterSpec()).revisit_every
        step = last()
        return self.step - (0 if step is None else step) >= revisit

    def _revisit(self) -> None:
        spec = self.spec.filter
        if spec is None or not self.filtered:
            return
        due = [tid for tid, (_, since) in self.filtered.items() if self.step - since >= spec.revisit_every]
        for tid in due:
            del self.filtered[tid]

    # --- learning

    def observe(self, tasks: Sequence[Task], passed: Sequence[Sequence[bool | None]]) -> None:
        """One group per task: each episode passed, failed, or None (an infra error)."""
        for task, group in zip(tasks, passed, strict=True):
            if "canary" in task.tags:
                continue
            rate = self.difficulty.observe(task, group, step=self.step)
            if rate is None:
                continue
            self.seen[task.id] = self.step
            if task.domain in self.streams:
                self.streams[task.domain].observe(task, rate, step=self.step)
            elif self.spec.filter is not None:
                recent = self.difficulty.recent(task)[-self.spec.filter.after:]
                if len(recent) == self.spec.filter.after and len(set(recent)) == 1 and recent[0] in (0.0, 1.0):
                    self.filtered[task.id] = ("saturated" if recent[0] == 1.0 else "impossible", self.step)

    # --- reporting and state

    def metrics(self) -> dict[str, float]:
        """Per domain d: ``domain/<d>/pool_<easy|normal|hard|filtered>`` (task counts), or a
        curriculum's ``domain/<d>/level`` and ``domain/<d>/estimate`` (its setting's estimated pass
        rate); ``pool/canaries``."""
        out: dict[str, float] = {}
        for d, tasks in self.sets.items():
            counts = dict.fromkeys((*CLASSES, "filtered"), 0)
            for t in tasks.tasks:
                counts["filtered" if t.id in self.filtered else self.pool_of(t)] += 1
            out.update({f"domain/{d}/pool_{c}": float(n) for c, n in counts.items()})
        for d, s in self.streams.items():
            out[f"domain/{d}/level"] = float(s.level)
            out[f"domain/{d}/estimate"] = self.difficulty.setting_estimate(d, s.level)
        if self.canaries:
            out["pool/canaries"] = float(len(self.canaries))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "pool", "seed": self.seed, "step": self.step, "pool_credits": dict(self.pool_credits),
                "credits": {c: dict(v) for c, v in self.credits.items()},
                "canary": [self.canary_credit, self.canary_cursor],
                "filtered": {tid: list(v) for tid, v in self.filtered.items()}, "seen": dict(self.seen),
                "difficulty": self.difficulty.state_dict(),
                "sets": {d: s.state_dict() for d, s in self.sets.items()},
                "streams": {d: s.state_dict() for d, s in self.streams.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != "pool" or int(state["seed"]) != self.seed:
            raise ValueError(f"sampler state is of a {state.get('kind', 'uniform')} sampler with seed "
                             f"{state.get('seed')}; this run uses a pool with seed {self.seed}")
        saved = set(state["credits"]["normal"])
        if saved != set(self.domains):
            raise ValueError(f"sampler state has domains {sorted(saved)}, this run {sorted(self.domains)}")
        self.step = int(state["step"])
        self.pool_credits = {c: float(v) for c, v in state["pool_credits"].items()}
        self.credits = {c: {d: float(v) for d, v in ds.items()} for c, ds in state["credits"].items()}
        self.canary_credit, self.canary_cursor = float(state["canary"][0]), int(state["canary"][1])
        self.filtered = {tid: (str(v[0]), int(v[1])) for tid, v in state["filtered"].items()}
        self.seen = {tid: int(v) for tid, v in state.get("seen", {}).items()}  # absent before 2026-12-06
        self.difficulty.load_state_dict(state["difficulty"])
        for d, s in state["sets"].items():
            self.sets[d].load_state_dict(s)
        for d, s in state["streams"].items():
            self.streams[d].load_state_dict(s)

    # the TaskSampler names, so a checkpoint stores either sampler the same way
    state = state_dict
    load_state = load_state_dict

"""The scheduler's rules: its knobs (``SchedPolicy``: the scheduling policy, not the model), its
duration and memory estimates (EWMA) and its circuit breaker: small, pure, clock-free.

Every method that depends on time takes ``now`` (seconds on whatever clock the caller runs: the
wall clock in the service, a virtual clock in the simulation), so the same code runs on both.
State round-trips through ``state_dict``/``load_state_dict`` (plain JSON types) for checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class SchedPolicy:
    """How the scheduler decides. The defaults are the service's; the simulation uses them too."""

    max_tries: int = 4
    """Tries per job (first + infra retries). A program's own failure is never retried."""
    backoff_s: float = 0.5
    """Delay before the first infra retry; doubled for each further one (capped at 8x)."""
    lane_split_s: float = 1.0
    """A job whose estimated duration is at least this goes to the slow lane."""
    slow_share: float = 0.5
    """Most workers that slow-lane jobs may hold while fast-lane jobs wait (at least 1 worker each)."""
    ewma_alpha: float = 0.3
    """Weight of the newest duration in each running estimate."""
    breaker_threshold: int = 5
    """Consecutive infra errors (of one domain, or one node; an infra timeout among them) that open its
    breaker. A candidate's own timeout is its fail, never counted."""
    breaker_cooldown_s: float = 5.0
    """How long an open breaker stays open before one probe job is let through (half-open)."""
    memory_budget_mb: float | None = None
    """Memory the running jobs' estimates may add up to (admission); None: the service's default
    (``Service``: 75% of the memory this process may use, physical or its cgroup's limit, for a
    local backend; no budget otherwise)."""

    def __post_init__(self) -> None:
        if self.max_tries < 1:
            raise ValueError(f"SchedPolicy.max_tries must be >= 1, got {self.max_tries}")
        if not 0.0 < self.slow_share <= 1.0:
            raise ValueError(f"SchedPolicy.slow_share must be in (0, 1], got {self.slow_share}")
        if not 0.0 < self.ewma_alpha <= 1.0:
            raise ValueError(f"SchedPolicy.ewma_alpha must be in (0, 1], got {self.ewma_alpha}")
        if self.breaker_threshold < 1:
            raise ValueError(f"SchedPolicy.breaker_threshold must be >= 1, got {self.breaker_threshold}")
        if self.memory_budget_mb is not None and self.memory_budget_mb <= 0:
            raise ValueError(f"SchedPolicy.memory_budget_mb must be > 0, got {self.memory_budget_mb}")

    def backoff(self, tries_done: int) -> float:
        """Delay before try number ``tries_done + 1`` (``tries_done`` >= 1)."""
        return self.backoff_s * min(8.0, 2.0 ** (tries_done - 1))


class Estimator:
    """Online estimates of each job's duration and memory: an EWMA per task and, per domain, an EWMA
    of log(observed / prior) -- the prior being the task's timeout (duration) or its
    ``limits.memory_mb`` (memory).

    A task seen before is estimated by its own EWMA. An unseen task is estimated by its prior scaled
    by how much of their priors its domain's jobs have been using, so a 60-second test suite still
    looks slow in a domain whose checks usually take 0.1 s. The domain's average is geometric (in
    log space): one slow suite does not make every quick check look slow. Memory is observed only
    where a try reports its peak (``done(memory_mb=...)``); until then the prior stands.

    >>> e = Estimator(alpha=0.5)
    >>> e.estimate("d", "t1", timeout_s=10.0)
    10.0
    >>> e.observe("d", "t1", duration_s=1.0, timeout_s=10.0)
    >>> e.estimate("d", "t1", timeout_s=10.0), e.estimate("d", "t2", timeout_s=30.0)
    (1.0, 3.0)
    >>> e.observe_memory("d", "t1", peak_mb=64.0, prior_mb=256.0)
    >>> e.memory("d", "t1", prior_mb=256.0), e.memory("d", "t2", prior_mb=512.0)
    (64.0, 128.0)
    """

    def __init__(self, alpha: float = 0.3) -> None:
        self.alpha = alpha
        self.task: dict[str, float] = {}
        self.domain_frac: dict[str, float] = {}
        self.task_mb: dict[str, float] = {}
        self.domain_mb_frac: dict[str, float] = {}

    def estimate(self, domain: str, task_id: str, timeout_s: float) -> float:
        """The expected duration in seconds."""
        if (seen := self.task.get(task_id)) is not None:
            return seen
        return timeout_s * self.domain_frac.get(domain, 1.0)

    def memory(self, domain: str, task_id: str, prior_mb: float) -> float:
        """The expected peak memory in MiB."""
        if (seen := self.task_mb.get(task_id)) is not None:
            return seen
        return prior_mb * self.domain_mb_frac.get(domain, 1.0)

    def observe(self, domain: str, task_id: str, *, duration_s: float, timeout_s: float) -> None:
        self._observe(self.task, self.domain_frac, domain, task_id, duration_s, timeout_s)

    def observe_memory(self, domain: str, task_id: str, *, peak_mb: float, prior_mb: float) -> None:
        self._observe(self.task_mb, self.domain_mb_frac, domain, task_id, peak_mb, prior_mb)

    def _observe(self, task: dict[str, float], domain_frac: dict[str, float], domain: str, task_id: str,
                 value: float, prior: float) -> None:
        a = self.alpha
        old = task.get(task_id)
        task[task_id] = value if old is None else a * value + (1 - a) * old
        frac = min(1.0, max(value / prior, 1e-6)) if prior > 0 else 1.0
        old_f = domain_frac.get(domain)
        domain_frac[domain] = frac if old_f is None else math.exp(a * math.log(frac) + (1 - a) * math.log(old_f))

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "task": dict(self.task), "domain_frac": dict(self.domain_frac),
                "task_mb": dict(self.task_mb), "domain_mb_frac": dict(self.domain_mb_frac)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha = float(state["alpha"])
        self.task = {str(k): float(v) for k, v in state["task"].items()}
        self.domain_frac = {str(k): float(v) for k, v in state["domain_frac"].items()}
        # checkpoints written before memory estimates have none: the priors stand
        self.task_mb = {str(k): float(v) for k, v in state.get("task_mb", {}).items()}
        self.domain_mb_frac = {str(k): float(v) for k, v in state.get("domain_mb_frac", {}).items()}


class Breaker:
    """A circuit breaker: ``threshold`` consecutive bad results open it; after ``cooldown_s`` it lets
    one probe through (half-open); the probe's success closes it, its failure opens it again.

    >>> b = Breaker(threshold=2, cooldown_s=5.0)
    >>> b.record(bad=True, now=0.0); b.record(bad=True, now=1.0); b.state
    'open'
    >>> b.allows(now=3.0), b.allows(now=6.0), b.state
    (False, True, 'half_open')
    >>> b.record(bad=False, now=7.0); b.state
    'closed'
    """

    def __init__(self, threshold: int, cooldown_s: float) -> None:
        self.threshold, self.cooldown_s = threshold, cooldown_s
        self.state: BreakerState = "closed"
        self.consecutive = 0
        self.opened_at = 0.0
        self.probing = False
        self.opens = 0

    def allows(self, now: float) -> bool:
        """May a job be sent now? In half-open, only one (the probe) until its result is in."""
        if self.state == "open" and now >= self.opened_at + self.cooldown_s:
            self.state, self.probing = "half_open", False
        if self.state == "closed":
            return True
        if self.state == "half_open" and not self.probing:
            self.probing = True
            return True
        return False

    def reopens_at(self) -> float | None:
        return self.opened_at + self.cooldown_s if self.state == "open" else None

    def record(self, *, bad: bool, now: float) -> None:
        if not bad:
            # A success while open came from a job sent before the breaker opened: only a success
            # after the cool-down (half-open) closes it.
            if self.state != "open":
                self.state, self.consecutive, self.probing = "closed", 0, False
            return
        self.consecutive += 1
        if self.state == "half_open" or (self.state == "closed" and self.consecutive >= self.threshold):
            self.state, self.opened_at, self.probing = "open", now, False
            self.opens += 1

    def state_dict(self, now: float) -> dict[str, Any]:
        """Times are stored relative to ``now``, so a resume on another clock keeps the cool-down left."""
        return {"state": self.state, "consecutive": self.consecutive, "opens": self.opens,
                "probing": self.probing, "cooldown_left_s": (self.opened_at + self.cooldown_s - now)
                if self.state == "open" else 0.0}

    def load_state_dict(self, state: dict[str, Any], now: float) -> None:
        self.state = state["state"]
        self.consecutive, self.opens = int(state["consecutive"]), int(state["opens"])
        self.probing = False  # no probe survives a restart: a half-open breaker probes again
        self.opened_at = now + float(state["cooldown_left_s"]) - self.cooldown_s

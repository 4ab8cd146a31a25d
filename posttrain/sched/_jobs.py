"""What the service runs and records: jobs, the domain hooks, one record per try, the ledger.

- ``Verify``: a stateless verification of one response. Cached and deduplicated by
  (task id, response); a domain may verify several in one call (``BatchVerifier``).
- ``Step``: one step of a stateful episode that the episode runner drives in lockstep (one
  ``generate`` call per round over every episode): ``run()`` steps that episode's own environment,
  which stays where it was built (this process, with its workspace). Counted, laned, breakered
  like any job, but never retried on its own and never cached: on an infra error its caller
  restarts the whole episode in a fresh environment (``rollout.run_batch``), and gives the group up
  (``Service.give_up``) when the episode's tries run out. A step whose ``run`` raises ``StepError``
  (an error of the environment itself, not infra: ``rollout.run_batch`` says which) is final too,
  but not an infra try: its future raises the ``StepError``, no breaker counts it.
- ``Ledger``: the driver's exactly-once book, keyed by (group, task, sample) and attempt: each try
  is settled once, each job gets one final result; a late or duplicate result (Ray re-running a
  task: reference/scheduling.md section 4) is counted and ignored.
"""

from __future__ import annotations

import builtins
import re
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.types import BatchVerifier, StepResult, Task, Verdict, Verifier

Result = Verdict | StepResult
JobKey = tuple[str, str, int]
"""(group id, task id, sample index): one sample of one group."""


class StepError(RuntimeError):
    """A stateful environment's step failed by an error of its own, not of the infrastructure (the
    rule: ``rollout.run_batch``'s docstring): raised by a ``Step``'s ``run``, handed to the caller
    as is (never retried, never an infra count), and out of the episode runner. Its message is one
    line naming the task, the environment and the exception; the exception is its ``__cause__``."""

    def __init__(self, message: str) -> None:
        super().__init__(re.sub(r"\s*\n\s*", " ", message).strip())


_CRASH = re.compile(r"verifier crashed: ([A-Za-z_][\w.]*)(?::\s|$)")
_RESOURCE_ERRORS = (OSError, EOFError, MemoryError)
"""A verifier that raised one of these may have met a failing resource (a pipe, the memory, a file
limit): its message repeats without the response being the cause (issue 21's broken pipe)."""
_BUG_KINDS = (ValueError, TypeError, LookupError, ArithmeticError, AttributeError, AssertionError, NameError,
              SyntaxError)
"""A library's exception (not a builtin) is a bug of the verifier when it is one of these kinds: a parser's
refusal (``json.JSONDecodeError``, sympy's ``SympifyError``, ``tomllib.TOMLDecodeError``, ``binascii.Error``:
ValueErrors), ``decimal.InvalidOperation`` (ArithmeticError). Other library kinds (a client's connection error,
a broken process pool, the sandbox's own errors) stay infra: their repeating says nothing of the response."""


def _exception_type(name: str) -> type | None:
    """The exception class a crash line names: a builtin's bare name, or a library's dotted one
    (``json.decoder.JSONDecodeError``, as ``traceback`` writes it) looked up among the modules already
    imported (never imported here); None when it names no class that is loaded."""
    if "." not in name:
        kind = getattr(builtins, name, None)
        return kind if isinstance(kind, type) else None
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        obj: Any = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
        return obj if isinstance(obj, type) else None
    return None


def verifier_bug(verdict: Verdict | None) -> str | None:
    """The crash line of a verifier that raised a programming error (``infra:verifier_crash``, as
    ``envs.guard`` and the batch hooks write it: ``"<domain> verifier crashed: ValueError: ..."``; or
    ``infra:worker`` with that line, as ``crash_verdict`` writes it for a hook that raised past guard),
    else None (a worker's or backend's own failure has no such line). A programming error: a builtin exception other than the resource kinds, or a library's whose
    class is of a programming kind (``_BUG_KINDS``: a ``json.decoder.JSONDecodeError``). The same line on
    every try of one response is the verifier's bug, not infra: retried and dropped, the response went
    unscored (its group dropped, evaluation's denominators short of it), a way out of a verdict.

    >>> verifier_bug(Verdict.infra("m verifier crashed: KeyError: 'x'", error_class="infra:verifier_crash"))
    "m verifier crashed: KeyError: 'x'"
    >>> verifier_bug(Verdict.infra("m verifier crashed: json.decoder.JSONDecodeError: Expecting value: line 1",
    ...                            error_class="infra:verifier_crash"))
    'm verifier crashed: json.decoder.JSONDecodeError: Expecting value: line 1'
    >>> verifier_bug(Verdict.infra("m verifier crashed: BrokenPipeError: [Errno 32]", error_class="infra:verifier_crash"))
    """
    if verdict is None or verdict.error_class not in ("infra:verifier_crash", "infra:worker"):
        return None
    line = str(verdict.evidence.get("detail", ""))
    m = _CRASH.search(line)
    kind = _exception_type(m.group(1)) if m else None
    if not (isinstance(kind, type) and issubclass(kind, Exception | SystemExit)) or issubclass(kind, _RESOURCE_ERRORS):
        return None
    if kind.__module__ != "builtins" and not issubclass(kind, _BUG_KINDS):
        return None
    return line


def crash_verdict(domain: str, error: BaseException) -> Verdict:
    """The ``infra:worker`` verdict of a domain's hook that raised ``error`` (``verify_with``), its line in
    ``envs.guard``'s words (``"<domain> verifier crashed: <type>: <message>"``): ``verifier_bug`` reads
    it as it reads guard's ``infra:verifier_crash``."""
    line = traceback.format_exception_only(type(error), error)[-1].strip()
    return Verdict.infra(f"{domain} verifier crashed: {line}", error_class="infra:worker")


def verify_with(hooks: DomainHooks, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
    """Verdicts of ``pairs`` by ``domain``'s hooks (its batch hook for several), where the tries run (a
    ``LocalBackend``, a Ray pool actor). A hook that raises -- one ``guard`` did not wrap (a plugin's), or
    a ``SystemExit`` (argparse on a response, a ``sys.exit``), which goes past ``guard`` and would end the
    worker thread and leave the job's future unsettled -- gives ``crash_verdict`` for its pair: infra
    while its line differs between tries, the verifier's bug (``verifier_bug``) when not.

    A batch hook that raises verifies each pair of the batch alone, by the one-at-a-time hook: one
    response that breaks the batch (a ``MemoryError`` from the largest item, a parser's refusal) costs
    that response its own verdict, never its neighbours' (before, every pair got the crash's infra
    verdict; retried in batches again, the response that broke them went unscored, its group dropped,
    and so did the neighbours' whose tries ran out beside it). Not covered: a batch hook that returns
    an infra verdict for every pair without raising (the service retries those jobs alone:
    ``Scheduler.take_more``)."""
    if len(pairs) > 1 and hooks.batch is not None:
        try:
            return hooks.batch.verify_batch(pairs)
        except (Exception, SystemExit):  # noqa: BLE001 - each pair alone below (docstring)
            pass
    out = []
    for task, response in pairs:
        try:
            out.append(hooks.verify(task, response))
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a crash of the hook is a verdict (docstring)
            out.append(crash_verdict(domain, e))
    return out


class GroupDropped(Exception):
    """The job's group was dropped: one of its samples ran out of infra retries. Never scored."""

    def __init__(self, group_id: str, detail: str) -> None:
        super().__init__(f"group {group_id!r} dropped: {detail}")
        self.group_id, self.detail = group_id, detail


@dataclass(frozen=True)
class Verify:
    """Verify ``response`` to ``task`` (stateless). ``priority``: lower runs first."""

    task: Task
    response: str
    group_id: str = ""
    sample_idx: int = 0
    priority: float = 0.0

    @property
    def key(self) -> JobKey:
        return (self.group_id, self.task.id, self.sample_idx)


@dataclass(frozen=True)
class Step:
    """One step of a stateful episode (module docstring): ``run()`` steps its environment in place.

    ``seq`` numbers the episode's step jobs, replays included (its key's task part is
    ``"<task id>/step<seq>"``, so each is its own job); ``delay_s``: not before this long (the
    backoff of a restart). An infra error is an exception from ``run`` or an ``infra_error`` verdict.
    ``run`` holds a worker of the service while it runs: it must not wait on jobs of the same service.
    ``run`` raising ``StepError`` settles the job with that error (not infra: module docstring).
    """

    task: Task
    run: Callable[[], StepResult]
    group_id: str = ""
    sample_idx: int = 0
    seq: int = 0
    priority: float = 0.0
    delay_s: float = 0.0

    @property
    def key(self) -> JobKey:
        return (self.group_id, f"{self.task.id}/step{self.seq}", self.sample_idx)


Job = Verify | Step


@dataclass(frozen=True)
class DomainHooks:
    """How the service verifies one domain: one at a time, and optionally in batches (the domain's
    ``make_verifier`` and ``make_batch_verifier``, handed in by the wiring)."""

    verify: Verifier
    batch: BatchVerifier | None = None
    replay: bool = True
    """Whether a verdict may be replayed, for the rest of the run, to a later job of the same (task id,
    response) (the service's verdict cache). False for a domain whose verdict is a draw and not a function
    of (task, response): the candidate's program runs (its own coin, its timing), or the verifier draws a
    secret per verification (the code domain's call arrangement). There a replayed lucky pass is a pass
    forever for repeating the response verbatim (``/tmp/h4/count_cache.py``: a coin-flipping code answer
    that once passed passed 60 of 60 repeats, 31 of 50 verified afresh), so each later job is verified
    afresh. Identical jobs in flight together still share one verification (a group's copies)."""


HooksFactory = Callable[[Sequence[str], Any], Mapping[str, DomainHooks]]
"""``hooks(domains, pool) -> {domain: DomainHooks}``: how a backend gets the verifiers of a set of
domains over a sandbox pool (the wiring's ``posttrain.cli.domain_hooks``; a Ray backend calls it on
each node, over that node's pool). The service never looks domains up itself."""


@dataclass(frozen=True)
class Attempt:
    """One try of one job, as recorded (attrition metrics, and the ledger's receipts)."""

    group_id: str
    task_id: str
    sample_idx: int
    attempt: int
    """0 for the first try."""
    worker: int
    node: str
    start_s: float
    """Seconds since the service started."""
    duration_s: float
    outcome: str
    """pass | fail | infra_error | step:<outcome> | step (no verdict) | step:error (a ``StepError``) |
    skipped."""
    error_class: str | None
    batch_size: int = 1
    final: bool = False
    """Whether this try settled the job (a result handed to the caller, or the group dropped)."""
    verdict: Verdict | None = None
    """The try's verdict (a Step's, when it gave one), infra errors included: evaluation records each try."""

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["verdict"] = self.verdict.to_json() if self.verdict is not None else None
        return out


class Ledger:
    """Exactly-once on top of at-least-once: one settlement per (key, attempt), one final per key.

    >>> led = Ledger()
    >>> led.settle(("g", "t", 0), 0, final=False), led.settle(("g", "t", 0), 0, final=False)
    (True, False)
    >>> led.settle(("g", "t", 0), 1, final=True), led.duplicates
    (True, 1)
    """

    def __init__(self) -> None:
        self._settled: dict[JobKey, set[int]] = {}
        self.finals: dict[JobKey, int] = {}
        """The attempt that settled each job not yet forgotten."""
        self.duplicates = 0
        self.settled_jobs = 0
        """Jobs given their one final result, forgotten ones included."""
        self._lock = threading.Lock()

    def receive(self, key: JobKey, attempt: int) -> bool:
        """A try's result arrived: True the first time, False (and counted) for a duplicate or late
        report of a try or job already settled."""
        with self._lock:
            tries = self._settled.setdefault(key, set())
            if attempt in tries or key in self.finals:
                self.duplicates += 1
                return False
            tries.add(attempt)
            return True

    def finalize(self, key: JobKey, attempt: int) -> None:
        """This try settled the job: its result went to the caller, or its group was dropped."""
        with self._lock:
            self.settled_jobs += key not in self.finals
            self.finals[key] = attempt

    def forget(self, key: JobKey) -> None:
        """The caller has the job's result and its group is done: drop its entries (bounded state)."""
        with self._lock:
            self._settled.pop(key, None)
            self.finals.pop(key, None)

    def settle(self, key: JobKey, attempt: int, *, final: bool) -> bool:
        """``receive`` and, when ``final``, ``finalize``."""
        if not self.receive(key, attempt):
            return False
        if final:
            self.finalize(key, attempt)
        return True

    def summary(self, jobs: int) -> dict[str, int]:
        """Of ``jobs`` submitted so far: how many got exactly one final result, and how many none (lost)."""
        return {"jobs": jobs, "settled": self.settled_jobs, "lost": jobs - self.settled_jobs,
                "duplicates": self.duplicates}

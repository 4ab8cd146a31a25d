"""Run a verifier's check in a long-lived worker process, under a CPU-time budget.

Why a worker: checking a response can take unbounded time inside C code that no thread can
interrupt (a backtracking regex in a task's JSON Schema ``pattern``, sympy on ``10^{10^{10}}``)
or unbounded memory, and verifiers run in trainer threads, where ``signal.alarm`` does not work.
So each check is sent to a small pool of worker processes (each under an address-space limit);
one that overruns is killed and replaced.

Blame is decided by CPU time, not wall time (issue 14, class 12). While it waits, the client reads
the worker's CPU time from ``/proc/PID/stat``:

- the check used ``cpu_budget_s`` of CPU: the response's doing -> ``cpu_exceeded`` (a fail);
- ``wall_limit_s`` passed with less CPU than that: the worker was starved on a loaded machine ->
  ``starved`` (an infra error, which the caller retries);
- the check raised: ``raised`` with the exception's class (a fail: the input made it raise);
- the worker died during a check: it is retried once on a fresh worker (an outside kill is not
  the response's doing); a second death is ``crashed`` (a fail: the input kills it);
- a worker cannot start: ``no_worker`` (an infra error).

A worker is ``python -s -m posttrain.verify._deadline MODULE``: it imports ``MODULE`` once (and
calls its ``warm_up()`` if it has one), says ``{"ready": true}``, then answers JSON lines with
``MODULE.handle_check(request)``; start-up time is never charged to a check. The check code
is ours; only its input (the response) is untrusted, and it is never evaluated.

Not here: what a check means (the domain modules), retries of infra errors (the caller).
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from posttrain.types import Verdict

_WORKER_MEMORY_BYTES = 2 << 30
_ORPHAN_CPU_S = 300
_POLL_S = 0.05
_TICKS = os.sysconf("SC_CLK_TCK")

Status = Literal["ok", "raised", "cpu_exceeded", "starved", "crashed", "no_worker"]


@dataclass(frozen=True)
class Outcome:
    """What became of one check. ``result`` is the check's reply when ``status == "ok"``."""

    status: Status
    result: Any = None
    detail: str = ""
    """For ``raised``: the exception class name, then ``: message``; otherwise why."""
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def is_infra(self) -> bool:
        """True when the verifier's own machinery failed (retry), not the response."""
        return self.status in ("starved", "no_worker")


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15 of stat)


def _readable(stream: Any, timeout: float) -> bool:
    """Whether ``stream`` has something to read within ``timeout`` seconds. ``poll``, not ``select``:
    a process holding more than 1024 descriptors (200 agent episodes' workspaces and jobs at once) gets
    pipes numbered past select's FD_SETSIZE, where ``select.select`` raises ValueError."""
    poller = select.poll()
    poller.register(stream, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0.0, timeout) * 1000))


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child interpreter of ours: this one's, ``extra`` on top, and a PYTHONPATH
    that imports the same posttrain checkout as this process, wherever it runs from."""
    path = os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **(extra or {}), "PYTHONPATH": path}


def protocol_stdout() -> Any:
    """In a child: a file on the original stdout for the protocol, with fd 1 pointed at stderr, so that
    what the libraries print cannot enter the protocol."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return out


class _Worker:
    def __init__(self, module: str, env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "posttrain.verify._deadline", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            env=child_env(env),
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the start-up line (importing sympy takes ~1 s, more under load)."""
        assert self.proc.stdout is not None
        if not _readable(self.proc.stdout, timeout):
            return False
        try:
            return json.loads(self.proc.stdout.readline() or b"{}").get("ready") is True
        except ValueError:
            return False

    def ask(self, request: Mapping[str, Any], cpu_budget_s: float, wall_limit_s: float) -> Outcome:
        """Send one request and wait for its reply, watching the worker's CPU time."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cpu0 = _cpu_seconds(self.pid) or 0.0
        start = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return Outcome("crashed", detail="the worker's input pipe is closed")
        while True:
            ready = _readable(self.proc.stdout, _POLL_S)
            wall = time.monotonic() - start
            cpu = (_cpu_seconds(self.pid) or cpu0) - cpu0
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    return Outcome("crashed", detail=f"the worker died (exit {self.proc.wait()})",
                                   cpu_s=cpu, wall_s=wall)
                reply = json.loads(line)
                if "raised" in reply:
                    return Outcome("raised", detail=str(reply["raised"]), cpu_s=cpu, wall_s=wall)
                return Outcome("ok", result=reply["ok"], cpu_s=cpu, wall_s=wall)
            if cpu >= cpu_budget_s:
                return Outcome("cpu_exceeded", detail=f"used {cpu:.2f}s of CPU (budget {cpu_budget_s:g}s)",
                               cpu_s=cpu, wall_s=wall)
            if wall >= wall_limit_s:
                return Outcome("starved", detail=f"only {cpu:.2f}s of CPU in {wall:.1f}s of wall time "
                               f"(budget {cpu_budget_s:g}s): the machine is overloaded", cpu_s=cpu, wall_s=wall)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class CheckPool:
    """A thread-safe pool of workers that run ``MODULE.handle_check(request)``.

    ``cpu_budget_s`` bounds one check's CPU time; ``wall_limit_s`` its wall time while starved
    (default: 4 x the budget, at least 30 s); ``startup_timeout_s`` a worker's start-up, which is
    not the response's doing; ``env`` extra environment variables of the workers (what their
    module's ``warm_up()`` reads, e.g. which reward function to import). Workers start lazily and
    are reused.
    """

    def __init__(self, module: str, *, size: int = 2, cpu_budget_s: float = 5.0, wall_limit_s: float | None = None,
                 startup_timeout_s: float = 120.0, env: Mapping[str, str] | None = None) -> None:
        self.module = module
        self.env = dict(env or {})
        self.cpu_budget_s = cpu_budget_s
        self.wall_limit_s = wall_limit_s if wall_limit_s is not None else max(30.0, 4 * cpu_budget_s)
        self.startup_timeout_s = startup_timeout_s
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)

    def run(self, request: Mapping[str, Any]) -> Outcome:
        """Run one check; never raises (see the module docstring for what each status means)."""
        worker = self._idle.get()
        try:
            for attempt in range(2):
                if worker is None or worker.proc.poll() is not None:
                    try:
                        worker = _Worker(self.module, self.env)
                    except OSError as e:  # fork/exec failed: the machine, not the response
                        worker = None
                        return Outcome("no_worker", detail=f"cannot start a {self.module} worker: {e}")
                    if not worker.wait_ready(self.startup_timeout_s):
                        worker.kill()
                        worker = None
                        return Outcome("no_worker", detail=f"a {self.module} worker did not start")
                try:
                    outcome = worker.ask(request, self.cpu_budget_s, self.wall_limit_s)
                except BaseException:  # e.g. KeyboardInterrupt: its reply must never answer the next check
                    worker.kill()
                    worker = None
                    raise
                if outcome.status in ("ok", "raised"):
                    return outcome
                worker.kill()
                worker = None
                if outcome.status != "crashed" or attempt == 1:
                    return outcome
            raise AssertionError("unreachable")
        finally:
            self._idle.put(worker)

    def worker_pids(self) -> list[int]:
        """The pids of the started, idle workers (for tests and diagnostics)."""
        return [w.pid for w in list(self._idle.queue) if w is not None]

    def close(self) -> None:
        while not self._idle.empty():
            worker = self._idle.get_nowait()
            if worker is not None:
                worker.kill()


_FAILS = {
    "raised": ("The answer made the checker raise an error; it cannot be checked.", "exception"),
    "cpu_exceeded": ("The answer took too long to check.", "timeout"),
    "crashed": ("The answer made the checker crash; it cannot be checked.", "checker_crash"),
}


def verdict_of(outcome: Outcome, domain: str) -> Verdict:
    """The verdict for a check whose ``ok`` result is a ``Verdict.to_json()`` dict.

    ``raised`` is ``exception:<Type>``, ``cpu_exceeded`` is ``timeout``, ``crashed`` is
    ``checker_crash`` (all fails, reward 0); ``starved``/``no_worker`` are infra errors.
    """
    evidence = {"checker": outcome.status, "detail": outcome.detail, "cpu_s": round(outcome.cpu_s, 3),
                "wall_s": round(outcome.wall_s, 3)}
    if outcome.status == "ok":
        r = outcome.result
        return Verdict(outcome=r["outcome"], reward=float(r["reward"]), feedback=r["feedback"],
                       error_class=r["error_class"], evidence=r["evidence"], components=r["components"])
    if outcome.is_infra:
        return Verdict.infra(f"{domain} checker: {outcome.detail}", error_class=f"infra:{outcome.status}",
                             evidence=evidence)
    feedback, error_class = _FAILS[outcome.status]
    if outcome.status == "raised":
        error_class = f"exception:{outcome.detail.split(':', 1)[0]}"
    return Verdict(outcome="fail", reward=0.0, feedback=feedback, error_class=error_class, evidence=evidence,
                   components={"outcome": 0.0, "format": 0.0})


_shared: dict[str, CheckPool] = {}
_shared_lock = threading.Lock()


def shared_pool(module: str, *, cpu_budget_s: float = 5.0) -> CheckPool:
    """The process-wide pool for ``module`` (workers die with this process: their stdin closes)."""
    with _shared_lock:
        if module not in _shared:
            _shared[module] = CheckPool(module, cpu_budget_s=cpu_budget_s)
        return _shared[module]


# ---------------------------------------------------------------- worker side (python -m ...)


def _worker_main(module: str) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY_BYTES, _WORKER_MEMORY_BYTES))
    out = protocol_stdout()
    handler = importlib.import_module(module)
    handle = handler.handle_check
    if hasattr(handler, "warm_up"):  # slow imports now, not on the first check's CPU budget
        handler.warm_up()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        # A backstop should this process outlive its client mid-check (nobody left to kill it):
        # the kernel ends it after _ORPHAN_CPU_S more seconds of CPU than it has used so far.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(usage.ru_utime + usage.ru_stime) + _ORPHAN_CPU_S
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        try:
            text = json.dumps({"ok": handle(json.loads(line))})
        except Exception as e:  # noqa: BLE001 - the input made the check raise: reported, the client decides
            text = json.dumps({"raised": f"{type(e).__name__}: {str(e)[:300]}"})
        out.write(text + "\n")
        out.flush()


if __name__ == "__main__":
    _worker_main(sys.argv[1])

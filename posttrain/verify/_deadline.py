"""Run a verifier's check in a long-lived worker process, under a CPU-time budget.

Why a worker: checking a response can take unbounded time inside C code that no thread can
interrupt (a backtracking regex in a task's JSON Schema ``pattern``, sympy on ``10^{10^{10}}``)
or unbounded memory, and verifiers run in trainer threads, where ``signal.alarm`` does not work.
So each check is sent to a small pool of worker processes (each under an address-space limit);
one that overruns is killed and replaced.

Blame is decided by CPU time, not wall time (issue 14, class 12). While it waits, the client reads
the CPU time of the worker and of every process below it (``/proc/PID/stat``, children found through
each thread's ``children`` list): a check's subprocesses spend its budget too.

- the check used ``cpu_budget_s`` of CPU: the response's doing -> ``cpu_exceeded`` (a fail);
- ``wall_limit_s`` passed with less CPU than that, and a thread of the worker or of a process below it
  waited for a CPU (``run_delay`` in ``/proc/PID/task/TID/schedstat``) for over ``STARVED_SHARE`` of
  that time at a priority it kept: the machine starved it -> ``starved`` (an infra error, which the
  caller retries). A check's threads wait behind its own processes only while those run, which is
  its CPU time: under the default wall limit (4 x the budget, at least 30 s) a check cannot make
  itself look starved (it would wait over 1.2 budgets while using under one);
- ``wall_limit_s`` passed otherwise: the check waited of its own accord (asleep on a subprocess, a
  pipe, a timer: a user's reward function that runs the completion, which sleeps) -> ``stalled`` (a
  fail). Only our waiting for a CPU is infra: a check that sleeps, or whose worker was stopped, is
  not starved, whatever little CPU it used (a completion could otherwise get itself dropped);
- the check raised: ``raised`` with the exception's class (a fail: the input made it raise);
- the worker died during a check: it is retried once on a fresh worker (an outside kill is not
  the response's doing); a second death is ``crashed`` (a fail: the input kills it);
- a worker cannot start: ``no_worker`` (an infra error).

A worker that is replaced (a check over its budget, stalled, starved or crashed) is killed with every
process below it, so that nothing a check started outlives it (a completion's ``while True: pass``
left spinning took the CPU the next checks needed), and the pool answers once they have exited.

A worker is ``python -s -m posttrain.verify._deadline MODULE``: it imports ``MODULE`` once (and
calls its ``warm_up()`` if it has one), says ``{"ready": true}``, then answers JSON lines with
``MODULE.handle_check(request)``; start-up time is never charged to a check. The check code
is ours; only its input (the response) is untrusted, and it is never evaluated.

Not here: what a check means (the domain modules), retries of infra errors (the caller).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import select
import signal
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
_MAX_TREE = 4096
_EXIT_WAIT_S = 10.0
STARVED_SHARE = 0.3
"""A check past its wall limit is ``starved`` only when one of its threads waited for a CPU for more
than this share of the limit (the sandbox's filter, ``posttrain.sandbox._starve``, uses the same)."""

Status = Literal["ok", "raised", "cpu_exceeded", "stalled", "starved", "crashed", "no_worker"]


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


def _stat(path: str) -> list[bytes] | None:
    """The fields of a ``stat`` file after the command's name (``[0]`` is field 3, the state)."""
    try:
        with open(path, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _tree(pid: int) -> list[int]:
    """``pid`` and every live process below it, read from each thread's ``children`` list."""
    out, todo, seen = [], [pid], set()
    while todo and len(out) < _MAX_TREE:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                continue
    return out


def _running(pids: list[int], pgid: int) -> set[int]:
    """Which of ``pids``, and of the processes in group ``pgid``, have not exited (zombies have)."""
    left = set()
    for pid in {*pids, *(int(p) for p in os.listdir("/proc") if p.isdigit())}:
        fields = _stat(f"/proc/{pid}/stat")
        if fields is None or fields[0] in (b"Z", b"X"):
            continue
        if pid in pids or fields[2] == str(pgid).encode():  # field 5, the process group
            left.add(pid)
    return left


def _wait_exited(pids: list[int], pgid: int, timeout: float) -> None:
    """Wait (up to ``timeout``) until ``pids`` and group ``pgid`` have exited, after their SIGKILL."""
    deadline = time.monotonic() + timeout
    while _running(pids, pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _cpu_seconds(pids: list[int]) -> float | None:
    """CPU time of ``pids`` (the first one's tree, ``_tree``), with the children each has reaped; None
    once the first is gone."""
    total = 0.0
    for i, pid in enumerate(pids):
        fields = _stat(f"/proc/{pid}/stat")
        if fields is None:
            if i == 0:
                return None
            continue
        total += sum(int(x) for x in fields[11:15]) / _TICKS  # utime stime cutime cstime (fields 14-17)
    return total


def _waits(pids: list[int], nice: int) -> dict[tuple[int, int], float]:
    """(pid, tid) -> seconds it waited for a CPU, of the threads of ``pids`` at ``nice`` or a higher
    priority, under the normal or batch scheduler (one that lowered its own priority waits by choice)."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tids:
            fields = _stat(f"/proc/{pid}/task/{t}/stat")
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat", "rb") as f:
                    run_delay = int(f.read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                continue
            if fields is not None and int(fields[16]) <= nice and int(fields[38]) in (os.SCHED_OTHER, os.SCHED_BATCH):
                out[pid, int(t)] = run_delay
    return out


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
        self.nice = os.getpriority(os.PRIO_PROCESS, 0)  # the worker's, as it starts
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "posttrain.verify._deadline", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            env=child_env(env),
            start_new_session=True,  # its own process group: what it started dies with it (``kill``)
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
        """Send one request and wait for its reply, watching the CPU time of the worker and of what it
        started (module docstring)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cpu0 = _cpu_seconds(_tree(self.pid)) or 0.0
        waits0: dict[tuple[int, int], float] | None = None  # read once a reply is late (most come at once)
        start = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return Outcome("crashed", detail="the worker's input pipe is closed")
        cpu = 0.0
        while True:
            ready = _readable(self.proc.stdout, _POLL_S)
            wall = time.monotonic() - start
            tree = [self.pid] if ready else _tree(self.pid)
            cpu = max(cpu, (_cpu_seconds(tree) or cpu0) - cpu0)  # a process that left the tree took its time
            if waits0 is None and not ready:
                waits0 = _waits(tree, self.nice)
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
                waited = max((w - (waits0 or {}).get(k, 0.0) for k, w in _waits(tree, self.nice).items()), default=0.0)
                if waited > STARVED_SHARE * wall:
                    return Outcome("starved", detail=f"only {cpu:.2f}s of CPU in {wall:.1f}s of wall time, {waited:.1f}s "
                                   f"of it waiting for one (budget {cpu_budget_s:g}s): the machine is overloaded",
                                   cpu_s=cpu, wall_s=wall)
                return Outcome("stalled", detail=f"the check waited {wall:.1f}s without finishing, using {cpu:.2f}s "
                               f"of CPU (budget {cpu_budget_s:g}s) and waiting {waited:.1f}s for one", cpu_s=cpu,
                               wall_s=wall)

    def kill(self) -> None:
        """Kill the worker and every process below it (stopped first, so that none starts another), and
        wait until they have exited: a SIGKILL is delivered when its process next runs, which on a busy
        CPU came after the next check began (CI: a killed spinner still listed as running)."""
        tree = _tree(self.pid)
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        killed = _tree(self.pid) + tree  # and what forked before the stop landed
        for pid in killed:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):  # and what was orphaned in its group (a worker that died)
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()
        _wait_exited([p for p in killed if p != self.pid], self.pid, _EXIT_WAIT_S)  # (its pid is free now)


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
    "stalled": ("The answer's check waited past its time limit without finishing.", "timeout"),
    "crashed": ("The answer made the checker crash; it cannot be checked.", "checker_crash"),
}


def verdict_of(outcome: Outcome, domain: str) -> Verdict:
    """The verdict for a check whose ``ok`` result is a ``Verdict.to_json()`` dict.

    ``raised`` is ``exception:<Type>``, ``cpu_exceeded`` and ``stalled`` are ``timeout``, ``crashed`` is
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

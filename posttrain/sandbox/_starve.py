"""Starvation is the host's to prove, and never an infra error: one rerun, whose verdict stands.

A job that ran out of wall-clock time is the job's own failure (a timeout), with one exception:
the host starved it of CPU. What the job's own processes show cannot decide that, since the job
controls it: a job that idles until just before its deadline and then forks spinners pinned to
one CPU used little of its CPU budget while one of its processes waited most of its short life
for a CPU, which is what a starved job looked like from the inside (issue 21; its wrong answer
became an ``infra_error``, 6 tries of 6). Three rules now:

1. ``maybe_starved``, the job's side, is only a filter: the job used under half of its CPU
   budget, and one of its processes waited for a CPU for over 30% of the timeout and for longer
   than the job ran, at a priority it did not lower itself. A job can make it true only by waiting
   behind processes that are not its own: a process waits behind its own siblings only while they
   run, which is the job's CPU time (or behind its own quota, which it then used: its budget), so
   on a host that is not overloaded a job cannot wait longer than it used. (The bound was a quarter
   of the budget, without the wait over the CPU time: a job of 1 s of CPU in 3 s beside another
   pool's 16-process spinners got a third of a CPU, 0.97 s used and 2.04 s waited, and its timeout
   was its own, 3 of 4 such timeouts in 10 runs.) The processes are read once each has
   had a CPU again after the deadline (stopped by the host, ``stop_runnable``, or killed by the
   fork-server): the kernel counts a wait only when it ends. (An earlier filter also asked that
   the process had waited for most of its life; a starved job's processes wait in turn, the
   launcher, then the shell, then its child, each sleeping after its turn, so that missed real
   starvation; the bound above never needed it.)
2. ``HostProbe``, the host's side, decides: a process of the pool's own, in a cgroup beside the
   slots' with the job's CPU quota, spins for ``PROBE_S`` once the job is dead (killed by cgroup,
   so it measures the machine, not the job). Another slot's job can take at most its own quota, so
   with as many slots as CPUs (the default) the pool's jobs alone cannot push the probe below
   ``BUSY_SHARE`` of what the job was entitled to.
3. A job judged starved gets one rerun, once the probe gets its share again (probed every
   ``RECOVER_STEP_S``, for at most ``recover_s(timeout)``, 4 s at least: past a neighbour's 4 s
   of spinners), with its wall time stretched by the probe's last share (``stretched``, at most
   ``MAX_STRETCH`` times the timeout), so that it gets about the CPU time its timeout was worth on
   a host that is not overloaded. The rerun's verdict stands: a timeout there is the job's
   timeout, whatever it looks like. So no way of failing buys a dropped sample; a job that burns
   its own CPU times out (a workspace's job, which cannot be rerun since its layers keep what it
   did, times out at once).

Margins (tests/sandbox/test_starvation.py tries both sides, idle and beside a nice-19 CPU hog):
an idle host gives the probe ~100% of its share, a host whose every CPU runs one other busy
process at the same priority 50-66%, the starving hogs of the tests (two per CPU at nice -10) ~5%;
``BUSY_SHARE`` is 0.4; beside another pool's slots spinning on every CPU, ~0.2-0.37. On an idle
host the self-starving job waits at most its own CPU time (0.33 s against its 0.37 s, 12 spinners
for 0.35 s of a 2 s timeout), so the filter's wait over its CPU time misses; on a host already half busy
it can meet the filter (pinned beside another process's load at a 1 s timeout, 0.34 s of wait
against its 0.05-0.26 s of CPU: 9 of 10 runs), so the filter only saves the probe's time: the probe
decides, and at worst such a job gets one rerun whose verdict stands.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from posttrain.sandbox._cgroup import SlotCgroup
from posttrain.sandbox._pump import longest_wait, proc_sched, proc_state

if TYPE_CHECKING:
    from posttrain.sandbox._types import Limits

_MiB = 1 << 20
HOST_OOM: Final = "host_oom"
"""What a slot's run says, in place of "maybe starved", of a job the OOM killer killed for no limit of
its slot (``SlotCgroup.oom_counts``): a host, or a cgroup above the pool, out of memory kills sandboxed
processes first, whatever they used (the fork-server gives each job ``oom_score_adj`` 1000). A job of
10 MiB, one of 16 spinning threads, was killed so on the test host when another process there took
21 GiB, and judged out of memory: an error, its own. It gets one rerun, as a starved job does, whose
verdict stands (so no way of failing buys anything: a job cannot make the host run out of memory
with memory its cgroups charge, and were it to, its rerun is judged as any job)."""
NOT_STARTED: Final = "not_started"
"""What a slot's run says of a job whose sandbox did not start (a fork-server that could not restart,
an exec sandbox that did not mark its start within ``_xslot.START_S``): none of its code ran, so
nothing of it, a workspace's layers included, was changed, and on an overloaded host it runs once
the host recovers, a workspace's job too (``_pool._judged``)."""
Rerun = bool | str
"""The second of a slot's run: whether the job timed out looking starved, ``HOST_OOM`` or ``NOT_STARTED``."""
PROBE_S = 0.3
"""How long the probe spins for one reading. At 0.15 s, beside another pool's 16-process spinners
(two slots of 1 CPU each on 2 CPUs) its readings averaged 0.37 with one in four over ``BUSY_SHARE``
(0.41-0.5), so a job starved there was judged not starved; at 0.3 s they were 0.24-0.34."""
BUSY_SHARE = 0.4
CPU_SHARE = 0.5
"""The job-side filter's bound on the CPU a job used, as a share of its budget (rule 1)."""
RECOVER_STEP_S = 0.2
"""The pause between two readings of the probe while a starved job waits for the host."""
MAX_STRETCH = 3.0
"""How much longer than its timeout the rerun of a job the host still starved may run (``stretched``)."""
SETTLE_S = 1.0
"""How long a timed-out job's runnable processes get to stop (``stop_runnable``) before they are read."""


def recover_s(timeout: float) -> float:
    """How long a starved job's rerun waits for the host to recover (it runs then either way). At
    most ``max(2, timeout)`` before, a 1 s job starved by another pool's 4 s spinners was rerun
    while they still spun, starved again, and its rerun's timeout stood (rule 3)."""
    return min(30.0, max(4.0, 2.0 * timeout))


def stretched(timeout: float, share: float) -> float:
    """The wall time of a starved job's rerun: its timeout over the share of its CPU the host's
    probe last got (``wait_recovered``; 1.0 and more: the timeout), at most ``MAX_STRETCH`` times
    the timeout, so that it gets about the CPU time its timeout is worth on a host that is not
    overloaded. (Rerun at its timeout, a job of 0.4 s of CPU in 1 s timed out again in 3 of 7
    runs on this 2-CPU host, loaded by other work to a probe share of ~0.4 once the neighbour's
    spinners had stopped.) Its RLIMIT_CPU follows that wall time (unless ``Limits.cpu_time_s``
    sets it): a job that burns its own CPU times out at it, its own verdict."""
    return timeout * min(MAX_STRETCH, 1.0 / max(share, 1.0 / MAX_STRETCH))


def maybe_starved(sched: dict, timeout: float, limits: Limits) -> bool:
    """The job-side filter (module docstring, rule 1): necessary for a starved verdict, never
    sufficient. ``sched``: the job's CPU seconds, and of the process that waited longest for a
    CPU at a priority it kept (``longest_wait``): how long it waited, whether it lowered its
    priority (then it is the longest wait of all, and the filter says no), and how long it lived
    (evidence only). True when ``filter_misses`` finds nothing missing."""
    return not filter_misses(sched, timeout, limits)


def filter_misses(sched: dict, timeout: float, limits: Limits) -> tuple[str, ...]:
    """Which conditions of ``maybe_starved`` ``sched`` misses, each with its measured value and
    its bound (empty: the job looks starved). A number missing from ``sched`` misses its condition:
    a reply without the numbers is never starved."""
    budget = timeout * min(limits.cpu_cores, 1.0)
    cpu, waited = float(sched.get("cpu_s", budget)), float(sched.get("run_delay_s", 0.0))
    misses = []
    if sched.get("deprioritized", True):
        misses.append("deprioritized: the process judged lowered its own priority (or none was read)")
    if not cpu < CPU_SHARE * budget:
        misses.append(f"cpu_s {cpu:.3f} is not under {CPU_SHARE * budget:.3f} (half of its CPU budget)")
    if not waited > 0.3 * timeout:
        misses.append(f"run_delay_s {waited:.3f} is not over {0.3 * timeout:.3f} (30% of the timeout; "
                      f"it lived {float(sched.get('alive_s', 0.0)):.3f} s)")  # fmt: skip
    if not waited > cpu:
        misses.append(f"run_delay_s {waited:.3f} is not over cpu_s {cpu:.3f} (its own processes' CPU "
                      "time can explain the wait)")  # fmt: skip
    return tuple(misses)


def threads_of(pid: int) -> list[int]:
    """The thread ids of process ``pid`` (none once it is gone): ``/proc/<tid>`` reads a thread's own
    state and CPU wait, ``/proc/<pid>`` only its main thread's."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def stop_runnable(pids: Callable[[], Iterable[int]], within_s: float = SETTLE_S) -> None:
    """SIGSTOP the processes of ``pids()`` with a runnable thread, again each round (``pids`` is
    listed each round: what they fork meanwhile), until none is runnable, for at most ``within_s``.

    The kernel adds a runnable process's current wait for a CPU to its ``run_delay`` only when it
    next gets one. Under the hogs that starve it that is every few hundred ms, so read while it waits,
    a starved job's spinner showed a quarter to a half of its wait and the job was not judged starved
    (its timeout became its own). To stop, each must get a CPU once: then its wait is all counted.
    Stopped once each, a process another of the job's continued (SIGCONT in a loop) ran on for the
    whole ``within_s`` (as the fork-server's ``kill_measured`` saw); each round stops what runs again.
    The caller kills them after reading."""
    end = time.monotonic() + within_s
    while True:
        runnable = {pid for pid in pids() if any(proc_state(t) == b"R" for t in threads_of(pid))}
        if not runnable or time.monotonic() >= end:
            return
        for pid in runnable:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)  # the whole process: every thread of it stops
        time.sleep(0.005)


def sched_of(cg: SlotCgroup, exclude: Iterable[int] = ()) -> dict:
    """What ``maybe_starved`` needs, read by the host from the job's processes in ``cg`` (but
    ``exclude``) before it kills them: their CPU time (with that of the children they reaped), and
    of the thread ``longest_wait`` picks (the longest wait for a CPU at a priority kept; each thread
    read, not only a process's main one) how long it waited and lived and whether it runs at a lower
    priority than this process (``proc_sched``). The runnable ones are stopped first
    (``stop_runnable``), so the caller must kill them. (The fork-server measures its own jobs; this
    is for exec jobs, and for a job the fork-server did not end in time.)"""
    base_nice, base_policy = os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0)
    skip = set(exclude)

    def inside() -> list[int]:
        return [p for p in cg.pids_inside() if p not in skip]

    stop_runnable(inside)
    with open("/proc/uptime", "rb") as f:
        now = float(f.read().split()[0])
    cpu, waits = 0.0, []
    for pid in inside():
        try:
            cpu += proc_sched(pid, now, base_nice, base_policy)[3]  # the process's, its threads' together
        except (OSError, ValueError, IndexError):
            continue
        for tid in threads_of(pid):
            try:
                waits.append(proc_sched(tid, now, base_nice, base_policy)[:3])
            except (OSError, ValueError, IndexError):
                continue
    delay, alive, lowered = longest_wait(waits)
    return {"cpu_s": cpu, "run_delay_s": delay, "alive_s": alive, "deprioritized": lowered}


_PROBE_SRC = r"""
import os, sys, time
for line in sys.stdin:
    wall = float(line)
    c0, t0 = time.process_time(), time.monotonic()
    while time.monotonic() - t0 < wall:
        pass
    print(time.process_time() - c0, time.monotonic() - t0, flush=True)
"""


class HostProbe:
    """The pool's own probe process in a cgroup of its own beside the slots' (module docstring).
    Thread-safe; started at the first question, restarted if it dies."""

    def __init__(self, cg: SlotCgroup) -> None:
        self.cg = cg
        self.proc: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()
        self.last_share = 1.0
        """The probe's last reading (``share``)."""

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _PROBE_SRC], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, close_fds=True)
        try:
            for f in self.cg.procs_files:
                with open(f, "w") as out:
                    out.write(str(proc.pid))
        except OSError:
            proc.kill()
            proc.wait()
            raise
        return proc

    def share(self, cpu_cores: float) -> float:
        """The share of ``min(1, cpu_cores)`` CPUs the probe got over ``PROBE_S`` of spinning
        (1.0 on an idle host); 0.0 if it cannot run at all."""
        with self.lock:
            try:
                self.cg.set_limits(64 * _MiB, 8, cpu_cores)
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = self._start()
                assert self.proc.stdin is not None and self.proc.stdout is not None
                self.proc.stdin.write(f"{PROBE_S}\n")
                self.proc.stdin.flush()
                cpu, wall = (float(x) for x in self.proc.stdout.readline().split())
            except (OSError, ValueError):
                self.close()
                cpu, wall = 0.0, 1.0
            self.last_share = cpu / max(wall * min(cpu_cores, 1.0), 1e-9)
            return self.last_share

    def overloaded(self, cpu_cores: float) -> bool:
        return self.share(cpu_cores) < BUSY_SHARE

    def wait_recovered(self, cpu_cores: float, within_s: float) -> float:
        """The probe's last share, once it is ``BUSY_SHARE`` again or after ``within_s`` (a
        reading of ``PROBE_S`` every ``RECOVER_STEP_S``): what ``stretched`` needs."""
        end = time.monotonic() + within_s
        while True:
            if not self.overloaded(cpu_cores) or time.monotonic() + RECOVER_STEP_S + PROBE_S > end:
                return self.last_share
            time.sleep(RECOVER_STEP_S)

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                if f is not None:
                    with contextlib.suppress(OSError):
                        f.close()
            self.proc = None

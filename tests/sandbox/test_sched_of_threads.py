"""The host's reading of a timed-out job (``_starve.sched_of``, exec jobs and jobs the fork-server
did not end) reads every thread, and stops what runs again each round.

A process whose work runs in threads beside a main thread sitting in ``join()`` was read by its main
thread (``/proc/<pid>`` is the main thread's): a wait of ~0 where its threads had waited most of a
second. The job is a real process; the slot's cgroup listing is the one thing stood in for (its
``pids_inside``), as the reading needs no more of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from posttrain.sandbox._starve import sched_of

# four GIL-free hashing threads pinned to one CPU, the main thread in join()
JOB = """
import hashlib, os, threading
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
data = b"x" * (1 << 24)
def work():
    while True:
        hashlib.sha256(data).digest()
ts = [threading.Thread(target=work, daemon=True) for _ in range(4)]
for t in ts:
    t.start()
print("ready", flush=True)
for t in ts:
    t.join()
"""


class _Listed:
    """The slot's cgroup as ``sched_of`` reads it: the processes inside."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def pids_inside(self) -> list[int]:
        return list(self.pids)


def test_a_job_working_in_threads_is_read_by_its_threads_and_left_stopped():
    proc = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(1.0)
        sched = sched_of(_Listed([proc.pid]))  # type: ignore[arg-type]
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        assert state == b"T", state  # stopped for the caller to kill
        # each of four threads on one CPU waited ~3/4 of the second; the main thread, in join(), ~0
        assert sched["run_delay_s"] > 0.3 and not sched["deprioritized"], sched
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

"""A timed-out job attacks how the fork-server stops, reads and kills it (``_zygote.kill_measured``).

Whatever the job does to its own processes while they are being stopped (continue them again,
fork, leave them stopped, in a vfork, unreaped, in sessions of their own, traced), the timeout is
its own, the slot is not held past the stop's bounds, and the next job in the same slot finds
no process of it. Each thread's wait for a CPU is read, not only its process's main thread's.
Not covered here: the host's side of the verdict (the probe; ``test_starvation.py``).
"""

from __future__ import annotations

import pytest

from posttrain.sandbox import Limits, _zslot
from posttrain.sandbox._starve import maybe_starved

# The next job in the slot: how many processes besides itself and the fork-server it sees.
NEXT = "import os\nprint(sum(p.isdigit() and int(p) not in (1, os.getpid()) for p in os.listdir('/proc')))"


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """What the job-side starvation filter is given (the real filter, its inputs recorded)."""
    seen: list[dict] = []

    def recorded(sched: dict, timeout: float, limits: Limits) -> bool:
        seen.append(dict(sched))
        return maybe_starved(sched, timeout, limits)

    monkeypatch.setattr(_zslot, "maybe_starved", recorded)
    return seen


def _own_timeout_then_clean(pool, src: str, timeout: float, within_s: float):
    ex = pool.run_python(src, timeout=timeout)
    assert ex.outcome == "error" and ex.timed_out and ex.infra_detail is None, ex
    assert ex.duration_s < timeout + within_s, ex
    after = pool.run_python(NEXT, timeout=5.0)
    assert after.ok and after.stdout == b"0\n", after  # nothing of it is left, stopped or running
    return ex


def test_processes_that_continue_each_other_do_not_hold_the_slot(pool1):
    """Escaped processes SIGCONT everything in a loop while the fork-server stops the job, so some
    stopped process runs again. Each round of the stop now stops the whole namespace again, so the
    job is read and killed once none runs; stopped once each, the job's processes ran on for the
    whole ``DEATH_WAIT_S`` (1 s) in 3 runs of 20 (a race, so this case pins the verdict and the
    clean slot, and bounds the time only as the other timeout tests do)."""
    src = ("import os, signal\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
           "        while True:\n            try: os.kill(-1, signal.SIGCONT)\n            except OSError: pass\n"
           "for _ in range(4):\n    if os.fork() == 0:\n        while True: pass\nwhile True: pass\n")  # fmt: skip
    _own_timeout_then_clean(pool1, src, 0.4, 3.0)


def test_a_fork_storm_of_stopped_zombie_vforked_and_traced_processes_leaves_nothing(pool1):
    """Sessions of their own forking as fast as they can, a parent in vfork (state D) under its
    spinning child, a process that stopped itself, unreaped zombies, and a ptrace attach (refused by
    seccomp): the job's own timeout, and none of it is left for the next job."""
    src = ("import os, signal, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "if os.fork() == 0:\n    if libc.vfork() == 0:\n        while True: pass\n    os._exit(0)\n"
           "if os.fork() == 0:\n    os.kill(os.getpid(), signal.SIGSTOP)\n    os._exit(0)\n"
           "for _ in range(20):\n    if os.fork() == 0:\n        os._exit(0)\n"
           "c = os.fork()\nif c == 0:\n    while True: pass\n"
           "print(libc.ptrace(16, c, 0, 0), ctypes.get_errno(), flush=True)\n"
           "for _ in range(3):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
           "    if pid == 0:\n        os.setsid()\n        while True:\n"
           "            try:\n                if os.fork() == 0:\n                    os.setsid()\n"
           "            except OSError: pass\nwhile True: pass\n")  # fmt: skip
    ex = _own_timeout_then_clean(pool1, src, 0.4, 3.0)
    assert ex.stdout == b"-1 1\n", ex  # ptrace: EPERM


def test_each_thread_of_a_timed_out_job_is_read(pool1, readings):
    """Four threads hash (the GIL released) pinned to one CPU while the main thread waits in
    join(): each waits for the CPU most of the time, behind its siblings. Read from the main
    thread only, the job waited 0.003-0.026 s of a 1 s timeout (5 runs); each thread read,
    0.84-0.89 s. (Behind its own threads, which is its CPU time: still its own timeout.)"""
    src = ("import hashlib, os, threading\ndata = bytes(1 << 22)\ndef spin():\n"
           "    os.sched_setaffinity(0, {0})\n    while True: hashlib.sha256(data).digest()\n"
           "ts = [threading.Thread(target=spin, daemon=True) for _ in range(4)]\n"
           "for t in ts: t.start()\nts[0].join()\n")  # fmt: skip
    _own_timeout_then_clean(pool1, src, 0.6, 3.0)
    waited = [r["run_delay_s"] for r in readings]
    assert waited and waited[0] > 0.3 * 0.6, waited  # the filter's bound: 30% of the timeout

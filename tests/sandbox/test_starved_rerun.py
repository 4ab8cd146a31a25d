"""A job starved by another pool's spinners is rerun fairly, and its verdict is its own (``_starve``).

On this 2-CPU host (cgroups v1, every slot of every pool a sibling at the CPU root, shares 1024),
a job of ~1 s of CPU with a 3 s timeout beside another pool's two 16-process spinners of 4 s timed
out in 4 of 10 runs before: it got about a third of a CPU, so it used over a quarter of its budget
and the job-side filter judged it not starved (its wait, twice its CPU time, came from the
neighbour); when judged starved, its one rerun came after ``recover_s`` (2 s for a 1 s job), while
the spinners still spun, and the rerun's timeout stood. Now the filter asks for a wait its own CPU
time cannot explain, the rerun waits for the host's probe (up to ``recover_s``, 4 s at least), and
its wall time is stretched by the probe's last share (``_starve.stretched``; on this host, loaded by
other work, a rerun at its 1 s timeout was starved again 3 times in 7). A job that burns its own CPU
still times out, its own verdict, never infra.
"""

from __future__ import annotations

import threading
import time

import pytest

from posttrain.sandbox import Limits, open_pool
from posttrain.sandbox._starve import maybe_starved, recover_s, stretched

SPIN_S = 4.0  # past the old rerun of the victim (its 1 s timeout, ~0.5 s of settling and probing, 2 s)
SPINNERS = (
    "import os, time\nend = time.monotonic() + {s}\nfor _ in range(16):\n    if os.fork() == 0:\n"
    "        while time.monotonic() < end:\n            pass\n        os._exit(0)\nfor _ in range(16):\n    os.wait()\n"
)
VICTIM = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4:\n    pass\nprint('done')"


@pytest.fixture(scope="module")
def neighbours():
    """Another pool: 4 slots of 1 CPU each, so a sibling slot gets about a third of a CPU beside
    them on an idle 2-CPU host (under the probe's ``BUSY_SHARE``), less on a busy one."""
    with open_pool(size=4) as p:
        yield p


def _spin(pool, seconds: float) -> list[threading.Thread]:
    jobs = [threading.Thread(target=pool.run_python, args=(SPINNERS.format(s=seconds),), kwargs={"timeout": 20.0})
            for _ in range(pool.size)]  # fmt: skip
    for j in jobs:
        j.start()
    time.sleep(0.3)  # forked and spinning
    return jobs


def test_a_job_another_pools_spinners_starve_gets_the_verdict_of_its_own_work(neighbours, pool1):
    """0.4 s of CPU in 1 s: beside the spinners it gets under 0.4 of a CPU and times out; its
    rerun runs once they are gone, stretched by what the host gives, and prints its answer.
    Before: its own timeout (the filter: 0.3 s of CPU is over a quarter of 1 s), or a rerun at
    ~3.5 s, starved again by spinners that spin 4 s."""
    jobs = _spin(neighbours, SPIN_S)
    try:
        t0 = time.monotonic()
        ex = pool1.run_python(VICTIM, timeout=1.0)
        took = time.monotonic() - t0
    finally:
        for j in jobs:
            j.join()
    assert ex.ok and ex.stdout == b"done\n", (ex, took)


def test_a_job_that_burns_its_own_cpu_times_out_its_own_verdict_beside_them(neighbours, pool):
    """Spinning to its deadline beside the spinners (rerun if the host starved it too, or its wall
    time stretched): a timeout, never an infra error; alone, it is ``conformance.timeout_kills``.
    (A guard: it passes on the old code too.)"""
    jobs = _spin(neighbours, 2.0)
    try:
        out = []
        burners = [threading.Thread(target=lambda s=src: out.append(pool.run_python(s, timeout=1.0)))
                   for src in ("while True: pass", "import os\nos.fork()\nwhile True: pass")]  # fmt: skip
        for b in burners:
            b.start()
        for b in burners:
            b.join()
    finally:
        for j in jobs:
            j.join()
    assert len(out) == 2, out
    for ex in out:
        assert ex.outcome == "error" and ex.timed_out and ex.infra_detail is None, ex
        assert ex.duration_s < 3.0 + 1.0, ex  # at most a stretched rerun


def test_the_filter_takes_a_wait_its_own_cpu_cannot_explain():
    """The victim's numbers, measured (3 s timeout: 0.97 s of CPU, 2.04 s waited): starved now,
    not before (0.97 is over a quarter of 3). A job waits behind its own processes only while
    they run, so a wait over its CPU time is not its own; one held back by its own quota used its
    budget; one of 12 pinned spinners waits less than it ran."""
    lim = Limits()
    assert maybe_starved({"cpu_s": 0.97, "run_delay_s": 2.04, "alive_s": 3.0, "deprioritized": False}, 3.0, lim)
    half = Limits(cpu_cores=0.5)  # 16 threads at half a CPU: each waits ~97%, the job used its budget
    assert not maybe_starved({"cpu_s": 1.45, "run_delay_s": 2.9, "alive_s": 3.0, "deprioritized": False}, 3.0, half)
    assert not maybe_starved({"cpu_s": 0.9, "run_delay_s": 0.85, "alive_s": 3.0, "deprioritized": False}, 3.0, lim)
    assert recover_s(1.0) >= SPIN_S  # the reviewer's 1 s job outwaits 4 s spinners
    assert stretched(1.0, 0.5) == 2.0 and stretched(1.0, 0.0) == 3.0 and stretched(2.0, 1.0) == 2.0

"""A job's infinite loop never costs a job of another pool its verdict (``posttrain/sandbox/_cpus.py``).

Each slot's cpu quota bounds its own job, but the quotas of the jobs of every pool on a host added up
to more than its CPUs: a job of one pool spinning 16 threads in each of its 2 slots left an honest
job of another pool on this 2-CPU host too little of a CPU, which timed out 8 of 8 times (0.25 s of
CPU within its 1 s timeout; its starved-job rerun beside the same loops timed out too, and stood).
Now a running job holds CPU tokens shared by every pool on the host, and a job of the second pool
starts once a CPU is free: after the first spinner's timeout, never beside both.

Measured by the clock, not by CPU shares (which the rest of a busy test host blurs): the honest job
prints ``time.time()`` when it starts (the host's clock: the sandbox has no time namespace).
"""

from __future__ import annotations

import threading
import time

from posttrain.sandbox import open_pool, usable_cpus
from posttrain.sandbox._cpus import CpuTokens, tokens_for

SPIN_TIMEOUT_S = 3.0
SPIN = (
    "import threading, time\n"
    "def spin():\n    while True:\n        pass\n"
    "for _ in range(16):\n    threading.Thread(target=spin, daemon=True).start()\n"
    "time.sleep(100)\n"
)
HONEST = "import time\nprint(time.time(), flush=True)\n"


def test_a_job_of_another_pool_does_not_run_beside_every_cpus_worth_of_spinners():
    cpus = usable_cpus()
    with open_pool(size=cpus) as hog, open_pool(size=1) as other:
        called: list[float] = []
        spun: list = []

        def spin() -> None:
            called.append(time.time())
            spun.append(hog.run_python(SPIN, timeout=SPIN_TIMEOUT_S))

        threads = [threading.Thread(target=spin) for _ in range(cpus)]
        for t in threads:
            t.start()
        while not hog._zygotes.empty():  # until each slot has a job
            time.sleep(0.01)
        time.sleep(0.3)
        honest = other.run_python(HONEST, timeout=10.0)
        for t in threads:
            t.join()
        assert all(ex.timed_out and ex.outcome == "error" for ex in spun), spun
        assert honest.ok, honest
        # It started only once a spinner's timeout had freed a CPU (before: beside them, ~0.3 s after they
        # were called); no spinner gives its CPU back before its timeout after it was called.
        assert float(honest.stdout) >= min(called) + SPIN_TIMEOUT_S, (min(called), honest.stdout)


def test_tokens_are_quarters_of_a_cpu_and_a_job_never_wants_more_than_the_host_has(tmp_path):
    assert [tokens_for(c, 2) for c in (0.01, 0.25, 0.26, 1.0, 1.5, 2.0, 64.0)] == [1, 1, 2, 4, 6, 8, 8]
    tokens = CpuTokens(tmp_path, 1)
    with tokens.held(1.0) as first:
        assert first
        # a second job of a whole CPU waits until it is cancelled (the pool closed): it never runs beside
        with tokens.held(0.25, cancelled=lambda: True) as second:
            assert not second
    with tokens.held(1.0) as again:  # given back
        assert again

"""The host's CPUs, shared by every pool on it: a job runs only while it holds CPU tokens.

A slot's cpu quota bounds its job at ``Limits.cpu_cores``, and ``_starve`` relied on that: "with as
many slots as CPUs (the default) the pool's jobs alone cannot push the probe below ``BUSY_SHARE``".
But a pool has as many ``exec`` slots as fork-server slots, and a host runs more than one pool (a
run's service pool, the pools of ``cad``/``repo`` helpers, a second run): the quotas of the jobs
running at once added up to more than the host had. A job of one pool that spun 16 threads in each
of its 2 slots (an infinite loop, the commonest bad program) left a job of another pool on this
2-CPU host too little of a CPU: an honest job needing 0.25 s of CPU within its 1 s timeout timed
out 8 of 8 times; the host's probe saw the starvation, and its one rerun, beside the same loops,
timed out too, and that verdict stood. The neighbour's honest program failed for another's.

So each running job holds ``QUARTERS`` tokens per CPU of its ``cpu_cores`` (at least one), from
``QUARTERS`` per usable CPU of the host, all pools together: the quotas of the running jobs never
add up to more than the host's CPUs. A job waits for its tokens before its slot runs it (the wait
is no part of its timeout, which counts from its start), holds them through its cleanup and a
starved job's probe and rerun, and gives them back after. Tokens are ``flock``s on directories in
the pools' shared registry (``_uids``: every posttrain process on the host that shares the cgroup
tree sees it); the kernel drops a dead process's. A job that wants more than the host has takes
them all: it runs alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

QUARTERS = 4
"""Tokens per CPU: a job of ``cpu_cores`` 0.25 holds one, a job of 1.0 four."""
POLL_S = 0.005
"""How often a waiting job tries the tokens again (each try: an open and a non-blocking ``flock`` per token)."""


def tokens_for(cpu_cores: float, cpus: int) -> int:
    """How many of the host's ``QUARTERS * cpus`` tokens a job of ``cpu_cores`` holds while it runs."""
    return max(1, min(QUARTERS * cpus, math.ceil(cpu_cores * QUARTERS - 1e-9)))


class CpuTokens:
    """The host's CPU tokens as seen from one pool (thread-safe: each job opens its own fds, since a
    ``flock`` belongs to an open file and two threads sharing one fd would both hold it)."""

    def __init__(self, registry: Path, cpus: int) -> None:
        self.cpus = cpus
        self.paths = [registry / f"cpu-{i}" for i in range(QUARTERS * cpus)]
        self.queue = registry / "cpu-queue"
        for p in (*self.paths, self.queue):
            with contextlib.suppress(FileExistsError):
                p.mkdir(mode=0o755)

    def _try(self, want: int) -> list[int]:
        """Up to ``want`` token fds locked now (fewer when fewer are free), tried in random order."""
        held: list[int] = []
        for p in random.sample(self.paths, len(self.paths)):
            try:
                fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:  # removed by someone: make it again next time round
                with contextlib.suppress(OSError):
                    p.mkdir(mode=0o755)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            held.append(fd)
            if len(held) == want:
                break
        return held

    @contextlib.contextmanager
    def held(self, cpu_cores: float, cancelled: Callable[[], bool] = lambda: False) -> Iterator[bool]:
        """Hold a job's tokens for the ``with`` block; yields False (holding none) if ``cancelled()``
        became true while it waited (the pool was closed)."""
        want = tokens_for(cpu_cores, self.cpus)
        fds: list[int] = []
        try:
            with self._at_head():
                while True:
                    fds = self._try(want)
                    if len(fds) == want:
                        break
                    for fd in fds:  # all or none: two jobs each holding part of what both need would wait forever
                        os.close(fd)
                    fds = []
                    if cancelled():
                        break
                    time.sleep(POLL_S * (0.5 + random.random()))
            yield bool(fds)
        finally:
            for fd in fds:
                os.close(fd)

    @contextlib.contextmanager
    def _at_head(self) -> Iterator[None]:
        """Be the one job that takes tokens as they come free (a blocking ``flock`` on ``queue``).

        Without it, a pool whose threads submit the next job the moment the last one returns took the
        tokens back before a waiting job of another pool next looked: that job waited 290 s, until the
        other pool stopped. Now a job that comes back queues behind the one already waiting."""
        try:
            fd = os.open(self.queue, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:  # removed by someone: make it again
            with contextlib.suppress(FileExistsError):
                self.queue.mkdir(mode=0o755)
            fd = os.open(self.queue, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

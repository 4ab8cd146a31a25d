"""Selftest probes of issue 21: what a job's behaviour may not buy it, and what it may not pass on.

- ``self_starvation``: a job that idles to just before its deadline and then forks spinners pinned
  to one CPU looks starved from the inside; it must time out as its own error, never an infra error.
- ``slow_wipe``: a job that leaves as deep a directory chain as it can make must cost only its own
  time: the call returns soon after its timeout, never as infra, and the next job runs normally.
- ``inode_channel``: a job that creates and deletes K files must not move the next job's first
  inode numbers (each job has file systems of its own).
- ``per_user_counters``: a job of another pool, in another process, that exhausts the per-user
  kernel counters (pipe buffer pages, fds in flight) must not shrink this pool's pipes or make its
  fd passing fail (each slot has a uid of its own).

Each returns None when the job's behaviour was contained, else what got through. The sources are
also the payloads of tests/sandbox/test_starvation.py, test_fresh_fs.py and test_uids.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from posttrain.sandbox._types import Execution, Limits

if TYPE_CHECKING:
    from posttrain.sandbox._pool import LocalSandboxPool

# Reads its deadline from RLIMIT_CPU (timeout + 1 s), prints its (wrong) answer, idles until just
# before the deadline, then forks spinners pinned to one CPU, on which it waits itself.
SELF_STARVE = r"""
import os, resource, time
soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
print("wrong answer", flush=True)
time.sleep(max(0.0, soft - 1 - 0.35))
cpu = min(os.sched_getaffinity(0))
for _ in range(12):
    if os.fork() == 0:
        os.sched_setaffinity(0, {cpu})
        while True:
            pass
os.sched_setaffinity(0, {cpu})
while True:
    time.sleep(0.0001)
"""

# Makes one nested directory after another in TOP (default /tmp) until its deadline is near or
# the file system refuses; prints how many, every thousand too (a loaded host may kill it first).
DEEP_CHAIN = r"""
import os, resource, time
end = time.monotonic() + resource.getrlimit(resource.RLIMIT_CPU)[0] - 1 - 0.3
fd = os.open(os.environ.get("TOP", "/tmp"), os.O_RDONLY)
n = 0
try:
    while time.monotonic() < end:
        for _ in range(1000):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        n += 1000
        print("made", n, flush=True)
except OSError as e:
    print("refused:", e.strerror)
print("made", n, flush=True)
"""
IDLE = "import time\ntime.sleep(3600)\n"  # runs out its timeout doing nothing: what a job's call costs anyway
WIPE_MARGIN_S = 3.0
"""What a deep chain may add to its call over an idle job of the same timeout (the kernel frees a
capped tmpfs in ~0.1 s of CPU; the rest is for a loaded host). Before issue 21 it added ~9 s."""

# Creates and deletes K files in each writable place (the sender), or reports the inode number of
# a first new file in each (the receiver).
INODE_SEND = (
    "import os\nfor top in ('/work', '/tmp', '/dev/shm'):\n    p = os.path.join(top, 'f')\n"
    "    for _ in range({k}):\n        open(p, 'w').close()\n        os.unlink(p)\n"
)
INODE_READ = (
    "import os\nout = []\nfor top in ('/work', '/tmp', '/dev/shm'):\n    p = os.path.join(top, 'probe')\n"
    "    open(p, 'w').close()\n    out.append(os.stat(p).st_ino)\nprint(out)\n"
)

# Exhausts its uid's pipe buffer pages and fds in flight, prints when, and holds them for HOLD s.
COUNTERS_HOG = r"""
import fcntl, json, os, socket, time
out, pipes = {}, []
try:
    while len(pipes) < 4096:
        r, w = os.pipe()
        pipes.append((r, w))
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        os.write(w, b"x" * 65536)
except OSError as e:
    out["pipes"] = [len(pipes), e.errno]
pipes += [os.pipe() for _ in range(16)]  # past the soft limit, not only at it
a, b = socket.socketpair()
fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(50)]
sent = 0
try:
    while sent < 100000:
        socket.send_fds(a, [b"x"], fds)
        sent += len(fds)
except OSError as e:
    out["inflight"] = [sent, e.errno]
out["from"] = time.time()
print(json.dumps(out), flush=True)
time.sleep(HOLD)
"""
# What a victim of an exhausted uid would meet: a pipe of 8 KiB instead of 64 KiB, fd passing refused.
COUNTERS_VICTIM = r"""
import fcntl, json, os, socket, time
r, w = os.pipe()
size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
a, b = socket.socketpair()
try:
    socket.send_fds(a, [b"x"], [0])
    passed = "ok"
except OSError as e:
    passed = e.strerror
print(json.dumps({"pipe": size, "fds": passed, "at": time.time()}))
"""
# Another pool in another process: runs COUNTERS_HOG once, prints its stdout.
_NEIGHBOUR = r"""
import sys
from posttrain.sandbox import open_pool
with open_pool(size=1) as pool:
    print("ready", flush=True)
    ex = pool.run_python(sys.argv[1], timeout=30.0)
print(ex.stdout.decode(errors="replace").strip() or ex.outcome, flush=True)
"""


@contextlib.contextmanager
def cpu_hogs(n: int | None = None, nice: int = 19) -> Iterator[list[subprocess.Popen]]:
    """``n`` busy processes (default: one per usable CPU) at ``nice`` for the duration: the load that
    timing-dependent rules are tested beside (issue 21). Each runs in a session of its own, and so an
    autogroup, at that nice too: the kernel groups root-cgroup tasks by session, and an autogroup's
    nice sets its share."""
    hogs = [subprocess.Popen(["nice", "-n", str(nice * 2), sys.executable, "-c", "while True: pass"],
                             start_new_session=True) for _ in range(n or len(os.sched_getaffinity(0)))]  # fmt: skip
    try:
        for h in hogs:
            with contextlib.suppress(OSError):
                Path(f"/proc/{h.pid}/autogroup").write_text(str(max(-20, min(19, nice))))
        yield hogs
    finally:
        for h in hogs:
            if h.poll() is None:
                h.kill()
            h.wait()


def _stopped_as_error(ex: Execution, what: str, bound_s: float) -> str | None:
    if ex.outcome == "infra_error":
        return f"{what}: an infra error ({ex.infra_detail})"
    if not (ex.outcome == "error" and ex.timed_out):
        return f"{what}: expected the job's own timeout, got {ex}"
    return None if ex.duration_s < bound_s else f"{what}: took {ex.duration_s:.1f} s"


def self_starvation(pool: LocalSandboxPool, c: object = None) -> str | None:
    # (bound: the run, and on a host that is busy meanwhile one rerun after waiting for it)
    ex = pool.run_python(SELF_STARVE, timeout=2.0)
    bad = _stopped_as_error(ex, "run_python", 12.0)
    if bad:
        return bad
    return _stopped_as_error(pool.exec(["python3", "-c", SELF_STARVE], timeout=2.0), "exec", 12.0)


def timed(run: Callable[[str], Execution], source: str) -> tuple[Execution, float]:
    t0 = time.monotonic()
    ex = run(source)
    return ex, time.monotonic() - t0


def chain_runs(pool: LocalSandboxPool, timeout: float = 3.0) -> dict[str, Callable[[str], Execution]]:
    """Run a Python source as a job of each path, TOP=/work for ``exec``."""
    lim = Limits(memory_mb=1024)
    return {"run_python": lambda src: pool.run_python(src, timeout=timeout, limits=lim),
            "exec": lambda src: pool.exec(["sh", "-c", 'TOP=/work exec python3 -c "$0"', src], timeout=timeout,
                                          limits=lim)}  # fmt: skip


def chain_tries(run: Callable[[str], Execution], tries: int = 3) -> list[tuple[Execution, float, float]]:
    """The deep chain's call against an idle job's of the same timeout, run just before it (so a
    loaded host slows both), until the chain adds at most ``WIPE_MARGIN_S`` or ``tries`` pairs ran:
    each pair's (chain's Execution, its call's seconds, the idle call's seconds). Load is uneven: in
    a full test run one pair in ten here took 3-9 s more than its idle job, the pool having rerun a
    chain that looked starved (two timeouts in one call) or the kernel's free waiting for a CPU;
    what the chain itself costs slows every pair (before issue 21, ~9 s each)."""
    pairs = []
    for _ in range(tries):
        _, idle = timed(run, IDLE)
        ex, took = timed(run, DEEP_CHAIN)
        pairs.append((ex, took, idle))
        if took <= idle + WIPE_MARGIN_S:
            break
    return pairs


def slow_wipe(pool: LocalSandboxPool, c: object = None) -> str | None:
    """Each path's call with a deep chain against an idle job's of the same timeout (``chain_tries``):
    the chain may add at most ``WIPE_MARGIN_S`` in one of three pairs, and is never infra."""
    for what, run in chain_runs(pool).items():
        pairs = chain_tries(run)
        for ex, _, _ in pairs:
            if ex.outcome == "infra_error":
                return f"{what}: a deep chain made the job an infra error ({ex.infra_detail})"
            if b"made" not in ex.stdout and not ex.timed_out:
                return f"{what}: the chain was not made: {ex}"
        ex, took, idle = pairs[-1]
        if took > idle + WIPE_MARGIN_S:
            return f"{what}: the call took {took:.1f} s, an idle job's {idle:.1f} s (cleanup waited for)"
        after = pool.run_python("print('next')")
        if not after.ok:
            return f"{what}: the next job failed: {after}"
    return None


def inode_channel(pool: LocalSandboxPool, c: object = None) -> str | None:
    """Run on a one-slot pool (the sender and receiver then share the slot)."""
    seen: dict[str, set[str]] = {"run_python": set(), "exec": set()}
    for k in (0, 1000, 7, 4242):
        pool.run_python(INODE_SEND.format(k=k))
        seen["run_python"].add(pool.run_python(INODE_READ).stdout.decode())
        pool.exec(["python3", "-c", INODE_SEND.format(k=k)])
        seen["exec"].add(pool.exec(["python3", "-c", INODE_READ]).stdout.decode())
    moved = {what: sorted(v) for what, v in seen.items() if len(v) != 1}
    return f"the first inode numbers followed the previous job: {moved}" if moved else None


def per_user_counters(pool: LocalSandboxPool, c: object = None) -> str | None:
    """Another pool, in another process, exhausts its uid's counters while a job here uses them."""
    hold = 8
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", _NEIGHBOUR, COUNTERS_HOG.replace("HOLD", str(hold))],
                             stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert other.stdout is not None
        if other.stdout.readline().strip() != "ready":
            return f"the neighbour pool did not start ({other.wait()})"
        time.sleep(2.0)  # its job exhausts its counters (well under a second on an idle host)
        victim = pool.run_python(COUNTERS_VICTIM)
        out, _ = other.communicate(timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    try:
        held, got = json.loads(out.strip().splitlines()[-1]), json.loads(victim.stdout)
    except (ValueError, IndexError):
        return f"the probe did not run: neighbour {out!r}, victim {victim}"
    if "pipes" not in held or "inflight" not in held:
        return f"the neighbour did not exhaust its counters: {held}"
    if not held["from"] <= got["at"] <= held["from"] + hold:
        return "the victim's job did not run while the neighbour held its counters (a loaded host): try again"
    if got["pipe"] != 65536 or got["fds"] != "ok":
        return f"a job of another pool exhausted this pool's per-user counters: pipe {got['pipe']} B, fd passing {got['fds']}"
    return None


PROBES = {f.__name__: f for f in (self_starvation, slow_wipe, inode_channel, per_user_counters)}

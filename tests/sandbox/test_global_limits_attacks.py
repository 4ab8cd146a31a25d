"""Kernel state that no cgroup charges to the job, and that outlives it or reaches another pool.

Sysctls: a job cannot change the sysctls of its slot's namespaces, which outlive it in a fork-server slot.

The sandbox's pid and IPC namespaces are owned by the slot's user namespace, so their sysctls
(``kernel.pid_max``, ``kernel.ns_last_pid``, ``kernel.msgmni``, ``shmmni``, ``sem``,
``fs.mqueue.queues_max`` ...) were writable by the job, and a fork-server slot keeps those
namespaces for every job it runs. A job that forked 400 times and then set ``pid_max`` to 301 left
the pid namespace one free pid: every later job of its slot failed at its first ``fork`` (EAGAIN,
the honest job's verdict ``error``); one that set the IPC limits to 0 failed their ``msgget``,
``shmget`` (ENOSPC), ``semget`` (EINVAL) and ``mq_open`` (ENOSPC). /proc/sys is now read-only in
the sandbox (``_launch.bwrap_args``), as the rest of the host's kernel settings always were.

Locked memory: ``mlock`` of a mapping of a /usr file pins pages of the host's page cache, which stay
charged to the cgroup that read them first. At the host's RLIMIT_MEMLOCK (8 MiB a process here, no
bound on hosts run with ``ulimit -l unlimited``) a job of one pool made the pages a slot of another
pool had read unevictable there (33 of that slot's 96 MiB with 6 processes); every sandboxed process
now has 64 KiB (``_launch.MEMLOCK_B``).

Tried and found bounded, one hog beside a job of another slot, the same pool's ``exec`` and another
pool (none changed): 128 inotify instances, 64 pipes of 1 MiB then EPERM, 9 message queues at
RLIMIT_MSGQUEUE, 96,367 POSIX timers (the uid's RLIMIT_SIGPENDING; 35 MiB of kernel memory, charged
to the hog's cgroup), each per uid and every slot's uid its own; unix socket buffers of 4 MiB (charged:
125 MiB buffered, 140 MiB used; 64 pairs OOM-killed the hog itself); 64 tasks (pids cgroup) on both
paths; keyrings, fanotify, perf, io_uring, userfaultfd, syslog: EPERM; PSI triggers: EINVAL; an abstract
socket: the slot's own net namespace; ``fsync`` of a /usr file in 4 processes: the host's own
fdatasync loop ran no slower (p99 0.9 ms beside it, 5 ms alone); ``flock`` of /usr and /dev files
works but posttrain locks nothing a sandbox can see.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from posttrain.sandbox import open_pool

HOSTILE = r"""
import os
for _ in range(400):  # past the pids a pid_max of 301 leaves, so that only one is free after it
    c = os.fork()
    if c == 0:
        os._exit(0)
    os.waitpid(c, 0)
refused = []
for name, value in (("kernel/pid_max", "301"), ("kernel/ns_last_pid", "5000"), ("kernel/msgmni", "0"),
                    ("kernel/shmmni", "0"), ("kernel/sem", "0 0 0 0"), ("fs/mqueue/queues_max", "0"),
                    ("kernel/shm_rmid_forced", "1")):
    try:
        fd = os.open("/proc/sys/" + name, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError:
        refused.append(name)
writable = []
for root, _, files in os.walk("/proc/sys"):
    for f in files:
        try:
            os.close(os.open(os.path.join(root, f), os.O_WRONLY))
            writable.append(os.path.join(root, f))
        except OSError:
            pass
print(len(refused), writable)
"""

HONEST = r"""
import ctypes, os, time
kids = []
for _ in range(8):
    c = os.fork()
    if c == 0:
        time.sleep(0.05)
        os._exit(0)
    kids.append(c)
for c in kids:
    os.waitpid(c, 0)
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
got = [libc.msgget(0, 0o1600), libc.shmget(0, 4096, 0o1600), libc.semget(0, 1, 0o1600),
       rt.mq_open(b"/q", 0o100 | 2, 0o600, None)]
assert all(g >= 0 for g in got), (got, ctypes.get_errno())
print(open("/proc/sys/kernel/pid_max").read().strip())
"""


def test_a_job_cannot_change_the_sysctls_its_slots_next_jobs_run_under(pool1):
    before = pool1.run_python(HONEST, timeout=20)
    assert before.ok, before
    hostile = pool1.run_python(HOSTILE, timeout=20)
    assert hostile.ok, hostile
    for _ in range(2):  # the same slot (a pool of one): its pid and IPC namespaces are the hostile job's
        after = pool1.run_python(HONEST, timeout=20)
        assert after.ok and after.stdout == before.stdout, (hostile.stdout, after)
    assert hostile.stdout == b"7 []\n", hostile.stdout


PIN = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
fd = os.open(FILE, os.O_RDONLY)
addr = libc.mmap(None, SIZE, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
big = libc.mlock(addr, SIZE)
err = ctypes.get_errno()
small = libc.mlock(libc.mmap(None, 4096, 3, 0x22, -1, 0), 4096)  # a private anonymous page: a secret's
open("/tmp/held", "w").write(f"{big} {err} {small}")
while not os.path.exists("/tmp/done"):
    time.sleep(0.01)
"""
SIZE = 4 << 20


def _largest_stdlib_file() -> Path:
    """A file of /usr that no one maps or reads while the test runs: the largest of Python's stdlib."""
    found = [
        p
        for d in Path("/usr/lib").glob("python3*")
        for p in d.rglob("*")
        if p.is_file() and not p.is_symlink()
    ]
    big = max(found, key=lambda p: p.stat().st_size)
    assert big.stat().st_size >= SIZE, f"no file of {SIZE} bytes in /usr/lib/python3*: {big}"
    return big


def _unevictable_mib(pool) -> float:
    for d in pool._all_z[0].cg.dirs.values():
        stat = d / "memory.stat"
        if stat.exists():
            return int(dict(line.split() for line in stat.read_text().splitlines())["unevictable"]) / (
                1 << 20
            )
    raise AssertionError(f"no memory.stat in {pool._all_z[0].cg.dirs}")


@pytest.fixture(scope="module")
def two_pools():
    with open_pool(size=1) as a, open_pool(size=1) as b:
        yield a, b


def test_a_job_cannot_pin_the_page_cache_another_pool_read(two_pools):
    a, b = two_pools
    victim = _largest_stdlib_file()
    fd = os.open(victim, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # so that the other pool's read is charged to it
    finally:
        os.close(fd)
    read = b.run_python(f"open({str(victim)!r}, 'rb').read({SIZE})", timeout=20)
    assert read.ok, read
    tmp = a._all_z[0].places.path("tmp")
    result = {}
    job = threading.Thread(
        target=lambda: result.update(
            ex=a.run_python(PIN.replace("FILE", repr(str(victim))).replace("SIZE", str(SIZE)), timeout=20)
        )
    )
    job.start()
    try:
        end = time.monotonic() + 15
        while not (tmp / "held").exists() and job.is_alive() and time.monotonic() < end:
            time.sleep(0.01)
        held = (tmp / "held").read_text() if (tmp / "held").exists() else result
        pinned = _unevictable_mib(b)
    finally:
        (tmp / "done").write_text("")
        job.join()
    assert result["ex"].ok, result["ex"]
    big, err, small = map(int, held.split())
    assert pinned < 0.5, f"{pinned:.1f} MiB of the other pool's slot unevictable (mlock: {big}, errno {err})"
    assert (big, err, small) == (-1, 12, 0), held  # ENOMEM past 64 KiB; a page still locks

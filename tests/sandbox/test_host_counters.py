"""Kernel counters of the whole host that no uid, namespace or cgroup splits: a job may not take them.

Ptys (``kernel.pty.max`` less ``kernel.pty.reserve``, 3072 for every devpts but the host's own) and
Linux AIO contexts (``fs.aio-max-nr``, 65536) are one count for the host. Before, a job that opened
/dev/ptmx ~3000 times left a job of another pool "out of pty devices", and one that asked
``io_setup`` for 65536 events left every other process on the host with EAGAIN, while it ran.
Now each slot's /dev/pts is a devpts of its own with at most ``_fs.MAX_PTYS`` ptys, and seccomp
answers ``io_setup`` with ENOSYS. Huge pages (``vm.nr_hugepages``) are the same kind of pool, on
hosts that reserve some: seccomp refuses them. So is the host's core-dump helper, on hosts whose
``kernel.core_pattern`` is a pipe: each crash ran it as root, outside every cgroup of the sandbox.

The hog takes what it can, then says so in a file of its /tmp, which the test reads from the host
(the slot's tmpfs), and holds it until the test has looked.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from posttrain.sandbox import open_pool
from posttrain.sandbox._types import Execution

HOLD = r"""
import os, time
def take():  # what one process can hold: KIND
    got = []
    try:
        while True:
            got.append(TAKE)
    except OSError:
        pass
    return got
total = 0
for _ in range(16):
    r, w = os.pipe()
    if os.fork() == 0:
        got = take()
        os.write(w, str(len(got)).encode())
        while not os.path.exists('/tmp/done'):
            time.sleep(0.01)
        os._exit(0)
    os.close(w)
    total += int(os.read(r, 32) or 0)
    os.close(r)
open('/tmp/held.new', 'w').write(str(total))
os.rename('/tmp/held.new', '/tmp/held')
while not os.path.exists('/tmp/done'):
    time.sleep(0.01)
print(total)
"""
PTYS = HOLD.replace("KIND", "ptys, 250 fds").replace("TAKE", "os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY)")
_AIO = "(lambda c: c if __import__('ctypes').CDLL(None).syscall(206, 4096, __import__('ctypes').byref(c)) == 0 else (_ for _ in ()).throw(OSError()))(__import__('ctypes').c_ulong(0))"
AIO = HOLD.replace("KIND", "aio contexts of 4096 events").replace("TAKE", _AIO)


@pytest.fixture(scope="module")
def pools():
    with open_pool(size=1) as hog, open_pool(size=1) as other:
        yield hog, other


@contextmanager
def holding(pool, source: str) -> Iterator[Callable[[], Execution]]:
    """Run ``source`` in ``pool`` until it holds what it could take; yields a function that lets it
    go and returns its Execution."""
    tmp = pool._all_z[0].places.path("tmp")
    result: dict[str, Execution] = {}
    job = threading.Thread(target=lambda: result.update(ex=pool.run_python(source, timeout=30.0)))
    job.start()

    def release() -> Execution:
        (tmp / "done").write_text("")
        job.join()
        return result["ex"]

    try:
        end = time.monotonic() + 25
        while not (tmp / "held").exists() and job.is_alive() and time.monotonic() < end:
            time.sleep(0.01)
        assert (tmp / "held").exists(), f"the hog did not get to hold anything: {result}"
        yield release
    finally:
        if job.is_alive():
            release()


def test_a_job_holding_every_pty_it_can_leaves_other_pools_their_ptys(pools):
    hog, other = pools
    with holding(hog, PTYS) as release:
        victim = other.run_python("import os, pty\nm, s = pty.openpty()\nprint(os.ttyname(s))\n")
        ex = release()
    assert ex.ok, ex
    assert victim.ok and victim.stdout.startswith(b"/dev/pts/"), (int(ex.stdout), victim)


def test_a_job_cannot_take_the_hosts_aio_contexts(pools):
    hog, _ = pools
    libc = ctypes.CDLL(None, use_errno=True)
    with holding(hog, AIO) as release:
        ctx = ctypes.c_ulong(0)
        rc = libc.syscall(206, 128, ctypes.byref(ctx))  # io_setup, x86_64: what any host process may do
        err = ctypes.get_errno()
        if rc == 0:
            libc.syscall(207, ctx)  # io_destroy
        ex = release()
    assert ex.ok, ex
    assert rc == 0, f"the host's own io_setup failed (errno {err}) while a job held {int(ex.stdout)} aio contexts of 4096 events"


HUGE = r"""
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(call):
    try:
        call()
        return 0
    except OSError as e:
        return e.errno
def shm():
    if libc.shmget(0, 2 << 20, 0o1600 | 0o4000) < 0:  # IPC_CREAT | 0600 | SHM_HUGETLB
        raise OSError(ctypes.get_errno(), "shmget")
print(errno_of(lambda: mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)),
      errno_of(lambda: os.memfd_create("h", 4)), errno_of(shm))
"""


def test_a_job_cannot_take_the_hosts_huge_pages(pools):
    """Huge pages come from one pool of the host's (``vm.nr_hugepages``), outside every memory
    cgroup. With two reserved, a job that mapped them left a job of another pool ENOMEM (run by
    hand: this host reserves none, and a test does not change the host's). Each way to ask for them
    is now refused in the sandbox itself, whatever the host reserves."""
    hog, _ = pools
    ex = hog.run_python(HUGE)
    assert ex.ok and ex.stdout.split() == [b"1", b"1", b"1"], ex  # EPERM, for mmap, memfd_create, shmget


CORE = r"""
import ctypes, resource, subprocess
print(*resource.getrlimit(resource.RLIMIT_CORE))
for want in ((0, 1), (0, 0)):
    try:
        resource.setrlimit(resource.RLIMIT_CORE, want)
        print("lowered")
    except (OSError, ValueError):
        print("refused")
libc = ctypes.CDLL(None, use_errno=True)
new = (ctypes.c_ulong * 2)(0, 0)
print("refused" if libc.prlimit(0, resource.RLIMIT_CORE, new, None) != 0 else "lowered")
print(subprocess.run(["sh", "-c", "ulimit -c 0 2>/dev/null && echo lowered || echo refused"],
                     capture_output=True, text=True).stdout.strip())
"""


def test_a_job_cannot_make_the_host_run_its_core_dump_helper(pools):
    """On a host whose ``kernel.core_pattern`` is a pipe (systemd-coredump, apport), RLIMIT_CORE 0
    does not stop a dump: the kernel ran the host's helper, as root, outside the sandbox and its
    cgroups, fed the process's memory, for every crash: 5 crashes of a job, 5 runs of the helper
    (measured by hand with ``|/tmp/helper %p %c``, then core_pattern put back: a test does not change
    the host's). RLIMIT_CORE is now 1, the kernel's own "no pipe dump" value, and no job can change it
    (``_seccomp``): 0 runs of the helper."""
    hog, _ = pools
    ex = hog.run_python(CORE)
    assert ex.ok and ex.stdout.split() == [b"1", b"1", b"refused", b"refused", b"refused", b"refused"], ex

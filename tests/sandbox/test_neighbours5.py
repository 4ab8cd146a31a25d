"""A job may not take the host's open files (``fs.file-max``) from another pool's jobs.

Open files are one count for the whole host, which no uid, namespace or cgroup splits, and a file
held by a mapping needs no fd: a job that opened a file, mapped a page of it and closed the fd
61 times over 65,000 (each of its processes up to ``vm.max_map_count``) held ~2.46 million, the
kernel's default ``file-max`` for this host's 24 GiB (one file per 10 KiB of RAM), in 1.5 GiB of
memory (~430 bytes of kernel memory each, charged to its cgroup). While it held them, every
unprivileged process on the host got ENFILE: an ``exec`` job of another pool was an infra error
(bwrap could not load its libraries, "Error 23"). Now a pool raises ``file-max`` to one file per
256 bytes of RAM (``_launch.ensure_file_max``), more than any job's memory can pay for.

The hog gets the memory the kernel's default count costs (whatever the host was set to since:
the first pool started on it raised it) and holds what it took until the test has looked.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from posttrain.sandbox import Limits, open_pool
from posttrain.sandbox._launch import FILE_COST_B, ensure_file_max

HOG = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
for _ in range(60):  # 61 processes of the job's 64
    if os.fork() == 0:
        break
n = 0
while n < 65000:  # vm.max_map_count mappings per process
    fd = libc.open(b"/usr/bin/env", os.O_RDONLY)
    if fd < 0:
        break
    page = libc.mmap(None, 4096, 1, 2, fd, 0)  # PROT_READ, MAP_PRIVATE: holds the file
    libc.close(fd)
    if page in (None, ctypes.c_void_p(-1).value):
        break
    n += 1
end = time.monotonic() + 20
while not os.path.exists("/tmp/done") and time.monotonic() < end:  # (stat: no file needed)
    time.sleep(0.01)
"""


def _open_files() -> int:
    return int(open("/proc/sys/fs/file-nr").read().split()[0])


def _default_file_max() -> int:
    """The kernel's own ``file-max`` for this host: one file per 10 KiB of RAM (fs/file_table.c)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (10 << 10)


def test_a_pool_raises_the_hosts_file_max_past_what_memory_can_hold():
    with open_pool(size=1):
        have = int(open("/proc/sys/fs/file-max").read())
    assert have * FILE_COST_B >= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    ensure_file_max()  # already enough: nothing to do, no error
    assert int(open("/proc/sys/fs/file-max").read()) == have


@pytest.mark.slow
def test_a_job_holding_every_file_it_can_leaves_other_pools_their_files():
    memory_mb = _default_file_max() * 512 // (1 << 20) + 64  # what the default count costs, with margin
    with open_pool(size=1) as hog, open_pool(size=1) as other:
        limit = int(open("/proc/sys/fs/file-max").read())
        tmp = hog._all_z[0].places.path("tmp")
        result = {}
        job = threading.Thread(target=lambda: result.update(
            ex=hog.run_python(HOG, timeout=60.0, limits=Limits(memory_mb=memory_mb, cpu_time_s=120.0))))
        job.start()
        try:
            last, still = _open_files(), 0
            while job.is_alive() and still < 10 and _open_files() < limit - 5000:  # until it holds what it got
                time.sleep(0.1)
                now = _open_files()
                still, last = (still + 1 if now - last < 100 else 0), now
            held = _open_files()
            victim = other.exec(["sh", "-c", "cat /usr/bin/env > /dev/null && echo ok"])
            py = other.run_python("print(len(open('/usr/bin/env', 'rb').read(2)))")
        finally:
            (tmp / "done").write_text("")
            job.join()
    assert result["ex"].outcome != "infra_error", result["ex"]
    assert victim.ok and victim.stdout == b"ok\n", (held, limit, victim)
    assert py.ok and py.stdout == b"2\n", (held, limit, py)

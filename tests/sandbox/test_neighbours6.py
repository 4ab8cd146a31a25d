"""Host counters a job may not take from its neighbours: a sixth read as a candidate (issue 21).

Committed memory: on a host with strict overcommit accounting (``vm.overcommit_memory=2``) every
private writable mapping, touched or not, counts against one ``CommitLimit`` for the whole host,
which no uid, namespace or cgroup splits (a memory cgroup charges pages as they are touched). A job
of 64 MiB mapped 64 x 16 GiB and raised ``Committed_AS`` by 1,024 GiB, 87 times this host's limit
(11.8 GiB), its cgroup never above its limit; on a strict host every other process would then get
ENOMEM from ``fork``, ``mmap`` and ``brk`` (another pool's ``exec`` job an infra error, its
``run_python`` jobs MemoryError). Before, a pool started on such a host; now it refuses one
(``_launch.check_overcommit``, ``HostCannotIsolate``), as no rlimit can bound the sum either. The
default modes (0: a heuristic that refuses only one mapping larger than RAM and swap; 1) keep no
count to exhaust, so the job's mappings here harm no one: the test measures the count, it does not
strand the host.
"""

from __future__ import annotations

import math
import os
import threading
import time

import pytest

from posttrain.sandbox import HostCannotIsolate, Limits, open_pool
from posttrain.sandbox._launch import OVERCOMMIT, check_overcommit

COMMIT = r"""
import mmap, time
maps = [mmap.mmap(-1, {chunk}, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) for _ in range({n})]
time.sleep(0.6)
print(len(maps))
"""


def _meminfo(key: str) -> int:
    """A /proc/meminfo figure in bytes."""
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) << 10
    raise KeyError(key)


def test_a_job_of_64_mib_commits_more_than_the_hosts_commit_limit():
    """The evidence: what a job maps counts against the host's one limit, not its cgroup's."""
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    chunk = ram // 4  # (mode 0 refuses a single mapping larger than RAM and swap)
    n = math.ceil(2 * _meminfo("CommitLimit") / chunk)
    before, peak = _meminfo("Committed_AS"), [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _meminfo("Committed_AS"))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    with open_pool(size=1) as pool:
        watcher.start()
        try:
            source = COMMIT.format(chunk=chunk, n=n)
            ex = pool.run_python(source, timeout=10.0, limits=Limits(memory_mb=64))
        finally:
            done.set()
            watcher.join()
    assert ex.ok and ex.stdout == f"{n}\n".encode(), ex
    assert ex.peak_memory_bytes is not None and ex.peak_memory_bytes < 64 << 20
    # 0.6: other processes of the host (a parallel test) may release commitments meanwhile
    assert peak[0] - before > 0.6 * n * chunk > _meminfo("CommitLimit")


@pytest.mark.parametrize(("mode", "refused"), [("0", False), ("1", False), ("2", True)])
def test_a_pool_refuses_a_host_with_strict_overcommit(tmp_path, mode, refused):
    sysctl = tmp_path / "overcommit_memory"
    sysctl.write_text(f"{mode}\n")
    if refused:
        with pytest.raises(
            HostCannotIsolate, match=r"vm.overcommit_memory is 2.*sysctl -w vm.overcommit_memory=0"
        ):
            check_overcommit(sysctl)
    else:
        check_overcommit(sysctl)
    with pytest.raises(HostCannotIsolate, match="cannot read"):
        check_overcommit(tmp_path / "absent")


def test_this_host_is_one_a_pool_starts_on():
    """The suite's hosts keep the kernel's default (else every pool here would have been refused)."""
    assert OVERCOMMIT.read_text().strip() != "2"
    check_overcommit()


FLOOD = r"""
import os
buf = b"y" * (1 << 16)
for _ in range(4096):  # 256 MiB
    os.write(1, buf)
"""


def _rchar() -> int:
    """Bytes this thread has read by read(2) and the like (splice is not counted)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_output_past_its_cap_is_not_copied_to_the_host():
    """An ``exec`` job's pipes are drained by the calling thread, outside every cgroup of the job.
    Past ``Limits.output_bytes`` it copied and discarded all of it (a flood of 5 GB in 3 s, at 0.1
    cores, cost this thread 0.6 s of CPU, twice the job's quota); now the kernel drops it
    (``_pump._drop``). The job's own result is unchanged: ok, its first bytes, truncated."""
    with open_pool(size=1) as pool:
        before = _rchar()
        ex = pool.exec(["python3", "-c", FLOOD], timeout=20.0, limits=Limits(output_bytes=1 << 16))
        copied = _rchar() - before
    assert ex.ok and ex.stdout == b"y" * (1 << 16) and ex.stdout_truncated, ex
    assert copied < 16 << 20, copied  # of 256 MiB written (before: all of them)


SECRET = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(447, 0)  # memfd_secret(0); no page of it is touched here
print(fd, ctypes.get_errno())
"""


def test_a_job_cannot_take_pages_out_of_the_hosts_direct_map():
    """``memfd_secret``: each page of secret memory is taken out of the kernel's direct map of all RAM,
    splitting the 1 GiB and 2 MiB pages that map it for good. One job of 4 MiB left this host's 24 GiB
    mapped by 1 GiB pages at 4 GiB after it ended (DirectMap4k 20 MiB -> 862 MiB): every kernel access
    to memory on the host costs more TLB misses until a reboot. Now it answers ENOSYS, as on a kernel
    without secret memory (before: an fd, on both paths)."""
    with open_pool(size=1) as pool:
        fork = pool.run_python(SECRET, timeout=10.0)
        fresh = pool.exec(["python3", "-c", SECRET], timeout=10.0)
    for ex in (fork, fresh):
        assert ex.ok and ex.stdout == b"-1 38\n", ex

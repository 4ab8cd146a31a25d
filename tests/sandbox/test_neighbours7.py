"""Host-wide work a job may not do outside its cgroups: a seventh read as a candidate (issue 21).

Writeback: ``sync()`` writes back the dirty pages of every file system of the host, and ``syncfs`` on
any fd (a file of the read-only /usr) those of its host file system: I/O for the whole host, outside
every cgroup of the job, that the caller waits for uninterruptibly. One ``sync()`` in a job of this
host wrote back the host's 1.7 GB of dirty pages in 1.1 s; SIGKILL-ed at its deadline, the job lives
until that writeback ends (a 0.3 s job calling ``sync`` in a loop beside 1.5 GB of dirty pages ran
1.0 s forked, 0.7 s in ``exec``), and on a host with a slower disk or a big checkpoint being written
that is past ``kill_all``'s deadline: "processes of the job survived SIGKILL", an infra error for its
own timeout. Everything a job can write is on tmpfs, where both are no-ops, so now both answer 0 and
do nothing (``_seccomp``): 40 of 40 calls (sync, syncfs; forked, exec) wrote back a dirty host file
before, 0 of 40 after, and the 0.3 s job ends at 0.31 s.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import tempfile

import pytest

_libc = ctypes.CDLL(None, use_errno=True)
_CACHESTAT = 451  # cachestat(2), Linux 6.5 (one number on every architecture)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


def _cachestat(path: str) -> _Stat:
    """The file's pages in the host's page cache (``cache``), dirty among them (``dirty``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = _Stat()
        if _libc.syscall(_CACHESTAT, fd, ctypes.byref(_Range(0, 0)), ctypes.byref(st), 0) != 0:
            pytest.skip(f"cachestat: {os.strerror(ctypes.get_errno())}")
        return st
    finally:
        os.close(fd)


def _dirty_pages(path: str) -> int:
    return _cachestat(path).dirty


SYNC = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/usr", os.O_RDONLY)
r = libc.syncfs(fd)
os.sync()
print(r)
"""


@pytest.fixture(scope="module")
def dirty_file():
    """A file on a host file system with writeback (/var/tmp, the temp directory or the checkout's),
    and a function that dirties it and returns its dirty pages."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in ("/var/tmp", tempfile.gettempdir(), here):
        try:
            fd, path = tempfile.mkstemp(prefix=".posttrain-dirty-", dir=d)
        except OSError:
            continue
        os.close(fd)

        def dirty(path: str = path) -> int:  # (no O_TRUNC: ext4 writes back a truncated file at close)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, os.urandom(1 << 20), 0)
            finally:
                os.close(fd)
            return _dirty_pages(path)

        try:
            if dirty() > 0:
                yield path, dirty
                return
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    pytest.skip("no file system here keeps dirty pages (all tmpfs?)")


def test_a_job_cannot_write_back_the_hosts_dirty_pages(pool1, dirty_file):
    path, dirty = dirty_file
    for run in (lambda: pool1.run_python(SYNC, timeout=10.0), lambda: pool1.exec(["python3", "-c", SYNC])):
        assert dirty() > 0
        ex = run()
        assert ex.ok and ex.stdout == b"0\n", ex
        assert _dirty_pages(path) > 0, "the job wrote back the host's dirty pages"


EVICT = r"""
import ctypes, os, platform
fd = os.open({path!r}, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
nr = {{"x86_64": 221, "aarch64": 223}}.get(platform.machine())
if nr is not None:  # the kernel reads advice as an int: bits above 32 must not slip past the filter
    ctypes.CDLL(None).syscall(nr, fd, ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long((1 << 32) | 4))
print("advised")
"""


def test_a_job_cannot_drop_the_hosts_page_cache(pool1):
    """``posix_fadvise(POSIX_FADV_DONTNEED)`` on a file of the read-only /usr dropped the host's cached
    pages of it (cc1plus: 8,659 pages -> 0; ``madvise`` COLD, PAGEOUT and DONTNEED of a mapping of it
    leave them): a job that advised all of /usr (120,468 files, ~2 s) sent every other sandbox's
    compilers and interpreters, of any pool, and the host's own processes back to the disk for them.
    Now it answers 0 and does nothing (a job's own files are on tmpfs, where it is a no-op)."""
    files = sorted(glob.glob("/usr/lib/python3*/*.py"), key=os.path.getsize)
    if not files:
        pytest.skip("no standard library under /usr/lib")
    path = files[-1]  # (a source file: read, never mapped, so nothing else keeps it in the cache)
    src = EVICT.format(path=path)
    for run in (lambda: pool1.run_python(src, timeout=10.0), lambda: pool1.exec(["python3", "-c", src])):
        with open(path, "rb") as f:
            f.read()
        cached = _cachestat(path).cache
        ex = run()
        assert ex.ok and ex.stdout == b"advised\n", ex
        assert _cachestat(path).cache >= cached > 0, "the job dropped the host's page cache"


WIDE_CORE = r"""
import ctypes, platform, resource
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
class R(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
setrlimit, prlimit64 = {"x86_64": (160, 302), "aarch64": (164, 261)}[platform.machine()]
core = (1 << 32) | resource.RLIMIT_CORE  # the kernel reads an unsigned int: RLIMIT_CORE
out = [libc.syscall(setrlimit, L(core), ctypes.byref(R(0, 0))), ctypes.get_errno()]
out += [libc.syscall(prlimit64, L(0), L(core), ctypes.byref(R(0, 0)), None), ctypes.get_errno()]
print(out, resource.getrlimit(resource.RLIMIT_CORE))
"""


def test_a_job_cannot_lower_its_core_limit_through_the_high_bits_of_the_resource(pool1):
    """seccomp compares a syscall's arguments as 64 bits, the kernel reads ``resource`` as 32: a raw
    ``setrlimit`` or ``prlimit64`` with resource ``(1 << 32) | RLIMIT_CORE`` was not the filter's
    RLIMIT_CORE and lowered the job's RLIMIT_CORE from 1 to 0 (on both paths), which on a host whose
    ``core_pattern`` is a pipe runs the host's helper, as root, for each of its crashes
    (``test_host_counters``). Now the filter compares the low 32 bits: EPERM, the limit stays 1."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("syscall numbers of x86_64 and aarch64 only")
    for ex in (pool1.run_python(WIDE_CORE, timeout=10.0), pool1.exec(["python3", "-c", WIDE_CORE])):
        assert ex.ok and ex.stdout == b"[-1, 1, -1, 1] (1, 1)\n", ex

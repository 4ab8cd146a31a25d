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


# What held (pinned): a job that leaves these behind costs the next job of its slot, and a job of
# another pool, nothing. Each probe fails on the first thing that differs from a fresh slot.
_PRE = "import ctypes, fcntl, os, signal, socket, subprocess, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
LEAVE = {
    # RT signals queued to itself (the slot uid's pending-signal count), every signal at the
    # fork-server (pid 1) through a pidfd
    "signals": "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
               "class V(ctypes.Union):\n    _fields_ = [('i', ctypes.c_int)]\n"
               "n = 0\nwhile n < 50000 and libc.sigqueue(os.getpid(), signal.SIGRTMIN, V(0)) == 0:\n    n += 1\n"
               "fd = os.pidfd_open(1)\nfor s in range(1, 32):\n"
               "    try:\n        signal.pidfd_send_signal(fd, s)\n    except OSError:\n        pass\n",
    # a double-forked session leader ignoring SIGTERM/SIGHUP holding an abstract socket and 128
    # inotify instances, a stopped child, a zombie, orphans under a subreaper
    "daemons": "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n        signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
               "        s = socket.socket(socket.AF_UNIX)\n        s.bind('\\0probe')\n        s.listen()\n"
               "        held = [libc.inotify_init() for _ in range(128)]\n        time.sleep(100)\n    os._exit(0)\n"
               "p = subprocess.Popen(['sleep', '100'])\nos.kill(p.pid, signal.SIGSTOP)\n"
               "if os.fork() == 0:\n    os._exit(0)\nlibc.prctl(36, 1)\n"
               "for _ in range(8):\n    if os.fork() == 0:\n        if os.fork() == 0:\n            time.sleep(100)\n        os._exit(0)\n"
               "time.sleep(0.3)\n",
    # the ipc namespace's message queues up to its limit, SysV objects of each kind (one locked)
    "ipc": "class A(ctypes.Structure):\n    _fields_ = [('f', ctypes.c_long), ('m', ctypes.c_long), ('s', ctypes.c_long), ('c', ctypes.c_long), ('p', ctypes.c_long * 4)]\n"
           "for i in range(300):\n    if libc.mq_open(f'/q{i}'.encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(A(0, 10, 8192, 0))) < 0:\n        break\n"
           "libc.shmctl(libc.shmget(0, 1 << 20, 0o1600), 11, None)\nlibc.semget(0, 10, 0o1600)\nlibc.msgget(0, 0o1600)\n",
    # locks, owner, flags and offset of the host's memfds (fds 0-3 share their open files with the host)
    "fds": "for fd in (0, 1, 2, 3):\n    fcntl.flock(fd, fcntl.LOCK_EX)\n    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())\n"
           "    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_APPEND | os.O_NONBLOCK | 0o20000)\nos.write(1, b'x')\nos.lseek(1, 1 << 30, 0)\n",
    # unix socket buffers filled, mlocked memory in forked children, pipes at the uid's page limit
    "memory": "for _ in range(8):\n    if os.fork() == 0:\n        libc.mlockall(3)\n        time.sleep(100)\n"
              "keep = []\nfor _ in range(20):\n    a, b = socket.socketpair()\n    a.setblocking(False)\n"
              "    try:\n        while True:\n            a.send(b'x' * 65536)\n    except BlockingIOError:\n        keep += [a, b]\n"
              "try:\n    while True:\n        r, w = os.pipe()\n        fcntl.fcntl(w, 1031, 1 << 20)\n        keep += [r, w]\nexcept OSError:\n    pass\n",
}
PROBE = r"""
import ctypes, fcntl, os, signal, socket, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
bad = []
def check(what, ok):
    if not ok:
        bad.append(what)
check("processes", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == sorted({1, os.getpid()}))
check("pending signals", open("/proc/self/status").read().split("SigQ:\t")[1].startswith("0/"))
check("files", [os.listdir(d) for d in ("/tmp", "/dev/shm", "/dev/mqueue", ".")] == [[], [], [], []])
check("unix sockets", len(open("/proc/net/unix").read().splitlines()) == 1)
check("sysv", all(len(open(f"/proc/sysvipc/{k}").read().splitlines()) == 1 for k in ("shm", "sem", "msg")))
check("fds", sorted(int(x) for x in os.listdir("/proc/self/fd")) == [0, 1, 2, 3, 4])
ino = [libc.inotify_init() for _ in range(100)]
check("inotify", min(ino) >= 0)
for fd in ino:
    os.close(fd) if fd >= 0 else None
r, w = os.pipe()
check("pipe pages", fcntl.fcntl(w, 1032) == 65536)
s = socket.socket(socket.AF_UNIX)
s.bind("\0probe")
class A(ctypes.Structure):
    _fields_ = [("f", ctypes.c_long), ("m", ctypes.c_long), ("s", ctypes.c_long), ("c", ctypes.c_long), ("p", ctypes.c_long * 4)]
check("mqueue", libc.mq_open(b"/probe", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, ctypes.byref(A(0, 10, 8192, 0))) >= 0)
libc.mq_unlink(b"/probe")
class V(ctypes.Union):
    _fields_ = [("i", ctypes.c_int)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
check("sigqueue", all(libc.sigqueue(os.getpid(), signal.SIGRTMIN, V(0)) == 0 for _ in range(100)))
buf = ctypes.create_string_buffer(1 << 15)  # under RLIMIT_MEMLOCK (_launch.MEMLOCK_B, 64 KiB) with its pages
check("mlock", libc.mlock(buf, 1 << 15) == 0)
check("fork", subprocess.run(["true"]).returncode == 0)
print(bad)
"""


@pytest.fixture(scope="module")
def two_pools():
    with open_pool(size=1) as slot, open_pool(size=1) as other:
        yield slot, other


@pytest.mark.parametrize("leave", sorted(LEAVE))
def test_what_a_job_leaves_costs_the_next_job_and_another_pool_nothing(two_pools, leave):
    slot, other = two_pools
    ex = slot.run_python(_PRE + LEAVE[leave], timeout=5.0)
    assert ex.outcome != "infra_error", ex
    for pool in (slot, other):
        after = pool.run_python(PROBE, timeout=10.0)
        assert after.ok and after.stdout == b"[]\n", (leave, after)
    assert slot.exec(["python3", "-c", PROBE], timeout=10.0).stdout.endswith(b"[]\n")

"""A job cannot change the sysctls of its slot's namespaces, which outlive it in a fork-server slot.

The sandbox's pid and IPC namespaces are owned by the slot's user namespace, so their sysctls
(``kernel.pid_max``, ``kernel.ns_last_pid``, ``kernel.msgmni``, ``shmmni``, ``sem``,
``fs.mqueue.queues_max`` ...) were writable by the job, and a fork-server slot keeps those
namespaces for every job it runs. A job that forked 400 times and then set ``pid_max`` to 301 left
the pid namespace one free pid: every later job of its slot failed at its first ``fork`` (EAGAIN,
the honest job's verdict ``error``); one that set the IPC limits to 0 failed their ``msgget``,
``shmget`` (ENOSPC), ``semget`` (EINVAL) and ``mq_open`` (ENOSPC). /proc/sys is now read-only in
the sandbox (``_launch.bwrap_args``), as the rest of the host's kernel settings always were.
"""

from __future__ import annotations

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

"""The seccomp-bpf filter every sandboxed process runs under, compiled with pyseccomp.

The filter is loaded by bwrap (``--seccomp FD``) right before it executes the sandboxed
program, so it covers the fork-server and every job. Default action: allow. Denied with EPERM:
network sockets (every family but AF_UNIX; ``socketpair`` stays allowed because asyncio needs
it), ptrace and cross-process memory access, mount and the new mount API, namespace creation
(``unshare``, ``setns``, namespace flags of ``clone``; ``clone3`` answers ENOSYS so libc falls
back to ``clone``, whose flags can be checked), keyctl, bpf, perf_event_open, io_uring, kexec
and module loading, userfaultfd, ``open_by_handle_at``, and the TIOCSTI/TIOCLINUX ioctls
(CVE-2017-5226; masked compare per CVE-2019-10063). Syscalls of a foreign ABI (i386, x32) kill
the process (libseccomp's bad-arch action).

Kernel counters of the whole host: ``io_setup`` (Linux AIO) answers ENOSYS, as on a kernel built
without AIO (glibc's POSIX AIO uses threads, not it). Its contexts count against ``fs.aio-max-nr``
(65536), one count for every process on the host: a job that asked for 65536 events left every
other sandbox, of this pool or another, and the host's own processes with EAGAIN while it ran.
Huge pages (``MAP_HUGETLB``, ``MFD_HUGETLB``, ``SHM_HUGETLB``) answer EPERM: they come from the
host's one pool (``vm.nr_hugepages``), outside the memory cgroup; on a host that reserves some, a
job that took them left a job of another pool ENOMEM. (Transparent huge pages are unaffected.)
``memfd_secret`` answers ENOSYS, as on a kernel built without secret memory: each page of it is
taken out of the kernel's direct map of all RAM, which splits the 1 GiB and 2 MiB pages that map
it, for good (nothing merges them back when the page is freed). One job of 4 MiB, its pages spread
over RAM, left this host's 24 GiB mapped by 1 GiB pages at 4 GiB (DirectMap4k 20 MiB -> 862 MiB,
DirectMap2M 2 -> 21 GiB) after it ended: every later kernel access to memory, for every process
on the host, costs more TLB misses until a reboot. ``sync`` and ``syncfs`` answer 0 and do nothing:
they wrote back the dirty pages of every file system of the host (``syncfs`` on a file of the
read-only /usr: those of its host file system), I/O outside every cgroup of the job that the caller
waits for uninterruptibly. A 0.3 s job calling ``sync`` ran 1.0 s while it wrote back the host's
1.5 GB of dirty pages, SIGKILL-ed at its deadline; with more, or a slower disk, it outlives
``kill_all``'s deadline and its own timeout becomes an infra error. What a job can write is on
tmpfs, where both are no-ops anyway (``fsync`` of its own files stays allowed). So does
``posix_fadvise(POSIX_FADV_DONTNEED)``: on a file of the read-only /usr it dropped the host's cached
pages of it (cc1plus: 8,659 -> 0), and a job that advised all of /usr (120,468 files, ~2 s) sent every
other sandbox's compilers and interpreters, and the host's processes, back to the disk for them. On a
job's own tmpfs files it does nothing anyway. (``madvise`` of a file mapping cannot: the kernel pages
out only files the caller could write.)

Changing another process: every process of a slot runs as uid 65534, so the kernel would let a
job set the fork-server's rlimits, nice value, CPU affinity, scheduler or I/O priority, and every
later job of the slot would inherit them. Those syscalls are allowed only on the calling process
itself (pid 0; ``setpriority``/``ioprio_set`` also on its own process group, never on a whole
uid); reading another process's limits stays allowed.

Core dumps: every sandboxed process has RLIMIT_CORE 1 (soft and hard, set at launch) and cannot
change it (``setrlimit``/``prlimit64`` of RLIMIT_CORE answer EPERM). On a host whose
``kernel.core_pattern`` is a pipe (systemd-coredump, apport), RLIMIT_CORE 0 does not stop a dump:
the kernel runs the host's helper, as root, outside the sandbox and its cgroups, for every crash,
and feeds it the process's memory; 1 is the kernel's own "no pipe dump" value (the recursion guard
of ``umh_coredump_setup``), and under the page size no file dump is written either. A job that
could lower it to 0 could crash in a loop to burn the host's CPU and disk outside its limits.

Arguments the kernel reads as 32-bit ints (a resource, ``which``, advice, an ioctl request) are
compared on their low 32 bits (``_int_eq``): seccomp sees the whole 64-bit register, and a raw
``setrlimit`` with resource ``(1 << 32) | RLIMIT_CORE`` got past an EQ rule and lowered the limit to
0. A pid compared ``NE 0`` needs no mask: any bit set above 32 is denied, the safe side.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import tempfile

from posttrain.sandbox.errors import HostCannotIsolate

_DENY_ALWAYS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "acct",
    "quotactl", "syslog", "fanotify_init", "lookup_dcookie", "vhangup",
)  # fmt: skip

_RLIMIT_CORE = 4

_CLONE_NS_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
# Syscalls that change another process of the same uid: (name, index of the pid argument).
_SELF_ONLY = (
    ("sched_setaffinity", 0), ("sched_setscheduler", 0), ("sched_setparam", 0), ("sched_setattr", 0),
    ("setpriority", 1), ("ioprio_set", 1),
)  # fmt: skip
_PRIO_USER, _IOPRIO_WHO_USER = 2, 3
# (name, index of the flags argument, the flag that asks for huge pages)
_HUGETLB = (("mmap", 3, 0x40000), ("memfd_create", 1, 0x4), ("shmget", 2, 0o4000))
_FADV_DONTNEED = 4  # fadvise64(fd, offset, len, advice) on every 64-bit ABI
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C


def _int_eq(sc, arg: int, value: int):  # noqa: ANN001, ANN202 - pyseccomp's module and Arg
    """Argument ``arg`` equals ``value`` as the kernel reads it, a 32-bit int: seccomp compares all 64
    bits of a register, so an EQ rule missed ``(1 << 32) | value``, which the kernel took for ``value``
    (a raw ``setrlimit`` with resource ``(1 << 32) | RLIMIT_CORE`` lowered RLIMIT_CORE to 0; the same
    for ``fadvise64``'s advice; CVE-2019-10063 for ``ioctl``'s request)."""
    return sc.Arg(arg, sc.MASKED_EQ, 0xFFFFFFFF, value)


@functools.lru_cache(maxsize=1)
def seccomp_bpf() -> bytes:
    """The compiled BPF program (cached). Raises HostCannotIsolate without libseccomp."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as e:  # pyseccomp raises when libseccomp.so.2 is absent
        raise HostCannotIsolate(
            f"seccomp: cannot load pyseccomp/libseccomp ({e}); fix: `apt-get install -y libseccomp2` "
            "and `pip install pyseccomp==0.1.2`"
        ) from e
    deny = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in _DENY_ALWAYS:
        try:
            f.add_rule(deny, name)
        except (ValueError, RuntimeError, OSError):
            continue  # a syscall this kernel/arch does not know cannot be called either
    f.add_rule(deny, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    for flag in _CLONE_NS_FLAGS:
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(sc.ERRNO(errno.ENOSYS), "io_setup")  # the host's one aio count (module docstring)
    for name in ("sync", "syncfs"):  # the host's writeback (same): 0, nothing done
        f.add_rule(sc.ERRNO(0), name)
    f.add_rule(sc.ERRNO(0), "fadvise64", _int_eq(sc, 3, _FADV_DONTNEED))  # the host's page cache (same)
    try:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "memfd_secret")  # splits the host's direct map for good (same)
    except (ValueError, RuntimeError, OSError):
        pass  # a libseccomp older than 2.5.2 cannot name it (as _DENY_ALWAYS' unknown names)
    for name, arg, flag in _HUGETLB:  # the host's one pool of huge pages (module docstring)
        f.add_rule(deny, name, sc.Arg(arg, sc.MASKED_EQ, flag, flag))
    for name, arg in _SELF_ONLY:
        f.add_rule(deny, name, sc.Arg(arg, sc.NE, 0))
    f.add_rule(deny, "setpriority", _int_eq(sc, 0, _PRIO_USER))
    f.add_rule(deny, "ioprio_set", _int_eq(sc, 0, _IOPRIO_WHO_USER))
    f.add_rule(deny, "prlimit64", sc.Arg(0, sc.NE, 0), sc.Arg(2, sc.NE, 0))  # another pid, new limits
    f.add_rule(deny, "prlimit64", _int_eq(sc, 1, _RLIMIT_CORE), sc.Arg(2, sc.NE, 0))  # (module docstring)
    f.add_rule(deny, "setrlimit", _int_eq(sc, 0, _RLIMIT_CORE))
    for req in (_TIOCSTI, _TIOCLINUX):
        f.add_rule(deny, "ioctl", _int_eq(sc, 1, req))
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


def seccomp_fd(bpf: bytes) -> int:
    """A readable, non-inheritable fd holding ``bpf`` from offset 0 (for ``bwrap --seccomp``)."""
    fd = os.memfd_create("posttrain-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, bpf)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd

"""posttrain.sandbox: run untrusted (model-written) code in real isolation, fast.

    >>> from posttrain.sandbox import open_pool
    >>> with open_pool(size=1) as pool:                              # doctest: +SKIP
    ...     ex = pool.run_python("import os; os.write(3, b'ok'); print('hi')")
    ...     (ex.outcome, ex.stdout, ex.report)
    ('ok', b'hi\\n', b'ok')

Two paths, one isolation recipe (``_launch.py``): ``run_python`` forks a warm interpreter that
lives inside a long-lived sandbox slot (hundreds of jobs/s); ``exec`` launches a fresh sandbox
per job for any program (tens of jobs/s). ``Workspace`` gives copy-on-write workspaces (overlayfs)
with snapshot and rollback for multi-turn tasks.

What is isolated, for every job:

- namespaces: user, pid, net (no interface but an unconfigured loopback: no outbound, no host
  loopback), mount, ipc, uts, cgroup; nested user namespaces disabled.
- identity: uid/gid 65534 inside; outside, a uid of the slot's own (the launcher drops root
  before bwrap), claimed from a range that every pool on the host shares without overlap
  (``_uids.py``), so the kernel's per-user counters (fds in flight over SCM_RIGHTS, pipe buffer
  pages, inotify, message queue bytes) are per slot: a job of one pool cannot exhaust them for a
  job of another (issue 21). All capabilities dropped, no_new_privs, new session (no TIOCSTI).
- kernel counters of the whole host, which no uid, namespace or cgroup splits: ptys (3072 for
  every devpts but the host's own) come from a devpts of the slot's own with at most
  ``_fs.MAX_PTYS`` (bwrap's had no cap: one job held them all and a job of another pool got "out of
  pty devices"); Linux AIO (``fs.aio-max-nr``) is refused (``io_setup`` answers ENOSYS: one job held
  the host's 65536 events, and every other process on the host got EAGAIN); so are huge pages
  (``vm.nr_hugepages``, outside the memory cgroup: on a host that reserves some, one job held them).
  Open files (``fs.file-max``): a file held by a mapping needs no fd, and at the kernel's default
  (one per 10 KiB of RAM) a job of 1.5 GiB held them all; a pool raises it to one per 256 bytes of
  RAM, more than any job's memory pays for (``_launch.ensure_file_max``). Committed memory
  (``vm.overcommit_memory=2``): every private writable mapping, touched or not, counts against one
  ``CommitLimit``, which a memory cgroup does not charge (a job of 64 MiB committed 1,024 GiB); a
  pool refuses such a host (``_launch.check_overcommit``); the default modes keep no such count.
- file system: only /usr (read-only) plus /lib, /bin symlinks, a fresh /proc of the job's pid
  namespace (its /proc/sys read-only: the sysctls of the slot's pid and IPC namespaces, such as
  ``kernel.pid_max`` and ``msgmni``, were the job's to write, and outlived it in a fork-server
  slot: a job that set ``pid_max`` to 301 failed every later job of its slot), a minimal
  read-only /dev (its /dev/mqueue read-only too: queues are made and removed by
  ``mq_open``/``mq_unlink``), and /work, /tmp, /dev/shm writable: each a tmpfs of the
  job's own, mounted for it and unmounted after it (``_fs.py``; size-capped, at most
  ``_fs.MAX_INODES`` inodes). No /etc, no /home, no /root, no host /tmp; nothing else is writable.
- environment: cleared (PATH, HOME, TMPDIR, LANG only); no host variable leaks in.
- resources: per-slot cgroup memory (+swap), pids and cpu quota (v1 or v2, under this process's
  own cgroup); rlimits on CPU time, file size, open files, core dumps, real-time priority and
  nice (both 0), locked memory (64 KiB: ``mlock`` of a /usr file pinned the host's cache, charged
  to whoever read it first, another pool's slot among them).
- syscalls: seccomp denies network sockets other than AF_UNIX, ptrace, mount, namespace
  creation, keyctl, bpf, perf_event_open, io_uring, Linux AIO, huge pages, secret memory
  (``memfd_secret``: it splits the host's direct map for good), module/kexec, TIOCSTI
  (``_seccomp.py``); ``sync``/``syncfs`` and ``posix_fadvise(DONTNEED)`` answer 0 and do nothing
  (they wrote back, or dropped from the page cache, the host's files, outside the job's cgroups);
  32-bit arguments (rlimit resources, advice, ioctl requests) are compared on their low 32 bits.
- lifetime: a wall-clock timeout kills the job's process group and everything in its slot, by
  cgroup (v1: freeze, kill, thaw; v2: ``cgroup.kill``), until the slot holds only its fork-server;
  after every job all of its processes are killed and its file systems replaced; outputs are
  capped with ``*_truncated`` flags; fd 3 is a report channel back to the caller.

What is NOT isolated:

- the kernel: this is not a VM. A kernel exploit escapes (use a gVisor/Firecracker backend
  behind the same ``SandboxPool`` protocol for hostile code at scale).
- /usr is visible read-only (installed programs and libraries can be read); /proc shows
  host-wide information such as /proc/meminfo and /proc/cpuinfo; timing side channels.
- fork-server jobs of one slot run one after another in the same namespaces (see "Between
  jobs" below for why none of it changes another job's result). The fork-server path imports
  common stdlib modules before forking, so ``sys.modules`` is not pristine.
- disk I/O bandwidth is not metered. Disk *space* is: every writable place is a tmpfs (the
  slot's, or the pool's private tmpfs holding ``exec`` and ``Workspace`` directories), whose
  pages are charged to the writing job's memory cgroup; RLIMIT_FSIZE caps single files.
- a ``Workspace`` built from a host directory mounts it read-only as its bottom layer, so the
  job can read every file in it that uid 65534 may read.
- covert channels between jobs of one slot through kernel counters. The file systems are new
  per job, so their inode numbers start over (the channel that passed K exactly, by creating and
  deleting K files, is closed). Still open: the pid counter of a fork-server slot's pid namespace
  (each job's first pid follows the processes the jobs before it in that slot forked: a number
  per job, exactly, up to ~15 bits at the default pids limit of 64 and 32768 pids, if the next
  job is known to land in the same slot); the host-wide inode counters of pipes, sockets and
  anonymous inodes (shared with every process on the host, so noisy); /proc/loadavg and timing.
  Through them a job can pass a number to a later job of the same slot, never read what another
  job read or wrote; the code verifier's threat model (docs/code-verifier-threat-model.md) says
  why a number passed to a later job does not change a verdict there.

Between jobs (the threat model for model-written code that shares a slot with the jobs after
it; issue 15). What a fork-server job can reach, and why none of it changes another job's result:

- its memory: a fork of a fork-server that never reads a job's program, stdin or outputs (they
  cross as memfds made by the host; the job's own process reads its program after the fork, the
  host reads the outputs). Frames, ``gc.get_objects()`` and the raw heap hold this module's code
  and the numbers of earlier jobs' headers (limits, exit status, duration), no byte of their data,
  and none of the job's own stdin until it reads it.
- its slot's file systems: /work, /tmp, /dev/shm and /dev/mqueue. The first three are tmpfs of
  the job's own: after the job the host unmounts them (the kernel frees what the job wrote, in
  time bounded by the inode cap: ~0.1 s at most on the test host, on the host's thread charged to
  the slot's cpu cgroup on v1, and counted as the job's time: a job whose run plus that cleanup
  overran its timeout timed out) and mounts new ones, so nothing of them, their roots' modes,
  times, xattrs or inode counters included, reaches the next job. Before, a job that made ~900k
  nested directories before its deadline kept its slot wiping for 9 s, which the host waited for
  and then called infra, and an ``exec`` job's chain was removed on the host as root outside any
  cgroup (15 s of host CPU). Message queues are unlinked; SysV IPC objects left over restart the
  slot. Unix sockets in flight in a cycle outlive the job's processes until the kernel's collector
  runs, which was after the next job had started (a listening abstract socket sent with MSG_OOB in
  one kept its name, any bytes, in that job's /proc/net/unix and its ``bind`` of the name failing;
  inotify instances in flight with it left that job none): the fork-server runs the collector
  (``_zygote.collect_sockets``) and restarts a slot where sockets remain.
  /dev/mqueue itself is read-only: its root is the slot uid's, and a job's ``chmod`` and ``utime``
  of it (12 mode bits, two 64-bit times) reached the next job. Ownership cannot change (no
  capabilities).
- its fds: 0-3 are memfds of its own job; the fork-server's channel and every other fd are closed.
- the syscalls seccomp allows (``_seccomp.py``): not ptrace, process_vm_*, pidfd_getfd, mount,
  namespaces, keyrings, bpf; prlimit/setpriority/sched_set*/ioprio_set only on itself.
- the processes of its uid: every process of the slot runs as the slot's uid. The fork-server is
  the pid namespace's init (signals from inside are dropped), not dumpable (no /proc/1/mem, fds,
  environ), beyond the reach of the scheduling and rlimit syscalls above, and it checks and
  resets its own rlimits, nice value, affinity and scheduler before each fork
  (refusing the job, which the host then runs in a fresh slot, when it cannot). After each job it
  SIGKILLs and reaps every other process in the namespace, and the host checks by cgroup that only
  bwrap's monitor and the fork-server are left (else the slot is restarted).
- its slot's cells (``_cgroup.Cell``): only a job that asks for them (``run_python(cells=...)``,
  the code runner) gets their fds, to put its untrusted processes in a cgroup of their own and
  kill them by it; every other job closes them before its code runs. They are child cgroups of
  the slot, under its limits; after the job they are thawed and emptied with the rest.
- its slot's cgroup limits: the host rewrites them before each job. What a job does to its slot
  while it runs is its own failure: a slot it drives out of memory, or whose bookkeeping breaks
  after the fork, or a fork-server that does not answer past the deadline (recycled, not waited
  for), is restarted and the job reported as the program's error, never as ``infra_error``. A
  restart first unmounts the job's file systems, whose pages stay charged to the slot until then:
  a job allowed more than the pool's default memory that filled them and got the fork-server
  OOM-killed left the restart unable to write the default limit (EBUSY), and every later job of
  the slot an infra error.
- its own failure never becomes infra by looking starved (``_starve.py``, issue 21). A job that
  idled to just before its deadline and then forked spinners pinned to one CPU looked starved
  from the inside and got ``infra_error``. Starvation is now the host's to prove: a probe of the
  pool's own, in a sibling cgroup, after the job is dead; and a starved job gets one rerun whose
  verdict stands, so it is never an infra error.
- a host's memory shortage is not its out-of-memory error (``_starve.HOST_OOM``): the OOM killer
  takes sandboxed jobs first (``oom_score_adj`` 1000), and a job it killed while its slot's own
  limit was never hit gets one rerun whose verdict stands.

Timing-dependent rules, each with its margin, each tested idle and beside a nice-19 spinner per CPU
(``_probes_fair.cpu_hogs``; tests/sandbox/test_starvation.py, test_fresh_fs.py):

- starvation (``_starve.py``): the job-side filter needs under 50% of the CPU budget used and a wait
  over 30% of the timeout and over the job's CPU time (a self-starving job waits at most its own CPU
  time: 0.33 s against 0.37 s); the host's probe decides at a share of 0.4 (idle ~1.0, every CPU busy
  at the same priority 0.5-0.66, another pool's spinners on every CPU ~0.2-0.37, the tests' nice -10
  hogs ~0.05); one rerun, which stands: once the probe recovers (``recover_s``, 4 s at least), its
  wall time stretched by the probe's last share (at most 3x).
- the fork-server's reply: ``KILL_GRACE_S`` (2 s) past a job's deadline, then the host kills the
  job itself and waits ``REPLY_GRACE_S`` (2 s) more before recycling the slot; the job is the
  program's timeout either way, never infra. A job's cleanup is charged to it: what runs past its
  deadline beyond ``FREE_GRACE_S`` (0.05 s) makes it a timeout.
- a job's file systems are freed by the kernel in bounded time (~0.1 s of CPU at the inode cap):
  the call of a job that left a chain as deep as it could make returns within ``WIPE_MARGIN_S``
  (3 s) of an idle job's call of the same timeout, run just before (``slow_wipe``; measured
  against the idle job, not the clock, so a loaded host slows both; in one of three such pairs, as
  load on a busy host is uneven and the chain's own cost is not).
- a killed job's processes: gone within 5 s, or, those already exiting (``PF_EXITING``: the kernel
  taking the job's own mounts down, charged to its cgroup), within ``EXIT_WAIT_S`` (60 s) more;
  only a survivor past those is infra ("processes of the job survived SIGKILL").
- an ``exec`` job's sandbox has ``START_S`` (30 s) to start (bwrap's namespaces and mounts, a
  workspace's overlay), and the job's timeout counts from its start: a busy host's slow start is
  never the job's timeout, nor infra short of that. A sandbox (or a fork-server slot's restart)
  that did not start in its 30 s while the host's probe is overloaded is the host's doing: the job,
  none of whose code ran, runs once the host recovers, and that run's verdict stands
  (``_pool._judged``; CI saw a slot restart beside nice -20 hogs pass its 30 s). A workspace's
  job too (``_starve.NOT_STARTED``): one that started is never rerun (its layers keep what it
  did), but one whose sandbox did not start changed nothing.

An ``exec`` job is a fresh sandbox of its own; a ``Workspace`` job also runs in the workspace's
own cgroups on the workspace's own tmpfs (storage charged to the workspace, with its own limit),
with its layers mounted by paths relative to the workspace, so it sees no host path. It enters
/work after the sandbox is up: a job that made the workspace's /work unreadable (``chmod 000``)
fails its later jobs there itself (exit 2), where bwrap's own chdir made each an infra error. The
host-side pool never follows what a job wrote: it opens only regular files (non-blocking),
deletes without recursion, and tells live pools from stale ones by a lock, not a pid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from posttrain.sandbox._pool import MAX_POOL_SIZE, LocalSandboxPool
from posttrain.sandbox._types import ExecOutcome, Execution, Limits, usable_cpus
from posttrain.sandbox.errors import (
    HostCannotIsolate,
    LimitsError,
    PoolClosed,
    SandboxError,
    WorkspaceError,
    WorkspaceFileMissing,
    WorkspaceFileTooLarge,
)
from posttrain.sandbox.workspace import Workspace

__all__ = [
    "SandboxPool",
    "LocalSandboxPool",
    "MAX_POOL_SIZE",
    "Limits",
    "Execution",
    "ExecOutcome",
    "open_pool",
    "usable_cpus",
    "Workspace",
    "SandboxError",
    "HostCannotIsolate",
    "LimitsError",
    "WorkspaceError",
    "WorkspaceFileMissing",
    "WorkspaceFileTooLarge",
    "PoolClosed",
]


@runtime_checkable
class SandboxPool(Protocol):
    """What every sandbox backend implements (local here; a Ray-actor pool for scale-out)."""

    def run_python(
        self,
        source: str | bytes,
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
    ) -> Execution: ...

    def exec(
        self,
        cmd: Sequence[str],
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
        hide: Sequence[str] = (),
    ) -> Execution: ...

    def close(self) -> None: ...

    def __enter__(self) -> SandboxPool: ...

    def __exit__(self, *exc: object) -> None: ...


def open_pool(size: int | None = None, **kwargs: object) -> LocalSandboxPool:
    """Start a local pool of ``size`` slots (default: the CPUs this process may use).

    Raises ``HostCannotIsolate`` (naming what is missing and how to fix it) when this host cannot
    provide the isolation; there is no fallback to weaker isolation.
    """
    return LocalSandboxPool(size, **kwargs)  # type: ignore[arg-type]

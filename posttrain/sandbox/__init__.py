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
- identity: uid/gid 65534 inside *and outside* (the launcher drops root before bwrap), all
  capabilities dropped, no_new_privs, new session (no TIOCSTI into the host terminal).
- file system: only /usr (read-only) plus /lib, /bin symlinks, a fresh /proc of the job's pid
  namespace, a minimal read-only /dev, size-capped tmpfs /tmp and /dev/shm, and /work (the
  workspace) writable. No /etc, no /home, no /root, no host /tmp; nothing else is writable.
- environment: cleared (PATH, HOME, TMPDIR, LANG only); no host variable leaks in.
- resources: per-slot cgroup memory (+swap), pids and cpu quota (v1 or v2, under this process's
  own cgroup); rlimits on CPU time, file size, open files, core dumps.
- syscalls: seccomp denies network sockets other than AF_UNIX, ptrace, mount, namespace
  creation, keyctl, bpf, perf_event_open, io_uring, module/kexec, TIOCSTI (``_seccomp.py``).
- lifetime: a wall-clock timeout kills the job's process group and everything in its slot;
  after every job all of its processes are killed and its writable places wiped; outputs are
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
- covert channels between jobs of one slot through kernel counters (pid and inode numbers,
  /proc/loadavg, timing): a job can tell that jobs ran before it, not what they read or wrote.

Between jobs (the threat model for model-written code that shares a slot with the jobs after
it; issue 15). What a fork-server job can reach, and why none of it changes another job's result:

- its memory: a fork of a fork-server that never reads a job's program, stdin or outputs (they
  cross as memfds made by the host; the job's own process reads its program after the fork, the
  host reads the outputs). Frames, ``gc.get_objects()`` and the raw heap hold this module's code
  and the numbers of earlier jobs' headers (limits, exit status, duration), no byte of their data,
  and none of the job's own stdin until it reads it.
- its slot's file systems: /work, /tmp, /dev/shm (tmpfs) and /dev/mqueue. After the job they are
  emptied without recursion (``_wipe.py``: depth, PATH_MAX and 000 modes do not matter) and the
  roots' mode, timestamps, inode flags and ``user.*`` xattrs are put back and checked; message
  queues are unlinked; SysV IPC objects left over restart the slot. Ownership cannot change
  (no capabilities).
- its fds: 0-3 are memfds of its own job; the fork-server's channel and every other fd are closed.
- the syscalls seccomp allows (``_seccomp.py``): not ptrace, process_vm_*, pidfd_getfd, mount,
  namespaces, keyrings, bpf; prlimit/setpriority/sched_set*/ioprio_set only on itself.
- the processes of its uid: every process of the slot runs as uid 65534. The fork-server is the
  pid namespace's init (signals from inside are dropped), not dumpable (no /proc/1/mem, fds,
  environ), beyond the reach of the scheduling and rlimit syscalls above, and it checks and
  resets its own rlimits, nice value, affinity and scheduler before each fork
  (refusing the job, which the host then runs in a fresh slot, when it cannot). After each job it
  SIGKILLs and reaps every other process in the namespace.
- its slot's cgroup limits: the host rewrites them before each job. What a job does to its slot
  while it runs is its own failure: a slot it drives out of memory, or whose bookkeeping breaks
  after the fork, is restarted and the job reported as the program's error, never as
  ``infra_error``. The one exception is a job that ran out of wall-clock time while starved of
  CPU by the host (little CPU time, much time runnable but waiting: ``_pool._starved``), which is
  infra and may be retried.

An ``exec`` job is a fresh sandbox of its own; a ``Workspace`` job also runs in the workspace's
own cgroups on the workspace's own tmpfs (storage charged to the workspace, with its own limit),
with its layers mounted by paths relative to the workspace, so it sees no host path. The
host-side pool never follows what a job wrote: it opens only regular files (non-blocking),
deletes without recursion, and tells live pools from stale ones by a lock, not a pid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from posttrain.sandbox._pool import LocalSandboxPool
from posttrain.sandbox._types import ExecOutcome, Execution, Limits, usable_cpus
from posttrain.sandbox.errors import HostCannotIsolate, LimitsError, PoolClosed, SandboxError, WorkspaceError
from posttrain.sandbox.workspace import Workspace

__all__ = [
    "SandboxPool",
    "LocalSandboxPool",
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

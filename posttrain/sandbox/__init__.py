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
- fork-server jobs of one slot run one after another in the same namespaces: no process or
  file survives between them, but kernel-level state of the namespace (e.g. its loopback
  config) is shared; a slot that cannot be wiped clean is restarted. The fork-server path
  imports common stdlib modules before forking, so ``sys.modules`` is not pristine.
- disk I/O bandwidth is not metered. Disk *space* is: every writable place is a tmpfs (the
  slot's, or the pool's private tmpfs holding ``exec`` and ``Workspace`` directories), whose
  pages are charged to the writing job's memory cgroup; RLIMIT_FSIZE caps single files.
- a ``Workspace`` built from a host directory mounts it read-only as its bottom layer, so the
  job can read every file in it that uid 65534 may read.
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

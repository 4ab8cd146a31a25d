"""The local sandbox pool: fork-server slots for Python, one bwrap launch per job for anything else.

Each of ``size`` zygote slots is one long-lived bwrap sandbox (own namespaces, own cgroups)
running ``_zygote.py`` as its pid 1; a job is a fork of that warm interpreter. Each of ``size``
exec slots is a set of cgroups that ``exec`` launches a fresh bwrap sandbox into, per job.
Slots are handed out through queues, so any number of threads may submit jobs; a slot runs one
job at a time, which is what lets the slot's cgroup limits be the job's limits.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import queue
import secrets
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from posttrain.sandbox import _launch
from posttrain.sandbox._cgroup import CgroupLayout, SlotCgroup, detect_layout, reap
from posttrain.sandbox._pump import Capture, FrameError, close_all, pump, send_frame, wait_for
from posttrain.sandbox._seccomp import seccomp_bpf, seccomp_fd
from posttrain.sandbox._types import Execution, Limits, check_timeout, classify, usable_cpus
from posttrain.sandbox._wipe import remove_tree
from posttrain.sandbox.errors import HostCannotIsolate, LimitsError, PoolClosed

_MiB = 1 << 20
KILL_GRACE_S = 2.0  # after a job's deadline, how long the host waits for the fork-server to end it
ZYGOTE_OVERHEAD = 48 * _MiB  # the fork-server's own memory, charged to the same slot cgroup
SLOT_TMP_BYTES = 256 * _MiB  # tmpfs /work, /tmp, /dev/shm of a zygote slot (memory-backed, so cgroup-bounded)


def _normalize_files(files: Mapping[str, bytes | str] | None) -> tuple[list[str], list[bytes]]:
    names, blobs = [], []
    for name, data in (files or {}).items():
        p = PurePosixPath(name)
        if (
            not name
            or not p.parts
            or p.is_absolute()
            or ".." in p.parts
            or name.endswith("/")
            or "\0" in name
        ):
            raise LimitsError(f"files: {name!r} must be a relative path inside the workspace, without '..'")
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, bytes | bytearray):
            raise LimitsError(f"files[{name!r}] must be bytes or str, got {type(data).__name__}")
        names.append(str(p))
        blobs.append(bytes(data))
    taken = set(names)
    for name in names:
        for parent in PurePosixPath(name).parents:
            if str(parent) in taken:
                raise LimitsError(
                    f"files: {name!r} needs {str(parent)!r} to be a directory, but it is also a file"
                )
    return names, blobs


def _stdin_bytes(stdin: bytes | str | None) -> bytes:
    if stdin is None:
        return b""
    return stdin.encode() if isinstance(stdin, str) else bytes(stdin)


def _cpu_seconds(limits: Limits, timeout: float) -> int:
    return max(1, int(limits.cpu_time_s if limits.cpu_time_s is not None else timeout + 1))


def _memfd(name: str) -> int:
    return os.memfd_create(name, os.MFD_CLOEXEC)


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to a fresh memfd and rewind it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)


def _read_capped(fd: int, cap: int) -> tuple[bytes, bool, int]:
    """(at most ``cap`` bytes from offset 0, whether there were more, size) of a job's memfd."""
    size = os.fstat(fd).st_size
    want, parts = min(size, cap), []
    while want > 0:
        chunk = os.pread(fd, min(want, 1 << 20), sum(map(len, parts)))
        if not chunk:
            break
        parts.append(chunk)
        want -= len(chunk)
    return b"".join(parts), size > cap, size


class _Retry(Exception):
    """The slot failed before the job started: restart it and run the job there once more."""


class _ZygoteSlot:
    """One warm fork-server sandbox; restarted on anomaly or every ``recycle_every`` jobs.

    Jobs cross to the fork-server as a header of numbers plus six memfds made here (source,
    files, stdin, stdout, stderr, report) over a SOCK_SEQPACKET socket; the outputs are read here, so
    the fork-server never holds a byte of any job's input or output (see ``_zygote.py``).
    """

    def __init__(self, pool: LocalSandboxPool, index: int) -> None:
        self.pool = pool
        self.cg = SlotCgroup(pool.layout, f"{pool.cg_prefix}-z{index}")
        self.pid: int | None = None
        self.chan: socket.socket | None = None
        self.log: tempfile._TemporaryFileWrapper | None = None
        self.jobs = 0
        self.oom_seen = 0
        self.keep: set[int] = set()  # host pids of bwrap's monitor and the fork-server

    def start(self) -> None:
        self.cg.set_limits(self.pool.default_limits.memory_mb * _MiB + ZYGOTE_OVERHEAD, 256, 1.0)
        chan, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile(prefix="posttrain-zygote-")
        sfd = seccomp_fd(self.pool.bpf)
        work = ["--size", str(SLOT_TMP_BYTES), "--tmpfs", "/work"]
        opts = _launch.bwrap_args(
            work=work,
            tmp_bytes=SLOT_TMP_BYTES,
            seccomp_fd=4,
            extra=_launch.zygote_mounts(self.pool.zygote_dir),
            as_pid_1=True,
        )
        cmd = [self.pool.tools.python, "-I", "-S", "-B", "/sbx/_zygote.py"]
        argv = _launch.launcher_argv(
            self.pool.tools, self.cg.procs_files, opts, cmd, cpu_s=None, fsize=None, nofile=4096
        )
        try:
            # bwrap --die-with-parent watches the spawning *thread*: spawn from the pool's
            # long-lived spawner thread, not from whichever caller thread restarts the slot.
            fds = {0: theirs.fileno(), 1: theirs.fileno(), 2: self.log.fileno(), 4: sfd}
            self.pid = self.pool.spawner.submit(_launch.spawn, argv, fds).result()
        finally:
            theirs.close()
            os.close(sfd)
        self.chan = chan
        try:
            header = self._recv(time.monotonic() + 30)
        except FrameError as e:
            detail = self.diagnostics()
            self.stop()
            raise HostCannotIsolate(
                f"the sandbox slot did not start ({e}): {detail}; if bwrap cannot create namespaces, enable "
                "unprivileged user namespaces (`sysctl -w user.max_user_namespaces=10000` and, on Debian/Ubuntu, "
                "`sysctl -w kernel.unprivileged_userns_clone=1`; AppArmor: "
                "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)"
            ) from e
        self.jobs = 0
        self.oom_seen = self.cg.oom_kills()
        self.keep = set(self.cg.pids_inside())
        if not header.get("ready"):
            self.stop()
            raise HostCannotIsolate(f"the sandbox slot sent an unexpected greeting: {header}")

    def _recv(self, deadline: float) -> dict:
        assert self.chan is not None
        if not wait_for(self.chan.fileno(), select.POLLIN, max(0.0, deadline - time.monotonic())):
            raise FrameError("timed out waiting for the fork-server")
        msg = self.chan.recv(1 << 16)
        if not msg:
            raise FrameError("the fork-server closed its channel")
        try:
            reply = json.loads(msg)
        except ValueError as e:
            raise FrameError(f"malformed reply: {e}") from e
        if not isinstance(reply, dict):
            raise FrameError("malformed reply")
        return reply

    def diagnostics(self) -> str:
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read()[-2000:].decode(errors="replace").strip() or "(no output)"

    def stop(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.cg.kill_all()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None
        if self.chan is not None:
            self.chan.close()
            self.chan = None
        if self.log is not None:
            self.log.close()
            self.log = None

    def kill_job(self) -> int:
        """SIGKILL every process in the slot but bwrap's monitor and the fork-server.

        The fork-server ends a job at its deadline itself; this is for when it could not, e.g.
        starved while the job thrashes the slot's memory (seen on cgroup v2: reclaim of the
        fork-server's own pages stalled it for seconds). It then reaps the job and replies.
        Returns how many processes were signalled."""
        if len(self.keep) != 2:  # could not tell them apart at start: leave it to the fork-server
            return 0
        killed = 0
        for pid in set(self.cg.pids_inside()) - self.keep:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        return killed

    def run(self, source: bytes, names: list[str], blobs: list[bytes], stdin: bytes, timeout: float,
            limits: Limits) -> Execution:  # fmt: skip
        for attempt in (0, 1):
            try:
                return self._run_once(source, names, blobs, stdin, timeout, limits)
            except _Retry as e:
                self.stop()
                if attempt:
                    return Execution.infra(f"the fork-server could not start the job twice: {e}")
        raise AssertionError("unreachable")

    def _run_once(self, source: bytes, names: list[str], blobs: list[bytes], stdin: bytes, timeout: float,
                  limits: Limits) -> Execution:  # fmt: skip
        if self.pid is None:
            self.start()
        # +2: the slot also holds bwrap's monitor process and the fork-server itself.
        self.cg.set_limits(limits.memory_mb * _MiB + ZYGOTE_OVERHEAD, limits.pids + 2, limits.cpu_cores)
        header = {
            "timeout": timeout,
            "cpu_s": _cpu_seconds(limits, timeout),
            "fsize": limits.file_size_mb * _MiB,
            "nofile": limits.open_files,
            "n_files": len(names),
        }
        fds = [_memfd(name) for name in ("source", "files", "stdin", "stdout", "stderr", "report")]
        try:  # read by the job's own process, after the fork
            _write_all(fds[0], source)
            if names:
                send_frame(fds[1], {"files": names}, blobs)
                os.lseek(fds[1], 0, os.SEEK_SET)
            _write_all(fds[2], stdin)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        t0 = time.monotonic()
        try:
            try:
                socket.send_fds(self.chan, [json.dumps(header).encode()], fds)
            except OSError as e:  # the slot died between jobs: nothing of this job has run
                raise _Retry(f"fork-server slot gone: {e}") from e
            killed = 0
            if not wait_for(self.chan.fileno(), select.POLLIN, timeout + KILL_GRACE_S):
                killed = self.kill_job()
            try:
                reply = self._recv(t0 + timeout + 10)
            except FrameError as e:
                return self._slot_died(e, fds, limits, time.monotonic() - t0)
            return self._result(reply, killed, fds, timeout, limits, time.monotonic() - t0)
        finally:
            for fd in fds:
                os.close(fd)

    def _slot_died(self, e: Exception, fds: list[int], limits: Limits, duration: float) -> Execution:
        """The fork-server died or hung during a job. Out of memory in the slot is the job's doing
        (its files and processes filled the slot until the kernel killed the fork-server too);
        anything else (a kill from outside, a host problem) is an infra error."""
        detail = f"fork-server slot failed: {e}; {self.diagnostics()}"
        oom = self.cg.oom_kills() > self.oom_seen
        self.stop()
        if not oom:
            return Execution.infra(detail, duration_s=duration)
        return self._execution(fds, limits, exit_code=None, sig=signal.SIGKILL, timed_out=False, oom=True,
                               duration=duration, peak=None)  # fmt: skip

    def _result(self, reply: dict, killed: int, fds: list[int], timeout: float, limits: Limits,
                duration: float) -> Execution:  # fmt: skip
        self.jobs += 1
        if "zygote_error" in reply:
            raise _Retry(f"fork-server error: {reply['zygote_error']}")
        if not reply.get("clean", False) or self.jobs >= self.pool.recycle_every:
            self.stop()  # restarted lazily by the next job
        oom_now = self.cg.oom_kills()  # one read per job: the count after the last job is cached
        oom, self.oom_seen = oom_now > self.oom_seen, oom_now
        if "slot_error" in reply:  # what broke the slot after the fork is the job's doing
            self.stop()
            return self._execution(fds, limits, exit_code=None, sig=signal.SIGKILL, timed_out=False, oom=oom,
                                   duration=duration, peak=None)  # fmt: skip
        # Killed here past its deadline: timed out, even if the fork-server saw only the death.
        exit_code, sig, timed_out = reply["exit_code"], reply["signal"], bool(reply["timed_out"]) or killed > 0
        if timed_out and _starved(reply, timeout, limits):
            return _starved_infra(reply, timeout, float(reply["duration_s"]))
        return self._execution(fds, limits, exit_code=exit_code, sig=sig, timed_out=timed_out, oom=oom,
                               duration=float(reply["duration_s"]), peak=int(reply["maxrss"]))  # fmt: skip

    @staticmethod
    def _execution(fds: list[int], limits: Limits, *, exit_code: int | None, sig: int | None, timed_out: bool,
                   oom: bool, duration: float, peak: int | None) -> Execution:  # fmt: skip
        cap = limits.output_bytes
        (out, out_cut, _), (err, err_cut, _), (rep, rep_cut, rep_size) = (_read_capped(fd, cap) for fd in fds[3:])
        return Execution(
            outcome=classify(exit_code, sig, timed_out, oom),
            exit_code=exit_code,
            signal=sig,
            stdout=out,
            stderr=err,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            duration_s=duration,
            peak_memory_bytes=peak,
            timed_out=timed_out,
            oom_killed=oom,
            report=rep if rep_size else None,
            report_truncated=rep_cut,
        )


def _sched_of(cg: SlotCgroup) -> dict:
    """What ``_starved`` needs, for the processes of an exec slot (the fork-server measures its
    own jobs): their CPU time (with that of the children they reaped), the longest any of them
    waited runnable for a CPU, and whether that one runs at a lower priority than this process."""
    tick = os.sysconf("SC_CLK_TCK")
    base = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
    with open("/proc/uptime", "rb") as f:
        now = float(f.read().split()[0])
    cpu, delay, alive, lowered = 0.0, 0.0, 1.0, False
    for pid in cg.pids_inside():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # fields[0] is stat field 3
            with open(f"/proc/{pid}/schedstat", "rb") as f:
                run_delay = int(f.read().split()[1]) / 1e9
            cpu += sum(int(x) for x in fields[11:15]) / tick  # utime, stime, cutime, cstime
            life = max(now - int(fields[19]) / tick, 0.01)  # it may have started late: its own lifetime
            if run_delay / life >= delay / alive:  # the process that waited for a CPU the most
                delay, alive, lowered = run_delay, life, (int(fields[16]), int(fields[38])) != base  # nice, policy
        except (OSError, ValueError, IndexError):
            continue
    return {"cpu_s": cpu, "run_delay_s": delay, "alive_s": alive, "deprioritized": lowered}


def _starved_infra(sched: dict, timeout: float, duration: float) -> Execution:
    return Execution.infra(
        f"the job ran out of wall-clock time while starved of CPU: {sched['cpu_s']:.2f} s of CPU and "
        f"{sched['run_delay_s']:.2f} s waiting for one in {timeout} s (the host is overloaded)",
        duration_s=duration,
    )


def _starved(reply: dict, timeout: float, limits: Limits) -> bool:
    """Whether a job that ran out of wall-clock time was starved by the host rather than slow.

    Blame is decided by CPU time: a job that used at least a quarter of the CPU its quota allowed in
    that time burned its budget (its failure); one that got less, and one of whose processes spent
    most of its life runnable but waiting for a CPU, was starved (infra, retried by the caller).
    A job that slept, or whose waiting process lowered its own priority, is never starved.
    """
    budget = timeout * min(limits.cpu_cores, 1.0)
    return (
        not reply.get("deprioritized", True)
        and float(reply.get("cpu_s", budget)) < 0.25 * budget
        and float(reply.get("run_delay_s", 0.0)) > 0.5 * float(reply.get("alive_s", timeout))
    )


@dataclass(frozen=True)
class _Room:
    """Where a workspace's jobs run: its own cgroups (limit: the job's memory plus the
    workspace's storage) and a launcher prefix that mounts its layers (``_launch.overlay_wrap``)."""

    cg: SlotCgroup
    storage_mb: int
    wrap: list[str]


class _ExecSlot:
    """The cgroups one ``exec`` job at a time is launched into."""

    def __init__(self, pool: LocalSandboxPool, index: int) -> None:
        self.pool = pool
        self.cg = SlotCgroup(pool.layout, f"{pool.cg_prefix}-x{index}")

    def run(self, cmd: list[str], work: list[str], stdin: bytes, timeout: float, limits: Limits,
            room: _Room | None = None) -> Execution:  # fmt: skip
        """Run one job in this slot's cgroups, or in ``room``'s (a workspace's own cgroups and
        mounts: what its jobs keep is charged there, not to whichever slot ran last)."""
        cg = room.cg if room is not None else self.cg
        extra_mb = room.storage_mb if room is not None else 0
        cg.set_limits((limits.memory_mb + extra_mb) * _MiB, limits.pids + 4, limits.cpu_cores)
        cg.reset_peak()
        oom_before = cg.oom_kills()
        # sh is the namespace's pid 1 (--as-pid-1) and runs the command as its child. bwrap's own
        # init would do the same, but bwrap's monitor exits without reaping that init, leaving a
        # zombie for the host's pid 1 to reap (if it ever does), charged to this slot's pids limit
        # meanwhile: one per job, so a busy slot ran out of pids. sh reports a command killed by
        # signal N as exit status 128 + N, as bwrap's init did. The marker proves the sandbox was
        # set up and the command is starting; fds 4 (seccomp) and 5 (marker) are closed first so
        # the program sees only 0-3. (Not ``exec "$@"``: init ignores signals it sends itself.)
        opts = _launch.bwrap_args(work=work, tmp_bytes=limits.tmp_mb * _MiB, seccomp_fd=4, as_pid_1=True)
        marker = ["/bin/sh", "-c", 'printf x >&5 || exit 125; exec 4<&- 5>&-; "$@"; exit $?', "sh", *cmd]
        argv = _launch.launcher_argv(
            self.pool.tools, cg.procs_files, opts, marker,
            cpu_s=_cpu_seconds(limits, timeout), fsize=limits.file_size_mb * _MiB, nofile=limits.open_files,
            wrap=room.wrap if room is not None else (),
        )  # fmt: skip
        pipes = [os.pipe() for _ in range(5)]  # stdin, stdout, stderr, report, marker
        sfd = seccomp_fd(self.pool.bpf)
        child_ends = {0: pipes[0][0], 1: pipes[1][1], 2: pipes[2][1], 3: pipes[3][1], 4: sfd, 5: pipes[4][1]}
        t0 = time.monotonic()
        try:
            pid = _launch.spawn(argv, child_ends)
        except OSError as e:
            for fd in (*child_ends.values(), pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0], pipes[4][0]):
                os.close(fd)
            return Execution.infra(f"cannot spawn the launcher: {e}")
        for fd in child_ends.values():
            os.close(fd)
        reaped: list[int] = []
        try:
            return self._supervise(cg, pid, reaped, pipes, stdin, t0, timeout, limits, oom_before)
        finally:  # whatever happened, nothing of the job survives and the launcher is reaped
            if not reaped:  # (never signal a reaped pid: it may belong to someone else by now)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            cg.kill_all()

    def _supervise(self, cg: SlotCgroup, pid: int, reaped: list[int], pipes: list[tuple[int, int]], stdin: bytes,
                   t0: float, timeout: float, limits: Limits, oom_before: int) -> Execution:  # fmt: skip
        caps = {pipes[i][0]: Capture(limits.output_bytes) for i in (1, 2, 3)}
        mark = Capture(16)
        caps[pipes[4][0]] = mark
        pidfd = os.pidfd_open(pid)
        exited = threading.Event()
        finished = pump(
            caps, stdin_fd=pipes[0][1], stdin_data=stdin, exit_fd=pidfd,
            on_exit=lambda: (exited.set(), cg.kill_all()), deadline=t0 + timeout,
        )  # fmt: skip
        timed_out = not exited.is_set()
        sched: dict = {}
        if timed_out:
            sched = _sched_of(cg)  # before the kill: was it starved of CPU, or slow on its own?
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            cg.kill_all()
        if not finished:
            pump(caps, stdin_fd=None, stdin_data=b"", exit_fd=None, on_exit=lambda: None,
                 deadline=time.monotonic() + 2)  # fmt: skip
            close_all(caps)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        reaped.append(status)
        duration = time.monotonic() - t0
        clean = cg.kill_all()
        out, err, rep = (caps[pipes[i][0]] for i in (1, 2, 3))
        if mark.value() != b"x":
            if timed_out:
                return Execution.infra(f"the sandbox did not start within {timeout}s", duration_s=duration)
            why = err.value()[-2000:].decode(errors="replace").strip()
            return Execution.infra(f"the sandbox did not start (status {status}): {why}", duration_s=duration)
        if not clean:
            return Execution.infra("processes of the job survived SIGKILL", duration_s=duration)
        if timed_out and _starved(sched, timeout, limits):
            return _starved_infra(sched, timeout, duration)
        oom = cg.oom_kills() > oom_before
        code = os.waitstatus_to_exitcode(status)
        # bwrap reports a program killed by signal N as exit status 128 + N.
        exit_code, sig = (code, None) if 0 <= code <= 128 or code > 159 else (None, code - 128)
        if code < 0:
            exit_code, sig = None, -code
        return Execution(
            outcome=classify(exit_code, sig, timed_out, oom),
            exit_code=exit_code,
            signal=sig,
            stdout=out.value(),
            stderr=err.value(),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            duration_s=duration,
            peak_memory_bytes=cg.peak_memory(),
            timed_out=timed_out,
            oom_killed=oom,
            report=rep.value() if rep.touched else None,
            report_truncated=rep.truncated,
        )


class LocalSandboxPool:
    """The local backend of ``SandboxPool``: see the package docstring for what is isolated."""

    def __init__(
        self,
        size: int | None = None,
        *,
        recycle_every: int = 1000,
        python: str | None = None,
        default_limits: Limits | None = None,
        workspace_mb: int = 4096,
    ) -> None:
        size = usable_cpus() if size is None else size
        if not isinstance(size, int) or size < 1:
            raise LimitsError(f"pool size must be a positive integer, got {size!r}")
        if recycle_every < 1:
            raise LimitsError(f"recycle_every must be >= 1, got {recycle_every!r}")
        self.size = size
        self.recycle_every = recycle_every
        self.default_limits = default_limits or Limits()
        self.tools = _launch.find_tools(python)
        self.layout: CgroupLayout = detect_layout()
        self.bpf = seccomp_bpf()
        self._closed = False
        self.spawner = ThreadPoolExecutor(1, thread_name_prefix="posttrain-sandbox-spawner")
        self._lock = threading.Lock()
        _reap_stale(self.layout)
        # The pool's directory, locked for the pool's lifetime. Its name is also the prefix of the
        # slot cgroups, which hold locks of their own (see ``_cgroup``): a neighbour that shares the
        # cgroup tree but not this temp directory tells that they are alive too.
        self._dir, self._dir_lock = _claim_dir()
        self.cg_prefix = self._dir.name
        self._root = self._dir / "root"
        self._root.mkdir(mode=0o711)
        try:
            # exec's workspaces live on a private tmpfs: what a job writes there is charged to its
            # memory cgroup, so it cannot fill the host disk, and the total is capped. (A Workspace
            # mounts a tmpfs of its own below it, with its own size.)
            _mount_tmpfs(self._root, workspace_mb * _MiB)
        except BaseException:
            remove_tree(self._dir)
            os.close(self._dir_lock)
            raise
        self.zygote_dir = _launch.install_zygote(self._root)
        self._zygotes: queue.Queue[_ZygoteSlot] = queue.Queue()
        self._execs: queue.Queue[_ExecSlot] = queue.Queue()
        self._all_z: list[_ZygoteSlot] = []
        self._all_x: list[_ExecSlot] = []
        self.rooms: set[SlotCgroup] = set()  # cgroups of open workspaces, destroyed at close at the latest
        try:
            for i in range(size):
                x = _ExecSlot(self, i)
                self._all_x.append(x)
                self._execs.put(x)
                z = _ZygoteSlot(self, i)
                self._all_z.append(z)
            self._start_zygotes()
        except BaseException:
            self.close()
            raise
        ref = weakref.ref(self)
        atexit.register(lambda: (pool := ref()) is not None and pool.close())

    def _start_zygotes(self) -> None:
        errors: list[BaseException] = []

        def start(z: _ZygoteSlot) -> None:
            try:
                z.start()
            except BaseException as e:  # collected and re-raised in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=start, args=(z,)) for z in self._all_z]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for z in self._all_z:
            self._zygotes.put(z)

    def __enter__(self) -> LocalSandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the sandbox pool is closed")

    def run_python(
        self,
        source: str | bytes,
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
    ) -> Execution:
        """Run ``source`` as ``__main__`` in a fork of a warm interpreter inside a sandbox slot."""
        self._check_open()
        timeout = check_timeout(timeout)
        limits = limits or self.default_limits
        names, blobs = _normalize_files(files)
        src = source.encode() if isinstance(source, str) else bytes(source)
        slot = self._zygotes.get()
        try:
            if self._closed:
                return Execution.infra("the pool was closed while the job waited")
            try:
                return slot.run(src, names, blobs, _stdin_bytes(stdin), timeout, limits)
            except HostCannotIsolate as e:
                return Execution.infra(f"the slot could not restart: {e}")
            except (OSError, KeyError, TypeError, ValueError) as e:  # a cgroup write failed, or a bad reply
                slot.stop()
                return Execution.infra(f"slot error: {type(e).__name__}: {e}")
        finally:
            self._zygotes.put(slot)

    def exec(
        self,
        cmd: Sequence[str],
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
    ) -> Execution:
        """Run ``cmd`` (argv; PATH is /usr/local/bin:/usr/bin:/bin) in a fresh sandbox, cwd /work."""
        self._check_open()
        ws = self._new_dir()
        try:
            names, blobs = _normalize_files(files)
            for name, data in zip(names, blobs, strict=True):
                path = ws / name
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                except OSError as e:  # e.g. both "a" and "a/b" given
                    raise LimitsError(f"files: cannot write {name!r}: {e.strerror}") from e
            _chown_tree(ws)
            return self.exec_in(
                cmd, ["--bind", str(ws), "/work"], stdin=stdin, timeout=timeout, limits=limits
            )
        finally:
            remove_tree(ws)

    def exec_in(
        self,
        cmd: Sequence[str],
        work: list[str],
        *,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
        room: _Room | None = None,
    ) -> Execution:
        """``exec`` with explicit bwrap options for /work; a workspace passes its own ``room``."""
        self._check_open()
        timeout = check_timeout(timeout)
        limits = limits or self.default_limits
        cmd = list(cmd)
        if not cmd or not all(isinstance(c, str) and c and "\0" not in c for c in cmd):
            raise LimitsError(f"cmd must be a non-empty list of non-empty strings, got {cmd!r}")
        slot = self._execs.get()
        try:
            return slot.run(cmd, work, _stdin_bytes(stdin), timeout, limits, room)
        except OSError as e:
            return Execution.infra(f"exec slot error: {e}")
        finally:
            self._execs.put(slot)

    def _new_dir(self) -> Path:
        d = self._root / secrets.token_hex(8)
        d.mkdir(mode=0o700)
        os.chown(d, _launch.SANDBOX_UID, _launch.SANDBOX_UID)
        return d

    @property
    def root(self) -> Path:
        """A root-owned 0711 directory for this pool's host-side workspaces."""
        return self._root

    def close(self) -> None:
        """Stop every slot, kill what is left in its cgroups and remove them. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for z in self._all_z:
            z.stop()
            z.cg.destroy()
        for x in self._all_x:
            x.cg.destroy()
        _unmount_and_remove(self._root)  # (lazily: workspace file systems mounted below go too)
        for cg in list(self.rooms):
            cg.destroy()
        remove_tree(self._dir)  # the lock file goes too: its open fd keeps the lock until closed
        os.close(self._dir_lock)
        self.spawner.shutdown(wait=False)


def _chown_tree(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(
                os.path.join(dirpath, name), _launch.SANDBOX_UID, _launch.SANDBOX_UID, follow_symlinks=False
            )


LOCK_FILE = "lock"
STALE_UNLOCKED_S = 60.0  # a pool directory without a lock file this old was left by a crash while starting


def _claim_dir() -> tuple[Path, int]:
    """Create this pool's directory in the temp dir; return it and the fd holding its lock.

    The lock file is created and locked under a temporary name and then renamed into place, so a
    ``lock`` file that another process can lock always means its pool is gone. The lock is an
    ``flock`` on an open file description that only this process holds (close-on-exec), so it is
    released by the kernel when the process exits, however it exits, in any pid namespace.
    """
    tmp = Path(tempfile.gettempdir())
    while True:
        d = tmp / f"posttrain-sbx-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            d.mkdir(mode=0o711)
        except FileExistsError:
            continue
        break
    fd = os.open(d / ".lock-new", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(d / ".lock-new", d / LOCK_FILE)
    return d, fd


@contextlib.contextmanager
def _dir_unowned(pool_dir: Path) -> Iterator[bool]:
    """Yields True while holding the lock of a pool directory whose pool is gone; False when its
    pool is alive, may be (a directory still being created), or the directory is not there."""
    try:
        fd = os.open(pool_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            age = time.time() - pool_dir.lstat().st_mtime
        except FileNotFoundError:
            yield False
            return
        yield age > STALE_UNLOCKED_S
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _dir_owned(pool_dir: Path) -> bool:
    """Whether ``pool_dir`` is there and its pool is alive (or may be)."""
    with _dir_unowned(pool_dir) as unowned:
        return not unowned and pool_dir.is_dir()


def _is_ours(name: str) -> bool:
    parts = name.split("-")
    return len(parts) >= 4 and parts[:2] == ["posttrain", "sbx"] and parts[2].isdigit()


def _reap_stale(layout: CgroupLayout) -> None:
    """Remove the host directories and the cgroups of pools that are gone.

    Liveness is a lock, never a pid (a pid names another process, or none, in another pid
    namespace) and never the presence of a path in another tree. A pool directory in the temp
    directory is removed (its tmpfs unmounted) while holding its ``lock`` file's flock, which its
    pool holds for its lifetime. A cgroup ``posttrain-sbx-…`` is removed only while holding the
    flock on the cgroup directory itself, which its pool holds for as long as the cgroup exists,
    and only when it is empty; nothing in it is ever signalled (``_cgroup.reap``). So a neighbour
    that shares the cgroup tree but has a temp directory of its own (another TMPDIR, a container
    with its own /tmp) keeps its cgroups, and a cgroup whose pool directory this process cannot
    see is not presumed dead. A cgroup whose pool directory is here and locked is left alone too
    (pools of earlier versions did not lock their cgroups).
    """
    tmp = Path(tempfile.gettempdir())
    dirs: list[Path] = []
    with contextlib.suppress(OSError):
        dirs = [e for e in tmp.iterdir() if _is_ours(e.name) and e.is_dir() and not e.is_symlink()]
    for d in dirs:
        with _dir_unowned(d) as unowned:
            if unowned:
                _unmount_and_remove(d / "root")
                _unmount_and_remove(d)  # (pools before the lock mounted their tmpfs here)
    for parent in set(layout.parents.values()):
        entries: list[Path] = []
        with contextlib.suppress(OSError):
            entries = [e for e in parent.iterdir() if _is_ours(e.name)]
        for cg in entries:
            if not _dir_owned(tmp / cg.name.rsplit("-", 1)[0]):
                reap(cg)


def _mount_tmpfs(path: Path, size_bytes: int, owner: str = "mode=0711") -> None:
    r = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={size_bytes},{owner},nosuid,nodev",
            "posttrain-sandbox",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        path.rmdir()
        raise HostCannotIsolate(
            f"cannot mount the workspace tmpfs on {path}: {r.stderr.strip()}; fix: run as root"
        )


def _unmount_and_remove(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
    if not os.path.ismount(path):  # never descend into a file system we failed to detach
        remove_tree(path)

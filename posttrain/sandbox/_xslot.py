"""An exec slot: the cgroups (and the host uid) that one ``exec`` job at a time is launched into.

Each job is a fresh bwrap sandbox with fresh file systems of its own at /work, /tmp and /dev/shm
(``_fs.JobPlaces``: tmpfs mounted for the job, unmounted after it; the kernel frees what the job
wrote in bounded time, on this thread charged to the slot's cpu cgroup on v1, and that time counts
as the job's). A workspace's job (``room``) runs in the workspace's own cgroups, as its uid, with
its overlay at /work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from posttrain.sandbox import _launch
from posttrain.sandbox._cgroup import SlotCgroup
from posttrain.sandbox._fs import JobPlaces, write_exact
from posttrain.sandbox._hide import hide_args
from posttrain.sandbox._pump import Capture, close_all, pump
from posttrain.sandbox._seccomp import seccomp_fd
from posttrain.sandbox._starve import HOST_OOM, NOT_STARTED, Rerun, maybe_starved, sched_of
from posttrain.sandbox._types import Execution, Limits, classify, cpu_seconds
from posttrain.sandbox._uids import claim_uid
from posttrain.sandbox._wipe import remove_tree
from posttrain.sandbox._zslot import FREE_GRACE_S, _oom

if TYPE_CHECKING:
    from posttrain.sandbox._pool import LocalSandboxPool

_MiB = 1 << 20
START_S = 30.0
"""How long a job's sandbox may take to start (bwrap's namespaces and mounts, a workspace's overlay)
before the job is an infra error. The job's timeout counts from its start: beside the sandbox suite
at -n 3 a 2 s job's sandbox once took over 2 s to start, and the job was an infra error for the host's
slowness ("did not start within 2.0s")."""


@dataclass(frozen=True)
class Room:
    """Where a workspace's jobs run: its own cgroups (limit: the job's memory plus ``kept_mb``, what
    the workspace's layers may hold in memory: their bytes and their inodes' kernel memory), its own
    uid, the bwrap options that mount its overlay at /work, and a launcher prefix that mounts its
    layers (``_launch.overlay_wrap``)."""

    cg: SlotCgroup
    uid: int
    kept_mb: int
    work: list[str]
    wrap: list[str]


class ExecSlot:
    """The cgroups and uid one ``exec`` job at a time is launched into."""

    def __init__(self, pool: LocalSandboxPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.cg = SlotCgroup(pool.layout, f"{pool.cg_prefix}-x{index}")
        try:
            self.claim = claim_uid(pool.registry)
        except BaseException:
            self.cg.destroy()
            raise

    def destroy(self) -> None:
        self.cg.destroy()
        self.claim.release()

    def run(self, cmd: list[str], files: tuple[list[str], list[bytes]], stdin: bytes, timeout: float,
            limits: Limits, room: Room | None = None, hide: Sequence[str] = ()) -> tuple[Execution, Rerun]:  # fmt: skip
        """Run one job in this slot's cgroups, or in ``room``'s (a workspace's own cgroups, uid and
        mounts: what its jobs keep is charged there, not to whichever slot ran last). ``files``
        (names, contents) are written to a fresh /work first (not with a room). Returns the
        Execution and whether it timed out looking starved (``_starve``). ``hide``: importable names
        whose copies under the host's /usr the job does not see (``_hide``)."""
        uid = room.uid if room is not None else self.claim.uid
        sizes = {"work": self.pool.workspace_bytes, "tmp": limits.tmp_mb * _MiB, "shm": limits.tmp_mb * _MiB}
        places = JobPlaces(self.pool.root / f"x{self.index}-{secrets.token_hex(4)}", uid, sizes, stable=False)
        try:
            places.fresh()
            _write_files(places.path("work"), files, uid)
            ex, starved = self._launch(cmd, places, stdin, timeout, limits, room, uid, hide)
        finally:  # the kernel frees what it left: CPU time of this thread (not wall: the host may be busy)
            t0 = time.thread_time()
            with contextlib.suppress(OSError), (room.cg if room is not None else self.cg).charged():
                places.close()
            remove_tree(places.root)
            free_s = time.thread_time() - t0
        if ex.outcome != "infra_error" and free_s > FREE_GRACE_S and ex.duration_s + free_s > timeout:
            # what it left took the kernel past its deadline to free: its time, its timeout
            ex = dataclasses.replace(ex, outcome="error", timed_out=True, duration_s=ex.duration_s + free_s)
            starved = False
        return ex, starved

    def _launch(self, cmd: list[str], places: JobPlaces, stdin: bytes, timeout: float, limits: Limits,
                room: Room | None, uid: int, hide: Sequence[str] = ()) -> tuple[Execution, Rerun]:  # fmt: skip
        cg = room.cg if room is not None else self.cg
        extra_mb = room.kept_mb if room is not None else 0
        cg.set_limits((limits.memory_mb + extra_mb) * _MiB, limits.pids + 4, limits.cpu_cores)
        cg.reset_peak()
        oom_before = cg.oom_counts()
        # sh is the namespace's pid 1 (--as-pid-1) and runs the command as its child. bwrap's own
        # init would do the same, but bwrap's monitor exits without reaping that init, leaving a
        # zombie for the host's pid 1 to reap (if it ever does), charged to this slot's pids limit
        # meanwhile: one per job, so a busy slot ran out of pids. sh reports a command killed by
        # signal N as exit status 128 + N, as bwrap's init did. The marker proves the sandbox was
        # set up and the command is starting; fds 4 (seccomp) and 5 (marker) are closed first so
        # the program sees only 0-3. (Not ``exec "$@"``: init ignores signals it sends itself.) It
        # enters /work only after the marker: a workspace's /work is what its earlier jobs made it,
        # and one that ran ``chmod 000 /work`` made bwrap's own chdir fail, every later job of the
        # workspace an infra error; now that is the job's own failure (exit 2, as sh's cd reports).
        where = places.bwrap_places()
        if room is not None:
            where["work"] = room.work
        opts = _launch.bwrap_args(**where, seccomp_fd=4, extra=hide_args(hide), as_pid_1=True)  # type: ignore[arg-type]
        script = 'printf x >&5 || exit 125; exec 4<&- 5>&-; cd /work || exit 2; unset OLDPWD; "$@"; exit $?'
        marker = ["/bin/sh", "-c", script, "sh", *cmd]
        argv = _launch.launcher_argv(
            self.pool.tools, cg.procs_files, opts, marker, uid=uid,
            cpu_s=cpu_seconds(limits, timeout), fsize=limits.file_size_mb * _MiB, nofile=limits.open_files,
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
            return Execution.infra(f"cannot spawn the launcher: {e}"), False
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
                   t0: float, timeout: float, limits: Limits, oom_before: tuple[int, int]) -> tuple[Execution, Rerun]:  # fmt: skip
        caps = {pipes[i][0]: Capture(limits.output_bytes) for i in (1, 2, 3)}
        mark = Capture(16)
        caps[pipes[4][0]] = mark
        pidfd = os.pidfd_open(pid)
        exited = threading.Event()
        started: list[float] = []  # when the marker came: the job's own time counts from there

        def deadline() -> float:
            if not started and mark.value() == b"x":
                started.append(time.monotonic())
            return started[0] + timeout if started else t0 + START_S

        finished = pump(
            caps, stdin_fd=pipes[0][1], stdin_data=stdin, exit_fd=pidfd,
            on_exit=lambda: (exited.set(), cg.kill_all()), deadline=deadline,
        )  # fmt: skip
        timed_out = not exited.is_set()
        sched: dict = {}
        if timed_out:
            sched = sched_of(cg)  # before the kill: did it want a CPU it did not get? (``_starve``)
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
        deadline()  # (a marker read with the exit, in one wake-up: the job took no longer than that)
        duration = time.monotonic() - (started[0] if started else t0)
        clean = cg.kill_all()
        out, err, rep = (caps[pipes[i][0]] for i in (1, 2, 3))
        if mark.value() != b"x":
            if timed_out:
                # the host's doing where its probe is overloaded: rerun once it recovers (``_pool._judged``)
                return Execution.infra(f"the sandbox did not start within {START_S}s", duration_s=duration), NOT_STARTED
            why = err.value()[-2000:].decode(errors="replace").strip()
            return Execution.infra(f"the sandbox did not start (status {status}): {why}", duration_s=duration), False
        if not clean:
            return Execution.infra("processes of the job survived SIGKILL", duration_s=duration), False
        peak = cg.peak_memory()  # (before ``_oom``, which resets it after a kill)
        oom, host_oom = _oom(cg, oom_before, cg.oom_counts())
        code = os.waitstatus_to_exitcode(status)
        # bwrap reports a program killed by signal N as exit status 128 + N.
        exit_code, sig = (code, None) if 0 <= code <= 128 or code > 159 else (None, code - 128)
        if code < 0:
            exit_code, sig = None, -code
        ex = Execution(
            outcome=classify(exit_code, sig, timed_out, oom),
            exit_code=exit_code,
            signal=sig,
            stdout=out.value(),
            stderr=err.value(),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            duration_s=duration,
            peak_memory_bytes=peak,
            timed_out=timed_out,
            oom_killed=oom,
            report=rep.value() if rep.touched else None,
            report_truncated=rep.truncated,
        )
        return ex, HOST_OOM if host_oom else timed_out and maybe_starved(sched, timeout, limits)


def _write_files(work: Path, files: tuple[list[str], list[bytes]], uid: int) -> None:
    """Write a job's files into its fresh /work, owned by the job's uid (as root: nothing in it is
    a job's yet, so no path here is one a job made)."""
    from posttrain.sandbox.errors import LimitsError

    for name, data in zip(*files, strict=True):
        path = work / name
        try:
            write_exact(path, data)
        except OSError as e:  # e.g. both "a" and "a/b" given
            raise LimitsError(f"files: cannot write {name!r}: {e.strerror}") from e
    chown_tree(work, uid)


def chown_tree(root: Path, uid: int) -> None:
    """Give everything below ``root`` (not ``root`` itself) to ``uid``, never following a symlink."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)

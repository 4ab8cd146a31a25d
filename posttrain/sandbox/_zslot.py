"""A fork-server slot: one long-lived bwrap sandbox running ``_zygote.py``; a job is a fork of it.

Jobs cross to the fork-server as a header of numbers plus six memfds made here (source, files,
stdin, stdout, stderr, report) over a SOCK_SEQPACKET socket; the outputs are read here, so the
fork-server never holds a byte of any job's input or output (see ``_zygote.py``).

The slot owns, for its lifetime: its cgroups and cells (``_cgroup``), a host uid of its own
(``_uids``), and three stable mount points where each job gets fresh file systems (``_fs``):
between two jobs the host unmounts the last job's and mounts new ones. Unmounting frees what the
job wrote in the kernel, in bounded time (``_fs.MAX_INODES``), on a thread charged to the slot's
cpu cgroup (v1); that time counts as the job's: a job whose run plus cleanup overran its timeout
timed out. The host never waits unboundedly for the fork-server: past the deadline it kills the
job by cgroup, and a fork-server that still does not reply is recycled (stopped and started
again by the next job), the job timed out.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import tempfile
import time
from typing import TYPE_CHECKING

from posttrain.sandbox import _launch
from posttrain.sandbox._cgroup import SlotCgroup
from posttrain.sandbox._fs import JobPlaces
from posttrain.sandbox._pump import FrameError, send_frame, wait_for
from posttrain.sandbox._seccomp import seccomp_fd
from posttrain.sandbox._starve import HOST_OOM, Rerun, maybe_starved, sched_of
from posttrain.sandbox._types import Execution, Limits, classify, cpu_seconds
from posttrain.sandbox._uids import claim_uid
from posttrain.sandbox.errors import HostCannotIsolate

if TYPE_CHECKING:
    from posttrain.sandbox._pool import LocalSandboxPool

_MiB = 1 << 20
KILL_GRACE_S = 2.0  # after a job's deadline, how long the host waits for the fork-server to end it
REPLY_GRACE_S = 2.0  # and then, after killing the job itself, for the fork-server's reply
FREE_GRACE_S = 0.05  # cleanup time that never turns a job into a timeout
ZYGOTE_OVERHEAD = 48 * _MiB  # the fork-server's own memory, charged to the same slot cgroup
SLOT_TMP_BYTES = 256 * _MiB  # tmpfs /work, /tmp, /dev/shm of a zygote slot (memory-backed, so cgroup-bounded)
"""How long a restart waits for the last job's memory to leave the slot before writing the default limit:
its file systems, detached, are freed when the kernel tears down the stopped sandbox's mount namespace,
which it may finish after the processes are gone (on a loaded machine, after the first write)."""
CELLS = 1
"""Cells per fork-server slot (``_cgroup.Cell``): what a job may ask for with ``cells``."""


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


def _oom(cg: SlotCgroup, before: tuple[int, int], after: tuple[int, int]) -> tuple[bool, bool]:
    """(the OOM killer killed a process of the slot, and not for the slot's own limit: the host's or
    a parent cgroup's shortage, no doing of the job's) between two ``SlotCgroup.oom_counts``."""
    killed = after[0] > before[0]
    host = killed and not cg.own_limit_hit(before, after)
    if killed:
        cg.reset_peak()  # (an exec slot resets it before each job; a fork-server slot only here)
    return killed, host


def _killed_peak(cg: SlotCgroup, before: tuple[int, int], after: tuple[int, int], limits: Limits) -> int:
    """The slot's memory watermark when the OOM killer took a process of it between two
    ``oom_counts`` (read before ``_oom`` resets it), at most the slot's limit for this job; else 0.
    The fork path's peak is the job's max RSS, blind to what else the job had charged to the slot:
    its tmpfs files (/tmp, /dev/shm, /work), kernel memory, children it did not wait for. A job
    killed at its 128 or 256 MiB limit by its files reported the 15 MiB of its interpreter."""
    if after[0] <= before[0]:
        return 0
    return min(cg.peak_memory() or 0, limits.memory_mb * _MiB + ZYGOTE_OVERHEAD)


class Retry(Exception):
    """The slot failed before the job started: restart it and run the job there once more."""


class ZygoteSlot:
    """One warm fork-server sandbox; restarted on anomaly or every ``recycle_every`` jobs."""

    def __init__(self, pool: LocalSandboxPool, index: int) -> None:
        self.pool = pool
        self.cg = SlotCgroup(pool.layout, f"{pool.cg_prefix}-z{index}")
        self.claim = None
        try:
            self.claim = claim_uid(pool.registry)
            self.cells = self.cg.add_cells(CELLS)
            sizes = dict.fromkeys(JobPlaces.NAMES, SLOT_TMP_BYTES)
            self.places = JobPlaces(pool.root / f"z{index}", self.claim.uid, sizes, stable=True)
        except BaseException:
            self.destroy()
            raise
        self.pid: int | None = None
        self.chan: socket.socket | None = None
        self.log: tempfile._TemporaryFileWrapper | None = None
        self.jobs = 0
        self.oom_seen = (0, 0)  # the slot's (OOM kills, own limit hits) after its last job
        self.keep: set[int] = set()  # host pids of bwrap's monitor and the fork-server

    @property
    def uid(self) -> int:
        assert self.claim is not None
        return self.claim.uid

    def start(self) -> None:
        # First the last job's file systems, which a stopped slot still has (and bwrap must bind the
        # stable points themselves, not a tmpfs on them: ``_fs``): their pages stay charged to the
        # slot until then. A job allowed more than the default limit that filled them and then got the
        # fork-server OOM-killed (no reply: the slot stopped, its places kept) left more charged than
        # the default; writing that limit failed (EBUSY) and every later job here was an infra error.
        # ``set_limits`` waits for the detached places to be freed (``_cgroup.DRAIN_WAIT_S``).
        self.places.clear()
        self.cg.set_limits(self.pool.default_limits.memory_mb * _MiB + ZYGOTE_OVERHEAD, 256, 1.0)
        chan, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile(prefix="posttrain-zygote-")
        sfd = seccomp_fd(self.pool.bpf)
        opts = _launch.bwrap_args(**self.places.bwrap_places(), seccomp_fd=4,
                                  extra=_launch.zygote_mounts(self.pool.zygote_dir), as_pid_1=True)  # fmt: skip
        cell_fds = {5 + 3 * k + i: fd for k, c in enumerate(self.cells) for i, fd in enumerate((c.procs, c.control, c.census))}
        given = {"cgroup": self.pool.layout.version, "cells": [[5 + 3 * k + i for i in range(3)] for k in range(len(self.cells))]}
        cmd = [self.pool.tools.python, "-I", "-S", "-B", "/sbx/_zygote.py", json.dumps(given)]
        argv = _launch.launcher_argv(self.pool.tools, self.cg.procs_files, opts, cmd, uid=self.uid,
                                     cpu_s=None, fsize=None, nofile=4096)  # fmt: skip
        try:
            # bwrap --die-with-parent watches the spawning *thread*: spawn from the pool's
            # long-lived spawner thread, not from whichever caller thread restarts the slot.
            fds = {0: theirs.fileno(), 1: theirs.fileno(), 2: self.log.fileno(), 4: sfd, **cell_fds}
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
                f"the sandbox slot did not start ({e}): {detail}; unless the host was too busy to start it in "
                "30 s (then the job is rerun once the host recovers), bwrap cannot create namespaces: enable "
                "unprivileged user namespaces (`sysctl -w user.max_user_namespaces=10000` and, on Debian/Ubuntu, "
                "`sysctl -w kernel.unprivileged_userns_clone=1`; AppArmor: "
                "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)"
            ) from e
        self.jobs = 0
        self.oom_seen = self.cg.oom_counts()
        self.keep = set(self.cg.pids_inside())
        if not header.get("ready"):
            self.stop()
            raise HostCannotIsolate(f"the sandbox slot sent an unexpected greeting: {header}")
        try:
            self.places.fresh()  # the first job's file systems, now that the slot has bound the points
        except OSError as e:
            self.stop()
            raise HostCannotIsolate(f"cannot mount the sandbox slot's file systems: {e}") from e

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

    def destroy(self) -> None:
        """Stop the slot and give back everything it owns (pool close)."""
        self.stop()
        self.cg.destroy()
        if self.claim is not None:
            self.claim.release()

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
            limits: Limits, cells: int) -> tuple[Execution, Rerun]:  # fmt: skip
        """The job's Execution, and whether it timed out looking starved (``_starve``)."""
        for attempt in (0, 1):
            try:
                return self._run_once(source, names, blobs, stdin, timeout, limits, cells)
            except Retry as e:
                self.stop()
                if attempt:
                    return Execution.infra(f"the fork-server could not start the job twice: {e}"), False
        raise AssertionError("unreachable")

    def _run_once(self, source: bytes, names: list[str], blobs: list[bytes], stdin: bytes, timeout: float,
                  limits: Limits, cells: int) -> tuple[Execution, Rerun]:  # fmt: skip
        if self.pid is None:
            self.start()
        # +2: the slot also holds bwrap's monitor process and the fork-server itself.
        self.cg.set_limits(limits.memory_mb * _MiB + ZYGOTE_OVERHEAD, limits.pids + 2, limits.cpu_cores)
        header = {
            "timeout": timeout,
            "cpu_s": cpu_seconds(limits, timeout),
            "fsize": limits.file_size_mb * _MiB,
            "nofile": limits.open_files,
            "n_files": len(names),
            "cells": cells,
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
                raise Retry(f"fork-server slot gone: {e}") from e
            killed, sched = 0, None
            if not wait_for(self.chan.fileno(), select.POLLIN, timeout + KILL_GRACE_S):
                sched = sched_of(self.cg, exclude=self.keep)  # the fork-server may not get to measure it
                killed = self.kill_job()
            try:
                reply = self._recv(t0 + timeout + KILL_GRACE_S + REPLY_GRACE_S)
            except FrameError as e:
                return self._no_reply(e, fds, limits, timeout, time.monotonic() - t0)
            if killed and not reply.get("timed_out") and sched is not None:
                reply = {**reply, **sched}
            return self._result(reply, killed, fds, timeout, limits, time.monotonic() - t0)
        finally:
            for fd in fds:
                os.close(fd)

    def _no_reply(self, e: FrameError, fds: list[int], limits: Limits, timeout: float,
                  duration: float) -> tuple[Execution, Rerun]:  # fmt: skip
        """The fork-server died, or did not answer past the job's deadline. Out of memory in the
        slot is the job's doing (its files and processes filled the slot until the kernel killed the
        fork-server too); a fork-server that hangs past the deadline is recycled and the job timed
        out (the host's probe decides whether it was starved); anything else (a kill from outside,
        a host problem) is an infra error."""
        detail = f"fork-server slot failed: {e}; {self.diagnostics()}"
        oom_now = self.cg.oom_counts()
        peak = _killed_peak(self.cg, self.oom_seen, oom_now, limits) or None
        oom, host_oom = _oom(self.cg, self.oom_seen, oom_now)
        hung = duration >= timeout and "timed out" in str(e)
        self.stop()
        if oom or hung:
            ex = self._execution(fds, limits, exit_code=None, sig=signal.SIGKILL, timed_out=hung and not oom,
                                 oom=oom, duration=duration, peak=peak)  # fmt: skip
            return ex, HOST_OOM if host_oom else hung and not oom
        return Execution.infra(detail, duration_s=duration), False

    def _result(self, reply: dict, killed: int, fds: list[int], timeout: float, limits: Limits,
                waited: float) -> tuple[Execution, Rerun]:  # fmt: skip
        self.jobs += 1
        if "zygote_error" in reply:
            raise Retry(f"fork-server error: {reply['zygote_error']}")
        free_s = self._fresh_places()
        if not reply.get("clean", False) or self.jobs >= self.pool.recycle_every:
            self.stop()  # restarted lazily by the next job
        oom_now = self.cg.oom_counts()  # one read per job: the counts after the last job are cached
        killed_peak = _killed_peak(self.cg, self.oom_seen, oom_now, limits)
        (oom, host_oom), self.oom_seen = _oom(self.cg, self.oom_seen, oom_now), oom_now
        if "slot_error" in reply:  # what broke the slot after the fork is the job's doing
            self.stop()
            ex = self._execution(fds, limits, exit_code=None, sig=signal.SIGKILL, timed_out=False, oom=oom,
                                 duration=waited, peak=killed_peak or None)  # fmt: skip
            return ex, HOST_OOM if host_oom else False
        # Killed here past its deadline: timed out, even if the fork-server saw only the death. And
        # the cleanup of what it left counts as its time (``FREE_GRACE_S`` aside).
        duration = float(reply["duration_s"])
        late = free_s > FREE_GRACE_S and duration + free_s > timeout
        exit_code, sig = reply["exit_code"], reply["signal"]
        timed_out = bool(reply["timed_out"]) or killed > 0 or late
        ex = self._execution(fds, limits, exit_code=exit_code, sig=sig, timed_out=timed_out, oom=oom,
                             duration=duration + free_s, peak=max(int(reply["maxrss"]), killed_peak))  # fmt: skip
        return ex, HOST_OOM if host_oom else timed_out and not late and maybe_starved(reply, timeout, limits)

    def _fresh_places(self) -> float:
        """New file systems for the next job (the slot is recycled if that fails); the CPU seconds
        it took on this thread (charged to the slot's cpu cgroup): the kernel's work of freeing what
        the job left, not the time a busy host kept this thread waiting. Also: nothing may be left
        in the slot's cgroups but the monitor and the fork-server."""
        t0 = time.thread_time()
        try:
            with self.cg.charged():
                self.places.fresh()
        except OSError:
            self.stop()
        if self.pid is not None and set(self.cg.pids_inside()) != self.keep:
            self.stop()
        return time.thread_time() - t0

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

"""``Limits`` (what a job may use) and ``Execution`` (what happened), both frozen."""

from __future__ import annotations

import base64
import math
import os
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.sandbox.errors import LimitsError

ExecOutcome = Literal["ok", "error", "infra_error"]

_MiB = 1 << 20


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: taskset, cpusets), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Limits:
    """Per-job resource limits. Defaults suit unit-test-sized Python jobs.

    >>> Limits(memory_mb=256).memory_mb
    256
    """

    memory_mb: int = 512
    """cgroup memory limit with swap (memory + memsw), for everything the job runs."""
    pids: int = 64
    """cgroup pids limit: processes and threads the job may have at once."""
    cpu_cores: float = 1.0
    """cgroup CPU quota, in cores."""
    cpu_time_s: float | None = None
    """RLIMIT_CPU (soft; hard = soft + 1). None: derived from the timeout (timeout + 1 s)."""
    file_size_mb: int = 64
    """RLIMIT_FSIZE: the largest file the job may write."""
    open_files: int = 256
    """RLIMIT_NOFILE."""
    tmp_mb: int = 64
    """Size of the tmpfs ``/tmp`` and ``/dev/shm`` of an ``exec`` job. Fork-server slots mount
    theirs once (256 MiB each); there, everything written counts against ``memory_mb``."""
    output_bytes: int = 1 << 20
    """Cap on each of stdout, stderr and the fd-3 report; the rest is dropped and the matching
    ``*_truncated`` flag is set. (``exec`` drains its pipes as the program writes; ``run_python``
    keeps each stream in a memfd until the job ends, so there a stream is also bounded by
    ``file_size_mb``: EFBIG, or SIGXFSZ for programs that do not ignore it.)"""

    def __post_init__(self) -> None:
        checks = {
            "memory_mb": (self.memory_mb, 16, 1 << 20),
            "pids": (self.pids, 4, 1 << 16),
            "file_size_mb": (self.file_size_mb, 0, 1 << 20),
            "open_files": (self.open_files, 16, 1 << 20),
            "tmp_mb": (self.tmp_mb, 1, 1 << 20),
            "output_bytes": (self.output_bytes, 0, 1 << 31),
        }
        for name, (value, lo, hi) in checks.items():
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise LimitsError(f"Limits.{name} must be an integer in [{lo}, {hi}], got {value!r}")
        if not (isinstance(self.cpu_cores, int | float) and 0.01 <= self.cpu_cores <= 1024):
            raise LimitsError(f"Limits.cpu_cores must be a number in [0.01, 1024], got {self.cpu_cores!r}")
        if self.cpu_time_s is not None and not (
            isinstance(self.cpu_time_s, int | float) and 0 < self.cpu_time_s < 1e6
        ):
            raise LimitsError(f"Limits.cpu_time_s must be None or a positive number, got {self.cpu_time_s!r}")


def cpu_seconds(limits: Limits, timeout: float) -> int:
    """RLIMIT_CPU (soft) of a job: ``limits.cpu_time_s``, else the timeout + 1 s."""
    return max(1, int(limits.cpu_time_s if limits.cpu_time_s is not None else timeout + 1))


def check_timeout(timeout: float) -> float:
    """Validate a job timeout (seconds) and return it as a float."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (0 < timeout <= 86400):
        raise LimitsError(f"timeout must be a number of seconds in (0, 86400], got {timeout!r}")
    if math.isnan(timeout):
        raise LimitsError("timeout must not be NaN")
    return float(timeout)


@dataclass(frozen=True)
class Execution:
    """What happened to one job.

    ``outcome``: ``ok`` = exit 0; ``error`` = the program failed (nonzero exit, signal, timeout,
    out of memory); ``infra_error`` = the sandbox failed (then ``infra_detail`` says how, and the
    other fields carry no information about the program). An infra error never looks like a
    program's failure or success.

    >>> Execution.infra("slot died").outcome
    'infra_error'
    """

    outcome: ExecOutcome
    exit_code: int | None
    """The exit status when the program exited; None when it was killed by a signal."""
    signal: int | None
    """The signal that killed the program (9 on timeout or OOM), else None. On the ``exec`` path
    bwrap reports a signal N as exit status 128+N, so statuses 129..159 are read as signals."""
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    """Wall-clock time of the job, from start to the last process reaped."""
    peak_memory_bytes: int | None
    """Peak resident memory (cgroup peak on the exec path, max RSS on the fork path); None if unknown."""
    timed_out: bool
    """Killed at its deadline; on the ``run_python`` path also ended earlier when its main process stayed
    stopped (SIGSTOP from one of its own processes), which could only have waited for the deadline."""
    oom_killed: bool
    report: bytes | None
    """What the job wrote to file descriptor 3 (None when it wrote nothing)."""
    infra_detail: str | None = None
    report_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @staticmethod
    def infra(detail: str, *, duration_s: float = 0.0) -> Execution:
        """An Execution for a sandbox failure: no program result, only ``infra_detail``."""
        return Execution(
            outcome="infra_error",
            exit_code=None,
            signal=None,
            stdout=b"",
            stderr=b"",
            stdout_truncated=False,
            stderr_truncated=False,
            duration_s=duration_s,
            peak_memory_bytes=None,
            timed_out=False,
            oom_killed=False,
            report=None,
            infra_detail=detail,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict; bytes become text when valid UTF-8, else ``{"base64": ...}``."""

        def enc(b: bytes | None) -> Any:
            if b is None:
                return None
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError:
                return {"base64": base64.b64encode(b).decode("ascii")}

        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": enc(self.stdout),
            "stderr": enc(self.stderr),
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "duration_s": round(self.duration_s, 6),
            "peak_memory_bytes": self.peak_memory_bytes,
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
            "report": enc(self.report),
            "report_truncated": self.report_truncated,
            "infra_detail": self.infra_detail,
        }


def classify(exit_code: int | None, sig: int | None, timed_out: bool, oom_killed: bool) -> ExecOutcome:
    """ok only for a clean exit 0 that was neither timed out nor OOM-killed."""
    if exit_code == 0 and sig is None and not timed_out and not oom_killed:
        return "ok"
    return "error"

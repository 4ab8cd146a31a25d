"""Capped I/O pumping and message framing, standard library only; and what the host and the
fork-server both read of a job's processes (``proc_state``, ``longest_wait``).

This file is imported both by the host (``_pool.py``) and by the fork-server inside the sandbox
(``_zygote.py``, which gets it bind-mounted read-only), so it must not import posttrain.

Frames: 4-byte big-endian header length, a JSON header whose ``blobs`` lists the lengths of the
binary blobs that follow, then the blobs. Nothing is pickled: the sandbox side is untrusted.
"""

from __future__ import annotations

import errno
import json
import os
import select
import struct
import time
from collections.abc import Callable

_HDR = struct.Struct(">I")
MAX_HEADER = 1 << 20

# What the fork-server imports before it forks (here so the benchmark's no-isolation floor warms
# the same set). Not threading: its at-fork handler costs every child ~0.5 ms on a VM with
# costly page faults, more than importing it costs the few jobs that use it.
PRELOAD = (
    "abc", "array", "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "enum",
    "fractions", "functools", "hashlib", "heapq", "io", "itertools", "json", "math", "operator",
    "random", "re", "statistics", "string", "struct", "textwrap", "traceback", "typing", "unittest",
    "atexit", "builtins",
)  # fmt: skip


class FrameError(Exception):
    """The peer closed the channel, timed out, or sent a malformed frame."""


def proc_fields(pid: int) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command's name (the state first: stat field 3).
    Raises OSError once the process is gone."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def proc_state(pid: int) -> bytes:
    """A process's state letter (R running or runnable, S sleeping, T stopped, Z zombie...); b"" if gone."""
    try:
        return proc_fields(pid)[0]
    except (OSError, IndexError):
        return b""


_PF_EXITING = 0x4


def proc_exiting(pid: int) -> bool:
    """Whether a process is already exiting (its ``PF_EXITING`` flag set: killed, not yet gone), or gone."""
    try:
        return bool(int(proc_fields(pid)[6]) & _PF_EXITING)
    except FileNotFoundError:
        return True
    except (OSError, IndexError, ValueError):
        return False


def proc_sched(pid: int, now: float, base_nice: int, base_policy: int) -> tuple[float, float, bool, float]:
    """(seconds runnable but waiting for a CPU, seconds alive, lowered, CPU seconds) of a process;
    ``now``: /proc/uptime's first number. Lowered: a higher nice than ``base_nice`` or a scheduler
    other than ``base_policy`` and SCHED_BATCH (which keeps its CPU share, as SCHED_IDLE does not).
    CPU: its own and that of the children it reaped. Raises OSError once it is gone."""
    with open(f"/proc/{pid}/schedstat", "rb") as f:
        run_delay = int(f.read().split()[1]) / 1e9
    fields = proc_fields(pid)  # fields[0] is stat field 3
    tick = os.sysconf("SC_CLK_TCK")
    alive = max(now - int(fields[19]) / tick, 0.01)  # it may have started late: its own lifetime
    lowered = int(fields[16]) > base_nice or int(fields[38]) not in (base_policy, os.SCHED_BATCH)
    return run_delay, alive, lowered, sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime


def longest_wait(waits: list[tuple[float, float, bool]]) -> tuple[float, float, bool]:
    """Of a job's processes' (run_delay, alive, lowered), the one the starvation filter judges
    (``_starve.maybe_starved``): the one that waited longest of those at a priority they kept, else
    the one that waited longest (which lowered its own)."""
    if not waits:
        return 0.0, 1.0, False
    return max(waits, key=lambda w: (not w[2], w[0]))


def wait_for(fd: int, events: int, timeout: float | None) -> bool:
    """True once ``fd`` is ready for ``events`` (select.POLLIN / POLLOUT; errors and hang-ups
    count as ready), False after ``timeout`` seconds. poll(), not select(): the host process may
    hold more than 1024 files."""
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000) + 1)))


def send_frame(fd: int, header: dict, blobs: list[bytes]) -> None:
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}).encode()
    data = b"".join([_HDR.pack(len(head)), head, *blobs])
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            wait_for(fd, select.POLLOUT, None)
            continue
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not wait_for(fd, select.POLLIN, wait):
                raise FrameError("timed out waiting for the peer")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise FrameError("peer closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(fd: int, deadline: float | None = None, max_blob: int = 1 << 31) -> tuple[dict, list[bytes]]:
    (size,) = _HDR.unpack(_read_exact(fd, 4, deadline))
    if size > MAX_HEADER:
        raise FrameError(f"frame header of {size} bytes is too large")
    try:
        header = json.loads(_read_exact(fd, size, deadline))
        lengths = [int(x) for x in header["blobs"]]
    except (ValueError, KeyError, TypeError) as e:
        raise FrameError(f"malformed frame header: {e}") from e
    if any(n < 0 or n > max_blob for n in lengths):
        raise FrameError("blob length out of range")
    return header, [_read_exact(fd, n, deadline) for n in lengths]


class Capture:
    """Bytes read from one pipe, keeping at most ``cap`` of them."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.touched = False
        self.closed = False

    def add(self, chunk: bytes) -> None:
        self.touched = True
        room = self.cap - self.size
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        if chunk:
            self.parts.append(chunk)
            self.size += len(chunk)

    def value(self) -> bytes:
        return b"".join(self.parts)


class _Feeder:
    """Writes ``data`` to a non-blocking pipe as it drains; stops quietly on EPIPE."""

    def __init__(self, fd: int | None, data: bytes) -> None:
        self.fd, self.view = fd, memoryview(data)
        if fd is not None and not data:
            os.close(fd)
            self.fd = None
        elif fd is not None:
            os.set_blocking(fd, False)

    def write(self) -> bool:
        """Write what the pipe takes; True when done (the fd is then closed)."""
        try:
            n = os.write(self.fd, self.view[: 1 << 16])
            self.view = self.view[n:]
        except BlockingIOError:
            return False
        except OSError as e:  # EPIPE: the program stopped reading its stdin
            if e.errno not in (errno.EPIPE, errno.EBADF):
                raise
            self.view = self.view[:0]
        if self.view:
            return False
        self.close()
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


_NULL: list[int] = []  # /dev/null, opened once (``_drop``)


def _drop(fd: int) -> int:
    """Move what the pipe ``fd`` holds to /dev/null in the kernel (splice: no copy, no buffer);
    the number of bytes, 0 at EOF. Raises BlockingIOError when it holds nothing yet. Where splice
    fails otherwise (never seen), it reads and discards instead: never a new error for the job."""
    if not _NULL:
        _NULL.append(os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC))
    try:
        return os.splice(fd, _NULL[0], 1 << 20, flags=os.SPLICE_F_NONBLOCK)
    except BlockingIOError:
        raise
    except OSError:
        return len(os.read(fd, 1 << 16))


def _read(fd: int, cap: Capture) -> bool:
    """Read one chunk into ``cap``; True at EOF (the fd is then closed). Once ``cap`` is full, what
    follows is dropped in the kernel (``_drop``), never copied here: an ``exec`` job that flooded its
    stdout past the cap (5 GB in 3 s by ``vmsplice``, at 0.1 cores) kept this thread copying and
    discarding it, host CPU outside every cgroup of the job: 0.6 s in those 3 s, twice the job's own
    quota; dropped, 0.38 s (the wake-ups remain, one per pipe's worth: 64 KiB)."""
    try:
        if cap.size >= cap.cap:
            if _drop(fd):
                cap.touched = cap.truncated = True
                return False
            chunk = b""
        else:
            chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    if chunk:
        cap.add(chunk)
        return False
    cap.closed = True
    os.close(fd)
    return True


def pump(
    outputs: dict[int, Capture],
    *,
    stdin_fd: int | None,
    stdin_data: bytes,
    exit_fd: int | None,
    on_exit: Callable[[], None],
    deadline: float | Callable[[], float],
) -> bool:
    """Feed stdin, read every output fd until EOF, call ``on_exit`` once when ``exit_fd``
    (a pidfd) becomes readable. Returns False if the deadline passed first (``deadline`` may be a
    function, read again after each wake-up: a deadline that moves with what was read).

    Closes ``stdin_fd`` and every output fd it reached EOF on (marking its Capture ``closed``);
    call ``close_all`` for the rest.
    """
    poller = select.poll()
    open_out = {fd for fd, cap in outputs.items() if not cap.closed}
    for fd in open_out:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    feeder = _Feeder(stdin_fd, stdin_data)
    if feeder.fd is not None:
        poller.register(feeder.fd, select.POLLOUT)
    if exit_fd is not None:
        poller.register(exit_fd, select.POLLIN)
    while open_out or exit_fd is not None:
        wait_ms = int(((deadline() if callable(deadline) else deadline) - time.monotonic()) * 1000) + 1
        if wait_ms <= 0:
            break
        for fd, _ in poller.poll(wait_ms):
            if fd == exit_fd:
                poller.unregister(fd)
                exit_fd = None
                on_exit()
            elif fd == feeder.fd:
                if feeder.write():
                    poller.unregister(fd)
            elif fd in open_out and _read(fd, outputs[fd]):
                poller.unregister(fd)
                open_out.discard(fd)
    feeder.close()
    return not open_out and exit_fd is None


def close_all(outputs: dict[int, Capture]) -> None:
    """Close the output fds that ``pump`` left open (after a deadline)."""
    for fd, cap in outputs.items():
        if not cap.closed:
            cap.closed = True
            os.close(fd)

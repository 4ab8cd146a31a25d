"""A CPU of the host held by two spinners at nice -20 (tests marked ``cpu_hog``: tests/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held_cpu() -> Iterator[int]:
    """The last CPU this process may use, with two spinners at nice -20 kept to it (each in its own
    session, whose autogroup is set to -20: the kernel shares CPU between autogroups): a process kept
    there too gets ~1% of it. Yields the CPU's number."""
    cpu = max(os.sched_getaffinity(0))
    hogs = [subprocess.Popen(["nice", "-n", "-20", sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(2)]
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, {cpu})
            with contextlib.suppress(OSError):
                Path(f"/proc/{h.pid}/autogroup").write_text("-20")
        yield cpu
    finally:
        for h in hogs:
            h.kill()
            h.wait()

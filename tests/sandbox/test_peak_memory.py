"""A job's reported peak memory (``Execution.peak_memory_bytes``, the scheduler's memory estimate
learns from it through a verdict's ``evidence["peak_memory_mb"]``) is at least what the job had
charged to its slot.

What broke: on the fork path (``run_python``) the peak was the job's max RSS alone. A job that filled
its /tmp and /dev/shm (tmpfs, charged to the slot's cgroup) until the OOM killer took it at its 128 or
256 MiB limit reported 15 MiB, its interpreter's RSS; the exec path reads the cgroup's watermark and
reported the limit. Now an OOM-killed fork-path job reports the slot's watermark (read before the
kill's bookkeeping resets it)."""

from __future__ import annotations

import pytest

from posttrain.sandbox import Limits

MiB = 1 << 20
FILL_TMP = """
block = b"x" * (1 << 20)
for d in ("/tmp", "/dev/shm"):
    try:
        with open(d + "/fill", "wb") as f:
            for _ in range(400):
                f.write(block)
    except OSError:  # (the exec path's tmpfs may be smaller than the limit: full, the heap goes on)
        pass
x = bytearray(300 << 20)
for i in range(0, len(x), 4096):
    x[i] = 1
"""
ALLOCATE = "x = bytearray({mb} << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\nprint('done')\n"


def _run(pool, path: str, source: str, limits: Limits):
    if path == "run_python":
        return pool.run_python(source, timeout=20.0, limits=limits)
    return pool.exec(["python3", "-c", source], timeout=20.0, limits=limits)


@pytest.mark.parametrize("path", ["run_python", "exec"])
@pytest.mark.parametrize("source", [FILL_TMP, ALLOCATE.format(mb=300)], ids=["files", "heap"])
def test_a_job_killed_at_its_limit_reports_a_peak_near_the_limit(pool1, path: str, source: str):
    ex = _run(pool1, path, source, Limits(memory_mb=128, file_size_mb=512))
    assert ex.outcome == "error" and ex.oom_killed, ex
    assert ex.peak_memory_bytes is not None and ex.peak_memory_bytes >= 0.9 * 128 * MiB, ex.peak_memory_bytes


@pytest.mark.parametrize("path", ["run_python", "exec"])
def test_an_honest_job_reports_about_what_it_allocated(pool1, path: str):
    ex = _run(pool1, path, ALLOCATE.format(mb=64), Limits(memory_mb=256))
    assert ex.ok and not ex.oom_killed and ex.stdout == b"done\n", ex
    # its 64 MiB, plus the interpreter (and, on the fork path, the pages it shares with the fork-server)
    assert 60 * MiB <= (ex.peak_memory_bytes or 0) <= 128 * MiB, ex.peak_memory_bytes

"""The code runner's cell kill (``_runner_clean.Cell.kill``) against an exit that outlasts its
deadline: a killed process that is still freeing its memory when the deadline passes is on its way
out, not left behind, so the candidate is not judged a saboteur for the host's load. Real sandbox,
real cgroups: the job gets one cell, as the runner does."""

from __future__ import annotations

import json
import os
import subprocess

from posttrain.envs.code._runner import runner_text
from posttrain.envs.code._runner_clean import _dying
from posttrain.sandbox import Limits

# The runner's files as the sandbox gets them (one namespace), then the job: a child moves itself into the cell, touches ``mb`` MiB (its exit must free them: tens of ms),
# sleeps; the job SIGKILLs it and asks the cell to be emptied with the deadline given.
_JOB = """
import json, os, signal, time

mb, deadline = {mb}, {deadline}
cell = Cell.given()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(cell.procs, b"0")
    buf = bytearray(int(mb) << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    os.write(w, b"x")
    time.sleep(60)
    os._exit(0)
os.read(r, 1)
before = sorted(cell._tasks())
os.kill(pid, signal.SIGKILL)
t0 = time.monotonic()
ok = cell.kill((pid,), deadline_s=deadline)
took = time.monotonic() - t0
print(json.dumps({{"ok": ok, "empty": cell.empty(), "before": before, "took": took}}))
"""


def _kill_in_cell(pool, mb: int, deadline: float) -> dict:
    ex = pool.run_python(runner_text() + _JOB.format(mb=mb, deadline=deadline), cells=1, timeout=60,
                         limits=Limits(memory_mb=mb + 256))
    assert ex.exit_code == 0, (ex.stdout, ex.stderr)
    return json.loads(ex.stdout.decode().strip().splitlines()[-1])


def test_a_killed_process_still_exiting_past_the_deadline_is_waited_for(pool1) -> None:
    got = _kill_in_cell(pool1, mb=384, deadline=0.0)
    assert got["before"], "the child never reached the cell"
    assert got["ok"] is True and got["empty"] is True, got


def test_a_quick_exit_stays_quick(pool1) -> None:
    got = _kill_in_cell(pool1, mb=1, deadline=5.0)
    assert got["ok"] is True and got["empty"] is True and got["took"] < 5.0, got


def test_a_live_process_is_not_taken_for_a_dying_one() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert _dying(os.getpid()) is False and _dying(child.pid) is False
    finally:
        child.kill()
        child.wait()
    assert _dying(child.pid) is True  # gone

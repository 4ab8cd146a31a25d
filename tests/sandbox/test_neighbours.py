"""Two posttrain processes on one host, one in its own pid namespace, do not harm each other.

Both share /tmp and the cgroup tree (issue 12, section 1). Before liveness was a lock, a pool
starting inside ``unshare --pid`` judged the other's directory and cgroups stale (their pid is
not alive in its namespace), killed its slots and deleted its fork-server's files; and the
cgroups of a pool that ran as pid 1 were never reaped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from posttrain.sandbox import open_pool
from posttrain.sandbox._cgroup import detect_layout

ROOT = Path(__file__).resolve().parents[2]

# Opens a one-slot pool, says so, then runs fork-server and exec jobs until its time is up.
NEIGHBOUR = r"""
import json, sys, time
from posttrain.sandbox import open_pool
with open_pool(size=1) as pool:
    print(json.dumps({"prefix": pool.cg_prefix}), flush=True)
    end, bad, n = time.monotonic() + float(sys.argv[1]), [], 0
    while time.monotonic() < end:
        for ex in (pool.run_python("print(1)"), pool.exec(["true"])):
            n += 1
            if not ex.ok:
                bad.append(ex.infra_detail or ex.outcome)
    print(json.dumps({"jobs": n, "bad": bad[:3], "n_bad": len(bad)}), flush=True)
"""


def _start(seconds: float, *, own_pid_ns: bool) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-c", NEIGHBOUR, str(seconds)]
    if own_pid_ns:  # --kill-child: a SIGKILL of unshare takes the namespace's pid 1 with it
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", *argv]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line, f"the neighbour did not start (exit {p.wait()})"
    return p, json.loads(line)["prefix"]


def _leftovers(prefixes: list[str]) -> list[str]:
    layout = detect_layout()
    found = [str(p) for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith(tuple(prefixes))]
    for parent in set(layout.parents.values()):
        found += [str(c) for c in parent.iterdir() if c.name.startswith(tuple(prefixes))]
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {p}" for p in prefixes if p in mounts]
    return found


def _slot_processes(prefixes: list[str]) -> list[str]:
    layout = detect_layout()
    out = []
    for parent in set(layout.parents.values()):
        for c in parent.iterdir():
            if c.name.startswith(tuple(prefixes)):
                out += (c / "cgroup.procs").read_text().split()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("killed", [False, True], ids=["exit", "sigkill"])
def test_pools_in_two_pid_namespaces_leave_each_other_alone(killed):
    host, host_prefix = _start(8, own_pid_ns=False)
    inner, inner_prefix = _start(8, own_pid_ns=True)  # its pool starts, and reaps, after the host's
    assert inner_prefix.startswith("posttrain-sbx-1-")  # pid 1 in its namespace
    with open_pool(size=1) as third:  # a third pool starting meanwhile reaps too
        assert third.run_python("print(1)").ok
    prefixes = [host_prefix, inner_prefix]
    if killed:
        time.sleep(1.0)
        for p in (host, inner):
            os.kill(p.pid, signal.SIGKILL)
        for p in (host, inner):
            p.wait(timeout=30)
        end = time.monotonic() + 20  # bwrap --die-with-parent ends the slots; wait until they are gone
        while _slot_processes(prefixes) and time.monotonic() < end:
            time.sleep(0.1)
        assert _leftovers(prefixes)  # a SIGKILL-ed pool cannot clean up after itself
        with open_pool(size=1):  # the next pool reaps what they left
            pass
    else:
        for p in (host, inner):
            report = json.loads(p.stdout.readline())
            assert p.wait(timeout=30) == 0
            assert report["jobs"] > 0 and report["n_bad"] == 0, report
    for p in (host, inner):
        p.stdout.close()
    assert _leftovers(prefixes) == []

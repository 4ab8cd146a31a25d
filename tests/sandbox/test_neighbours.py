"""Posttrain processes on one host that share the cgroup tree do not harm each other (issue 12 §1).

Neighbours: one with another temp directory (TMPDIR), one in its own pid and mount namespaces with
a private tmpfs on /tmp (a container with the host's cgroup namespace), one in its own pid
namespace sharing /tmp. Each keeps a pool with an exec slot and a Workspace whose cgroups are
empty between jobs; meanwhile the others start pools, which reap. Before liveness was a lock on
each cgroup, a pool that could not see its neighbour's temp directory removed those empty
cgroups and the neighbour's next exec failed; and before it was a lock at all (not a pid), a
pool in another pid namespace deleted its neighbour's fork-server files.
"""

from __future__ import annotations

import contextlib
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
from posttrain.sandbox._cgroup import _mounts, detect_layout
from posttrain.sandbox.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]

# Opens a one-slot pool and a workspace, runs a round of jobs, then obeys stdin: "jobs" runs
# another round, "reap" starts (and closes) a second pool, which reaps; end of input closes.
NEIGHBOUR = r"""
import json, sys, tempfile
from posttrain.sandbox import open_pool
from posttrain.sandbox.workspace import Workspace

def jobs(pool, ws):
    runs = (pool.run_python("print(1)"), pool.exec(["true"]), ws.exec(["cat", "a"]))
    return [ex.infra_detail or ex.outcome for ex in runs if not ex.ok]

with open_pool(size=1) as pool, Workspace(pool, {"a": "1"}, storage_mb=16) as ws:
    hello = {"prefix": pool.cg_prefix, "tmp": tempfile.gettempdir(), "bad": jobs(pool, ws)}
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        if line.strip() == "reap":
            with open_pool(size=1):
                pass
            print(json.dumps({"bad": []}), flush=True)
        else:
            print(json.dumps({"bad": jobs(pool, ws)}), flush=True)
"""
# --kill-child: a SIGKILL of unshare takes the namespace's pid 1 with it.
PID_NS = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"]
# A private tmpfs as the temp directory, visible only in the neighbour's mount namespace (a
# container's own /tmp). Mounted on a directory of its own rather than on /tmp itself, so that a
# checkout or venv that lives under /tmp (CI clones anywhere) stays visible to the neighbour.
PRIVATE_TMP = [*PID_NS, "--mount", "sh", "-c",
               'mount -t tmpfs -o mode=1777 tmp "$PRIVATE" && TMPDIR="$PRIVATE" exec "$@"', "sh"]


class Neighbour:
    """A posttrain process with a pool, started ``where``: "tmpdir", "private-tmp" or "pid-ns"."""

    def __init__(self, where: str, tmpdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
        argv = [sys.executable, "-c", NEIGHBOUR]
        if where == "tmpdir":
            env["TMPDIR"] = str(tmpdir)
        elif where == "private-tmp":
            self.private = Path(tempfile.mkdtemp(prefix="posttrain-test-private-"))  # empty here, always
            env["PRIVATE"] = str(self.private)
            argv = [*PRIVATE_TMP, *argv]
        else:
            env, argv = dict(os.environ), [*PID_NS, *argv]
        self.where = where
        pipe = subprocess.PIPE
        self.p = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=pipe, stdout=pipe, text=True)
        hello = self.read()
        self.prefix, self.tmp = hello["prefix"], hello["tmp"]
        assert hello["bad"] == [], (where, hello)

    def read(self) -> dict:
        line = self.p.stdout.readline()
        assert line, f"the {self.where} neighbour exited ({self.p.wait()})"
        return json.loads(line)

    def ask(self, command: str) -> list:
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()
        return self.read()["bad"]

    def close(self, killed: bool) -> None:
        if killed:
            os.kill(self.p.pid, signal.SIGKILL)
        else:
            self.p.stdin.close()
        assert self.p.wait(timeout=60) == (-signal.SIGKILL if killed else 0)
        self.p.stdout.close()
        if killed:
            self.p.stdin.close()
        if self.where == "private-tmp":
            self.private.rmdir()  # the tmpfs went with its mount namespace


def _cgroups(prefixes: list[str]) -> list[Path]:
    parents = set(detect_layout().parents.values())
    return [c for parent in parents for c in parent.iterdir() if c.name.startswith(tuple(prefixes))]


def _procs(cgroup: Path) -> str:
    """The cgroup's ``cgroup.procs``; empty once a reaper removed it (a neighbour may, meanwhile)."""
    try:
        return (cgroup / "cgroup.procs").read_text()
    except FileNotFoundError:
        return ""


def _leftovers(prefixes: list[str], tmpdirs: list[Path]) -> list[str]:
    found = [str(p) for d in tmpdirs for p in d.iterdir() if p.name.startswith(tuple(prefixes))]
    found += [str(c) for c in _cgroups(prefixes)]
    mounts = Path("/proc/self/mountinfo").read_text()
    return found + [f"mount {p}" for p in prefixes if p in mounts]


def _cgroup_fds(pids: list[str]) -> list[str]:
    """What the processes ``pids`` hold open in a cgroup file system."""
    points = tuple(point + "/" for point, _, _ in _mounts())
    out = []
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except FileNotFoundError:  # (the fd listdir itself used)
                continue
            if target.startswith(points):
                out.append(f"{pid}: {target}")
    return out


@contextlib.contextmanager
def _tempdir(d: Path):
    """Pools started meanwhile in this process use ``d`` as their temp directory."""
    saved, tempfile.tempdir = tempfile.tempdir, str(d)
    try:
        yield
    finally:
        tempfile.tempdir = saved


@pytest.fixture
def other_tmpdir():
    """A temp directory of its own for one neighbour (world-searchable, as /tmp is: uid 65534
    binds the fork-server's files from it). A pool started on it at the end reaps what is left."""
    d = Path(tempfile.mkdtemp(prefix="posttrain-test-tmpdir-"))
    d.chmod(0o711)
    yield d
    with _tempdir(d), open_pool(size=1):
        pass
    d.rmdir()


@pytest.mark.slow
@pytest.mark.parametrize("killed", [False, True], ids=["exit", "sigkill"])
def test_neighbours_with_other_temp_dirs_and_pid_namespaces_leave_each_other_alone(killed, other_tmpdir):
    neighbours: list[Neighbour] = []
    try:
        for where in ("tmpdir", "private-tmp", "pid-ns"):  # each start reaps while the others idle
            neighbours.append(Neighbour(where, other_tmpdir))
        a, b, d = neighbours
        assert a.tmp == str(other_tmpdir)
        assert b.prefix.startswith("posttrain-sbx-1-")  # pid 1 in its namespace
        assert a.ask("reap") == []  # a pool on another temp directory starts while b and d idle
        with open_pool(size=1) as third, Workspace(third, storage_mb=16) as ws:  # one here, sharing d's /tmp
            assert third.run_python("print(1)").ok
            # The cgroup locks stay out of the sandbox: not in the fork-server's processes (which hold
            # their own cells' files, not directories: no lock), and a job launched through an exec
            # slot or a workspace has only its own fds 0-3.
            slot = third._all_z[0]
            cells = {str(c.dir / n) for c in slot.cells
                     for n in ("cgroup.procs", "freezer.state", "tasks", "cgroup.kill", "cgroup.events")}
            assert [f for f in _cgroup_fds(slot.cg.pids_inside()) if f.split(": ", 1)[1] not in cells] == []
            for ex in (third.exec(["ls", "/proc/self/fd"]), ws.exec(["ls", "/proc/self/fd"])):
                assert ex.stdout.split() == [b"0", b"1", b"2", b"3", b"4"], ex  # 4: the listing itself
        for n in neighbours:
            assert n.ask("jobs") == [], n.where
        prefixes = [n.prefix for n in neighbours]
        tmpdirs = [other_tmpdir, Path(tempfile.gettempdir())]
        assert _cgroups(prefixes)  # (what the reaping below must remove exists)
        for n in neighbours:
            n.close(killed)
        if killed:
            # A SIGKILL-ed pool cannot clean up after itself; any pool started on this host from now
            # on (another test worker's too) reaps its cgroups once they are empty: one gone was empty.
            end = time.monotonic() + 20  # their slots end with them (die-with-parent, pid namespaces)
            while any(_procs(c) for c in _cgroups(prefixes)):
                assert time.monotonic() < end, "their slots outlived them"
                time.sleep(0.1)
            # The next pool reaps every cgroup they left, whatever their temp dir. (Another posttrain on
            # this host may be reaping the same cgroups at this moment, holding their lock for an
            # instant: then a later pool, or that one, removes them.)
            end = time.monotonic() + 20
            while True:
                with open_pool(size=1):
                    pass
                if not _cgroups(prefixes) or time.monotonic() > end:
                    break
                time.sleep(0.5)
            assert _cgroups(prefixes) == []
            with _tempdir(other_tmpdir), open_pool(size=1):  # one on a's temp dir reaps its dir and mounts
                pass
        assert _leftovers(prefixes, tmpdirs) == []
    finally:
        for n in neighbours:
            if n.p.poll() is None:
                n.p.kill()
                n.p.wait()

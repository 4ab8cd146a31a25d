"""cgroup v2 delegation (``_delegate_v2``) against a directory that behaves like cgroupfs, and
the cgroup locks (``_make_locked``, ``reap``) on every real hierarchy mounted here, v2 included.

This host mounts cgroup v1, so the real v2 delegation runs only where v2 is the hierarchy (it
was exercised on a v2-only machine; see the closing note of issue 3). There a plain directory
stands in for the cgroup, with the one rule that matters: enabling controllers for the children
of a cgroup that holds processes fails with EBUSY.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posttrain.sandbox import _cgroup
from posttrain.sandbox.errors import HostCannotIsolate


class FakeV2:
    def __init__(self, root: Path, procs: list[int]) -> None:
        self.base = root / "svc"
        self.base.mkdir()
        (self.base / "cgroup.subtree_control").write_text("")
        (self.base / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))

    def write(self, path: Path, value: str) -> None:
        if path.name == "cgroup.procs" and path.parent != self.base:  # a migration: leave the base
            left = [p for p in (self.base / "cgroup.procs").read_text().split() if p != value]
            (self.base / "cgroup.procs").write_text("".join(f"{p}\n" for p in left))
        if path == self.base / "cgroup.subtree_control" and (self.base / "cgroup.procs").read_text().split():
            raise OSError(errno.EBUSY, "Device or resource busy")
        path.write_text(value)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    def make(procs: list[int]) -> FakeV2:
        fs = FakeV2(tmp_path, procs)
        monkeypatch.setattr(_cgroup, "_write", fs.write)
        return fs

    yield make
    for leaf in [leaf for leaf in _cgroup._leaf_locks if leaf.is_relative_to(tmp_path)]:
        os.close(_cgroup._leaf_locks.pop(leaf))


def test_alone_in_its_cgroup_it_moves_into_a_leaf_and_delegates(fake):
    fs = fake([os.getpid()])
    _cgroup._delegate_v2(fs.base)
    leaf = fs.base / f"posttrain-sbx-{os.getpid()}-host"
    assert (leaf / "cgroup.procs").read_text() == str(os.getpid())
    assert leaf in _cgroup._leaf_locks and not _cgroup.reap(leaf)  # held like a slot's cgroup
    assert (fs.base / "cgroup.procs").read_text() == ""
    assert (fs.base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"


def test_sharing_its_cgroup_it_stops_and_says_what_to_run(fake):
    fs = fake([os.getpid(), 4242])
    with pytest.raises(HostCannotIsolate, match=r"also holds processes \[4242\].*Delegate=yes"):
        _cgroup._delegate_v2(fs.base)
    assert not list(fs.base.glob("posttrain-sbx-*"))  # nothing moved


def test_already_delegated_is_left_alone(fake):
    fs = fake([os.getpid(), 4242])
    (fs.base / "cgroup.subtree_control").write_text("cpu memory pids")
    _cgroup._delegate_v2(fs.base)
    assert (fs.base / "cgroup.procs").read_text().split() == [str(os.getpid()), "4242"]


# The locks that tell a live cgroup from a stale one (``_cgroup`` docstring), on each real
# hierarchy mounted here: v1 (pids) and v2 (this host mounts an empty cgroup2 beside v1; on a
# v2-only host it is the hierarchy the slots use). The test cgroups are named so that no pool's
# reaper ever considers them.
def _hierarchies() -> dict[str, Path]:
    own, out = _cgroup._own_paths(), {}
    for point, fstype, opts in _cgroup._mounts():
        if fstype == "cgroup2" and "" in own:
            out.setdefault("v2", Path(point) / own[""].lstrip("/"))
        elif fstype == "cgroup" and "pids" in opts and "pids" in own:
            out.setdefault("v1", Path(point) / own["pids"].lstrip("/"))
    return out


HIERARCHIES = _hierarchies()

# Removes the cgroup argv[1] whenever it can, until it has done so argv[2] times or argv[3] s pass.
REAPER = """
import sys, time
from pathlib import Path
from posttrain.sandbox._cgroup import reap
path, want, end, n = Path(sys.argv[1]), int(sys.argv[2]), time.monotonic() + float(sys.argv[3]), 0
print("ready", flush=True)
while n < want and time.monotonic() < end:
    n += reap(path)
print(n)
"""


@pytest.fixture(params=sorted(HIERARCHIES))
def cgroup_dir(request):
    path = HIERARCHIES[request.param] / f"posttrain-test-lock-{os.getpid()}-{secrets.token_hex(4)}"
    yield path
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()


def test_a_held_cgroup_stays_and_a_free_one_goes_only_when_empty(cgroup_dir):
    fd = _cgroup._make_locked(cgroup_dir)
    assert not _cgroup.reap(cgroup_dir) and cgroup_dir.is_dir()  # another open file: flock refuses it
    os.close(fd)  # as when its owner dies
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (cgroup_dir / "cgroup.procs").write_text(str(sleeper.pid))
        assert not _cgroup.reap(cgroup_dir) and cgroup_dir.is_dir()  # not empty
        assert sleeper.poll() is None  # and nothing in it was signalled
    finally:
        sleeper.kill()
        sleeper.wait()
    deadline = time.monotonic() + 5
    while (cgroup_dir / "cgroup.procs").read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _cgroup.reap(cgroup_dir) and not cgroup_dir.exists()


def test_a_cgroup_made_while_a_neighbour_reaps_is_never_lost(cgroup_dir):
    """A reaper in another process removes the cgroup whenever it can: between mkdir and flock
    (caught by the creator's check), or through an fd of an earlier directory of the same name
    (caught by its own). The cgroup ``_make_locked`` returns must stay until its owner removes it."""
    want = 3  # removals in the creation window: evidence that the race was run, not dodged
    reaper = subprocess.Popen(
        [sys.executable, "-c", REAPER, str(cgroup_dir), str(want), "20"], stdout=subprocess.PIPE, text=True
    )
    assert reaper.stdout.readline() == "ready\n"
    made, lost = 0, 0
    while reaper.poll() is None:
        fd = _cgroup._make_locked(cgroup_dir)
        made += 1
        time.sleep(0.0005)
        if cgroup_dir.is_dir():
            cgroup_dir.rmdir()  # as its owner does, still holding the flock
        else:
            lost += 1
        os.close(fd)
    removed = int(reaper.stdout.read())
    reaper.stdout.close()
    assert lost == 0, f"{lost} of {made} cgroups removed by the reaper while held"
    assert removed == want, f"the reaper hit the creation window only {removed} times in 20 s"


def test_a_cgroup_reaped_between_open_and_flock_is_made_again(cgroup_dir, monkeypatch):
    """The narrowest window, forced: a neighbour's reap runs just before the creator's flock (a
    neighbour that can win there is rare; the stress test above rarely runs into it)."""
    real = fcntl.flock
    reaped: list[bool] = []

    def flock(fd: int, op: int) -> None:
        if not reaped:  # the creator's first flock; reap's own calls go straight through
            reaped.append(False)
            reaped[0] = _cgroup.reap(cgroup_dir)
        real(fd, op)

    monkeypatch.setattr(_cgroup.fcntl, "flock", flock)
    fd = _cgroup._make_locked(cgroup_dir)
    monkeypatch.undo()
    try:
        assert reaped == [True]
        assert cgroup_dir.is_dir() and not _cgroup.reap(cgroup_dir)
    finally:
        os.close(fd)

"""cgroup v2 delegation (``_delegate_v2``) against a directory that behaves like cgroupfs.

This host mounts cgroup v1, so the real v2 path runs only where v2 is the hierarchy (it was
exercised on a v2-only machine; see the closing note of issue 3). Here a plain directory stands
in for the cgroup, with the one rule that matters: enabling controllers for the children of a
cgroup that holds processes fails with EBUSY.
"""

from __future__ import annotations

import errno
import os
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

    return make


def test_alone_in_its_cgroup_it_moves_into_a_leaf_and_delegates(fake):
    fs = fake([os.getpid()])
    _cgroup._delegate_v2(fs.base)
    leaf = fs.base / f"posttrain-sbx-{os.getpid()}-host"
    assert (leaf / "cgroup.procs").read_text() == str(os.getpid())
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

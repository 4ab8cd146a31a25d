"""Copy-on-write workspaces: attempts see the initial state, snapshots continue, rollbacks restore."""

from __future__ import annotations

import pytest

from posttrain.sandbox import WorkspaceError
from posttrain.sandbox.workspace import Workspace


def test_snapshot_continue_and_rollback(pool):
    with Workspace(pool, {"a.txt": "v0", "pkg/m.py": "x = 1"}) as ws:
        ex = ws.exec(["sh", "-c", "cat a.txt; echo v1 > a.txt; echo new > b.txt; rm pkg/m.py"])
        assert ex.ok and ex.stdout == b"v0"
        snap = ws.snapshot()
        assert ws.read_file("a.txt") == b"v1\n" and ws.read_file("b.txt") == b"new\n"
        with pytest.raises(WorkspaceError):
            ws.read_file("pkg/m.py")  # deleted in the snapshot (whiteout)
        assert ws.exec(["sh", "-c", "echo v2 > a.txt; rm b.txt"]).ok
        assert ws.read_file("a.txt") == b"v2\n"
        ws.rollback()
        assert ws.read_file("a.txt") == b"v1\n" and ws.read_file("b.txt") == b"new\n"
        ws.write_file("pkg/m.py", "y = 2")
        assert ws.exec(["cat", "pkg/m.py"]).stdout == b"y = 2"
        ws.rollback(to=snap)
        assert ws.exec(["sh", "-c", "cat a.txt; test -e pkg/m.py || echo gone"]).stdout == b"v1\ngone\n"
        ws.rollback(to=1)
        assert ws.read_file("a.txt") == b"v0"


def test_initial_directory_is_never_modified(pool, tmp_path):
    (tmp_path / "f.txt").write_text("orig")
    tmp_path.chmod(0o755)
    with Workspace(pool, tmp_path) as ws:
        assert ws.exec(["sh", "-c", "echo changed > f.txt; touch new"]).ok
        assert ws.read_file("f.txt") == b"changed\n"
    assert (tmp_path / "f.txt").read_text() == "orig" and not (tmp_path / "new").exists()


def test_symlinks_do_not_lead_out(pool):
    with Workspace(pool) as ws:
        assert ws.exec(["ln", "-s", "/etc/shadow", "s"]).ok
        with pytest.raises(WorkspaceError):
            ws.read_file("s")
        with pytest.raises(WorkspaceError):
            ws.read_file("../x")


def test_many_files_snapshot_keeps_content(pool):
    files = {f"d{i % 10}/f{i}.txt": str(i) for i in range(2000)}
    with Workspace(pool, files) as ws:
        assert ws.exec(["sh", "-c", "echo x > d3/f3.txt"]).ok
        s = ws.snapshot()
        assert ws.exec(["sh", "-c", "rm -r d3"]).ok
        ws.rollback(to=s)
        assert ws.read_file("d3/f3.txt") == b"x\n" and ws.read_file("d4/f4.txt") == b"4"


def test_write_into_a_deleted_directory_keeps_old_files_deleted(pool):
    with Workspace(pool, {"d/a": "1", "d/b": "2"}) as ws:
        assert ws.exec(["rm", "-r", "d"]).ok
        ws.write_file("d/new", "n")
        assert ws.exec(["ls", "d"]).stdout == b"new\n"
        with pytest.raises(WorkspaceError):
            ws.read_file("d/a")


def test_write_into_a_directory_a_job_replaced_by_a_file_keeps_its_old_files_gone(pool):
    """A job's file or link in place of a directory hid that directory's files; a new directory made there
    by ``write_file`` showed them again (``d/a`` came back). Writing a file over a directory of any
    layer is refused, as a file system's open would (one of the upper layer was, one below replaced)."""
    with Workspace(pool, {"d/a": "1", "e/k": "2", "l/x": "3"}) as ws:
        assert ws.exec(["sh", "-c", "rm -r d l && echo f > d && ln -s /tmp l"]).ok
        ws.write_file("d/new", "n")
        ws.write_file("l/new", "n")
        assert ws.exec(["ls", "d", "l"]).stdout == b"d:\nnew\n\nl:\nnew\n"
        with pytest.raises(WorkspaceError, match="is a directory"):
            ws.write_file("e", "now a file")
        assert ws.read_file("e/k") == b"2"


@pytest.mark.parametrize("initial", [{"big.bin": b"x" * (2 << 20)}, "missing-dir"])
def test_a_failed_constructor_leaks_no_mount_or_cgroup(pool, tmp_path, initial):
    """A Workspace whose constructor fails after mounting (initial files larger than its tmpfs, an
    initial directory that does not exist) unmounts and deletes its tmpfs and its cgroup at once,
    not when the pool closes."""
    before_dirs = {p.name for p in pool.root.iterdir()}
    before_rooms = set(pool.rooms)
    with pytest.raises((OSError, WorkspaceError)):
        Workspace(pool, initial if isinstance(initial, dict) else tmp_path / initial, storage_mb=1)
    assert {p.name for p in pool.root.iterdir()} == before_dirs
    assert set(pool.rooms) == before_rooms
    with open("/proc/self/mountinfo") as f:
        assert str(pool.root) + "/ws-" not in f.read()


def test_a_job_that_shuts_its_workspace_out_of_work_fails_later_jobs_there_never_as_infra(pool):
    # bwrap entered /work itself, as the job's uid: after `chmod 000 /work` every later job of the
    # workspace was an infra error ("Can't chdir to /work"), which callers retry instead of scoring
    with Workspace(pool, {"a.txt": "x"}) as ws:
        assert ws.exec(["chmod", "000", "/work"]).ok
        ex = ws.exec(["cat", "a.txt"])
        assert ex.outcome == "error" and ex.exit_code == 2 and b"/work" in ex.stderr, ex
        ws.rollback()
        assert ws.exec(["cat", "a.txt"]).stdout == b"x"


def test_work_keeps_its_own_mode_through_snapshot_and_rollback(pool):
    """/work's own mode is the top layer's root: a snapshot froze it and the next attempt's new
    layer came with 0755 (a job's ``chmod 700 .`` was lost at the next step); rollback goes back to
    the snapshot's mode, not to 0755."""
    with Workspace(pool) as ws:
        assert ws.exec(["sh", "-c", "chmod 700 . && touch a"]).ok
        ws.snapshot()
        assert ws.exec(["stat", "-c", "%a", "."]).stdout == b"700\n"
        assert ws.exec(["sh", "-c", "chmod 750 ."]).ok
        ws.rollback()
        assert ws.exec(["stat", "-c", "%a", "."]).stdout == b"700\n"
        assert ws.exec(["sh", "-c", "ls"]).stdout == b"a\n"

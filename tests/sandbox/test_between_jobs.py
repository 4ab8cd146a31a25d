"""Nothing a job does reaches the next job, the fork-server or the host-side pool (issue 15).

Classes 1-4 and 6 are conformance checks (``posttrain/sandbox/conformance.py``, run on every
backend); here each runs against a one-slot pool, where every job follows the one before it in
the same slot. Class 5 (workspaces) and what only the local backend has (the fork-server's own
state, host-side deletion) are tested directly.
"""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from posttrain.sandbox import Limits, WorkspaceError
from posttrain.sandbox import conformance as cf
from posttrain.sandbox._starve import maybe_starved
from posttrain.sandbox.workspace import Workspace


@pytest.mark.parametrize(
    "check",
    [
        cf.no_data_of_other_jobs,  # class 1
        cf.cannot_change_other_processes,  # class 2
        cf.job_failures_are_not_infra,  # class 3
        cf.deep_trees_are_removed,  # class 4
        cf.wipe_restores_everything,  # class 6
    ],
    ids=lambda f: f.__name__,
)
def test_one_slot(pool1, check):
    assert check(pool1) is None


def test_fork_server_resets_its_own_state(pool1):
    """Class 2, second half: whatever changed the fork-server (here the host, which may), it puts
    its rlimits, affinity and nice value back before the next fork, or the slot is restarted."""
    slot = pool1._all_z[0]
    for _ in range(3):  # a slot with something of its last job still exiting is restarted after it (under load)
        state = pool1.run_python(cf._OWN_STATE)
        if slot.pid is not None:
            break
    assert state.ok and slot.pid is not None, state
    (server,) = slot.keep - {slot.pid}
    as_nobody = ["setpriv", f"--reuid={slot.uid}", f"--regid={slot.uid}", "--clear-groups", "--"]  # what a job could do
    subprocess.run([*as_nobody, "prlimit", f"--pid={server}", f"--as={300 << 20}:unlimited"], check=True)
    os.sched_setaffinity(server, {min(os.sched_getaffinity(0))})
    assert pool1.run_python(cf._OWN_STATE).stdout == state.stdout
    assert slot.keep - {slot.pid} == {server}  # reset in place
    subprocess.run([*as_nobody, "renice", "-n", "10", "-p", str(server)], check=True, capture_output=True)
    assert pool1.run_python(cf._OWN_STATE).stdout == state.stdout
    (server,) = slot.keep - {slot.pid}  # the one serving now (under load a slot whose job is still exiting restarts)
    # A hard limit it cannot raise back: it refuses the job, and the host runs it in a new slot.
    subprocess.run([*as_nobody, "prlimit", f"--pid={server}", f"--as={300 << 20}:{300 << 20}"], check=True)
    after = pool1.run_python(cf._OWN_STATE)
    assert after.ok and after.stdout == state.stdout, after
    assert server not in slot.keep


def test_the_job_side_starvation_filter():
    """Class 3's exception, the job's side (necessary, never sufficient: the host's probe decides,
    tests/sandbox/test_starvation.py): little CPU while waiting for one; sleeping or burning the
    budget is the job's own failure."""
    lim = Limits(cpu_cores=1.0)
    starved = {"cpu_s": 0.1, "run_delay_s": 1.8, "deprioritized": False}
    assert maybe_starved(starved, 2.0, lim)
    assert not maybe_starved({**starved, "run_delay_s": 0.0}, 2.0, lim)  # slept
    assert not maybe_starved({**starved, "cpu_s": 1.5}, 2.0, lim)  # burned its CPU
    assert not maybe_starved({**starved, "deprioritized": True}, 2.0, lim)  # niced itself
    assert not maybe_starved({}, 2.0, lim)  # a reply without the numbers is never starved


def test_deep_trees_in_a_workspace_do_not_break_rollback_or_close(pool):
    """Class 4: rollback and close of a workspace whose job left a tree deeper than the
    recursion limit (they raised RecursionError)."""
    with Workspace(pool) as ws:
        ex = ws.exec(["python3", "-c", cf._DEEP_TREE], timeout=60.0)
        assert ex.ok, ex
        ws.rollback()
        assert ws.exec(["find", ".", "-mindepth", "1"]).stdout == b""
        assert ws.exec(["python3", "-c", cf._DEEP_TREE], timeout=60.0).ok
        root = ws._root
    assert not root.exists()


def test_read_file_never_blocks_on_a_fifo(pool):
    """Class 5: a fifo in the workspace made read_file block forever, holding the lock."""
    with Workspace(pool) as ws:
        assert ws.exec(["mkfifo", "p"]).ok
        result: list[BaseException] = []

        def read() -> None:
            try:
                ws.read_file("p")
            except BaseException as e:
                result.append(e)

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout=5)
        assert not t.is_alive(), "read_file blocked on a fifo"
        assert isinstance(result[0], WorkspaceError) and "not a regular file" in str(result[0])
        assert ws.exec(["true"]).ok


def test_workspace_jobs_see_no_host_paths(pool, tmp_path):
    """Class 5: /proc/self/mountinfo in a workspace job showed lowerdir=/oldroot/tmp/... paths."""
    tmp_path.chmod(0o755)
    (tmp_path / "f").write_text("x")
    for initial in ({"a": "1"}, tmp_path):
        with Workspace(pool, initial) as ws:
            ws.snapshot()
            mounts = ws.exec(["cat", "/proc/self/mountinfo"]).stdout.decode()
            assert "overlay" in mounts
            for host in (str(pool.root), str(tmp_path), "/oldroot", os.path.basename(str(ws._root))):
                assert host not in mounts, mounts


def test_workspace_storage_is_charged_to_the_workspace(pool1):
    """Class 5: files a workspace keeps were charged to the exec slot that wrote them, so an
    unrelated job in that slot was OOM-killed; the workspace has its own limit instead."""
    lim = Limits(memory_mb=160)
    with Workspace(pool1, storage_mb=128) as ws:
        ex = ws.exec(["sh", "-c", "head -c 50000000 /dev/zero > a; head -c 50000000 /dev/zero > b"], limits=lim)
        assert ex.ok, ex
        hog = "python3 -c \"b = bytearray(100 << 20); b[::4096] = b'x' * (len(b) // 4096)\""
        ex = pool1.exec(["sh", "-c", hog], limits=lim)
        assert ex.ok and not ex.oom_killed, ex
        ex = ws.exec(["sh", "-c", "head -c 40000000 /dev/zero > c"], limits=lim)
        assert ex.outcome == "error" and b"No space left" in ex.stderr, ex  # its own limit
        assert ws.exec(["sh", "-c", hog], limits=lim).ok  # the job still has its own memory



_OOB_CYCLE = r"""
import array, ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
watchers = []
while len(watchers) < 200 and (fd := libc.inotify_init1(0)) >= 0:  # all the slot's uid may have
    watchers.append(fd)
a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
a.bind(b'\0posttrain-left'); a.listen(1)
b, c = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
rights = lambda *fds: [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))]
b.sendmsg([b'x'], rights(a.fileno(), c.fileno(), b.fileno(), *watchers), socket.MSG_OOB)
c.sendmsg([b'y'], rights(b.fileno(), c.fileno()), socket.MSG_OOB)
print('planted')
"""
_NEXT = r"""
import ctypes, socket
left = [line.split()[-1] for line in open('/proc/net/unix').read().splitlines()[1:]]
socket.socket(socket.AF_UNIX).bind(b'\0posttrain-left')
print(left, ctypes.CDLL(None).inotify_init1(0) >= 0)
"""


def test_sockets_in_flight_in_a_cycle_do_not_outlive_their_job(pool1):
    """A cycle of unix sockets in flight waits for the kernel's collector, which had not run when the
    next job of the slot started: with a listening abstract socket sent with MSG_OOB in it, its name
    (any bytes a job chose) was in that job's /proc/net/unix and binding the same name failed
    (EADDRINUSE); with the slot uid's inotify instances in flight too, that job could not watch a
    file (EMFILE). The fork-server now runs the collector, and restarts a slot it leaves sockets in."""
    for _ in range(2):
        ex = pool1.run_python(_OOB_CYCLE)
        assert ex.ok and ex.stdout == b"planted\n", ex
        nxt = pool1.run_python(_NEXT)
        assert nxt.ok and nxt.stdout == b"[] True\n", nxt

"""Pool behaviour one property at a time: infra errors, threads, arguments, recycling."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.errors import UserError
from posttrain.sandbox import (
    MAX_POOL_SIZE,
    Execution,
    HostCannotIsolate,
    Limits,
    LimitsError,
    PoolClosed,
    SandboxPool,
    open_pool,
)
from posttrain.sandbox._zslot import KILL_GRACE_S
from posttrain.sandbox.conformance import is_starved


def test_pool_implements_protocol(pool):
    assert isinstance(pool, SandboxPool)


def test_killed_slot_is_infra_error_not_program_failure(pool1):
    slot = pool1._all_z[0]
    result: list[Execution] = []
    t = threading.Thread(
        target=lambda: result.append(pool1.run_python("import time; time.sleep(20)", timeout=30))
    )
    t.start()
    time.sleep(0.5)
    os.killpg(slot.pid, signal.SIGKILL)
    t.join(timeout=30)
    (ex,) = result
    assert ex.outcome == "infra_error" and ex.infra_detail and ex.exit_code is None
    assert pool1.run_python("print(1)").ok  # the slot restarts on the next job


def test_concurrent_threads_get_their_own_results(pool):
    def job(i: int) -> bool:
        ex = pool.run_python(f"import os; print({i}); os.write(3, b'{i}')")
        return ex.ok and ex.stdout == f"{i}\n".encode() and ex.report == str(i).encode()

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(job, range(64)))


def test_exec_and_run_python_interleave_across_threads(pool):
    def job(i: int) -> bool:
        if i % 4 == 0:
            return pool.exec(["sh", "-c", f"echo {i}"]).stdout == f"{i}\n".encode()
        return pool.run_python(f"print({i})").stdout == f"{i}\n".encode()

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(job, range(16)))


def test_slots_are_recycled():
    with open_pool(size=1, recycle_every=3) as p:
        pids = set()
        for _ in range(7):
            pids.add(p._all_z[0].pid or 0)
            assert p.run_python("pass").ok
        assert len(pids) >= 2


def test_bad_arguments_raise_user_errors(pool):
    with pytest.raises(LimitsError, match="timeout"):
        pool.run_python("pass", timeout=-1)
    with pytest.raises(LimitsError, match="files"):
        pool.run_python("pass", files={"../escape": "x"})
    with pytest.raises(LimitsError, match="cmd"):
        pool.exec([])
    with pytest.raises(LimitsError, match="memory_mb"):
        Limits(memory_mb=0)
    assert issubclass(LimitsError, UserError) and issubclass(HostCannotIsolate, UserError)


def test_a_pool_past_its_size_bound_and_a_slot_cgroup_that_fails_partway_are_one_line_errors(tmp_path):
    """sandbox.workers 100,000 ran the host out of fds partway through making the pools' slots, and the
    cleanup of the slot being made raised KeyError 'pids' (its pids directory not made yet): a traceback."""
    from posttrain.sandbox._cgroup import CgroupLayout, SlotCgroup

    for size in (0, MAX_POOL_SIZE + 1, True):
        with pytest.raises(LimitsError, match=rf"pool size must be an integer in \[1, {MAX_POOL_SIZE}\]"):
            open_pool(size=size)
    for c in ("memory", "pids"):
        (tmp_path / c).mkdir()
    layout = CgroupLayout(1, {"memory": tmp_path / "memory", "cpu": tmp_path / "no-such-parent", "pids": tmp_path / "pids"})
    with pytest.raises(HostCannotIsolate, match="cannot create slot cgroup 'x'"):
        SlotCgroup(layout, "x")


def test_missing_python_is_host_cannot_isolate():
    with pytest.raises(HostCannotIsolate, match="python"):
        open_pool(size=1, python="/opt/nowhere/python3")


def test_closed_pool_refuses_jobs():
    p = open_pool(size=1)
    p.close()
    with pytest.raises(PoolClosed):
        p.run_python("pass")
    assert not any(d.exists() for s in p._all_z for d in s.cg.dirs.values())


def test_execution_json_handles_binary(pool):
    ex = pool.run_python("import sys; sys.stdout.buffer.write(b'\\xff\\x00')")
    out = json.loads(json.dumps(ex.to_json()))
    assert out["stdout"] == {"base64": "/wA="} and out["outcome"] == "ok"


def test_signal_and_exit_code_are_reported(pool):
    ex = pool.run_python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert ex.outcome == "error" and ex.signal == signal.SIGSEGV and ex.exit_code is None
    ex = pool.exec(["sh", "-c", "kill -SEGV $$"])
    assert ex.outcome == "error" and ex.signal == signal.SIGSEGV


def test_sys_exit_zero_before_asserts_is_ok_but_report_is_missing(pool):
    # The grader must not trust exit codes: a program can exit 0 early. The fd-3 report is the
    # evidence channel, and here it stays empty.
    ex = pool.run_python("import sys; sys.exit(0)\nimport os; os.write(3, b'PASS')")
    assert ex.ok and ex.report is None


def test_no_fd_or_process_leaks_across_jobs(pool):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    pool.run_python("pass")
    pool.probe.share(1.0)  # the starvation probe (started at its first use) holds two pipes for the pool's life
    jobs = [
        lambda: pool.run_python("print(1)"),
        lambda: pool.run_python("while True: pass", timeout=0.3),
        lambda: pool.exec(["sh", "-c", "sleep 5 & echo x"], timeout=2),
        lambda: pool.exec(["sleep", "5"], timeout=0.3),
        lambda: pool.run_python("import os\nif os.fork() == 0:\n    os.setsid(); import time; time.sleep(9)"),
    ]
    with ThreadPoolExecutor(4) as ex:  # a first round: what a slot opens once, at its first job, stays open
        list(ex.map(lambda f: f(), jobs * 3))  # (an exec slot's memory.oom_control)
    before = fds()
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda f: f(), jobs * 3))
    # (spinning on a loaded host; or an exec sandbox that could not even start in 0.3 s: infra before
    # any of the job's code ran)
    assert all(r.outcome != "infra_error" or is_starved(r) or "did not start" in (r.infra_detail or "")
               for r in results), [r for r in results if r.outcome == "infra_error"]
    assert fds() == before
    assert all(not s.cg.pids_inside() for s in pool._all_x)


def test_oom_from_many_small_processes_hits_the_job_not_the_slot(pool1):
    src = (
        "import os, time\nkids = []\nfor i in range(40):\n    pid = os.fork()\n    if pid == 0:\n"
        "        b = bytearray(12 << 20); b[::4096] = b'x' * (len(b) // 4096); time.sleep(2); os._exit(0)\n"
        "    kids.append(pid)\nfor k in kids: os.waitpid(k, 0)\n"
    )
    ex = pool1.run_python(src, timeout=15, limits=Limits(memory_mb=128, pids=64))
    assert ex.outcome == "error" and ex.oom_killed, ex
    assert pool1.run_python("print(1)").ok


def test_a_job_that_fills_its_file_systems_and_kills_the_fork_server_costs_no_later_job(pool1):
    """A job allowed more memory than the pool's default fills /dev/shm, /tmp and /work (files are
    in no process's RSS), with its own OOM score back at 0, then faults a page: the OOM killer takes
    the fork-server, the largest process left. Its files stayed charged to the stopped slot, and the
    restart wrote the default limit below them first: EBUSY, every later job of the slot an infra
    error."""
    fill = "for d in /dev/shm /tmp /work; do for i in 1 2 3 4 5; do cat /dev/zero > $d/f$i 2>/dev/null; done; done"
    src = ("import os\nopen('/proc/self/oom_score_adj', 'w').write('0')\n"
           f"os.execv('/bin/sh', ['sh', '-c', {fill + '; dd bs=64M count=1 if=/dev/zero of=/dev/null; sleep 30'!r}])\n")
    assert pool1.default_limits.memory_mb + 48 < 640 + 48 < 3 * 256  # more than the default, less than the places
    ex = pool1.run_python(src, timeout=10, limits=Limits(memory_mb=640))
    assert ex.outcome == "error", ex
    for _ in range(2):
        nxt = pool1.run_python("print(1)")
        assert nxt.ok and nxt.stdout == b"1\n", nxt


def test_jobs_may_use_threads_and_subreapers_without_leaving_processes(pool1):
    """threading is not preloaded (its at-fork hook is costly); a job importing it still works. A job
    that makes itself a child subreaper still leaves nothing behind for the next job."""
    ex = pool1.run_python(
        "import threading\nout = []\nt = threading.Thread(target=lambda: out.append(1))\nt.start(); t.join()\n"
        "print(out)"
    )
    assert ex.ok and ex.stdout == b"[1]\n", ex
    cg = pool1._all_z[0].cg
    before = len(cg.pids_inside())
    src = (
        "import ctypes, os, time\n"
        "assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER\n"
        "if os.fork() == 0:\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
        "time.sleep(0.2)\n"
    )
    ex = pool1.run_python(src)
    assert ex.ok, ex
    assert len(cg.pids_inside()) == before
    nxt = pool1.run_python("import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))")
    assert nxt.stdout == b"2\n", nxt  # the fork-server and this job


def test_exec_jobs_leave_no_zombie_charged_to_the_slot(pool1):
    """bwrap's own init used to outlive each exec job as a zombie of the host's pid 1, holding one of
    the slot's pids until reaped: a busy slot ran out of pids ("Can't fork for pid 1")."""
    for _ in range(5):
        assert pool1.exec(["sh", "-c", "true"]).ok
    assert (pool1._all_x[0].cg.dirs["pids"] / "pids.current").read_text().strip() == "0"


def test_host_ends_a_job_the_fork_server_could_not(pool1):
    """A fork-server starved past a job's deadline (seen under memory thrash on cgroup v2) does not
    turn the job into an infra error: the host kills the job's processes itself."""
    slot = pool1._all_z[0]
    pool1.run_python("pass")  # the slot is up and ``keep`` known
    (zygote,) = slot.keep - {slot.pid}
    result: list[Execution] = []
    t = threading.Thread(target=lambda: result.append(pool1.run_python("import time; time.sleep(60)", timeout=1)))
    t.start()
    time.sleep(0.5)
    os.kill(zygote, signal.SIGSTOP)  # the fork-server cannot enforce the 1 s deadline
    try:
        time.sleep(1 + KILL_GRACE_S + 1.0)
        assert set(slot.cg.pids_inside()) == slot.keep  # the host killed the job
    finally:
        os.kill(zygote, signal.SIGCONT)
    t.join(timeout=30)
    (ex,) = result
    assert ex.outcome == "error" and ex.signal == signal.SIGKILL and ex.timed_out, ex
    assert pool1.run_python("print(1)").ok


def test_a_job_whose_main_process_stays_stopped_ends_then_as_its_own_timeout(pool1):
    """Stopped by one of its own processes, a job's main process can do nothing but wait for its
    deadline: the fork-server ends it, as timed out, once its processes used 0.1 s of CPU since (a
    helper that spins) or two checks found none of them runnable (a helper that sleeps). One that a
    helper continues runs on, however long the helper waits for a CPU (it is runnable meanwhile).
    The next job in the slot is clean."""
    stop_then = ("import os, signal, time\nif os.fork() == 0:\n    os.kill(os.getppid(), signal.SIGSTOP)\n"
                 "    {}\nelse:\n    time.sleep(60)\n")
    for helper in ("time.sleep(60)", "while True: pass"):
        t0 = time.monotonic()
        ex = pool1.run_python(stop_then.format(helper), timeout=60)  # (a spinner beside nice -20 hogs: ~1% of a CPU)
        assert ex.timed_out and ex.outcome == "error" and time.monotonic() - t0 < 30, (helper, ex)
    resumed = ("import os, signal, time\npid = os.getpid()\nif os.fork() == 0:\n"
               "    os.kill(pid, signal.SIGSTOP)\n    time.sleep(0.05)\n    os.kill(pid, signal.SIGCONT)\n"
               "    os._exit(0)\ntime.sleep(1.5)\nos.wait()\nprint('ran on')\n")
    ex = pool1.run_python(resumed, timeout=30)
    assert ex.ok and ex.stdout.strip() == b"ran on", ex
    assert pool1.run_python("print(1)").ok

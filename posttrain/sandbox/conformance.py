"""Properties every ``SandboxPool`` backend must pass: one adversarial property per check.

Backends are checked only through the public protocol (``run_python``, ``exec``), so a Ray or
remote backend can run the same suite::

    from posttrain.sandbox import open_pool
    from posttrain.sandbox.conformance import run_conformance
    with open_pool(size=1) as pool:
        failures = {k: v for k, v in run_conformance(pool).items() if v}

Each check returns None when the property holds, else a sentence saying what went wrong. The
escape probes (``posttrain sandbox selftest``) are separate: they need host-side canaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from posttrain.sandbox._types import Execution, Limits

if TYPE_CHECKING:
    from posttrain.sandbox import SandboxPool

__all__ = ["CHECKS", "run_conformance", "check_invariants"]


def check_invariants(ex: Execution) -> str | None:
    """What must hold of any Execution, whatever the job did."""
    if ex.outcome == "infra_error":
        if not ex.infra_detail or ex.exit_code is not None:
            return f"infra_error must carry infra_detail and no exit code: {ex}"
    elif ex.outcome == "ok":
        if ex.exit_code != 0 or ex.timed_out or ex.oom_killed or ex.signal is not None:
            return f"ok must mean exit 0, no signal, no timeout, no OOM: {ex}"
    elif ex.outcome == "error":
        if ex.exit_code == 0 and not (ex.timed_out or ex.oom_killed):
            return f"error with exit code 0 and neither timeout nor OOM: {ex}"
    else:
        return f"unknown outcome {ex.outcome!r}"
    return None


def _expect(ex: Execution, cond: bool, what: str) -> str | None:
    bad = check_invariants(ex)
    if bad:
        return bad
    return None if cond else f"{what}; got {ex}"


def exit_zero_is_ok(pool: SandboxPool) -> str | None:
    ex = pool.run_python("print('hello')")
    return _expect(
        ex, ex.outcome == "ok" and ex.stdout == b"hello\n", "print then exit 0 must be ok with stdout"
    )


def exception_is_error(pool: SandboxPool) -> str | None:
    ex = pool.run_python("raise ValueError('boom')")
    return _expect(ex, ex.outcome == "error" and ex.exit_code == 1 and b"ValueError" in ex.stderr,
                   "an uncaught exception must be error, exit 1, traceback on stderr")  # fmt: skip


def sys_exit_code_is_kept(pool: SandboxPool) -> str | None:
    ex = pool.run_python("import sys; sys.exit(7)")
    return _expect(ex, ex.outcome == "error" and ex.exit_code == 7, "sys.exit(7) must give exit_code 7")


def stdin_and_files_arrive(pool: SandboxPool) -> str | None:
    ex = pool.run_python(
        "import sys; print(open('data/in.txt').read() + sys.stdin.read())",
        files={"data/in.txt": "ab"},
        stdin="cd",
    )
    return _expect(ex, ex.ok and ex.stdout == b"abcd\n", "files and stdin must reach the job")


def report_channel_fd3(pool: SandboxPool) -> str | None:
    ex = pool.run_python("import os; os.write(3, b'{\"nonce\": 1}'); os.close(3)")
    if bad := _expect(
        ex, ex.ok and ex.report == b'{"nonce": 1}', "bytes written to fd 3 must come back as report"
    ):
        return bad
    ex = pool.run_python("print('no report')")
    return _expect(ex, ex.report is None, "a job that writes nothing to fd 3 must have report None")


def timeout_kills(pool: SandboxPool) -> str | None:
    ex = pool.run_python("while True: pass", timeout=1.0)
    return _expect(ex, ex.outcome == "error" and ex.timed_out and ex.duration_s < 4.0,
                   "an infinite loop must be killed at the timeout and flagged timed_out")  # fmt: skip


def timeout_kills_exec(pool: SandboxPool) -> str | None:
    ex = pool.exec(["sleep", "30"], timeout=1.0)
    return _expect(ex, ex.outcome == "error" and ex.timed_out and ex.duration_s < 4.0,
                   "exec of sleep 30 with timeout 1 must time out")  # fmt: skip


def memory_limit_oom(pool: SandboxPool) -> str | None:
    src = "x = []\nwhile True:\n    x.append(bytearray(8 << 20))\n"
    ex = pool.run_python(src, timeout=20.0, limits=Limits(memory_mb=96))
    return _expect(
        ex, ex.outcome == "error" and ex.oom_killed, "allocating past memory_mb must be oom_killed"
    )


def env_is_clean(pool: SandboxPool) -> str | None:
    ex = pool.run_python("import os; print(sorted(os.environ))")
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "LC_CTYPE", "PWD"}
    names = set(eval(ex.stdout.decode())) if ex.ok else None  # our own repr of a list of str
    return _expect(ex, names is not None and names <= allowed, f"only {sorted(allowed)} may be set")


def writes_stay_in_workspace(pool: SandboxPool) -> str | None:
    ex = pool.run_python(
        "import os\nopen('mine.txt','w').write('x')\nbad=[]\n"
        "for p in ('/usr/x', '/etc/x', '/x', '/bin/x'):\n"
        "    try:\n        open(p, 'w').write('x'); bad.append(p)\n    except OSError:\n        pass\n"
        "print(bad)"
    )
    if bad := _expect(ex, ex.ok and ex.stdout == b"[]\n", "writes outside the workspace must fail"):
        return bad
    ex = pool.run_python("import os; print(os.path.exists('mine.txt'))")
    return _expect(
        ex, ex.ok and ex.stdout == b"False\n", "a file written by one job must not be seen by the next"
    )


def fork_bomb_contained(pool: SandboxPool) -> str | None:
    src = (
        "import os, time\nn = 0\nfor _ in range(500):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30); os._exit(0)\n    n += 1\n"
        "print(n)"
    )
    ex = pool.run_python(src, timeout=10.0, limits=Limits(pids=32))
    if bad := _expect(ex, ex.ok and int(ex.stdout or b"999") <= 32, "forks must stop at the pids limit"):
        return bad
    ex = pool.run_python("print('alive')")
    return _expect(ex, ex.ok, "the next job must run normally after a fork storm")


def output_capped(pool: SandboxPool) -> str | None:
    lim = Limits(output_bytes=1000)
    ex = pool.run_python("import sys\nfor _ in range(2000): sys.stdout.write('y' * 1000)\n", limits=lim)
    return _expect(ex, ex.ok and len(ex.stdout) == 1000 and ex.stdout_truncated and not ex.stderr_truncated,
                   "stdout past output_bytes must be cut at the cap and flagged")  # fmt: skip


def binary_output(pool: SandboxPool) -> str | None:
    ex = pool.run_python("import sys; sys.stdout.buffer.write(bytes(range(256)))")
    return _expect(ex, ex.ok and ex.stdout == bytes(range(256)), "binary stdout must come back byte-exact")


def exec_generic(pool: SandboxPool) -> str | None:
    ex = pool.exec(["sh", "-c", "cat in.txt; echo rep >&3; exit 3"], files={"in.txt": "data"})
    return _expect(ex, ex.outcome == "error" and ex.exit_code == 3 and ex.stdout == b"data" and ex.report == b"rep\n",
                   "exec must run the command in the workspace with fd 3")  # fmt: skip


def ordinary_code_still_works(pool: SandboxPool) -> str | None:
    src = (
        "import asyncio, multiprocessing, subprocess, tempfile, threading\n"
        "async def main():\n    await asyncio.sleep(0.01)\n    return 1\n"
        "assert asyncio.run(main()) == 1  # needs socketpair\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "with multiprocessing.Pool(2) as p:\n    assert p.map(abs, [-1, -2]) == [1, 2]  # needs /dev/shm\n"
        "assert subprocess.run(['echo', 'x'], capture_output=True).stdout == b'x\\n'\n"
        "with tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n"
        "print('ok')\n"
    )
    ex = pool.run_python(src, timeout=30.0)
    return _expect(
        ex,
        ex.ok and ex.stdout == b"ok\n",
        "asyncio, threads, multiprocessing, subprocess, tempfile must work",
    )


CHECKS: dict[str, Callable[[SandboxPool], str | None]] = {
    f.__name__: f
    for f in (
        exit_zero_is_ok, exception_is_error, sys_exit_code_is_kept, stdin_and_files_arrive, report_channel_fd3,
        timeout_kills, timeout_kills_exec, memory_limit_oom, env_is_clean, writes_stay_in_workspace,
        fork_bomb_contained, output_capped, binary_output, exec_generic, ordinary_code_still_works,
    )
}  # fmt: skip


def run_conformance(pool: SandboxPool) -> dict[str, str | None]:
    """Run every check; {name: None if it holds, else what went wrong}."""
    return {name: check(pool) for name, check in CHECKS.items()}

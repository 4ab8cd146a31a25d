"""Properties every ``SandboxPool`` backend must pass: one adversarial property per check.

Backends are checked only through the public protocol (``run_python``, ``exec``), so a Ray or
remote backend can run the same suite::

    from posttrain.sandbox import open_pool
    from posttrain.sandbox.conformance import run_conformance
    with open_pool(size=1) as pool:
        failures = {k: v for k, v in run_conformance(pool).items() if v}

Each check returns None when the property holds, else a sentence saying what went wrong. The
escape probes (``posttrain sandbox selftest``) are separate: they need host-side canaries.

The checks from ``no_data_of_other_jobs`` on are about jobs that share a slot one after another
(issue 15): nothing a job does may reach the next job or the machinery that serves it. A backend
may spread consecutive calls over several slots, so each of them runs its attacking job
``ROUNDS`` times before checking ``ROUNDS`` times (enough for a first-in-first-out pool of up to
``ROUNDS`` slots to put a check right after an attack in every slot).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from posttrain.sandbox._types import Execution, Limits

if TYPE_CHECKING:
    from posttrain.sandbox import SandboxPool

__all__ = ["CHECKS", "run_conformance", "check_invariants", "is_starved"]


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


def is_starved(ex: Execution) -> bool:
    """An infra error for a job that ran out of wall-clock time while the host starved it of CPU.
    The local backend no longer gives one (a starved job is rerun once and the rerun's verdict
    stands: ``_starve.py``); a backend that does must never let the job cause it."""
    return ex.outcome == "infra_error" and "starved of CPU" in (ex.infra_detail or "")


def timeout_kills(pool: SandboxPool) -> str | None:
    ex = pool.run_python("while True: pass", timeout=1.0)
    return _expect(ex, (ex.outcome == "error" and ex.timed_out or is_starved(ex)) and ex.duration_s < 4.0,
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


ROUNDS = 4
_TAG = "PTSEC" + "RET"  # never written whole in a job's source, so a match is another job's data

# Looks for marked secrets (by hash) in every object, every frame and every writable mapping of
# its own process, before it reads its stdin; prints the hashes found, as JSON.
_SCAN = r"""
import gc, hashlib, json, re, sys
want, found = set(json.loads(WANT)), set()
pat = re.compile(("PTSEC" + "RET").encode() + rb"[0-9a-f]{32}")
def check(b):
    for m in pat.finditer(b):
        h = hashlib.sha256(m.group()).hexdigest()
        if h in want:
            found.add(h)
def visit(o):
    if isinstance(o, (bytes, bytearray, memoryview)):
        check(bytes(o))
    elif isinstance(o, str):
        check(o.encode("utf-8", "surrogateescape"))
for o in gc.get_objects():
    visit(o)
    for r in gc.get_referents(o):
        visit(r)
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()) + list(f.f_globals.values()):
        visit(v)
    f = f.f_back
try:
    mem = open("/proc/self/mem", "rb", buffering=0)
    for line in open("/proc/self/maps"):
        span, perms = line.split()[:2]
        if perms.startswith("rw"):
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                check(mem.read(hi - lo))
            except (OSError, OverflowError, ValueError):
                pass
except OSError:
    pass
print(json.dumps(sorted(found)))
"""


def _secret() -> tuple[str, str]:
    value = _TAG + os.urandom(16).hex()
    return value, hashlib.sha256(value.encode()).hexdigest()


def no_data_of_other_jobs(pool: SandboxPool) -> str | None:
    """Class 1: a job's memory holds no earlier job's program, stdout or report, and none of its
    own stdin before it reads it (the code verifier sends every test and its nonce on stdin)."""
    names: dict[str, str] = {}
    for _ in range(ROUNDS):
        (src, h1), (out, h2), (rep, h3) = _secret(), _secret(), _secret()
        names.update({h1: "an earlier job's source", h2: "an earlier job's stdout", h3: "an earlier job's report"})
        ex = pool.run_python(
            f"import os, sys\nx = {src!r}\nsys.stdout.buffer.write(bytes.fromhex({out.encode().hex()!r}))\n"
            f"os.write(3, bytes.fromhex({rep.encode().hex()!r}))"
        )
        if bad := _expect(ex, ex.ok, "the job planting secrets must run"):
            return bad
    for _ in range(ROUNDS):
        stdin, h4 = _secret()
        names[h4] = "its own unread stdin"
        ex = pool.run_python(_SCAN.replace("WANT", repr(json.dumps(sorted(names)))), stdin=stdin, timeout=60.0)
        if bad := _expect(ex, ex.ok, "the scanning job must run"):
            return bad
        found = json.loads(ex.stdout)
        if found:
            return f"a job found {sorted({names[h] for h in found})} in its own memory"
    return None


_OWN_STATE = (
    "import json, os, resource\n"
    "lims = [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith('RLIMIT_')\n"
    "        and n not in ('RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CORE')]  # set per job\n"
    "print(json.dumps([lims, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),\n"
    "                  os.sched_getscheduler(0)]))\n"
)
_CHANGE_OTHERS = (
    "import ctypes, os, resource\n"
    "libc = ctypes.CDLL(None)\n"
    "changed = []\n"
    "for pid in sorted({int(p) for p in os.listdir('/proc') if p.isdigit()} - {os.getpid()}):\n"
    "    for what, call in (\n"
    "        ('AS', lambda: resource.prlimit(pid, resource.RLIMIT_AS, (300 << 20, 300 << 20))),\n"
    "        ('NOFILE', lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (12, 12))),\n"
    "        ('nice', lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),\n"
    "        ('affinity', lambda: os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})),\n"
    "        ('scheduler', lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))),\n"
    "    ):\n"
    "        try:\n            call(); changed.append((pid, what))\n        except OSError:\n            pass\n"
    "    if libc.syscall(251, 1, pid, 3 << 13) == 0:  # ioprio_set(IOPRIO_WHO_PROCESS, pid, IDLE), x86_64\n"
    "        changed.append((pid, 'ioprio'))\n"
    "try:\n    os.setpriority(os.PRIO_USER, 0, 19); changed.append(('uid', 'nice'))\nexcept OSError:\n    pass\n"
    "print(changed)\n"
)


def cannot_change_other_processes(pool: SandboxPool) -> str | None:
    """Class 2: a job cannot set the rlimits, nice value, CPU affinity, scheduler or I/O priority
    of any process but its own (the fork-server that serves the next jobs above all)."""
    before = pool.run_python(_OWN_STATE)
    if bad := _expect(before, before.ok, "reading a job's own limits must work"):
        return bad
    attacks = [pool.run_python(_CHANGE_OTHERS) for _ in range(ROUNDS)]
    for ex in attacks:
        if bad := check_invariants(ex):
            return bad
    for _ in range(ROUNDS):
        after = pool.run_python(_OWN_STATE)
        if after.outcome != "ok" or after.stdout != before.stdout:
            changed = [a.stdout.decode(errors="replace").strip() for a in attacks]
            return f"after jobs changed other processes ({changed}) the next job got {after} instead of {before.stdout!r}"
    return None


_FILL_SLOT = (
    "import os\n"
    "try:\n    open('/proc/self/oom_score_adj', 'w').write('0')  # not the first pick of the OOM killer\n"
    "except OSError:\n    pass\n"
    "chunk = b'x' * (1 << 20)\n"
    "for n in range(6):\n"
    "    with open(f'/dev/shm/fill{n}', 'wb') as f:\n"
    "        for _ in range(48):\n            f.write(chunk)\n"
)


def job_failures_are_not_infra(pool: SandboxPool) -> str | None:
    """Class 3: what a job does to its slot is its own failure, never an infra error: filling the
    slot's memory with files until the kernel kills everything, sleeping past its deadline."""
    ex = pool.run_python(_FILL_SLOT, timeout=30.0, limits=Limits(memory_mb=64))
    if bad := _expect(ex, ex.outcome == "error", "a job filling its slot's memory must be the job's error"):
        return bad
    ex = pool.run_python("import time; time.sleep(30)", timeout=1.0)
    if bad := _expect(ex, ex.outcome == "error" and ex.timed_out, "a job sleeping past its timeout must time out"):
        return bad
    ex = pool.run_python("print('next')")
    return _expect(ex, ex.ok and ex.stdout == b"next\n", "the next job must run normally")


_DEEP_TREE = (
    "import os\n"
    "for top in ('/tmp', '/dev/shm', '.'):\n"
    "    d = os.open(top, os.O_RDONLY)\n"
    "    for _ in range(3000):  # deeper than Python's recursion limit, longer than PATH_MAX\n"
    "        os.mkdir('d', dir_fd=d)\n"
    "        nxt = os.open('d', os.O_RDONLY, dir_fd=d)\n"
    "        os.close(d)\n"
    "        d = nxt\n"
    "    open(os.open('f', os.O_CREAT | os.O_WRONLY, dir_fd=d), 'w').write('x')\n"
    "    os.fchmod(d, 0)\n"
    "    os.close(d)\n"
    "os.chmod('d', 0o100)\n"
    "print('planted')\n"
)


def deep_trees_are_removed(pool: SandboxPool) -> str | None:
    """Class 4: what a job leaves (deep trees, odd modes) is removed and cannot break cleanup."""
    for _ in range(ROUNDS // 2):
        ex = pool.run_python(_DEEP_TREE, timeout=60.0)
        if bad := _expect(ex, ex.ok and ex.stdout == b"planted\n", "planting a deep tree must work"):
            return bad
    ex = pool.exec(["python3", "-c", _DEEP_TREE], timeout=60.0)
    if bad := _expect(ex, ex.ok and ex.stdout == b"planted\n", "planting a deep tree with exec must work"):
        return bad
    look = "import os\nprint([n for top in ('/tmp', '/dev/shm', '.') for n in os.listdir(top)])\n"
    for _ in range(ROUNDS // 2):
        ex = pool.run_python(look)
        if bad := _expect(ex, ex.ok and ex.stdout == b"[]\n", "the next job must find nothing left"):
            return bad
    ex = pool.exec(["find", "/tmp", "/dev/shm", ".", "-mindepth", "1"])
    return _expect(ex, ex.ok and ex.stdout == b"", "the next exec job must find nothing left")


_ROOTS_STATE = (
    "import json, os\n"
    "def xattrs(p):\n    try:\n        return sorted(os.listxattr(p))\n    except OSError:\n        return []\n"
    "roots = {p: [oct(os.stat(p).st_mode), xattrs(p)] for p in ('/work', '/tmp', '/dev/shm', '/dev/mqueue')}\n"
    "roots.update({p: roots[p] + [os.stat(p).st_mtime > 1 and os.stat(p).st_atime > 1]\n"
    "              for p in ('/tmp', '/dev/shm', '/dev/mqueue')})\n"
    "import ctypes\n"
    "q = ctypes.CDLL(None).mq_open(b'/posttrain-probe', os.O_RDONLY, 0, None)  # -1 unless left by a job\n"
    "print(json.dumps([roots, q]))\n"
)
_CHANGE_ROOTS = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.mq_open.restype = ctypes.c_int\n"
    "q = libc.mq_open(b'/posttrain-probe', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
    "print('mq', q, ctypes.get_errno())\n"
    "if os.path.isdir('/work/job'):  # this backend's job directory: gone, so the roots are empty\n"
    "    os.chdir('/')\n    import shutil\n    shutil.rmtree('/work/job')\n"
    "# /dev/mqueue's mode keeps its owner's write bit: the queues in it must still be removable\n"
    "for p, mode in (('/work', 0o555), ('/tmp', 0o555), ('/dev/shm', 0o555), ('/dev/mqueue', 0o1755)):\n"
    "    for call in (lambda: os.setxattr(p, 'user.posttrain', b'1'), lambda: os.utime(p, (1, 1)),\n"
    "                 lambda: os.chmod(p, mode)):\n"
    "        try:\n            call()\n        except OSError as e:\n            print(p, e)\n"
)


def wipe_restores_everything(pool: SandboxPool) -> str | None:
    """Class 6: POSIX message queues, ``user.*`` xattrs, and the mode and timestamps of the
    writable roots (/work, /tmp, /dev/shm) and of /dev/mqueue do not survive into the next job."""
    before = pool.run_python(_ROOTS_STATE)
    if bad := _expect(before, before.ok, "reading the roots' state must work"):
        return bad
    for _ in range(ROUNDS):
        ex = pool.run_python(_CHANGE_ROOTS)
        if bad := _expect(ex, ex.ok, "changing the roots must not fail the job"):
            return bad
    for _ in range(ROUNDS):
        after = pool.run_python(_ROOTS_STATE)
        if not after.ok or after.stdout != before.stdout:
            return f"the next job saw {after.stdout!r} (or failed: {after.outcome}) instead of {before.stdout!r}"
    ex = pool.run_python(
        "import multiprocessing\nwith multiprocessing.Pool(2) as p:\n    print(p.map(abs, [-1, -2]))\n", timeout=30.0
    )
    return _expect(ex, ex.ok and ex.stdout == b"[1, 2]\n", "multiprocessing must work in the next job")


CHECKS: dict[str, Callable[[SandboxPool], str | None]] = {
    f.__name__: f
    for f in (
        exit_zero_is_ok, exception_is_error, sys_exit_code_is_kept, stdin_and_files_arrive, report_channel_fd3,
        timeout_kills, timeout_kills_exec, memory_limit_oom, env_is_clean, writes_stay_in_workspace,
        fork_bomb_contained, output_capped, binary_output, exec_generic, ordinary_code_still_works,
        no_data_of_other_jobs, cannot_change_other_processes, job_failures_are_not_infra, deep_trees_are_removed,
        wipe_restores_everything,
    )
}  # fmt: skip


def run_conformance(pool: SandboxPool) -> dict[str, str | None]:
    """Run every check; {name: None if it holds, else what went wrong}."""
    return {name: check(pool) for name, check in CHECKS.items()}

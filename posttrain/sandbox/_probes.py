"""Escape probes: each runs hostile code *inside* the real sandbox and says whether it was contained.

Used by ``posttrain sandbox selftest`` and by tests/sandbox/test_probes.py. A probe returns None
when contained, else a sentence saying what escaped. The probes named ``between_jobs_*`` are the
classes of issue 15 (what a job can do to the jobs after it, the fork-server and the host-side
pool); all but the workspace one are conformance checks, run here too so that the selftest
covers them. Those of issue 21 (what a job's failure may not buy it: self-starvation, a slow wipe;
what it may not pass on: the inode channel, per-user kernel counters) are in ``_probes_fair``. Host-side canaries (a loopback server, a
unix socket, an environment variable, a 0600 secret file) are set up by ``HostCanaries``.
Never run these sources outside the sandbox: they mount, fork-bomb and fill memory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from posttrain.sandbox import _probes_fair, conformance
from posttrain.sandbox._pool import LocalSandboxPool
from posttrain.sandbox._types import Execution, Limits
from posttrain.sandbox.errors import WorkspaceError

CANARY_ENV = "POSTTRAIN_SANDBOX_CANARY"


@dataclass
class HostCanaries:
    """Things on the host a contained job must not reach."""

    tcp_port: int
    unix_path: str
    secret_path: str
    secret: str
    host_pid: int

    @staticmethod
    @contextlib.contextmanager
    def start():
        secret = os.urandom(8).hex()
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        d = tempfile.mkdtemp(prefix="posttrain-canary-")
        unix_path = os.path.join(d, "canary.sock")
        usrv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        usrv.bind(unix_path)
        usrv.listen(8)
        os.chmod(d, 0o755)
        os.chmod(unix_path, 0o777)
        secret_path = os.path.join(d, "secret")
        Path(secret_path).write_text(secret)
        os.chmod(secret_path, 0o600)
        stop = threading.Event()

        def serve(s: socket.socket) -> None:
            s.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    conn, _ = s.accept()
                    conn.sendall(b"LEAK")
                    conn.close()

        threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in (srv, usrv)]
        for t in threads:
            t.start()
        old = os.environ.get(CANARY_ENV)
        os.environ[CANARY_ENV] = secret
        try:
            yield HostCanaries(srv.getsockname()[1], unix_path, secret_path, secret, os.getpid())
        finally:
            stop.set()
            for t in threads:
                t.join()
            srv.close()
            usrv.close()
            if old is None:
                os.environ.pop(CANARY_ENV, None)
            else:
                os.environ[CANARY_ENV] = old
            for p in (unix_path, secret_path):
                with contextlib.suppress(OSError):
                    os.unlink(p)
            with contextlib.suppress(OSError):
                os.rmdir(d)


Probe = Callable[[LocalSandboxPool, HostCanaries], "str | None"]


def _py(pool: LocalSandboxPool, src: str, **kw) -> Execution:
    return pool.run_python(src, **kw)


def _leaks(ex: Execution, what: str) -> str | None:
    """The probe sources print LEAK:<detail> for anything that got through."""
    if ex.outcome == "infra_error":
        return f"{what}: infra_error ({ex.infra_detail})"
    if b"LEAK" in ex.stdout:
        return f"{what}: {ex.stdout.decode(errors='replace').strip()[:300]}"
    if b"DONE" not in ex.stdout:
        return f"{what}: probe did not finish: {ex.stderr.decode(errors='replace')[-300:]}"
    return None


def outbound_network(pool, c):
    src = (
        "import socket\n"
        "for fam, addr in ((socket.AF_INET, ('1.1.1.1', 53)), (socket.AF_INET, ('192.0.2.1', 80)),\n"
        "                  (socket.AF_INET6, ('2606:4700::1111', 53))):\n"
        "    try:\n        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect(addr)\n"
        "        print('LEAK connected', addr)\n    except OSError:\n        pass\n"
        "try:\n    socket.getaddrinfo('example.com', 80); print('LEAK dns')\nexcept OSError:\n    pass\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "outbound network")


def host_loopback(pool, c):
    src = (
        "import socket\n"
        f"try:\n    s = socket.create_connection(('127.0.0.1', {c.tcp_port}), timeout=2); print('LEAK tcp', s.recv(9))\n"
        "except OSError:\n    pass\n"
        f"try:\n    u = socket.socket(socket.AF_UNIX); u.connect({c.unix_path!r}); print('LEAK unix', u.recv(9))\n"
        "except OSError:\n    pass\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "host loopback / unix socket")


def host_secrets(pool, c):
    src = (
        "import os\n"
        f"for p in ('/etc/shadow', '/etc/passwd', {c.secret_path!r}, '/root', '/home'):\n"
        "    if os.path.exists(p): print('LEAK exists', p)\n"
        f"if os.environ.get({CANARY_ENV!r}): print('LEAK env')\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        f"            if {c.secret!r}.encode() in open(f'/proc/{{pid}}/environ','rb').read(): print('LEAK proc env')\n"
        "        except OSError: pass\n"
        "print('DONE')\n"
    )
    leak = _leaks(_py(pool, src), "host secrets (python)")
    if leak:
        return leak
    ex = pool.exec(
        [
            "sh",
            "-c",
            f"env | grep -q {c.secret} && echo LEAK; cat /etc/shadow 2>/dev/null && echo LEAK; echo DONE",
        ]
    )
    return _leaks(ex, "host secrets (exec)")


def host_proc(pool, c):
    src = (
        "import os\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "if len(pids) > 4: print('LEAK pids', pids[:10])\n"
        "import signal\n"
        f"try:\n    os.kill({c.host_pid}, 0)\n    print('LEAK can signal a host pid') if {c.host_pid} not in map(int, pids) else None\n"
        "except OSError:\n    pass\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "host /proc")


def other_workspaces(pool, c):
    root = str(pool.root)
    src = f"import os\nif os.path.exists({root!r}): print('LEAK pool root visible')\nprint('DONE')\n"
    leak = _leaks(_py(pool, src), "other workspaces (python)")
    if leak:
        return leak
    ex = pool.exec(["sh", "-c", f"ls {root} 2>/dev/null && echo LEAK; ls / | tr '\\n' ' '; echo DONE"])
    return _leaks(ex, "other workspaces (exec)")


def writes_outside(pool, c):
    targets = ["/usr/posttrain-probe", "/etc/posttrain-probe", "/posttrain-probe", "/proc/sys/kernel/hostname",
               "/dev/posttrain-probe", "/sys/posttrain-probe", "/lib/posttrain-probe"]  # fmt: skip
    src = (
        "import os\n"
        f"for p in {targets!r}:\n"
        "    try:\n        open(p, 'w').write('x'); print('LEAK wrote', p)\n    except OSError:\n        pass\n"
        "print('DONE')\n"
    )
    leak = _leaks(_py(pool, src), "writes outside the workspace")
    if leak:
        return leak
    host = [p for p in ("/usr/posttrain-probe", "/posttrain-probe") if os.path.exists(p)]
    return f"files appeared on the host: {host}" if host else None


def fork_bomb(pool, c):
    ex = pool.exec(["sh", "-c", "b(){ b|b& }; b; sleep 3"], timeout=3.0, limits=Limits(pids=32))
    if ex.outcome == "infra_error":
        return f"fork bomb: infra_error {ex.infra_detail}"
    left = [s.cg.pids_inside() for s in pool._all_x]
    if any(left):
        return f"fork bomb left processes on the host: {left}"
    after = pool.run_python("print('alive')")
    return None if after.ok else f"the pool did not recover: {after}"


def memory_bomb(pool, c):
    ex = pool.run_python("b = bytearray(1 << 30)\nb[::4096] = b'x' * (len(b) // 4096)\nprint('LEAK')",
                         timeout=20.0, limits=Limits(memory_mb=128))  # fmt: skip
    if b"LEAK" in ex.stdout or not ex.oom_killed:
        return f"1 GiB allocation under a 128 MiB limit was not OOM-killed: {ex}"
    return None


def disk_fill(pool, c):
    src = (
        "import os\nfor p in ('/tmp/fill', '/dev/shm/fill', 'fill'):\n"
        "    n = 0\n    try:\n        with open(p, 'wb') as f:\n"
        "            for _ in range(400):\n                f.write(b'x' * (1 << 20)); f.flush(); n += 1\n"
        "        print('LEAK wrote 400 MiB to', p)\n"
        "    except OSError:\n        pass\n"
        "    try: os.unlink(p)\n    except OSError: pass\n"
        "print('DONE')\n"
    )
    leak = _leaks(_py(pool, src, timeout=30.0, limits=Limits(file_size_mb=64, memory_mb=512)), "disk fill")
    if leak:
        return leak
    # exec path: the workspace is on the pool's tmpfs, so writes are charged to the job's memory.
    ex = pool.exec(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do head -c 50000000 /dev/zero > f$i || exit 9; done"],
                   timeout=30.0, limits=Limits(memory_mb=128))  # fmt: skip
    return None if ex.outcome == "error" else f"exec wrote 400 MB under a 128 MiB limit: {ex}"


def cpu_spin(pool, c):
    ex = pool.run_python("while True: pass", timeout=1.0)
    if not (ex.timed_out or conformance.is_starved(ex)) or ex.duration_s > 3.0:
        return f"CPU spin was not stopped at the 1 s timeout: {ex}"
    ex = pool.exec(["sh", "-c", "while :; do :; done"], timeout=1.0)
    stopped = ex.timed_out or conformance.is_starved(ex)
    return None if stopped and ex.duration_s < 3.0 else f"exec CPU spin not stopped: {ex}"


def child_outlives(pool, c):
    before = [len(s.cg.pids_inside()) for s in pool._all_z]
    src = (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
        "print('DONE')\n"
    )
    ex = pool.run_python(src)
    after = [len(s.cg.pids_inside()) for s in pool._all_z]
    if ex.outcome != "ok" or after != before:
        return f"a daemonized child survived the job (slot process counts {before} -> {after}): {ex}"
    ex = pool.exec(["sh", "-c", "setsid sleep 60 & echo DONE"])
    left = [s.cg.pids_inside() for s in pool._all_x]
    return f"exec: processes outlived the job: {left}" if any(left) else _leaks(ex, "exec child")


def signals_to_parent(pool, c):
    src = (
        "import os, signal\n"
        f"for pid in (1, os.getppid(), -1, {c.host_pid}):\n"
        "    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):\n"
        "        try: os.kill(pid, sig)\n        except OSError: pass\n"
        "print('DONE')\n"
    )
    ex = pool.run_python(src)
    nxt = pool.run_python("print('alive')")
    if not nxt.ok:
        return f"the fork-server did not survive signals from a job: {nxt}"
    if ex.outcome == "infra_error":
        return f"a job's signals broke its slot: {ex.infra_detail}"
    return None


def setuid_caps(pool, c):
    src = (
        "import os\n"
        "st = open('/proc/self/status').read()\n"
        "if os.getuid() == 0 or os.geteuid() == 0: print('LEAK uid 0')\n"
        "for line in st.splitlines():\n"
        "    if line.startswith(('CapEff', 'CapPrm', 'CapAmb')) and int(line.split()[1], 16): print('LEAK', line)\n"
        "    if line.startswith('NoNewPrivs') and line.split()[1] != '1': print('LEAK', line)\n"
        "try:\n    os.setuid(0); print('LEAK setuid')\nexcept OSError:\n    pass\n"
        "print('DONE')\n"
    )
    leak = _leaks(_py(pool, src), "setuid/capabilities")
    if leak:
        return leak
    ex = pool.exec(["sh", "-c", "test -u /usr/bin/su && /usr/bin/su -c 'echo LEAK' root </dev/null 2>/dev/null; "
                    "test $(id -u) = 0 && echo LEAK; echo DONE"])  # fmt: skip
    return _leaks(ex, "setuid binary")


_CTYPES = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def mount(pool, c):
    src = _CTYPES + (
        "os.makedirs('/tmp/m', exist_ok=True)\n"
        "if libc.mount(b'none', b'/tmp/m', b'tmpfs', 0, None) == 0: print('LEAK mount')\n"
        "if libc.umount2(b'/work', 2) == 0: print('LEAK umount')\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "mount")


def ptrace(pool, c):
    src = _CTYPES + (
        "PTRACE_ATTACH, PTRACE_TRACEME = 16, 0\n"
        "for pid in (1, os.getppid()):\n"
        "    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0: print('LEAK attach', pid)\n"
        "if libc.ptrace(PTRACE_TRACEME, 0, None, None) == 0: print('LEAK traceme')\n"
        "try:\n    open('/proc/1/mem', 'rb').read(1); print('LEAK /proc/1/mem')\nexcept OSError:\n    pass\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "ptrace")


def nested_userns(pool, c):
    src = _CTYPES + (
        "for flag in (0x10000000, 0x40000000, 0x20000, 0x20000000):\n"
        "    if libc.unshare(flag) == 0: print('LEAK unshare', hex(flag))\n"
        "print('DONE')\n"
    )
    leak = _leaks(_py(pool, src), "nested namespaces")
    if leak:
        return leak
    ex = pool.exec(
        [
            "sh",
            "-c",
            "unshare -U true 2>/dev/null && echo LEAK; unshare -r true 2>/dev/null && echo LEAK; echo DONE",
        ]
    )
    return _leaks(ex, "nested userns (exec)")


def tiocsti(pool, c):
    src = _CTYPES + (
        "TIOCSTI = 0x5412\nch = ctypes.c_char(b'x')\n"
        "for fd in (0, 1, 2):\n"
        "    if libc.ioctl(fd, TIOCSTI, ctypes.byref(ch)) == 0: print('LEAK tiocsti', fd)\n"
        "try:\n    os.open('/dev/tty', os.O_RDWR); print('LEAK controlling tty')\nexcept OSError:\n    pass\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "TIOCSTI")


def stdout_flood(pool, c):
    ex = pool.run_python("import os\nwhile True: os.write(1, b'y' * 65536)", timeout=2.0,
                         limits=Limits(output_bytes=1 << 20))  # fmt: skip
    # Stopped by the 2 s timeout, or (fork-server: stdout is a memfd) by the file-size rlimit:
    # SIGXFSZ, or EFBIG for Python, which ignores that signal.
    stopped = ex.timed_out or ex.signal == signal.SIGXFSZ or b"File too large" in ex.stderr
    if len(ex.stdout) != 1 << 20 or not ex.stdout_truncated or not stopped:
        return f"stdout flood not capped at 1 MiB and stopped: {len(ex.stdout)} bytes, {ex}"
    ex = pool.exec(["sh", "-c", "yes"], timeout=1.0, limits=Limits(output_bytes=1 << 20))
    if len(ex.stdout) != 1 << 20 or not ex.stdout_truncated or not ex.timed_out:
        return f"exec stdout flood not capped at 1 MiB and stopped: {len(ex.stdout)} bytes, {ex}"
    return None


def dev_access(pool, c):
    src = (
        "import os\n"
        "allowed = {'null', 'zero', 'full', 'random', 'urandom', 'tty', 'shm', 'pts', 'ptmx', 'fd', 'stdin',\n"
        "           'stdout', 'stderr', 'core', 'mqueue'}\n"
        "extra = set(os.listdir('/dev')) - allowed\n"
        "if extra: print('LEAK devices', sorted(extra))\n"
        "for p in ('/dev/mem', '/dev/kmsg', '/dev/sda', '/dev/vda', '/dev/kvm', '/dev/port'):\n"
        "    try:\n        os.open(p, os.O_RDONLY); print('LEAK opened', p)\n    except OSError:\n        pass\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, src), "/dev access")


def state_for_next_job(pool, c):
    plant = (
        "import os\n"
        "for p in ('/tmp/planted', '/dev/shm/planted', 'planted', '/work/planted'):\n"
        "    try: open(p, 'w').write('x')\n    except OSError: pass\n"
        "os.makedirs('/tmp/locked/d', exist_ok=True); os.chmod('/tmp/locked', 0)\n"
        "import ctypes\nctypes.CDLL(None).shmget(0, 4096, 0o1600)  # a SysV segment outlives its creator\n"
        "print('DONE')\n"
    )
    ex = _py(pool, plant)
    if ex.outcome != "ok":
        return f"planting job failed: {ex}"
    look = (
        "import os\n"
        "for top in ('/tmp', '/dev/shm', '/work', '.'):\n"
        "    for root, dirs, files in os.walk(top):\n"
        "        if 'planted' in files or 'locked' in dirs: print('LEAK', root)\n"
        "if len(open('/proc/sysvipc/shm').read().splitlines()) > 1: print('LEAK SysV shm segment')\n"
        "print('DONE')\n"
    )
    return _leaks(_py(pool, look), "state left for the next job")


def _from_conformance(check: Callable[[LocalSandboxPool], str | None]) -> Probe:
    def probe(pool: LocalSandboxPool, c: HostCanaries) -> str | None:
        return check(pool)

    probe.__name__ = check.__name__
    return probe


def between_jobs_workspace(pool, c):
    """Class 5: a fifo cannot hang the host's read_file; a job sees no host path in mountinfo;
    what a workspace keeps is charged to the workspace, not to the exec slot an unrelated job uses."""
    from posttrain.sandbox.workspace import Workspace

    lim = Limits(memory_mb=160)
    with Workspace(pool, storage_mb=128) as ws:
        ex = ws.exec(["sh", "-c", "mkfifo p; cat /proc/self/mountinfo; head -c 50000000 /dev/zero > a; "
                      "head -c 50000000 /dev/zero > b"], limits=lim)  # fmt: skip
        if not ex.ok:
            return f"the workspace job failed: {ex}"
        for host in (str(pool.root), "/oldroot", "/tmp/"):
            if host in ex.stdout.decode(errors="replace"):
                return f"a workspace job sees the host path {host!r} in /proc/self/mountinfo"
        def read() -> None:
            with contextlib.suppress(WorkspaceError):  # "not a regular file"
                ws.read_file("p")

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=5)
        if reader.is_alive():
            return "the host's read_file blocked on a fifo a job made"
        hog = ["python3", "-c", "b = bytearray(100 << 20); b[::4096] = b'x' * (len(b) // 4096)"]
        after = pool.exec(hog, limits=lim)
        if not after.ok:
            return f"100 MB a workspace kept were charged to the exec slot: the next job there got {after}"
    return None


_CONFORMANCE_PROBES = {
    "between_jobs_memory": conformance.no_data_of_other_jobs,
    "between_jobs_fork_server": conformance.cannot_change_other_processes,
    "between_jobs_infra": conformance.job_failures_are_not_infra,
    "between_jobs_cleanup": conformance.deep_trees_are_removed,
    "between_jobs_wipe": conformance.wipe_restores_everything,
}
FROM_CONFORMANCE = frozenset(_CONFORMANCE_PROBES)  # tested as conformance checks already


PROBES: dict[str, Probe] = {
    f.__name__: f
    for f in (
        outbound_network, host_loopback, host_secrets, host_proc, other_workspaces, writes_outside, fork_bomb,
        memory_bomb, disk_fill, cpu_spin, child_outlives, signals_to_parent, setuid_caps, mount, ptrace,
        nested_userns, tiocsti, stdout_flood, dev_access, state_for_next_job,
    )
} | {name: _from_conformance(check) for name, check in _CONFORMANCE_PROBES.items()} | {
    "between_jobs_workspace": between_jobs_workspace,
} | _probes_fair.PROBES  # fmt: skip


def run_probes(
    pool: LocalSandboxPool, on_result: Callable[[str, str | None], None] | None = None
) -> dict[str, str | None]:
    """Run every probe against ``pool`` (use a one-slot pool); {name: None if contained, else the leak}."""
    results: dict[str, str | None] = {}
    with HostCanaries.start() as canaries:
        for name, probe in PROBES.items():
            try:
                results[name] = probe(pool, canaries)
            except Exception as e:  # a probe that crashes proves nothing: count it as not contained
                results[name] = f"probe crashed: {type(e).__name__}: {e}"
            if on_result:
                on_result(name, results[name])
    return results

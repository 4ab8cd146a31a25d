"""Two posttrain processes on one host, each with a pool: an eighth read as a candidate (issue 21).

Each pool here is a process of its own, as two runs on one host are. While a job of one holds what
it can of a host-wide name space or counter, a job of the other takes the same and must get the
verdict it gets alone: SysV shm, semaphores and message queues under one key, a name in /dev/shm
and /tmp, an abstract unix socket, a loopback inet socket (each job has its own ipc, net and mount
namespaces, and seccomp refuses every socket family but AF_UNIX); signals to every process it can
see (its own pid namespace); new namespaces, which would count against the host's per-user
``user.max_*`` (seccomp and the dropped capabilities refuse them); eventfds, timerfds, epolls,
inotify instances and pipe pages, hundreds of each, until refused (inotify and pipe pages are
counted per uid, and each slot's uid is its own); a full /tmp and /dev/shm (tmpfs of the job's own
size). Those held before this round, and are pinned here.

What broke: a pool killed with SIGKILL leaves its tmpfs mounted on the host, every file its jobs
wrote in its slots and workspaces held in memory with it, and its uid claims. Pools reaped only
when one started, so beside a live pool and no new one a killed pool's workspace kept its 256 MiB
of Shmem for as long as the live pool ran. Now a live pool reaps every ``REAP_EVERY_S`` (1 s here):
within seconds nothing of the killed pool is left, no process of its uids, no mount, no directory,
no cgroup and no uid claim, and the live pool's jobs, workspace ones included, still pass. And a
pool killed while it held a slot frozen to kill its job (cgroup v1) left that slot's processes
frozen for good; the pool that reaps its cgroups now thaws them, and they die.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from posttrain.sandbox import _uids, open_pool
from posttrain.sandbox._cgroup import detect_layout
from posttrain.sandbox._uids import claim_uid, reap_claims
from posttrain.sandbox.errors import HostCannotIsolate

ROOT = Path(__file__).resolve().parents[2]

# A pool (and a workspace) in a process of its own, obeying one JSON command a line on stdin:
# {"py": src} or {"exec": argv} or {"ws": argv} runs a job and answers its outcome and stdout;
# {"uids": 1} answers the host uids of its slots and workspace. REAP sets REAP_EVERY_S.
POOL = r"""
import json, os, sys
import posttrain.sandbox._pool as _pool
_pool.REAP_EVERY_S = float(os.environ["REAP"])
from posttrain.sandbox import open_pool
from posttrain.sandbox.workspace import Workspace

with open_pool(size=1) as pool, Workspace(pool, {"a": "1"}, storage_mb=512) as ws:
    print(json.dumps({"prefix": pool.cg_prefix}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if "uids" in cmd:
            uids = [z.uid for z in pool._all_z] + [x.claim.uid for x in pool._all_x] + [ws.uid]
            print(json.dumps(uids), flush=True)
            continue
        t = cmd.get("t", 20.0)
        ex = (pool.run_python(cmd["py"], timeout=t) if "py" in cmd else pool.exec(cmd["exec"], timeout=t)
              if "exec" in cmd else ws.exec(cmd["ws"], timeout=t))
        print(json.dumps({"outcome": ex.outcome, "infra": ex.infra_detail, "out": ex.stdout.decode()}), flush=True)
"""


class Neighbour:
    """A posttrain process with a one-slot pool and a workspace."""

    def __init__(self, reap_s: float = 30.0) -> None:
        env = {**os.environ, "REAP": str(reap_s), "PYTHONPATH": str(ROOT)}
        pipe = subprocess.PIPE
        self.p = subprocess.Popen([sys.executable, "-c", POOL], cwd=ROOT, env=env, stdin=pipe, stdout=pipe, text=True)
        self.prefix: str = self._read()["prefix"]

    def _read(self):  # noqa: ANN202 - JSON
        line = self.p.stdout.readline()
        assert line, f"the neighbour died: {self.p.wait()}"
        return json.loads(line)

    def send(self, **cmd: object) -> None:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def run(self, **cmd: object) -> dict:
        self.send(**cmd)
        return self._read()

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=60)


@pytest.fixture(scope="module")
def pools():
    a, b = Neighbour(), Neighbour(reap_s=1.0)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def honest(b: Neighbour) -> list[dict]:
    """What of the honest jobs of ``b`` (fork-server, exec, workspace) did not pass."""
    runs = (b.run(py="print(6 * 7)"), b.run(exec=["python3", "-c", "print(6 * 7)"]),
            b.run(ws=["sh", "-c", "cat a && echo 42"]))  # fmt: skip
    return [r for r in runs if r["outcome"] != "ok" or not r["out"].endswith("42\n")]


def while_holding(a: Neighbour, b: Neighbour, hold: str, probe: str, *, check: bool = True) -> tuple[dict, list[dict]]:
    """Run ``hold`` in ``a`` (in its fork-server slot, then its exec slot; it prints, then sleeps)
    while ``b`` runs ``probe`` on both paths; return ``hold``'s first result and ``b``'s four.
    ``check``: that ``hold`` itself passed."""
    held, seen = [], []
    for path in ("py", "exec"):
        src = hold + "\nprint('held', flush=True)\nimport time\ntime.sleep(2.5)\n"
        a.send(**({"py": src} if path == "py" else {"exec": ["python3", "-c", src]}))
        time.sleep(1.0)  # (a fork is ready in ~0.1 s, an exec in ~0.5)
        seen += [b.run(py=probe), b.run(exec=["python3", "-c", probe])]
        held.append(a._read())
    for r in held if check else ():
        assert r["outcome"] == "ok" and r["out"].endswith("held\n"), r
    return held[0], seen


HOLD_NAMES = r"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
ids = [libc.shmget(0x5EED, 4096, 0o1666), libc.semget(0x5EED, 4, 0o1666), libc.msgget(0x5EED, 0o1666)]
assert min(ids) >= 0, ids
for d in ("/dev/shm", "/tmp"):
    open(d + "/posttrain-n8", "w").write("x")
s = socket.socket(socket.AF_UNIX)
s.bind(b"\0posttrain-n8")
s.listen(1)
"""
PROBE_NAMES = r"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
seen = []
for name, call in (("shm", lambda: libc.shmget(0x5EED, 0, 0)), ("sem", lambda: libc.semget(0x5EED, 0, 0)),
                   ("msg", lambda: libc.msgget(0x5EED, 0))):
    if call() >= 0 or ctypes.get_errno() != 2:
        seen.append(name)
seen += [d for d in ("/dev/shm", "/tmp") if os.listdir(d)]
try:
    socket.socket(socket.AF_UNIX).connect(b"\0posttrain-n8")
    seen.append("connect")
except ConnectionRefusedError:
    pass
socket.socket(socket.AF_UNIX).bind(b"\0posttrain-n8")  # EADDRINUSE if it were the other job's
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
    try:
        socket.socket(family, socket.SOCK_DGRAM if family == socket.AF_NETLINK else socket.SOCK_STREAM)
        seen.append(family.name)
    except PermissionError:
        pass
print(seen)
"""


def test_ipc_keys_names_and_abstract_sockets_a_job_holds_are_not_another_pools(pools):
    """SysV keys, /dev/shm and /tmp names and an abstract socket a job of one pool holds are not
    there for a job of the other (it makes its own under the same names); no inet socket at all."""
    a, b = pools
    _, seen = while_holding(a, b, HOLD_NAMES, PROBE_NAMES)
    assert [r["out"] for r in seen] == ["[]\n"] * 4 and {r["outcome"] for r in seen} == {"ok"}, seen


HOLD_SIGNALS = r"""
import os, signal
os.kill(-1, signal.SIGKILL)  # every process this job may signal, but itself
mine = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
assert len(mine) < 8, mine  # its own pid namespace: a handful, never the other pool's
"""
PROBE_ALIVE = "import time\ntime.sleep(0.3)\nprint([])\n"


def test_a_job_signalling_every_process_it_sees_spares_another_pools_jobs(pools):
    a, b = pools
    _, seen = while_holding(a, b, HOLD_SIGNALS, PROBE_ALIVE, check=False)  # (it kills its own pid 1)
    assert [(r["outcome"], r["out"]) for r in seen] == [("ok", "[]\n")] * 4, seen


PROBE_NAMESPACES = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
made = []
for flag in (0x10000000, 0x00020000, 0x08000000, 0x40000000, 0x04000000, 0x20000000, 0x02000000):
    for _ in range(50):  # each one made would count against the host's user.max_* for this uid
        if libc.unshare(flag) == 0:
            made.append(hex(flag))
            break
for name in ("max_user_namespaces", "max_mnt_namespaces", "max_net_namespaces"):
    try:
        open("/proc/sys/user/" + name, "w").write("0")
        made.append(name)
    except OSError:
        pass
print(made)
"""


def test_a_job_makes_no_namespace_that_counts_against_the_hosts_user_max(pools):
    """Namespaces a job made would count against ``user.max_*_namespaces`` in the host's user
    namespace: none can be made, nor those limits written; the other pool's jobs (which each need
    seven namespaces to start) still start."""
    a, b = pools
    held, seen = while_holding(a, b, PROBE_NAMESPACES, "print([])")
    assert held["out"] == "[]\nheld\n", held
    assert [(r["outcome"], r["out"]) for r in seen] == [("ok", "[]\n")] * 4, seen


HOLD_FDS = r"""
import ctypes, fcntl, os, time
libc = ctypes.CDLL(None, use_errno=True)
class T(ctypes.Structure):
    _fields_ = [("i_s", ctypes.c_long), ("i_ns", ctypes.c_long), ("v_s", ctypes.c_long), ("v_ns", ctypes.c_long)]
def timerfd():  # armed: fires every millisecond
    fd = libc.timerfd_create(1, 0)
    if fd < 0 or libc.timerfd_settime(fd, 0, ctypes.byref(T(0, 1000000, 0, 1000000)), None) < 0:
        raise OSError(ctypes.get_errno(), "timerfd")
    return fd
def raw(fd):
    if fd < 0:
        raise OSError(ctypes.get_errno(), "refused")
    return fd
def pipe():  # 1 MiB of the uid's pipe pages (fs.pipe-user-pages-soft: 64 MiB), until refused
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    return r
def take():  # eventfds, timerfds, epolls, inotify instances and pipes, 40 of each or until refused
    fds = []
    for make in (lambda: os.eventfd(0), timerfd, lambda: raw(libc.epoll_create1(0)), lambda: raw(libc.inotify_init1(0)),
                 pipe):
        for _ in range(40):
            try:
                fds.append(make())
            except OSError:
                break
    return fds
for _ in range(16):
    if os.fork() == 0:
        keep = take()
        time.sleep(60)
        os._exit(0)
keep = take()
"""
PROBE_FDS = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fds = [os.eventfd(0), libc.timerfd_create(1, 0), libc.epoll_create1(0), libc.inotify_init1(0)]
r, w = os.pipe()
print([fd for fd in fds if fd < 0] + ([] if os.write(w, b"x" * 65536) == 65536 else ["pipe"]))
"""


def test_eventfds_timerfds_epolls_inotify_and_pipe_pages_held_leave_another_pool_its_own(pools):
    """17 processes of a job of one pool take eventfds, armed timerfds, epolls, inotify instances
    and 1 MiB pipes until refused; a job of the other gets each of them, and a pipe of 64 KiB."""
    a, b = pools
    _, seen = while_holding(a, b, HOLD_FDS, PROBE_FDS)
    assert [(r["outcome"], r["out"]) for r in seen] == [("ok", "[]\n")] * 4, seen


HOLD_FULL = r"""
for d in ("/tmp", "/dev/shm"):
    try:
        with open(d + "/fill", "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
    except OSError:
        pass
"""
PROBE_ROOM = r"""
ok = []
for d in ("/tmp", "/dev/shm"):
    with open(d + "/mine", "wb") as f:
        f.write(b"y" * (8 << 20))
print([])
"""


def test_a_job_filling_its_tmp_and_shm_leaves_another_pool_room_and_the_hosts_tmp_alone(pools):
    a, b = pools
    free = os.statvfs("/tmp")
    _, seen = while_holding(a, b, HOLD_FULL, PROBE_ROOM)
    assert [(r["outcome"], r["out"]) for r in seen] == [("ok", "[]\n")] * 4, seen
    now = os.statvfs("/tmp")  # (nothing of it on the host's /tmp: within 16 MiB of what was free)
    assert abs(now.f_bavail * now.f_frsize - free.f_bavail * free.f_frsize) < 16 << 20


def _shmem_mib() -> int:
    return int(re.search(r"Shmem:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)) // 1024


def _of_uids(uids: set[int]) -> list[str]:
    """Processes of the host that run as any of ``uids``."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and p.stat().st_uid in uids:
                found.append(p.name)
        except FileNotFoundError:
            continue
    return found


def _left(prefix: str, uids: set[int]) -> list[str]:
    """What is left on the host of the pool ``prefix`` whose uids were ``uids``."""
    layout = detect_layout()
    left = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if prefix in line]
    left += [str(p) for p in Path(tempfile.gettempdir()).glob(prefix)]
    left += [str(c) for parent in set(layout.parents.values()) for c in parent.glob(f"{prefix}-*")]
    registries = [r for r in (layout.registry, layout.parents["pids"] / "posttrain-uids") if r is not None]
    left += [str(r / str(uid)) for r in registries for uid in uids if (r / str(uid)).exists()]
    return left + _of_uids(uids)


def _kill_and_wait_for_the_reaper(k: Neighbour, uids: set[int]) -> None:
    """SIGKILL the neighbour's pool process; within 5 s the live pool's reaper leaves nothing of it."""
    k.p.send_signal(signal.SIGKILL)
    assert k.p.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 5.0
    while _left(k.prefix, uids) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert _left(k.prefix, uids) == []


def test_a_pool_killed_with_sigkill_is_gone_from_the_host_while_its_neighbour_runs(pools):
    """A pool killed in the middle of its jobs (a fork-server, an exec and a workspace job, the
    workspace holding 256 MiB): within seconds no process runs as any of its uids (a pool that
    claims one next starts clean) and, with no new pool started, the live neighbour has removed its
    mounts (the 256 MiB freed), its directory, its cgroups and its uid claims; the neighbour's own
    jobs pass all along."""
    _, b = pools
    k = Neighbour()
    try:
        uids = set(k.run(uids=1))
        fill = "for i in 1 2 3 4; do head -c 67108864 /dev/zero > f$i; done; du -sm . | cut -f1"
        assert k.run(ws=["sh", "-c", fill])["out"] == "257\n"
        shmem = _shmem_mib()
        k.send(py="import time\ntime.sleep(30)")
        k.send(exec=["sleep", "30"])
        k.send(ws=["sleep", "30"])
        time.sleep(1.0)
        assert _of_uids(uids), "the killed pool's jobs were not running"
        _kill_and_wait_for_the_reaper(k, uids)
        assert shmem - _shmem_mib() >= 64, "the killed pool's workspace files are still held"  # (of 256: neighbours)
        assert honest(b) == []
    finally:
        k.close()


def test_a_pool_killed_while_it_froze_a_slot_leaves_no_frozen_processes(pools):
    """v1 kills a slot frozen (``kill_all``: freeze, SIGKILL, thaw): a pool killed in between left
    the slot's processes frozen for good, and its cgroups (3 processes and 7 entries 8 s after the
    kill, beside a pool reaping every second). A pool that reaps a dead pool's cgroups thaws them:
    the SIGKILLs the kernel queued for them end them."""
    _, b = pools
    if not Path("/sys/fs/cgroup/freezer").is_dir():
        pytest.skip("cgroup v1's freezer only (v2 kills by cgroup.kill, and a frozen task dies of SIGKILL)")
    k = Neighbour()
    try:
        uids = set(k.run(uids=1))
        k.send(py="import time\ntime.sleep(30)")
        time.sleep(1.0)
        states = list(Path("/sys/fs/cgroup/freezer").glob(f"{k.prefix}-*/freezer.state"))
        for state in states:  # as kill_all does for the moment it kills
            state.write_text("FROZEN")
        assert states and _of_uids(uids), "the killed pool's job was not running"
        _kill_and_wait_for_the_reaper(k, uids)
        assert honest(b) == []
    finally:
        k.close()


def test_a_new_pool_beside_a_live_one_leaves_it_its_slots_and_workspace(pools):
    """A pool started (and reaping as it starts) beside a live one, after one was killed: the live
    pool's slots and workspace still run their jobs."""
    _, b = pools
    with open_pool(size=1) as c:
        assert c.run_python("print(1)").ok
        assert honest(b) == []
    assert honest(b) == []


def test_unheld_uid_claims_are_reaped_and_held_ones_stay(tmp_path):
    """A claim whose owner died (here: never released) is removed by ``reap_claims``; one a process
    holds stays claimed."""
    registry = tmp_path / "uids"
    held = claim_uid(registry)
    dead = claim_uid(registry)
    os.close(dead.fd)  # as a SIGKILL leaves it: the lock dropped, the directory there
    try:
        assert reap_claims(registry) == 1
        assert sorted(p.name for p in registry.iterdir()) == [str(held.uid)]
    finally:
        held.release()
    assert reap_claims(registry) == 0 and list(registry.iterdir()) == []


def test_a_uid_a_dead_pools_process_still_runs_as_is_not_claimed_again(tmp_path, monkeypatch):
    """A dead pool's claim was taken over (and, reaped, drawn afresh) while a process of its uid
    still ran (dying, frozen, stuck in the kernel): the new slot then shared that uid's per-user
    counts with it, RLIMIT_NPROC first. Now such a claim stays, and is not taken: with every draw
    this uid, no uid is claimed (before: the uid, at the first draw)."""
    monkeypatch.setattr(_uids, "UID_SPAN", 1)  # every draw is UID_BASE
    registry = tmp_path / "uids"
    registry.mkdir()
    (registry / str(_uids.UID_BASE)).mkdir()  # its claim, as a SIGKILL-ed pool leaves it
    uid = str(_uids.UID_BASE)
    left = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5.0
        while not _of_uids({_uids.UID_BASE}) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert reap_claims(registry) == 0 and (registry / uid).is_dir()
        with pytest.raises(HostCannotIsolate):
            claim_uid(registry).release()
    finally:
        left.kill()
        left.wait()
    claim = claim_uid(registry)  # nothing of it runs any more: it is taken over
    assert claim.uid == _uids.UID_BASE
    claim.release()

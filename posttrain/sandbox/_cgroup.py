"""Per-slot cgroups (memory with swap, pids, cpu quota), v1 or v2, under this process's own cgroup.

Killing is by cgroup, never by a list of pids a job could hide from: ``kill_all`` freezes the slot
(v1 freezer; v2 ``cgroup.kill`` kills the subtree at once), SIGKILLs what is in it and waits until
it is empty. A fork-server slot can also hold *cells* (``add_cells``): child cgroups that a job's
own supervisor (the code runner) puts its untrusted processes in, each emptied and checked empty
through file descriptors the host opened (``Cell``), so that what one candidate leaves behind
dies before the next one starts (issue 21).

A slot's cgroups are created once and reused for every job of that slot: only the limits are
rewritten when they change. The launcher (still root) joins the slot by writing its own pid to
``cgroup.procs`` before it drops privileges; the sandboxed program never sees the cgroup file
system (it is not mounted inside).

cgroup v2 forbids enabling controllers for the children of a cgroup that holds processes. When
this process is alone in its cgroup, it moves itself into a leaf (``posttrain-sbx-<pid>-host``)
and enables memory, pids and cpu for the slots beside it, as a systemd ``Delegate=yes`` unit
would; when other processes share its cgroup it stops with what to run instead.

Liveness is a lock on the cgroup itself, never a pid or a path elsewhere. Every cgroup directory
made here (each controller's in v1, the one in v2; exec and fork-server slots, workspaces and v2's
host leaf alike) is held under an ``flock`` on an ``O_RDONLY|O_DIRECTORY|O_CLOEXEC`` fd of the
directory for as long as it exists: the kernel drops it when its owner dies, however it dies and in
whatever pid, mount or user namespace, and two processes that share a cgroup tree share these
locks whether or not they share a temp directory. The fd is close-on-exec and a launch gets only
the fds ``_launch.spawn`` names, so no job holds it (cost: one fd per directory, three per slot or
workspace on v1). ``reap`` removes a cgroup only while holding its flock (taken without waiting)
and only when it is empty: rmdir refuses a cgroup with processes or children, and nothing in it
is ever signalled.

Creating a cgroup races a reaper: between ``mkdir`` and ``flock`` the new directory is empty and
unlocked. ``_make_locked`` therefore takes the flock and then checks that the path still names the
directory it locked (same inode); a reaper holds the flock across its rmdir, so a directory it
removed fails that check and is made again, and one it has not removed stays ours. A reaper checks
the same once it holds a flock: an fd it opened before the name was made again locks a directory
that is gone, and must not remove the new one.

Not done here: cgroup v2 delegation to a non-root user, and io limits (disk fill is bounded by
RLIMIT_FSIZE and the size of the tmpfs mounts instead).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from posttrain.sandbox._pump import proc_exiting
from posttrain.sandbox.errors import HostCannotIsolate

_CONTROLLERS = ("memory", "pids", "cpu")
_V1_CONTROLLERS = (*_CONTROLLERS, "freezer")  # v1: freeze-then-kill; v2 has cgroup.freeze/cgroup.kill in its core
_FIX = (
    "run as root on a host with cgroup v1 memory+pids+cpu+freezer controllers (with swap accounting) or "
    "cgroup v2 with memory+pids+cpu delegated to this process's cgroup"
)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(rparts) >= 3 and rparts[0] in ("cgroup", "cgroup2"):
            out.append((parts[4], rparts[0], set(rparts[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            out[""] = path
        for c in ctrls.split(","):
            out[c] = path
    return out


@dataclass(frozen=True)
class CgroupLayout:
    """Where the slot cgroups of this process go: version and one parent directory per controller;
    ``registry``: a directory every posttrain process on this host that shares the cgroup tree
    sees (the root of the pids hierarchy, or of v2), where pools claim their sandbox uids."""

    version: int
    parents: dict[str, Path]
    registry: Path | None = None


EXIT_WAIT_S = 60.0
"""How long past ``kill_all``'s deadline a killed process that is already exiting may take to go: its
exit is its own kernel work, charged to its cgroup (a job that left a 250k-deep directory chain on its
workspace needs ~0.4 s of CPU to go, which took 9-15 s beside the tests' nice -20 hogs, ~1% of a CPU:
that was an infra error, 3 of 3)."""


DRAIN_WAIT_S = 10.0
"""How long writing a lower memory limit waits for memory the slot's last job left charged to drain.
The kernel lists a killed process in no ``cgroup.procs`` from the moment it starts to exit, before it
has freed its memory and closed its files, and a detached tmpfs is freed only when nothing holds it
any more; tmpfs pages and anonymous memory cannot be reclaimed (no swap). So right after a job that
filled its file systems, the next job's lower limit was refused (v1: EBUSY, the kernel having
reclaimed what it could; the job an infra error, ``slot error: OSError: [Errno 16]``) or, on v2,
would have OOM-killed the fork-server in its stead. Each try reclaims what it can."""
DRAIN_STEP_S = 0.02


OWN_LIMIT_SLACK = 4 << 20
"""How near its limit a v1 slot's watermark must come for an OOM kill there to be its own
(``SlotCgroup.own_limit_hit``): a charge refused at the limit leaves usage within a per-CPU charge
batch of it (64 pages)."""
REGISTRY = "posttrain-uids"  # below the hierarchy's root: see ``_uids``


def _host_leaf() -> str:
    return f"posttrain-sbx-{os.getpid()}-host"


_leaf_locks: dict[Path, int] = {}  # v2 host leaf -> the fd holding its flock


_V2_FIX = (
    "start posttrain alone in a cgroup of its own, e.g. `systemd-run --scope -p Delegate=yes posttrain ...`, "
    "or as root `mkdir /sys/fs/cgroup/posttrain && echo $$ > /sys/fs/cgroup/posttrain/cgroup.procs` in the "
    "shell that then runs posttrain"
)


def _delegate_v2(base: Path) -> None:
    """Enable memory, pids and cpu for the children of ``base``, moving this process into a leaf
    below it when it is the only process there (cgroup v2's no-internal-process rule)."""
    want = set(_CONTROLLERS)
    if want <= set(_read(base / "cgroup.subtree_control").split()):
        return
    try:
        _write(base / "cgroup.subtree_control", "+memory +pids +cpu")
        return
    except OSError as e:
        if e.errno != errno.EBUSY:
            raise HostCannotIsolate(f"cgroups v2: cannot enable memory/pids/cpu in {base}: {e}; fix: {_V2_FIX}") from e
    others = sorted({int(p) for p in _read(base / "cgroup.procs").split()} - {os.getpid()})
    if others:
        raise HostCannotIsolate(
            f"cgroups v2: {base} also holds processes {others[:5]}, so it cannot give its children memory/pids/cpu "
            f"limits; fix: {_V2_FIX}"
        )
    try:
        leaf = base / _host_leaf()
        if leaf not in _leaf_locks:  # held for this process's lifetime, like a slot's (module docstring)
            _leaf_locks[leaf] = _make_locked(leaf)
        _write(leaf / "cgroup.procs", str(os.getpid()))
        _write(base / "cgroup.subtree_control", "+memory +pids +cpu")
    except OSError as e:  # e.g. another process joined the cgroup meanwhile
        raise HostCannotIsolate(f"cgroups v2: cannot delegate memory/pids/cpu in {base}: {e}; fix: {_V2_FIX}") from e


def detect_layout() -> CgroupLayout:
    """Find v1 controllers (preferred when they are mounted) or a v2 hierarchy that has them; on v2,
    make them available to the slot cgroups (see the module docstring)."""
    mounts, own = _mounts(), _own_paths()
    v1: dict[str, Path] = {}
    v1_roots: dict[str, Path] = {}
    for point, fstype, opts in mounts:
        if fstype == "cgroup":
            for c in _V1_CONTROLLERS:
                if c in opts and c in own:
                    v1[c] = Path(point) / own[c].lstrip("/")
                    v1_roots[c] = Path(point)
    if len(v1) == len(_V1_CONTROLLERS):
        for point, fstype, opts in mounts:  # optional: CPU time per slot (``SlotCgroup.cpu_ns``)
            if fstype == "cgroup" and "cpuacct" in opts and "cpuacct" in own and "cpuacct" not in v1:
                v1["cpuacct"] = Path(point) / own["cpuacct"].lstrip("/")
        return CgroupLayout(1, v1, v1_roots["pids"] / REGISTRY)
    v2_missing: tuple[Path, list[str]] | None = None
    for point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            base = Path(point) / own[""].lstrip("/")
            if base.name == _host_leaf():  # an earlier pool of this process moved it there
                base = base.parent
            try:
                avail = set((base / "cgroup.controllers").read_text().split())
            except OSError:
                continue
            if set(_CONTROLLERS) <= avail:
                _delegate_v2(base)
                return CgroupLayout(2, {c: base for c in _CONTROLLERS}, Path(point) / REGISTRY)
            v2_missing = (base, sorted(set(_CONTROLLERS) - avail))
    if v2_missing is not None and not v1:
        base, missing = v2_missing
        raise HostCannotIsolate(
            f"cgroups v2: {'/'.join(missing)} not available in {base} (its parent does not delegate them); fix: "
            f"enable them in the parent's cgroup.subtree_control, or {_V2_FIX}"
        )
    missing = sorted(set(_V1_CONTROLLERS if v1 else _CONTROLLERS) - set(v1))
    raise HostCannotIsolate(
        f"cgroups: no usable {'/'.join(missing)} controller found (v1 or v2); fix: {_FIX}"
    )


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path) -> str:
    with open(path) as f:
        return f.read()


def _make_locked(path: Path) -> int:
    """Create the cgroup directory ``path`` and return an fd holding its flock (module docstring).

    Raises OSError when it keeps vanishing or another process holds it for 2 s."""
    for _ in range(200):
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:  # a reaper removed it between mkdir and open
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            st, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except BlockingIOError:  # a reaper holds it while it removes it
            time.sleep(0.01)
        except FileNotFoundError:  # a reaper removed it between open and flock
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EBUSY, "another process keeps it locked or removes it", str(path))


def reap(path: Path) -> bool:
    """Remove the cgroup ``path`` if no process holds its flock and it is empty, holding the flock
    across the rmdir; never signal anything in it, but thaw it if it was left frozen (``_thaw``).
    Returns whether it removed it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        st, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:  # its owner is alive, or it is gone
        os.close(fd)
        return False
    if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):  # made again since we opened it: not ours to remove
        os.close(fd)
        return False
    try:
        _thaw(path)
        for child in path.iterdir():  # rmdir refuses a child that holds processes, and then the parent
            if child.is_dir() and not child.is_symlink():
                child.rmdir()
        path.rmdir()
        return True
    except OSError:  # EBUSY: processes (or children) inside
        return False
    finally:
        os.close(fd)


def _thaw(path: Path, wait_s: float = 1.0) -> None:
    """v1: thaw the freezer cgroup ``path`` of a pool that is gone, and its cells, if it was left
    frozen, and wait up to ``wait_s`` for it to empty. A pool killed while ``kill_all`` held its slot
    frozen left the slot's processes frozen for good, its cgroups with them: the SIGKILLs they had
    (``--die-with-parent``, the pid namespace's end) wait for a thaw, which no one made. Thawing
    signals nothing; what the kernel had queued for them ends them."""
    frozen = False
    for d in (path, *(c for c in path.iterdir() if c.is_dir() and not c.is_symlink())):
        state = d / "freezer.state"
        with contextlib.suppress(OSError):
            if _read(state).strip() != "THAWED":
                _write(state, "THAWED")
                frozen = True
    end = time.monotonic() + wait_s
    while frozen and _read(path / "cgroup.procs").strip() and time.monotonic() < end:
        time.sleep(0.01)


class SlotCgroup:
    """The cgroups of one slot. ``procs_files`` are what a launcher writes its pid into."""

    def __init__(self, layout: CgroupLayout, name: str) -> None:
        self.layout = layout
        self.dirs: dict[str, Path] = {}
        self._memory: int | None = None
        self._pids: int | None = None
        self._cpu: float | None = None
        self._oom_fd = -1  # kept open: one pread per job instead of open + read + close
        self._peak_fd = -1  # v2: memory.peak resets only for reads through the fd that wrote it
        self._locks: list[int] = []  # one flock per directory, held until it is removed (module docstring)
        self.cells: list[Cell] = []
        try:
            for c in layout.parents:
                d = layout.parents[c] / name
                if d not in self.dirs.values():
                    self._locks.append(_make_locked(d))
                self.dirs[c] = d
            if layout.version == 2:
                parent = layout.parents["memory"]
                with contextlib.suppress(OSError):
                    _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
                d = self.dirs["memory"]
                if not all(
                    (d / f).exists() for f in ("memory.max", "memory.swap.max", "pids.max", "cpu.max")
                ):
                    self.destroy()
                    raise HostCannotIsolate(
                        f"cgroups v2: memory/pids/cpu are not enabled for children of {parent} (a cgroup with "
                        "processes cannot delegate controllers); fix: start posttrain in its own delegated "
                        "cgroup, e.g. `systemd-run --scope -p Delegate=yes posttrain ...`"
                    )
        except OSError as e:
            self.destroy()
            raise HostCannotIsolate(f"cgroups: cannot create slot cgroup {name!r}: {e}; fix: {_FIX}") from e

    @property
    def procs_files(self) -> list[str]:
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def set_limits(self, memory_bytes: int, pids: int, cpu_cores: float) -> None:
        """Write the limits that changed since the last call."""
        if memory_bytes != self._memory:
            self._set_memory(memory_bytes)
            self._memory = memory_bytes
        if pids != self._pids:
            name = "pids.max"
            _write(self.dirs["pids"] / name, str(pids))
            self._pids = pids
        if cpu_cores != self._cpu:
            period = 100_000
            quota = max(1000, int(cpu_cores * period))
            if self.layout.version == 1:
                _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(period))
                _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(quota))
            else:
                _write(self.dirs["cpu"] / "cpu.max", f"{quota} {period}")
            self._cpu = cpu_cores

    def _set_memory(self, limit: int) -> None:
        """Write the memory limit; a lower one waits up to ``DRAIN_WAIT_S`` for what is still charged
        above it to drain (v1: the last try's EBUSY is raised; v2: written then, as before)."""
        end = time.monotonic() + DRAIN_WAIT_S
        while True:
            try:
                if self.layout.version == 1:
                    self._set_memory_v1(limit)
                    return
                if self._drained_v2(limit) or time.monotonic() >= end:  # (past it: reclaim, then the OOM killer)
                    _write(self.dirs["memory"] / "memory.max", str(limit))
                    _write(self.dirs["memory"] / "memory.swap.max", "0")
                    return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() >= end:
                    raise
            time.sleep(DRAIN_STEP_S)

    def _drained_v2(self, limit: int) -> bool:
        """v2: whether the slot's usage is within ``limit``, after asking the kernel to reclaim the
        excess (``memory.reclaim``: EAGAIN when it could not, e.g. tmpfs or anonymous pages without swap)."""
        d = self.dirs["memory"]
        excess = int(_read(d / "memory.current")) - limit
        if excess <= 0:
            return True
        with contextlib.suppress(OSError):
            _write(d / "memory.reclaim", str(excess))
        return int(_read(d / "memory.current")) <= limit

    def _set_memory_v1(self, limit: int) -> None:
        d = self.dirs["memory"]
        mem, memsw = d / "memory.limit_in_bytes", d / "memory.memsw.limit_in_bytes"
        if not memsw.exists():
            raise HostCannotIsolate(
                "cgroups: memory.memsw.limit_in_bytes is missing, so a job could dodge the memory limit via "
                "swap; fix: boot with swapaccount=1 (or use cgroup v2)"
            )
        # memsw must stay >= mem: raise memsw first when growing, mem first when shrinking.
        order = [(memsw, limit), (mem, limit)]
        current = int(_read(mem).strip())
        if limit < current:
            order.reverse()
        for path, value in order:
            _write(path, str(value))

    def oom_kills(self) -> int:
        """How many processes the kernel OOM killer has killed in this slot so far."""
        return self.oom_counts()[0]

    def oom_counts(self) -> tuple[int, int]:
        """(processes the OOM killer killed in this slot, the slot's own out-of-memory events) so far.
        The first counts kills of any OOM killer: a host out of memory, or a cgroup above the slot's
        at its limit, kills sandboxed processes first (the fork-server gives each job
        ``oom_score_adj`` 1000), whatever they used. The second is v2's ``memory.events`` ``oom``;
        v1 counts no such events (0; ``own_limit_hit`` reads its watermarks instead)."""
        kills = hits = 0
        try:
            if self._oom_fd < 0:
                name = "memory.oom_control" if self.layout.version == 1 else "memory.events"
                self._oom_fd = os.open(self.dirs["memory"] / name, os.O_RDONLY | os.O_CLOEXEC)
            text = os.pread(self._oom_fd, 4096, 0).decode()  # a fresh rendering on each read at 0
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    kills = int(value)
                elif key == "oom":
                    hits = int(value)
        except (OSError, ValueError):
            pass
        return kills, hits

    def own_limit_hit(self, before: tuple[int, int], after: tuple[int, int]) -> bool:
        """Whether the slot's own memory limit was reached between two ``oom_counts`` (an OOM kill
        then is the job's own; else the host's shortage). v2: its ``oom`` events rose. v1: its memory
        or memory+swap watermark came within ``OWN_LIMIT_SLACK`` of the limit (v1 counts no events, and
        this kernel's ``failcnt`` stayed 0 through a slot's own OOM kills). The caller resets them
        (``reset_peak``); one left high by an earlier job errs on the job's side: its own verdict."""
        if self.layout.version == 2:
            return after[1] > before[1]
        if self._memory is None:
            return True
        d = self.dirs["memory"]
        try:
            peak = max(int(_read(d / f"memory.{k}max_usage_in_bytes")) for k in ("", "memsw."))
        except (OSError, ValueError):
            return True
        return peak >= self._memory - OWN_LIMIT_SLACK

    def peak_memory(self) -> int | None:
        d = self.dirs["memory"]
        try:
            if self.layout.version == 1:
                return int(_read(d / "memory.max_usage_in_bytes").strip())
            return int(os.pread(self._peak(), 64, 0).strip())
        except (OSError, ValueError):
            return None

    def _peak(self) -> int:
        if self._peak_fd < 0:
            path = self.dirs["memory"] / "memory.peak"
            try:
                self._peak_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:  # kernels before 6.12: read-only, the peak since the slot was made
                self._peak_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return self._peak_fd

    def reset_peak(self) -> None:
        d = self.dirs["memory"]
        with contextlib.suppress(OSError):
            if self.layout.version == 1:
                _write(d / "memory.max_usage_in_bytes", "0")
                _write(d / "memory.memsw.max_usage_in_bytes", "0")
            else:
                os.write(self._peak(), b"0")

    def cpu_ns(self) -> int | None:
        """CPU time used in the slot so far, in ns (v1: when cpuacct is mounted; v2: cpu.stat)."""
        try:
            if self.layout.version == 2:
                for line in _read(self.dirs["cpu"] / "cpu.stat").splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) * 1000
                return None
            if "cpuacct" in self.dirs:
                return int(_read(self.dirs["cpuacct"] / "cpuacct.usage"))
        except (OSError, ValueError):
            pass
        return None

    def pids_inside(self) -> list[int]:
        """Every process in the slot (its cells included)."""
        dirs = [self.dirs["pids"]] if "pids" in self.dirs else []  # (a slot whose making failed partway)
        dirs += [c.dir for c in self.cells] if self.layout.version == 2 else []
        out: list[int] = []
        for d in dirs:
            try:
                out += [int(x) for x in _read(d / "cgroup.procs").split()]
            except OSError:
                pass
        return out

    def _freeze(self, frozen: bool) -> None:
        """v1: freeze (or thaw) the slot, its cells included, so that nothing in it forks while it is
        being killed. Best effort: a slot that does not reach FROZEN within 0.5 s is killed anyway."""
        if self.layout.version != 1 or "freezer" not in self.dirs:
            return
        state = self.dirs["freezer"] / "freezer.state"
        with contextlib.suppress(OSError):
            _write(state, "FROZEN" if frozen else "THAWED")
            end = time.monotonic() + 0.5
            while frozen and _read(state).strip() != "FROZEN" and time.monotonic() < end:
                time.sleep(0.0002)

    def kill_all(self, deadline_s: float = 5.0) -> bool:
        """Kill everything in the slot by its cgroup and wait until none of it is left; False if
        something that is not yet exiting survived ``deadline_s``, or something exiting survived
        ``EXIT_WAIT_S`` more. v2: ``cgroup.kill`` (the kernel kills the subtree, forks included);
        v1: freeze, SIGKILL every process listed, thaw."""
        end = time.monotonic() + deadline_s
        if not self.pids_inside():
            return True
        if self.layout.version == 2 and (self.dirs["pids"] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.dirs["pids"] / "cgroup.kill", "1")
        self._freeze(True)
        try:
            for pid in self.pids_inside():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            self._freeze(False)
        while True:
            pids = self.pids_inside()
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            now = time.monotonic()
            if now > end and (now > end + EXIT_WAIT_S or not all(map(proc_exiting, pids))):
                return False
            time.sleep(0.001 if now < end else 0.01)

    @contextlib.contextmanager
    def charged(self) -> Iterator[None]:
        """Run the body on this thread as part of the slot's cpu cgroup (v1 moves single threads;
        on v2 only threaded cgroups can, so there the body runs where it is): kernel work it causes,
        such as freeing a job's file systems, is then the slot's CPU time, not the host's."""
        if self.layout.version != 1:
            yield
            return
        tid = str(threading.get_native_id())
        try:
            _write(self.dirs["cpu"] / "tasks", tid)
        except OSError:
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                _write(self.layout.parents["cpu"] / "tasks", tid)

    def add_cells(self, n: int) -> list[Cell]:
        """Make ``n`` cells: child cgroups of this slot (v1: of its freezer cgroup; v2: plain children,
        without controllers, which a cgroup that holds processes may have) and the fds a job gets to
        use them (``Cell``). Processes in a cell stay under the slot's limits."""
        parent = self.dirs["freezer" if self.layout.version == 1 else "pids"]
        try:
            for k in range(len(self.cells), len(self.cells) + n):
                d = parent / f"c{k}"
                with contextlib.suppress(FileExistsError):
                    d.mkdir()
                self.cells.append(Cell.open(d, self.layout.version))
        except OSError as e:
            raise HostCannotIsolate(f"cgroups: cannot make the cells of {parent}: {e}; fix: {_FIX}") from e
        return self.cells

    def destroy(self) -> None:
        """Kill what is left and remove the cgroup directories (retrying while memory drains)."""
        for fd in (self._oom_fd, self._peak_fd):
            if fd >= 0:
                os.close(fd)
        self._oom_fd = self._peak_fd = -1
        if self.dirs:
            self.kill_all()
        for cell in self.cells:
            cell.close()
        dirs = [c.dir for c in self.cells] + sorted(set(self.dirs.values()))
        self.cells = []
        for d in dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        break
                    time.sleep(0.01)
        for fd in self._locks:  # after the rmdir: a directory that would not go is a reaper's to retry
            os.close(fd)
        self._locks = []
        self.dirs = {}


@dataclass
class Cell:
    """A child cgroup of a slot, as three file descriptors opened here (by root) and handed to a job:

    - ``procs``: ``cgroup.procs``, write-only: a process that writes ``0`` to it moves itself in
      (the kernel checks the opener's credentials, so the job needs no access to cgroupfs);
    - ``control``: v1 ``freezer.state`` (read-write: FROZEN, THAWED), v2 ``cgroup.kill`` (write-only);
    - ``census``: v1 ``tasks`` (every live thread; reopen it through ``/proc/self/fd`` for each read,
      the kernel caches v1 pid lists per open file), v2 ``cgroup.events`` (``populated 0``: empty).

    A job that holds them can move any process of its own pid namespace into the cell and kill
    what is there; nothing else. They are for a job's trusted supervisor, never for model code.
    """

    dir: Path
    version: int
    procs: int
    control: int
    census: int

    @staticmethod
    def open(d: Path, version: int) -> Cell:
        fds: list[int] = []
        try:
            names = (("cgroup.procs", os.O_WRONLY),
                     ("freezer.state", os.O_RDWR) if version == 1 else ("cgroup.kill", os.O_WRONLY),
                     ("tasks" if version == 1 else "cgroup.events", os.O_RDONLY))  # fmt: skip
            for name, flags in names:
                fds.append(os.open(d / name, flags | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return Cell(d, version, *fds)

    def close(self) -> None:
        for fd in (self.procs, self.control, self.census):
            with contextlib.suppress(OSError):
                os.close(fd)

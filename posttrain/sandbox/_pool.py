"""The local sandbox pool: fork-server slots for Python, one bwrap launch per job for anything else.

Each of ``size`` fork-server slots (``_zslot.py``) is one long-lived bwrap sandbox (own
namespaces, own cgroups, own uid) running ``_zygote.py`` as its pid 1; a job is a fork of that
warm interpreter. Each of ``size`` exec slots (``_xslot.py``) is a set of cgroups and a uid that
``exec`` launches a fresh bwrap sandbox into, per job. Slots are handed out through queues, so any
number of threads may submit jobs; a slot runs one job at a time, which is what lets the slot's
cgroup limits be the job's limits. A job that timed out looking starved is judged here, from the
host's side (``_starve.py``): its own timeout, or one rerun whose verdict stands; never infra.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import queue
import secrets
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from posttrain.sandbox import _launch
from posttrain.sandbox._cgroup import CgroupLayout, SlotCgroup, detect_layout, reap
from posttrain.sandbox._fs import make_dir
from posttrain.sandbox._seccomp import seccomp_bpf
from posttrain.sandbox._starve import HOST_OOM, NOT_STARTED, HostProbe, Rerun, recover_s, stretched
from posttrain.sandbox._types import Execution, Limits, check_timeout, usable_cpus
from posttrain.sandbox._uids import claim_uid, reap_claims
from posttrain.sandbox._wipe import remove_tree
from posttrain.sandbox._xslot import ExecSlot, Room
from posttrain.sandbox._zslot import CELLS, ZygoteSlot
from posttrain.sandbox.errors import HostCannotIsolate, LimitsError, PoolClosed

_MiB = 1 << 20


MAX_POOL_SIZE = 512
"""The most slots a pool may have: each is a fork-server and an exec slot with cgroups, a uid, a devpts
and fds of its own (the default is one per usable CPU); 100,000 ran the host out of fds partway and
the pool's cleanup of the slot it was making raised (KeyError 'pids')."""


def _normalize_files(files: Mapping[str, bytes | str] | None) -> tuple[list[str], list[bytes]]:
    names, blobs = [], []
    for name, data in (files or {}).items():
        p = PurePosixPath(name)
        if (
            not name
            or not p.parts
            or p.is_absolute()
            or ".." in p.parts
            or name.endswith("/")
            or "\0" in name
        ):
            raise LimitsError(f"files: {name!r} must be a relative path inside the workspace, without '..'")
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, bytes | bytearray):
            raise LimitsError(f"files[{name!r}] must be bytes or str, got {type(data).__name__}")
        names.append(str(p))
        blobs.append(bytes(data))
    taken = set(names)
    for name in names:
        for parent in PurePosixPath(name).parents:
            if str(parent) in taken:
                raise LimitsError(
                    f"files: {name!r} needs {str(parent)!r} to be a directory, but it is also a file"
                )
    return names, blobs


def _stdin_bytes(stdin: bytes | str | None) -> bytes:
    if stdin is None:
        return b""
    return stdin.encode() if isinstance(stdin, str) else bytes(stdin)


class LocalSandboxPool:
    """The local backend of ``SandboxPool``: see the package docstring for what is isolated."""

    def __init__(
        self,
        size: int | None = None,
        *,
        recycle_every: int = 1000,
        python: str | None = None,
        default_limits: Limits | None = None,
        workspace_mb: int = 4096,
    ) -> None:
        size = usable_cpus() if size is None else size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_POOL_SIZE:
            raise LimitsError(f"pool size must be an integer in [1, {MAX_POOL_SIZE}], got {size!r}")
        if recycle_every < 1:
            raise LimitsError(f"recycle_every must be >= 1, got {recycle_every!r}")
        self.size = size
        self.recycle_every = recycle_every
        self.default_limits = default_limits or Limits()
        self.workspace_bytes = workspace_mb * _MiB
        self.tools = _launch.find_tools(python)
        self.layout: CgroupLayout = detect_layout()
        self.registry = _registry(self.layout)
        self.bpf = seccomp_bpf()
        self._closed = False
        self.spawner = ThreadPoolExecutor(1, thread_name_prefix="posttrain-sandbox-spawner")
        self._lock = threading.Lock()
        _reap_stale(self.layout)
        self._reaping = threading.Event()  # set at close: stops ``_reap_while``
        # The pool's directory, locked for the pool's lifetime. Its name is also the prefix of the
        # slot cgroups, which hold locks of their own (see ``_cgroup``): a neighbour that shares the
        # cgroup tree but not this temp directory tells that they are alive too.
        self._dir, self._dir_lock = _claim_dir()
        self.cg_prefix = self._dir.name
        self._root = self._dir / "root"
        make_dir(self._root, 0o711)
        try:
            # The pool's host-side directories (slots' mount points, workspaces) live on a private
            # tmpfs; every job's own files are on tmpfs of their own below it (``_fs``).
            _mount_tmpfs(self._root, 64 * _MiB)
        except BaseException:
            remove_tree(self._dir)
            os.close(self._dir_lock)
            raise
        self.zygote_dir = _launch.install_zygote(self._root)
        self._zygotes: queue.Queue[ZygoteSlot] = queue.Queue()
        self._execs: queue.Queue[ExecSlot] = queue.Queue()
        self._all_z: list[ZygoteSlot] = []
        self._all_x: list[ExecSlot] = []
        self.rooms: set[SlotCgroup] = set()  # cgroups of open workspaces, destroyed at close at the latest
        self.probe: HostProbe | None = None
        try:
            self.probe = HostProbe(SlotCgroup(self.layout, f"{self.cg_prefix}-probe"))
            for i in range(size):
                x = ExecSlot(self, i)
                self._all_x.append(x)
                self._execs.put(x)
                z = ZygoteSlot(self, i)
                self._all_z.append(z)
            self._start_zygotes()
        except BaseException:
            self.close()
            raise
        threading.Thread(target=_reap_while, args=(self._reaping, self.layout, self.registry), daemon=True,
                         name="posttrain-sandbox-reaper").start()
        ref = weakref.ref(self)
        atexit.register(lambda: (pool := ref()) is not None and pool.close())

    def _start_zygotes(self) -> None:
        errors: list[BaseException] = []

        def start(z: ZygoteSlot) -> None:
            try:
                z.start()
            except BaseException as e:  # collected and re-raised in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=start, args=(z,)) for z in self._all_z]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for z in self._all_z:
            self._zygotes.put(z)

    def __enter__(self) -> LocalSandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the sandbox pool is closed")

    def _judged(self, run: Callable[..., tuple[Execution, Rerun]], timeout: float, limits: Limits,
                rerun: bool = True) -> Execution:  # fmt: skip
        """The verdict of a job that may have been starved (``_starve``): its own, unless the host's
        probe is overloaded right after it; then one rerun, whose verdict stands: once the probe
        recovers (or after ``recover_s``), its wall time stretched by the share the probe got
        (``run(wall)``, ``_starve.stretched``). So does a job the OOM killer killed for the host's
        shortage, not its slot's limit (``_starve.HOST_OOM``), at once. So does a job whose sandbox
        did not start (``maybe`` with an infra error: none of its code ran) while the probe was
        overloaded: a slot restarting at 1% of a CPU took over its 30 s (CI). Without ``rerun`` (a
        workspace's job, whose layers keep what it did) its own, unless its sandbox did not start
        (``NOT_STARTED``): then nothing of it ran, and it is rerun as any job."""
        ex, maybe = run()
        if maybe == HOST_OOM:  # killed for the host's shortage, not its own limit
            return run()[0] if rerun else ex
        if not maybe or not (rerun or maybe == NOT_STARTED):
            return ex
        if self.probe is None or not self.probe.overloaded(limits.cpu_cores):
            return ex
        wall = stretched(timeout, self.probe.wait_recovered(limits.cpu_cores, recover_s(timeout)))
        return (run(wall) if wall > timeout else run())[0]

    def run_python(
        self,
        source: str | bytes,
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
        cells: int = 0,
    ) -> Execution:
        """Run ``source`` as ``__main__`` in a fork of a warm interpreter inside a sandbox slot.

        ``cells``: how many of the slot's cells (``_cgroup.Cell``) the job gets, as fds 5.. with a
        JSON description at fd 4; for a job's trusted supervisor (the code runner), never for
        model code, which could use them to move and kill the processes of its own job.
        """
        self._check_open()
        timeout = check_timeout(timeout)
        limits = limits or self.default_limits
        if isinstance(cells, bool) or not isinstance(cells, int) or not 0 <= cells <= CELLS:
            raise LimitsError(f"cells must be an integer in [0, {CELLS}], got {cells!r}")
        names, blobs = _normalize_files(files)
        src = source.encode() if isinstance(source, str) else bytes(source)
        data = _stdin_bytes(stdin)
        slot = self._zygotes.get()

        def once(wall: float = timeout) -> tuple[Execution, Rerun]:
            if self._closed:
                return Execution.infra("the pool was closed while the job waited"), False
            try:
                return slot.run(src, names, blobs, data, wall, limits, cells)
            except HostCannotIsolate as e:  # on an overloaded host, the host's doing: rerun once it recovers
                return Execution.infra(f"the slot could not restart: {e}"), NOT_STARTED
            except (OSError, KeyError, TypeError, ValueError) as e:  # a cgroup write failed, or a bad reply
                slot.stop()
                return Execution.infra(f"slot error: {type(e).__name__}: {e}"), False

        try:
            return self._judged(once, timeout, limits)
        finally:
            self._zygotes.put(slot)

    def exec(
        self,
        cmd: Sequence[str],
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
        hide: Sequence[str] = (),
    ) -> Execution:
        """Run ``cmd`` (argv; PATH is /usr/local/bin:/usr/bin:/bin) in a fresh sandbox, cwd /work.
        ``hide``: importable names (a repository task's packages) whose copies under the host's /usr
        the job does not see (``_hide``)."""
        return self.exec_in(cmd, files=files, stdin=stdin, timeout=timeout, limits=limits, hide=hide)

    def exec_in(
        self,
        cmd: Sequence[str],
        *,
        files: Mapping[str, bytes | str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float = 10.0,
        limits: Limits | None = None,
        room: Room | None = None,
        hide: Sequence[str] = (),
    ) -> Execution:
        """``exec``, or a workspace's job in its own ``room`` (its cgroups, uid and overlay). A
        workspace's job is never rerun once it started (its layers keep what it did): starved, it
        timed out; one whose sandbox did not start on an overloaded host is (``_judged``)."""
        self._check_open()
        timeout = check_timeout(timeout)
        limits = limits or self.default_limits
        cmd = list(cmd)
        if not cmd or not all(isinstance(c, str) and c and "\0" not in c for c in cmd):
            raise LimitsError(f"cmd must be a non-empty list of non-empty strings, got {cmd!r}")
        names, blobs = _normalize_files(files)
        data = _stdin_bytes(stdin)
        slot = self._execs.get()

        def once(wall: float = timeout) -> tuple[Execution, Rerun]:
            try:
                return slot.run(cmd, (names, blobs), data, wall, limits, room, tuple(hide))
            except OSError as e:
                return Execution.infra(f"exec slot error: {e}"), False

        try:
            return self._judged(once, timeout, limits, rerun=room is None)
        finally:
            self._execs.put(slot)

    @property
    def root(self) -> Path:
        """A root-owned 0711 directory for this pool's host-side directories."""
        return self._root

    def claim_uid(self):  # noqa: ANN201 - a _uids.UidClaim
        """A uid of its own for a workspace (released by the caller)."""
        return claim_uid(self.registry)

    def close(self) -> None:
        """Stop every slot, kill what is left in its cgroups and remove them. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._reaping.set()
        for z in self._all_z:
            z.destroy()
        for x in self._all_x:
            x.destroy()
        if self.probe is not None:
            self.probe.close()
            self.probe.cg.destroy()
        _unmount_and_remove(self._root)  # (lazily: every job's and workspace's file systems go too)
        for cg in list(self.rooms):
            cg.destroy()
        remove_tree(self._dir)  # the lock file goes too: its open fd keeps the lock until closed
        os.close(self._dir_lock)
        self.spawner.shutdown(wait=False)


def _registry(layout: CgroupLayout) -> Path:
    """Where this pool claims its uids: the layout's registry when it can be made there (the root
    of the hierarchy), else beside this process's own slot cgroups (``_uids``)."""
    for d in (layout.registry, layout.parents["pids"] / "posttrain-uids"):
        if d is None:
            continue
        with contextlib.suppress(OSError):
            d.mkdir(mode=0o755, exist_ok=True)
            return d
    raise HostCannotIsolate(f"cgroups: cannot make a uid registry in {layout.registry} or "
                            f"{layout.parents['pids']}; fix: run as root with a writable cgroup file system")


LOCK_FILE = "lock"
STALE_UNLOCKED_S = 60.0  # a pool directory without a lock file this old was left by a crash while starting


def _claim_dir() -> tuple[Path, int]:
    """Create this pool's directory in the temp dir; return it and the fd holding its lock.

    The lock file is created and locked under a temporary name and then renamed into place, so a
    ``lock`` file that another process can lock always means its pool is gone. The lock is an
    ``flock`` on an open file description that only this process holds (close-on-exec), so it is
    released by the kernel when the process exits, however it exits, in any pid namespace.
    """
    tmp = Path(tempfile.gettempdir())
    while True:
        d = tmp / f"posttrain-sbx-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            make_dir(d, 0o711)
        except FileExistsError:
            continue
        break
    fd = os.open(d / ".lock-new", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(d / ".lock-new", d / LOCK_FILE)
    return d, fd


@contextlib.contextmanager
def _dir_unowned(pool_dir: Path) -> Iterator[bool]:
    """Yields True while holding the lock of a pool directory whose pool is gone; False when its
    pool is alive, may be (a directory still being created), or the directory is not there."""
    try:
        fd = os.open(pool_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            age = time.time() - pool_dir.lstat().st_mtime
        except FileNotFoundError:
            yield False
            return
        yield age > STALE_UNLOCKED_S
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _dir_owned(pool_dir: Path) -> bool:
    """Whether ``pool_dir`` is there and its pool is alive (or may be)."""
    with _dir_unowned(pool_dir) as unowned:
        return not unowned and pool_dir.is_dir()


def _is_ours(name: str) -> bool:
    parts = name.split("-")
    return len(parts) >= 4 and parts[:2] == ["posttrain", "sbx"] and parts[2].isdigit()


def _reap_stale(layout: CgroupLayout) -> None:
    """Remove the host directories and the cgroups of pools that are gone.

    Liveness is a lock, never a pid (a pid names another process, or none, in another pid
    namespace) and never the presence of a path in another tree. A pool directory in the temp
    directory is removed (its tmpfs unmounted) while holding its ``lock`` file's flock, which its
    pool holds for its lifetime. A cgroup ``posttrain-sbx-…`` is removed only while holding the
    flock on the cgroup directory itself, which its pool holds for as long as the cgroup exists,
    and only when it is empty; nothing in it is ever signalled (``_cgroup.reap``). So a neighbour
    that shares the cgroup tree but has a temp directory of its own (another TMPDIR, a container
    with its own /tmp) keeps its cgroups, and a cgroup whose pool directory this process cannot
    see is not presumed dead. A cgroup whose pool directory is here and locked is left alone too
    (pools of earlier versions did not lock their cgroups).
    """
    tmp = Path(tempfile.gettempdir())
    dirs: list[Path] = []
    with contextlib.suppress(OSError):
        dirs = [e for e in tmp.iterdir() if _is_ours(e.name) and e.is_dir() and not e.is_symlink()]
    for d in dirs:
        with _dir_unowned(d) as unowned:
            if unowned:
                _unmount_and_remove(d / "root")
                _unmount_and_remove(d)  # (pools before the lock mounted their tmpfs here)
    for parent in set(layout.parents.values()):
        entries: list[Path] = []
        with contextlib.suppress(OSError):
            entries = [e for e in parent.iterdir() if _is_ours(e.name)]
        for cg in entries:
            if not _dir_owned(tmp / cg.name.rsplit("-", 1)[0]):
                reap(cg)


REAP_EVERY_S = 30.0
"""How often a live pool removes what dead pools left, as each pool does when it starts. A pool
killed with SIGKILL leaves its tmpfs mounted, with every file its slots' and workspaces' jobs wrote
in it, and so held in memory, and its uid claims: beside a live pool and no new one, a killed pool's
workspace kept its 256 MiB of Shmem (four 64 MiB files) held for as long as the live one ran; with
this at 1 s, 2 s after the kill they were gone."""


def _reap_while(stop: threading.Event, layout: CgroupLayout, registry: Path) -> None:
    """Until ``stop`` is set, every ``REAP_EVERY_S``: ``_reap_stale`` and ``_uids.reap_claims``."""
    while not stop.wait(REAP_EVERY_S):
        try:
            _reap_stale(layout)
            reap_claims(registry)
        except OSError:
            continue  # (a cgroup file system gone at shutdown): try again next time


def _mount_tmpfs(path: Path, size_bytes: int, owner: str = "mode=0711") -> None:
    r = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={size_bytes},{owner},nosuid,nodev",
            "posttrain-sandbox",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        path.rmdir()
        raise HostCannotIsolate(
            f"cannot mount the workspace tmpfs on {path}: {r.stderr.strip()}; fix: run as root"
        )


def _unmount_and_remove(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
    if not os.path.ismount(path):  # never descend into a file system we failed to detach
        remove_tree(path)

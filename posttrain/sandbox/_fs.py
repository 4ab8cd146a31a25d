"""A fresh file system for every job: each writable place is a tmpfs of its own, made per job.

Every place a job can write (``/work``, ``/tmp``, ``/dev/shm``) is a tmpfs mounted by the host
for that job alone and unmounted after it (issue 21). So nothing one job wrote, and nothing about
how it wrote (the inode counter of a file system that outlived it: create and delete K files and
the next job's first inode number moved by exactly K), reaches the next job; and what a job leaves
is freed by the kernel in one unmount, with no wipe to wait for: the userspace wipe hoisted one
directory level per pass, so ~500k nested directories made just before the deadline kept a slot
busy for longer than the host waited (an infra error), or, for ``exec``, kept the host itself
busy as root outside any cgroup. Every tmpfs has at most ``MAX_INODES`` inodes, which bounds what
the unmount has to free (about 0.1 s at the cap on the 2-core test host; 500k directories took
0.8 s to free and 2 s to make).

A fork-server slot lives across jobs, so its places are *stable mount points*: a directory of the
pool, bind-mounted onto itself and marked shared, that bwrap binds into the slot once (its copy
in the slot's mount namespace is a slave of it). Between jobs the host unmounts the job's tmpfs
there and mounts a new one; both events propagate into the slot. A tmpfs mounted *before* bwrap
binds the point would be bound itself (a private copy that no later event reaches), so the first
one is mounted once the slot is up. ``exec`` jobs get three new tmpfs per job, bound at launch.

Ptys come from the kernel's one count for the whole host (``kernel.pty.max`` less
``kernel.pty.reserve``: 3072 by default for every devpts but the host's own), which bwrap's
``--dev`` instance does not cap: one job that opened /dev/ptmx ~3000 times (16 processes of 250
fds) left every other sandbox on the host, of this pool or another, "out of pty devices" while it
ran. So each slot's /dev/pts is a devpts instance of its own with at most ``MAX_PTYS`` ptys
(``JobPlaces.pts``), mounted by the host for the slot's lifetime (an exec job's: for the job).

Nothing here follows a path a job made: the mount points are the pool's own directories, and
unmounting never descends into what a job wrote.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

MAX_INODES = 1 << 16
"""Inodes (files, directories, links) per writable place of a job."""
MAX_PTYS = 8
"""Ptys a slot's jobs may hold at once (module docstring): a slot takes at most this many of the
host's 3072, a pool at most 16 per CPU (a fork-server and an exec slot each)."""

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_SHARED = 2, 4, 8, 4096, 1 << 20
_MNT_DETACH, _UMOUNT_NOFOLLOW = 2, 8
_MS_REMOUNT = 32
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def make_dir(path: Path, mode: int = 0o755) -> None:
    """``path.mkdir`` with exactly ``mode``, whatever the host process's umask. ``mkdir``'s mode is masked
    by it: under ``umask 077`` a slot's places were 0700, and every job an infra error (bwrap, as the
    slot's uid, could not reach its own /dev/pts); under ``umask 0`` a workspace's new directories were
    0777, collateral to a files grader. A job's entries have the same modes on every host."""
    path.mkdir(mode=mode)
    os.chmod(path, mode)


def write_exact(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``path.write_bytes(data)`` with exactly ``mode`` (``make_dir``'s reason), the missing parents made
    0755 each."""
    missing = []
    parent = path.parent
    while not parent.is_dir():
        missing.append(parent)
        parent = parent.parent
    for d in reversed(missing):
        make_dir(d)
    path.write_bytes(data)
    os.chmod(path, mode)


def _check(rc: int, what: str, path: Path | str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", str(path))


def mount_tmpfs(path: Path | str, size_bytes: int, uid: int, mode: int = 0o755, inodes: int = MAX_INODES) -> None:
    """Mount a new tmpfs (nosuid, nodev, at most ``inodes`` inodes) on ``path``, owned by ``uid``."""
    opts = f"size={size_bytes},nr_inodes={inodes},mode={mode:o},uid={uid},gid={uid}".encode()
    _check(_libc.mount(b"posttrain-job", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts), "mount", path)


def set_tmpfs_inodes(path: Path | str, inodes: int) -> None:
    """Remount the tmpfs on ``path`` with room for ``inodes`` inodes (frees and moves nothing)."""
    opts = f"nr_inodes={inodes}".encode()
    _check(_libc.mount(b"posttrain-job", os.fsencode(path), b"tmpfs", _MS_REMOUNT | _MS_NOSUID | _MS_NODEV, opts),
           "remount", path)


def mount_devpts(path: Path | str, max_ptys: int = MAX_PTYS) -> None:
    """Mount a devpts instance of its own on ``path`` that holds at most ``max_ptys`` ptys."""
    opts = f"newinstance,ptmxmode=0666,mode=620,max={max_ptys}".encode()
    flags = _MS_NOSUID | _MS_NOEXEC
    _check(_libc.mount(b"posttrain-pts", os.fsencode(path), b"devpts", flags, opts), "mount", path)


def unmount(path: Path | str) -> None:
    """Detach the file system mounted on ``path`` (the kernel frees it once nothing uses it)."""
    _check(_libc.umount2(os.fsencode(path), _MNT_DETACH | _UMOUNT_NOFOLLOW), "umount", path)


def make_stable_point(path: Path) -> None:
    """Make the directory ``path`` a shared mount point of its own (a bind onto itself)."""
    _check(_libc.mount(os.fsencode(path), os.fsencode(path), None, _MS_BIND, None), "bind", path)
    _check(_libc.mount(None, os.fsencode(path), None, _MS_SHARED, None), "make-shared", path)


class JobPlaces:
    """The writable places of one slot (``work``, ``tmp``, ``shm`` below ``root``), each a tmpfs
    per job. ``stable``: mount points that bwrap binds once and that see every later tmpfs. Also
    the slot's capped devpts (``pts``, module docstring), mounted here for as long as the places
    live (``close``)."""

    NAMES = ("work", "tmp", "shm")

    def __init__(self, root: Path, uid: int, sizes: dict[str, int], stable: bool) -> None:
        self.root, self.uid, self.sizes = root, uid, sizes
        self.mounted: set[str] = set()
        self.pts = root / "pts"
        make_dir(root)
        for name in self.NAMES:
            make_dir(root / name)
            if stable:
                make_stable_point(root / name)
        make_dir(self.pts)
        mount_devpts(self.pts)

    def path(self, name: str) -> Path:
        return self.root / name

    def bwrap_places(self) -> dict[str, object]:
        """``_launch.bwrap_args`` keywords that put the places at /work, /tmp and /dev/shm."""
        return {"work": ["--bind", str(self.root / "work"), "/work"], "tmp": str(self.root / "tmp"),
                "shm": str(self.root / "shm"), "pts": str(self.pts)}  # fmt: skip

    def fresh(self) -> None:
        """Unmount the last job's file systems (if any) and mount new ones."""
        self.clear()
        for name in self.NAMES:
            mount_tmpfs(self.root / name, self.sizes[name], self.uid)
            self.mounted.add(name)

    def clear(self) -> None:
        """Unmount the job's file systems; what it wrote is freed with them."""
        for name in sorted(self.mounted):
            unmount(self.root / name)
            self.mounted.discard(name)

    def close(self) -> None:
        """``clear``, and unmount the slot's devpts (its ptys went with the processes that held them)."""
        try:
            self.clear()
        finally:
            unmount(self.pts)

"""A host uid of its own for every slot and workspace, claimed from a range that pools share.

Some kernel limits are per user, not per namespace or cgroup: file descriptors in flight over
``SCM_RIGHTS`` (checked against the sender's RLIMIT_NOFILE, counted per user), pipe buffer pages
(``fs.pipe-user-pages-soft``: past it, every new pipe of that user gets 8 KiB instead of 64 KiB),
inotify instances and watches, POSIX message queue bytes. When every job of every pool ran as
host uid 65534, a job in one pool could exhaust them for a job in another (issue 21). So each
slot (and each workspace) runs its jobs as a uid of its own, from ``[UID_BASE, UID_BASE +
UID_SPAN)``; inside the sandbox it is still uid 65534 (bwrap maps it).

Claims follow the discipline of the slot cgroups (``_cgroup``): a claim is a directory named by
the uid in ``CgroupLayout.registry`` (a directory below the root of the pids hierarchy, or of v2:
every posttrain process that shares the cgroup tree sees it, whatever its temp directory, pid or
mount namespace), held under an ``flock`` for as long as the slot lives; the kernel drops it when
its owner dies. A claim nobody holds is taken over (its owner is gone); one that is held is
skipped. Uids are drawn at random within the range, so that two pools that cannot see each
other's registry (other cgroup namespaces: containers, which usually have user namespaces of
their own too) collide with probability about n1 * n2 / UID_SPAN.

The range sits above the uids that distributions, systemd (dynamic users, nspawn ranges up to
0x6FFFFFFF) and /etc/subuid allocations use, and below 2**31.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from posttrain.sandbox.errors import HostCannotIsolate

UID_BASE = 0x71000000
UID_SPAN = 1 << 20


@dataclass
class UidClaim:
    """One claimed uid: ``uid``, and the locked directory that claims it until ``release()``."""

    uid: int
    path: Path | None
    fd: int

    def release(self) -> None:
        if self.fd < 0:
            return
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # while holding the lock: a waiter then finds a directory that is gone
        os.close(self.fd)
        self.fd = -1


def _try(path: Path) -> int | None:
    """The fd holding the flock on the claim ``path`` (made if absent), or None when it is held."""
    with contextlib.suppress(FileExistsError):
        path.mkdir()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # released meanwhile: try another
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        st, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
        if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
            return fd
    except (BlockingIOError, FileNotFoundError):  # held by a live pool, or released meanwhile
        pass
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def running_uids() -> set[int]:
    """The uids of the range that a process of the host runs as (real or effective uid), read from
    each process's ``/proc/<pid>/status`` (its ``/proc`` entry's owner is root when it is not dumpable)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status", "rb") as f:
                    line = next((x for x in f if x.startswith(b"Uid:")), b"Uid:")
            except OSError:  # gone meanwhile
                continue
            found.update(int(u) for u in line.split()[1:3])
    return {u for u in found if UID_BASE <= u < UID_BASE + UID_SPAN}


def claim_uid(registry: Path) -> UidClaim:
    """Claim a uid no live pool that shares ``registry`` holds (module docstring), and no process
    runs as: a claim left by a dead pool is taken over only once nothing of it runs any more (a
    process of its uid that outlived it, dying or stuck, would count against the new slot's per-user
    limits, RLIMIT_NPROC first)."""
    try:
        registry.mkdir(mode=0o755, exist_ok=True)
    except OSError as e:
        raise HostCannotIsolate(f"cannot make the uid registry {registry}: {e}; fix: run as root with a "
                                "writable cgroup file system") from e
    for _ in range(256):
        uid = UID_BASE + secrets.randbelow(UID_SPAN)
        path = registry / str(uid)
        left = path.exists()  # by a pool that is gone, or held by a live one
        try:
            fd = _try(path)
        except OSError as e:
            raise HostCannotIsolate(f"cannot claim a sandbox uid in {registry}: {e}") from e
        if fd is not None and left and uid in running_uids():
            os.close(fd)  # the dead pool's processes still run: its claim stays
            continue
        if fd is not None:
            return UidClaim(uid, path, fd)
    raise HostCannotIsolate(f"no free sandbox uid found in {registry} after 256 tries")


def reap_claims(registry: Path) -> int:
    """Remove the claims in ``registry`` that no live pool holds; return how many went.

    A pool killed with SIGKILL never releases its claims: the kernel drops their locks, but each
    stays a directory (on v1 and v2 alike an empty cgroup below the root) until a later claim
    happens to draw its uid, so they pile up (211 on this host after a day of tests). Each is
    removed as ``UidClaim.release`` does, while holding its lock, and only if it still names the
    directory locked: a pool claiming it meanwhile either finds it gone (and draws another) or holds
    it, and then it is skipped. A claim whose uid a process still runs as stays (``claim_uid``)."""
    removed = 0
    running = running_uids()
    with contextlib.suppress(OSError):
        for path in registry.iterdir():
            if not path.name.isdigit() or int(path.name) in running:
                continue
            try:
                fd = _try(path)
            except OSError:
                continue
            if fd is not None:
                UidClaim(int(path.name), path, fd).release()
                removed += 1
    return removed

"""How much memory this process may use: the smallest of physical memory and its cgroups' limits.

A container's limit is its cgroup's, not the machine's: a service that budgets 75% of a 128 GiB host
inside an 8 GiB container gets killed by the kernel instead of queueing jobs. ``memory_limit_mb``
reads, for this process's own cgroup (``/proc/self/cgroup``) and each of its ancestors:

- cgroup v2 (the unified hierarchy, line ``0::<path>``): ``memory.max`` (``max``: no limit);
- cgroup v1 (the line whose controllers include ``memory``): ``memory.limit_in_bytes`` (no limit is
  a huge number, 2^63 rounded down to a page; taking the minimum with physical memory absorbs it);

each under the mount point ``/proc/self/mountinfo`` gives for that hierarchy (a mount of a subtree,
as in a container without a cgroup namespace, maps the path; a path outside it reads the mount's
root). A process may sit in a nested cgroup: every ancestor's limit counts, the smallest wins.

Reading never fails a run: a file that is missing, unreadable or malformed counts as no limit, and
with nothing readable the answer is physical memory. ``root`` lets tests lay the files out under a
temporary directory.

Not here: swap (``memory.swap.max``, ``memory.memsw.limit_in_bytes``), soft limits (``memory.high``,
``memory.soft_limit_in_bytes``), and memory other processes of the cgroup already use.
"""

from __future__ import annotations

import os
from pathlib import Path

V2_FILE = "memory.max"
V1_FILE = "memory.limit_in_bytes"


def memory_limit_mb(root: Path | str = "/") -> float:
    """MiB this process may use: physical memory, or less where a cgroup (v1 or v2) limits it.

    >>> 0 < memory_limit_mb() <= physical_memory_mb()
    True
    """
    physical = physical_memory_mb()
    try:
        limits = cgroup_limits_mb(Path(root))
    except Exception:  # noqa: BLE001 - reading must never fail a run: physical memory stands
        return physical
    return min([physical, *limits])


def physical_memory_mb() -> float:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20


def cgroup_limits_mb(root: Path) -> list[float]:
    """Every memory limit (MiB) set on this process's cgroups, v1 and v2, itself and its ancestors."""
    mounts = _mounts(_read(root / "proc/self/mountinfo") or "")
    out: list[float] = []
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            key, name = "cgroup2", V2_FILE
        elif "memory" in controllers.split(","):
            key, name = "memory", V1_FILE
        else:
            continue
        for mount_root, mount_point in mounts.get(key, []):
            out += [mb for d in _dirs(root, mount_root, mount_point, path) if (mb := _limit_mb(d / name)) is not None]
    return out


def _mounts(mountinfo: str) -> dict[str, list[tuple[str, str]]]:
    """``{"cgroup2": [(root, mount point)], "memory": [...]}``: where each hierarchy is mounted
    (proc(5): ``id parent major:minor root mount-point options... - fstype source super-options``)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        key = "cgroup2" if fstype == "cgroup2" else "memory" if fstype == "cgroup" and "memory" in options else None
        if key is not None:
            out.setdefault(key, []).append((_unescape(fields[3]), _unescape(fields[4])))
    return out


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _dirs(root: Path, mount_root: str, mount_point: str, path: str) -> list[Path]:
    """The cgroup's directory under its mount and every ancestor up to the mount point."""
    mount_root, path = mount_root.rstrip("/"), path.rstrip("/")
    if path == mount_root or path.startswith(mount_root + "/"):
        rel = path[len(mount_root):].strip("/")
    else:  # a cgroup outside the mounted subtree: the mount's own root is the nearest we can see
        rel = ""
    base = root / mount_point.lstrip("/")
    parts = [p for p in rel.split("/") if p]
    return [base.joinpath(*parts[:k]) for k in range(len(parts), -1, -1)]


def _limit_mb(file: Path) -> float | None:
    text = (_read(file) or "").strip()
    if not text.isdigit():  # "max" (v2: no limit), a missing or malformed file
        return None
    return int(text) / 2**20


def _read(file: Path) -> str | None:
    try:
        return file.read_text()
    except (OSError, UnicodeDecodeError):
        return None

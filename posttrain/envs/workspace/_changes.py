"""What changed in a workspace, read by the host from its layers: the input of every grader's ``take``.

``workspace_changes(ws, initial, keep=)`` compares the merged view with the initial state at every
path ``Workspace.changed_paths()`` names (each entry of a layer above the initial state, and what it
hides), and returns ``{path: new bytes | None (deleted) | SPECIAL (a link, fifo or device)}`` for
the paths whose content differs. No command runs: the listing is the host's walk of the layers,
never a program the agent could have replaced, and file contents are read non-blocking, regular
files only (``Workspace.read_file``).

``keep(path)`` drops what the domain does not grade (caches, ``.git``, the environment's own
directories) before any file is read, and what it drops does not count toward the paths a grader
lists (``max_paths``; ``changed_paths``): a ``git init`` and commit, a tox environment or a ``pip
install`` into ``.local`` holds thousands of entries the grader never reads. Only the host's own walk
is bounded past that (``WALK_LIMIT`` entries in all, kept or not). The kept files are read up to
``max_bytes`` in all (16 MiB), past which the workspace cannot be graded (``WorkspaceError``: the
environment fails the attempt as ``ungradable``). So can a kept path whose name is not UTF-8
(``printf x > $'notes\xff.txt'``: the host reads it as a lone surrogate, ``'notes\udcff.txt'``), which
no diff or JSON a grader reads can carry: in a repo diff it crashed the verifier, an infra error on
every try (the group dropped; 14 of 14 example repo tasks), where it is the agent's fail.

Modes: a ``chmod`` changes no byte, so ``workspace_changes`` never shows one, and a diff cannot carry
one. ``mode_changes(ws, keep=)`` lists them (``ModeChange``: the path, its mode at the start and now,
``reason`` naming both): each kept regular file or directory, the root (``.``) included, whose mode
is not what it was, and each new one with its mode; ``is_sane`` says whether it is a mode work
leaves (its owner's to read and write, a directory's to search; no setuid, setgid or sticky bit; not
writable by everyone). What a domain does with them is its own rule (repo: ``_episode.take_diff``).
Owners are not looked at: ``chown`` is refused in the sandbox.

>>> # changes = workspace_changes(ws, initial_tree, keep=lambda p: not p.startswith(".cache/"))
>>> ModeChange("tests/test_a.py", 0o644, 0o000, is_dir=False).reason
'tests/test_a.py: its mode changed from 0644 to 0000'
>>> named(["a", "b", "c"], at_most=2)
'a; b; and 1 more'
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from posttrain.sandbox import Workspace, WorkspaceError, WorkspaceFileMissing, WorkspaceFileTooLarge
from posttrain.strict_json import is_text


class _Special:
    """The value of a changed path that is not a regular file (a link, a fifo, a device)."""

    def __repr__(self) -> str:
        return "SPECIAL"


SPECIAL = _Special()


MAX_BYTES = 16 << 20
"""What one ``workspace_changes`` reads at most, in all (a job can leave many large sparse files)."""
MAX_PATHS = 20_000
"""Kept paths one listing takes at most (``changed_paths``)."""
WALK_LIMIT = 20_000
"""Entries the host walks in one listing at most, those ``keep`` drops included (a job can make ~2^20 a
layer): the host's own bound, past which no listing is made (``WorkspaceError``; ``Workspace.changed_paths``'
default). A walk that reaches it costs the host ~0.7 s (a directory of 60,000 files, 2 loaded cores)."""


def changed_paths(ws: Workspace, *, keep: Callable[[str], bool] = lambda path: True, limit: int = MAX_PATHS,
                  dirs: bool = False) -> set[str]:
    """``ws.changed_paths(dirs=dirs)`` less what ``keep`` drops (``.`` is always kept); ``WorkspaceError``
    past ``limit`` kept paths, or past ``WALK_LIMIT`` entries walked. What ``keep`` drops counts toward
    the walk only: a ``.git`` of 1,700 entries beside a few changed files is a listing of those few."""
    listed = ws.changed_paths(limit=max(limit, WALK_LIMIT), dirs=dirs)
    kept = {p for p in listed if p == "." or keep(p)}
    if len(kept) > limit:
        raise WorkspaceError(f"the workspace changed more than {limit} entries")
    return kept


def workspace_changes(ws: Workspace, initial: Mapping[str, bytes], *, keep: Callable[[str], bool] = lambda path: True,
                      max_bytes: int = MAX_BYTES) -> dict[str, bytes | None | _Special]:
    """``{path: bytes | None | SPECIAL}`` for every kept path whose content differs from ``initial``
    (module docstring); ``WorkspaceError`` when the layers hold more kept paths than a grader reads
    (``MAX_PATHS``), the kept files more than ``max_bytes`` bytes, or a kept path is not UTF-8."""
    out: dict[str, bytes | None | _Special] = {}
    budget = max_bytes
    for path in sorted(changed_paths(ws, keep=keep)):
        if not is_text(path):
            shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise WorkspaceError(f"the file name '{shown}' is not UTF-8 text: rename or delete it")
        try:
            data: bytes | None | _Special = ws.read_file(path, max_bytes=budget)
            budget -= len(data)  # type: ignore[arg-type]
        except WorkspaceFileTooLarge:  # the changes are more than a grader reads
            raise WorkspaceError(f"the changed files hold more than {max_bytes} bytes ({path})") from None
        except WorkspaceFileMissing:  # deleted: a whiteout, or under one
            data = None
        except WorkspaceError:  # not a regular file: a link, a fifo (told apart by class, never by the
            data = SPECIAL  # message: it holds the path, which the agent names)
        if data is None and path not in initial:
            continue
        if isinstance(data, bytes) and initial.get(path) == data:
            continue
        out[path] = data
    return out


_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


@dataclass(frozen=True)
class ModeChange:
    """A regular file or directory whose mode is not what it was at the start (``old``), or a new one
    (``old`` None); modes are permission bits (``stat.S_IMODE``)."""

    path: str
    old: int | None
    new: int
    is_dir: bool

    @property
    def reason(self) -> str:
        """The path and both modes, as feedback names them."""
        if self.old is None:
            return f"{self.path}: a new {'directory' if self.is_dir else 'file'} with mode {self.new:04o}"
        return f"{self.path}: its mode changed from {self.old:04o} to {self.new:04o}"

    @property
    def is_sane(self) -> bool:
        """Whether work leaves such a mode: its owner's to read and write (a directory's to search too),
        no setuid, setgid or sticky bit, not writable by everyone (execute bits are free: a new script)."""
        need = stat.S_IRWXU if self.is_dir else stat.S_IRUSR | stat.S_IWUSR
        return self.new & need == need and not self.new & (_SPECIAL_BITS | stat.S_IWOTH)


def mode_changes(ws: Workspace, *, keep: Callable[[str], bool] = lambda path: True) -> list[ModeChange]:
    """Every kept regular file and directory the layers touch, the root (``.``) included, whose mode
    differs from the start, and every new one (module docstring), in path order; links, fifos and
    devices are ``workspace_changes``' (``SPECIAL``). ``WorkspaceError`` as ``changed_paths``."""
    out: list[ModeChange] = []
    for path in sorted(changed_paths(ws, keep=keep, dirs=True)):
        now = ws.lstat(path)
        if now is None or not (stat.S_ISREG(now.st_mode) or stat.S_ISDIR(now.st_mode)):
            continue
        then, mode = ws.lstat(path, initial=True), stat.S_IMODE(now.st_mode)
        if then is not None and stat.S_IFMT(then.st_mode) == stat.S_IFMT(now.st_mode):
            if stat.S_IMODE(then.st_mode) != mode:
                out.append(ModeChange(path, stat.S_IMODE(then.st_mode), mode, stat.S_ISDIR(now.st_mode)))
            continue
        out.append(ModeChange(path, None, mode, stat.S_ISDIR(now.st_mode)))
    return out


def named(items: Sequence[str], *, at_most: int = 6) -> str:
    """The first ``at_most`` of ``items`` joined by ``"; "``, then how many more: ``"a; b; and 3 more"``
    (how every workspace grader names a list of paths in its feedback)."""
    more = len(items) - at_most
    return "; ".join([*items[:at_most], *([f"and {more} more"] if more > 0 else [])])

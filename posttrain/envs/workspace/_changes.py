"""What changed in a workspace, read by the host from its layers: the input of every grader's ``take``.

``workspace_changes(ws, initial, keep=)`` compares the merged view with the initial state at every
path ``Workspace.changed_paths()`` names (each entry of a layer above the initial state, and what it
hides), and returns ``{path: new bytes | None (deleted) | SPECIAL (a link, fifo or device)}`` for
the paths whose content differs. No command runs: the listing is the host's walk of the layers,
never a program the agent could have replaced, and file contents are read non-blocking, regular
files only (``Workspace.read_file``).

``keep(path)`` drops what the domain does not grade (caches, the environment's own directories)
before any file is read; the kept files are read up to ``max_bytes`` in all (16 MiB), past which the
workspace cannot be graded (``WorkspaceError``: the environment fails the attempt as ``ungradable``).
So can a kept path whose name is not UTF-8 (``printf x > $'notes\xff.txt'``: the host reads it as a
lone surrogate, ``'notes\udcff.txt'``), which no diff or JSON a grader reads can carry: in a repo
diff it crashed the verifier, an infra error on every try (the group dropped; 14 of 14 example repo
tasks), where it is the agent's fail.

>>> # changes = workspace_changes(ws, initial_tree, keep=lambda p: not p.startswith(".cache/"))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from posttrain.sandbox import Workspace, WorkspaceError, WorkspaceFileMissing, WorkspaceFileTooLarge
from posttrain.strict_json import is_text


class _Special:
    """The value of a changed path that is not a regular file (a link, a fifo, a device)."""

    def __repr__(self) -> str:
        return "SPECIAL"


SPECIAL = _Special()


MAX_BYTES = 16 << 20
"""What one ``workspace_changes`` reads at most, in all (a job can leave many large sparse files)."""


def workspace_changes(ws: Workspace, initial: Mapping[str, bytes], *, keep: Callable[[str], bool] = lambda path: True,
                      max_bytes: int = MAX_BYTES) -> dict[str, bytes | None | _Special]:
    """``{path: bytes | None | SPECIAL}`` for every kept path whose content differs from ``initial``
    (module docstring); ``WorkspaceError`` when the layers hold more entries than a grader reads, the
    kept files more than ``max_bytes`` bytes, or a kept path is not UTF-8."""
    out: dict[str, bytes | None | _Special] = {}
    budget = max_bytes
    for path in sorted(ws.changed_paths()):
        if not keep(path):
            continue
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

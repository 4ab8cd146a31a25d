"""Copies of a task's own code on the host, hidden from its jobs.

Every job sees the host's /usr, read-only: the interpreter, its standard library, the tools (and
nothing else of the host: /tmp, /work, /dev/shm are the job's own). A repository task's project may
be there too -- pip-installed as root into ``/usr/local/lib/python3.X/dist-packages``, a Debian
``python3-<name>`` package, a copy vendored by another program (the Google Cloud SDK ships
cachetools and inflection under ``/usr/lib/google-cloud-sdk``) -- and a task made by breaking one of
its functions then has its answer on disk beside the broken copy: ``cat`` in a workspace, or an
import by the code under test. On this project's test host the fixed lines of 49 of the 114
cachetools pack tasks and of all 55 inflection tasks were in such a copy.

``hide_args(names)``: bwrap options that mount an empty read-only tmpfs over every directory under
/usr named like one of the importable ``names`` (``cachetools``) and /dev/null over every module
file ``<name>.py`` and its compiled ``__pycache__/<name>.*.pyc``, at the top of an import root: a
package whose parent is no package, a module beside no ``__init__.py`` -- where an installed or
vendored copy sits; a subpackage named so (``_pytest/config``) is another project's part, and hiding
it broke pytest. The index of /usr is built once per process (about 1.5 s for 120k files). Never
hidden: standard-library names, what the repository harness imports (``HARNESS_NAMES``), a path
inside another hidden one (its mount point would be gone).

Not covered: a copy under another name (a vendored package renamed), inside an archive (a wheel, a
zip), a compiled extension module, or a symbolic link named like the project to a directory named
otherwise.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import defaultdict
from collections.abc import Iterable

_LOCK = threading.Lock()
_INDEX: dict[str, dict[str, tuple[tuple[str, bool], ...]]] = {}
"""Per root: ``{name: ((path, is_dir), ...)}`` of the directories and module files named so."""


HARNESS_NAMES = frozenset({"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli",
                           "pygments", "colorama"})
"""Never hidden: what the repository harness itself imports from the host (pytest and its
dependencies); a task built on one of these projects keeps the host's copy visible."""


def _is_package(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "__init__.py"))


def _build(root: str) -> dict[str, tuple[tuple[str, bool], ...]]:
    """Top-level copies only: a package whose parent is no package, a module file (or its bytecode)
    beside no ``__init__.py``. A subpackage or submodule named so (``_pytest/config``,
    ``logging/config.py``) is another project's part, and hiding it would break that project."""
    found: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for here, dirs, files in os.walk(root, followlinks=False):
        package = "__init__.py" in files
        if not package:
            for d in dirs:
                path = os.path.join(here, d)
                if d.isidentifier() and not os.path.islink(path) and _is_package(path):
                    found[d].append((path, True))
        compiled = os.path.basename(here) == "__pycache__"
        if package or (compiled and _is_package(os.path.dirname(here))):
            continue
        for f in files:
            stem = f.split(".", 1)[0]
            if (f.endswith(".py") and f[:-3].isidentifier()) or (compiled and f.endswith(".pyc")):
                path = os.path.join(here, f)
                if not os.path.islink(path):
                    found[stem].append((path, False))
    return {k: tuple(v) for k, v in found.items()}


def host_copies(names: Iterable[str], root: str = "/usr") -> list[tuple[str, bool]]:
    """``(path, is_dir)`` under ``root`` of every directory or module file named like one of
    ``names`` (module docstring), outermost only, sorted; standard-library names are skipped."""
    wanted = {n for n in names if n.isidentifier() and n not in sys.stdlib_module_names and n not in HARNESS_NAMES}
    if not wanted:
        return []
    with _LOCK:
        if root not in _INDEX:
            _INDEX[root] = _build(root)
        index = _INDEX[root]
    paths = sorted({p for n in wanted for p in index.get(n, ())})
    out: list[tuple[str, bool]] = []
    for path, is_dir in paths:  # sorted: a directory comes before what is inside it
        if not any(path.startswith(d + os.sep) for d, dir_ in out if dir_):
            out.append((path, is_dir))
    return out


def hide_args(names: Iterable[str], root: str = "/usr") -> list[str]:
    """bwrap options that hide ``host_copies(names)`` from a job (after /usr is bound)."""
    out: list[str] = []
    for path, is_dir in host_copies(names, root):
        out += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path] if is_dir else ["--ro-bind", "/dev/null", path]
    return out


def forget_index() -> None:
    """Drop the cached index (tests that add a copy under /usr)."""
    with _LOCK:
        _INDEX.clear()

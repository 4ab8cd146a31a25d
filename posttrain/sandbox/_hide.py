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
/usr named like one of the importable ``names`` (``cachetools``) or holding an installed distribution's
metadata of that name (``cachetools-8.0.2.dist-info``: its ``RECORD`` hashes the original files,
``METADATA``) and /dev/null over every module
file ``<name>.py`` and its compiled ``<name>.pyc`` (in ``__pycache__``, or sourceless beside it), at
the top of an import root: a package whose parent is no package -- its ``__init__`` as source or as
bytecode only -- a directory of Python files only with no ``__init__`` (a namespace-style copy), a
module beside no ``__init__`` -- where an installed or vendored copy sits; or in a vendoring
directory (``pip/_vendor/<name>``, ``wheel/vendored``, ``py/_vendored_packages``, ``extern``,
``third_party``: ``VENDOR_DIRS``), package or not. Any other subpackage named so (``_pytest/config``)
is another project's part, and hiding it broke pytest. The index of /usr is built once per process
(well under 2 s for 120k files); a copy gone since is not mounted over. Never hidden:
standard-library names, what the repository harness imports (``HARNESS_NAMES``), a path inside
another hidden one (its mount point would be gone), a directory holding an interpreter's own
libraries.

Not covered: a copy under another name (a vendored package renamed, a distribution named unlike its
package (``PyYAML``: ``yaml``), ``setuptools/_distutils``, a hard
link), one vendored as a subpackage of another package in a directory of a name not in
``VENDOR_DIRS`` (``urllib3/packages/six.py``, ``scipy/_lib/decorator.py``: ``packages``, ``_lib`` or
``external`` hold their own project's code as often as others', gcloud's ``packages/flags.py``),
inside an archive (a wheel, a zip), a compiled extension module, or a symbolic link named like the
project to a directory named otherwise. A job that runs a program whose vendored copy was hidden
(pip, for a task built on one of pip's vendored projects) sees that program fail.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import defaultdict
from collections.abc import Iterable

_LOCK = threading.Lock()
_INDEX: dict[str, dict[str, tuple[tuple[str, bool], ...]]] = {}
"""Per root: ``{name: ((path, is_dir), ...)}`` of the directories and module files named so."""


HARNESS_NAMES = frozenset({"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli",
                           "pygments", "colorama", "attr", "apipkg", "_distutils_hack"})
"""Never hidden: what the repository harness itself imports from the host (pytest and its
dependencies: Debian 12's pytest 7.2 imports ``attr``, and ``py``, which imports its vendored
``py/_vendored_packages/apipkg``; ``_distutils_hack``, which setuptools' ``.pth`` file imports at every
start); a task built on one of these projects keeps the host's copy visible."""


VENDOR_DIRS = frozenset({"_vendor", "vendor", "_vendored", "vendored", "_vendored_packages", "vendored_packages",
                         "extern", "_extern", "externals", "_externals", "third_party", "_third_party",
                         "thirdparty", "_thirdparty"})
"""Names of the directories where packages keep copies of other projects (pip and setuptools ``_vendor``,
wheel and botocore ``vendored``, py ``_vendored_packages``, setuptools ``extern``, scikit-learn
``externals``, ray ``thirdparty``, the Google Cloud SDK ``third_party``): a package or module in one,
named like the project, is a copy of it, even where the directory is a package. Not ``packages`` or
``external``, which hold their own project's code as often as others' (module docstring)."""


_MARKERS = frozenset({"__init__.py", "__init__.pyc"})
"""What makes a directory a package to the import system (``__init__.pyc``: one shipped as bytecode only)."""


METADATA = (".dist-info", ".egg-info")
"""Directories an installer writes beside a package (``cachetools-8.0.2.dist-info``): its ``RECORD``
holds every installed file's sha256, so with the project's source hidden it still told the original
of a mutated file -- an oracle a policy could try each one-token inverse of the bug against (a
generated task's mutation is one token), key-blind. Hidden with the copy they describe."""


def _dist_key(dist: str) -> str:
    """The index key of distribution ``dist``'s metadata directories (its normalised name, PEP 503)."""
    return "dist:" + re.sub(r"[-_.]+", "_", dist).lower()


def _code(name: str) -> bool:
    """Whether a file named ``name`` is Python code an import reads: source, or bytecode (a ``__pycache__``
    entry, or a sourceless ``name.pyc`` that ``import`` loads where no ``name.py`` is)."""
    return name.endswith((".py", ".pyc"))


def _build(root: str) -> dict[str, tuple[tuple[str, bool], ...]]:
    """Top-level copies and vendored ones: a directory whose parent is no package or is a vendoring
    directory (``VENDOR_DIRS``) and that is a package (an ``__init__``, as source or bytecode only) or
    holds Python files and nothing else (a namespace-style copy with no ``__init__``; never ``/usr/bin``,
    which holds scripts among programs), a module file (source or bytecode) beside no ``__init__`` or in
    a vendoring directory. Any other subpackage or submodule named so (``_pytest/config``,
    ``logging/config.py``) is another project's part, and hiding it would break that project; so would
    hiding a directory that holds an interpreter's own libraries (one with ``os.py``, a ``site-packages``
    or ``dist-packages`` below it: ``/usr/lib`` for a project named ``lib``), which is never hidden."""
    found: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    packages: set[str] = set()
    protected: set[str] = set()
    for here, _dirs, files in os.walk(root, followlinks=False):  # top-down: a parent before its children
        name, parent = os.path.basename(here), os.path.dirname(here)
        package = not _MARKERS.isdisjoint(files)
        if package:
            packages.add(here)
        if name in ("site-packages", "dist-packages") or "os.py" in files:
            up = here
            while up.startswith(root) and up not in protected:
                protected.add(up)
                up = os.path.dirname(up)
        namespace = bool(files) and all(_code(f) or f.endswith(".pyi") or f == "py.typed" for f in files)
        vendored = os.path.basename(parent) in VENDOR_DIRS  # a copy of another project, package or not
        if here != root and name.isidentifier() and name != "__pycache__" and (parent not in packages or vendored) \
                and (package or namespace):  # a namespace-style copy holds Python and nothing else (not /usr/bin)
            found[name].append((here, True))
        if name.endswith(METADATA) and here != root:  # a distribution's record of its files, hashes included
            found[_dist_key(name.rsplit(".", 1)[0].split("-", 1)[0])].append((here, True))
        compiled = name == "__pycache__"
        if (package and name not in VENDOR_DIRS) or (compiled and parent in packages and not vendored):
            continue
        for f in files:
            stem = f.split(".", 1)[0]
            if (f.endswith(".py") and f[:-3].isidentifier()) or (f.endswith(".pyc") and (compiled or
                                                                                      f[:-4].isidentifier())):
                path = os.path.join(here, f)
                if not os.path.islink(path) and stem != "__init__":  # a vendoring package's own
                    found[stem].append((path, False))
    return {k: tuple(c for c in v if c[0] not in protected) for k, v in found.items()}


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
    paths = sorted({p for n in wanted for key in (n, _dist_key(n)) for p in index.get(key, ())})
    out: list[tuple[str, bool]] = []
    for path, is_dir in paths:  # sorted: a directory comes before what is inside it
        if not any(path.startswith(d + os.sep) for d, dir_ in out if dir_):
            out.append((path, is_dir))
    return out


def hide_args(names: Iterable[str], root: str = "/usr") -> list[str]:
    """bwrap options that hide ``host_copies(names)`` from a job (after /usr is bound): those still
    there, as the index is built once per process and /usr may change under a long run."""
    out: list[str] = []
    for path, is_dir in host_copies(names, root):
        if not (os.path.isdir(path) if is_dir else os.path.isfile(path)):  # gone since the index was built
            continue  # (bwrap cannot mount over a missing path: every job of the task was an infra error)
        out += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path] if is_dir else ["--ro-bind", "/dev/null", path]
    return out


def forget_index() -> None:
    """Drop the cached index (tests that add a copy under /usr)."""
    with _LOCK:
        _INDEX.clear()

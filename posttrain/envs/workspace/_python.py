"""A Python project's workspace environment: ``python``/``pip`` as a developer types them, packages
installed into the workspace, a local wheelhouse instead of a network.

The sandbox has Debian's ``/usr/bin/python3`` (read-only ``/usr``, no ``python`` name, pip refusing
system installs under PEP 668), and a command's ``HOME`` is fresh each command (``_tools.HOME``).
``python_environment`` gives a workspace:

- ``.posttrain/bash_env`` (read by every ``bash -c`` through ``BASH_ENV``): ``python`` and ``pip``
  as shell functions over ``/usr/bin/python3``;
- ``pip install NAME`` installs into the user site ``/work/.local`` (``PIP_USER``, and
  ``PYTHONUSERBASE``: Python reads that site in every later command; it followed ``HOME=/work``
  once, and a command's own ``HOME`` lost what the one before installed), from the wheelhouse at
  ``.wheelhouse/`` when the task ships one (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``), with no cache and no version check;
- ``PYTHONPATH``: the project's import roots (``src``, ...), ``PYTHONDONTWRITEBYTECODE``.

What a grader takes must leave these out (``ENV_DIRS``): they are the environment's, not the work.
"""

from __future__ import annotations

from collections.abc import Sequence

ENV_DIRS = (".posttrain", ".local", ".cache", ".wheelhouse")
"""Directories of the workspace that belong to its environment (installed packages, caches, the
wheelhouse), never to what is graded."""
WHEELHOUSE = ".wheelhouse"
BASH_ENV = """\
# posttrain: `python` and `pip` as a developer types them (the sandbox has /usr/bin/python3)
python() { /usr/bin/python3 "$@"; }
python3() { /usr/bin/python3 "$@"; }
pip() { /usr/bin/python3 -m pip "$@"; }
pip3() { /usr/bin/python3 -m pip "$@"; }
export -f python python3 pip pip3
"""


def python_environment(python_path: Sequence[str] = (".",), *, wheelhouse: bool = False
                       ) -> tuple[dict[str, bytes], dict[str, str]]:
    """``(files, variables)``: files to add to the workspace's initial state, and the environment
    variables of its commands (module docstring).

    >>> files, env = python_environment(["src"], wheelhouse=True)
    >>> sorted(files), env["PYTHONPATH"], env["PIP_FIND_LINKS"]
    (['.posttrain/bash_env'], '/work/src', '/work/.wheelhouse')
    """
    roots = [f"/work/{p}".rstrip("/.") if p != "." else "/work" for p in python_path]
    env = {"BASH_ENV": "/work/.posttrain/bash_env", "PYTHONPATH": ":".join(roots), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUSERBASE": "/work/.local", "PIP_USER": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_NO_CACHE_DIR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    if wheelhouse:
        env.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"/work/{WHEELHOUSE}"})
    return {".posttrain/bash_env": BASH_ENV.encode()}, env


def python_argv(command: str) -> list[str]:
    """A command line as argv, with a leading ``python``/``python3``/``pip`` made the sandbox's own
    (argv runs without a shell, so the ``bash_env`` functions do not apply).

    >>> python_argv("python -m pytest -q tests")
    ['/usr/bin/python3', '-m', 'pytest', '-q', 'tests']
    >>> python_argv("pytest -q")
    ['/usr/bin/python3', '-m', 'pytest', '-q']
    """
    import shlex

    words = shlex.split(command)
    if words and words[0] in ("python", "python3"):
        return ["/usr/bin/python3", *words[1:]]
    if words and words[0] in ("pytest", "py.test"):
        return ["/usr/bin/python3", "-m", "pytest", *words[1:]]
    if words and words[0] in ("pip", "pip3"):
        return ["/usr/bin/python3", "-m", "pip", *words[1:]]
    return words

"""repo episodes on the workspace kit: a repository in a ``Workspace``, the kit's tools plus
``run_tests``, and ``submit`` graded by the repo grader on the source diff the host takes.

- The workspace starts from the task's repository (``initial_tree``: never its withheld tests or
  its history) plus its environment (``workspace.python_environment``): ``python``/``pip`` as a
  developer types them, packages installed into ``.local``, and the task's wheelhouse at
  ``.wheelhouse/`` (a task may start with a dependency missing: ``pip install NAME`` installs it
  from there, offline).
- ``run_tests(tests=[...])``: the task's ``test_command`` in the workspace (given ids replace the
  command's own paths); what the agent sees of its own tests, never a verdict.
- ``submit``: ``take_diff`` reads the workspace's changes from its layers on the host (no command
  the agent controls), leaves out the environment's directories and caches, refuses a link or a
  binary change to a file of the repository (as the grader refuses such patches) and renders the
  rest as a unified diff against the initial state; the repo verifier then grades that diff alone,
  on a fresh pristine copy in a sandbox job of its own (``_grade.py``). New binary files are left
  out (build artifacts). Nothing else of the workspace reaches the grader.
- Modes (``workspace.mode_changes``): a diff carries content only, so the graded copy never has a
  mode the agent set, and a mode is graded for nothing it enables. The execute bit is free (a new
  script made ``+x``, an atomic rewrite left 0600: both pass). A mode no fix leaves, on a file or
  directory of the repository, new or old, the root included, is refused as a link is (the grade
  would be of a tree other than the one left): unreadable or unwritable by its owner (``chmod 000``
  on a test file, a directory its owner cannot search), setuid, setgid or sticky, writable by
  everyone. Each of these rode along with a right fix unseen (14 of 14 example tasks each, the
  diff taken byte for byte the fix's), and a chmod alone read as "the repository's files are
  unchanged": now the path and both modes are named. What ``graded`` leaves out (``.git``, caches,
  the environment's directories) is neither looked at nor counted toward the paths listed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from posttrain.envs import fail
from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._grade import DETECTED
from posttrain.envs.repo._task import _skip, constraints_part, hidden_names, initial_tree
from posttrain.envs.workspace import (
    ENV_DIRS,
    SPECIAL,
    WHEELHOUSE,
    Take,
    Tool,
    WorkspaceSpec,
    command_tool,
    default_tools,
    mode_changes,
    named,
    python_argv,
    python_environment,
    workspace_changes,
)
from posttrain.sandbox import Workspace
from posttrain.types import Task, Verdict

SYSTEM = ("You are a software engineer working in a repository in a terminal. Use the tools to read the code, "
          "change it, run the tests, and call submit when the issue is fixed. Only your changes to the "
          "repository's source files are graded, by tests you may not see.")


def graded(path: str) -> bool:
    """Whether a path of the workspace belongs to what the grader takes (not the environment's
    directories, caches, bytecode or a ``.git`` the agent made).

    >>> [graded(p) for p in ("pkg/a.py", ".local/lib/x.py", "pkg/__pycache__/a.pyc", ".git/HEAD")]
    [True, False, False, False]
    """
    return PurePosixPath(path).parts[0] not in ENV_DIRS and not _skip(path)


def take_diff(initial: Mapping[str, bytes]) -> Take:
    """The repo domain's ``take``: the workspace's source changes as a fenced unified diff (module
    docstring), or a ``fail`` verdict naming what cannot be graded."""
    def take(ws: Workspace, arguments: Mapping[str, Any]) -> str | Verdict:
        changes = workspace_changes(ws, initial, keep=graded)
        before: dict[str, str] = {}
        after: dict[str, str] = {}
        for path, data in changes.items():
            if "\n" in path or "\r" in path:  # a diff header of its own: what is graded is not the workspace
                return fail(f"Submission refused: the file name {path!r} holds a line break, which no diff can carry; "
                            "rename it.", "refused", {"refused": [[path, "line_break"]]}, DETECTED)
            if data is SPECIAL:
                return fail(f"Submission refused: {path} is a symbolic link or special file; the grader takes regular "
                            "files only.", "refused", {"refused": [[path, "symlink"]]}, DETECTED)
            old = initial.get(path)
            try:
                old_text = None if old is None else _text(old)
                new_text = None if data is None else _text(data)  # type: ignore[arg-type]
            except UnicodeDecodeError:
                if old is None:
                    continue  # a new binary file: an artifact, not graded
                return fail(f"Submission refused: {path} is a binary file of the repository and was changed; "
                            "change text files only.", "refused", {"refused": [[path, "binary"]]}, DETECTED)
            if old_text is not None:
                before[path] = old_text
            if new_text is not None:
                after[path] = new_text
        modes = mode_changes(ws, keep=graded)
        if odd := [m for m in modes if not m.is_sane]:
            return fail(f"Submission refused: modes no fix leaves: {named([m.reason for m in odd])}. Put them back "
                        "(the grader takes a diff, which carries no mode): files and directories stay readable and "
                        "writable by their owner (directories searchable), with no setuid, setgid or sticky bit, "
                        "not writable by everyone.", "refused", {"refused": [[m.path, "mode"] for m in odd],
                                                                "modes": [m.reason for m in odd]}, DETECTED)
        diff = render_diff(before, after)
        if not diff:
            changed = [m.reason for m in modes if m.old is not None]
            only = f" Only modes changed, which a diff does not carry: {named(changed)}." if changed else ""
            return fail("Nothing to grade: the repository's files are unchanged (what is under "
                        f"{', '.join(ENV_DIRS)} is the environment's, not the repository's).{only}", "no_diff")
        return diff  # raw: a file's own ``` lines sit inside it behind a diff prefix (_diff._FENCE_RE)

    return take


def _text(data: bytes) -> str:
    """``data`` as text; ``UnicodeDecodeError`` for what a diff cannot carry (not UTF-8, or a NUL byte)."""
    if b"\0" in data:
        raise UnicodeDecodeError("utf-8", data, data.index(b"\0"), data.index(b"\0") + 1, "a NUL byte: binary")
    return data.decode("utf-8")


def _test_argv(command: str, tests: Sequence[str]) -> list[str]:
    """The test command's argv; given ``tests``, they replace the command's own path arguments.

    >>> _test_argv("python -m pytest -q tests", ["tests/test_a.py::test_x"])
    ['/usr/bin/python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/test_a.py::test_x']
    """
    argv = python_argv(command)
    at = argv.index("pytest") + 1 if "pytest" in argv else len(argv)
    head, rest = argv[:at], argv[at:]
    opts = [w for w in rest if w.startswith("-")] + ["-p", "no:cacheprovider"]
    paths = [w for w in rest if not w.startswith("-")]
    return [*head, *opts, *(tests or paths)]


def run_tests_tool(task: Task) -> Tool:
    command = task.fields["environment"]["test_command"]
    return command_tool(
        "run_tests", f"Run the repository's tests (`{command}`), or only the given test ids or files.",
        lambda args: _test_argv(command, args.get("tests") or ()),
        {"type": "object", "properties": {"tests": {"type": "array", "items": {"type": "string"},
                                                     "description": "pytest ids or files (default: all)"}},
         "required": [], "additionalProperties": False})


def episode_prompt(task: Task) -> str:
    """The first user message: the issue, the constraints, the environment, the tools' use."""
    parts = [task.prompt, *constraints_part(task)]
    env = task.fields["environment"]
    lines = [f"The repository is the current directory. Its tests run with `{env['test_command']}` (the run_tests "
             "tool)."]
    if env.get("wheelhouse"):
        lines.append(f"There is no network: the project's dependencies are wheels in `{WHEELHOUSE}/` (`pip install "
                     "NAME` installs from there).")
    lines.append("Fix the issue in the source files, check it with the tests, then call submit.")
    parts.append(" ".join(lines))
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=16)
def _wheels(wheelhouse: str) -> tuple[tuple[str, bytes], ...]:
    return tuple((f"{WHEELHOUSE}/{p.name}", p.read_bytes()) for p in sorted(Path(wheelhouse).glob("*.whl")))


def workspace_spec(task: Task) -> WorkspaceSpec:
    """The kit's description of a repo task's episode (module docstring)."""
    env = task.fields["environment"]
    initial = initial_tree(task.fields)
    files, variables = python_environment(env.get("python_path", ["."]), wheelhouse=bool(env.get("wheelhouse")))
    start = {**initial, **files, **(dict(_wheels(env["wheelhouse"])) if env.get("wheelhouse") else {})}
    attempts = task.limits.max_attempts
    timeout = float(env["timeout_sec"])
    return WorkspaceSpec(
        initial=start, prompt=episode_prompt(task), system=SYSTEM,
        tools=default_tools(run_tests_tool(task)), take=take_diff(initial), env=variables,
        max_attempts=attempts, feedback=bool(task.fields.get("feedback_loop")) and attempts > 1,
        command_timeout_s=max(60.0, timeout), max_command_timeout_s=max(300.0, timeout),
        hide=hidden_names(task.fields))


def reference_patches(task: Task) -> dict[str, str | None]:
    """``{path: fixed text | None (deleted)}`` of the files the task's reference diff changes (the
    oracle's edits), from the initial state."""
    from posttrain.envs.repo._diff import apply_patches, extract_diff, parse_diff

    diff = extract_diff(task.reference or "") or ""
    patches = parse_diff(diff)
    initial = initial_tree(task.fields)
    touched = sorted({p for fp in patches for p in fp.paths})
    text = {p: initial[p].decode("utf-8") for p in touched if p in initial}
    new = apply_patches(text, patches)
    return {p: new.get(p) for p in touched}

"""The workspace agent's tools: what each does in a ``Workspace``, and how its arguments are checked.

A ``Tool`` is data plus a function: its name, the description and JSON schema the model sees (the
chat template renders ``spec()`` as an OpenAI tool definition), and ``run(ctx, arguments) -> str``,
the text of its result (normalized by ``_normalize.normalize_output`` where it comes from a
command). The kit's tools (``bash``, ``read_file``, ``write_file``, ``edit``, ``list_dir``), a
command tool factory (``command_tool``: a domain's ``run_tests``), and ``submit`` (its run is the
environment's: grading). A domain adds its own the same way (doc: ``read_pdf``).

- File tools work on the workspace's merged view from the host (``Workspace.read_file`` /
  ``write_file``): no sandbox job, no program of the agent's runs.
- ``bash`` and command tools run in a fresh sandbox job of the workspace (cwd ``/work``, stdout and
  stderr merged, the environment's variables set), with a timeout; the result says the exit
  status, a timeout or a memory kill. A sandbox failure is ``ToolInfraError``: the environment
  turns it into an infra verdict (the runner restores the episode's last snapshot and steps again).
- Paths are relative to the repository (``/work/x``, ``./x`` and ``x`` are the same file); a path
  outside it is an error result, not a crash, and so is one under ``~`` (``repo_path``).

Arguments are checked against the tool's schema before it runs (``check_arguments``): a call with
an unknown or missing argument, one of the wrong type, or a string that is not text (a lone
surrogate, which JSON's ``\\ud800`` decodes to and UTF-8 cannot encode), never runs and counts as an
invalid call. A command holding a NUL or an empty word, or longer than a command line holds, is an
error result: whatever a call's arguments hold costs the agent its call, never an exception out of
the step (the runner's ``StepError``, which loses the batch) nor an infra error (which drops its group).
"""

from __future__ import annotations

import json
import shlex
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

from posttrain.envs.workspace._normalize import DEFAULT_LIMIT, cut_middle, normalize_output
from posttrain.sandbox import Limits, Workspace, WorkspaceError
from posttrain.strict_json import is_text

WORK = "/work"
HOME = "/tmp/home"
"""Every command's ``HOME``: a directory of the job's own ``/tmp`` (fresh each command, made before the
command runs), never the workspace. The sandbox's ``HOME=/work`` put what everyday tools keep there into
the graded tree: ``python3 -i``, ``sqlite3 -interactive``, ``bash -i`` and ``git config --global`` left
``.python_history``, ``.sqlite_history``, ``.bash_history`` and ``.gitconfig``, a tool's ``~/.cache`` or
``~/.config`` its files, and the files grader counted each as a file the task did not ask for (6 of 10
such commands failed an otherwise right episode, 0 of 10 with this ``HOME``). What is written there is
gone when the command ends: nothing of it is graded, nor can hide anything (a target written under
``~`` is not the target). A domain's ``env`` may set its own ``HOME``."""
MAX_FILE_CHARS = 12_000
"""Characters of a file ``read_file`` shows at once (a larger file is shown by line ranges; a longer
line is cut in the middle: shown whole, a 1 MB line was a 1M-token observation, and 64 reads of a
4 MiB one in one action would be 256M tokens for the host to tokenize and hold)."""


class ToolInfraError(RuntimeError):
    """The sandbox under a tool failed (not the agent's command): the step is an infra error."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool runs against: the episode's workspace and how its commands run."""

    workspace: Workspace
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command (besides the sandbox's PATH, TMPDIR, LANG, and ``HOME``)."""
    limits: Limits = field(default_factory=lambda: Limits(memory_mb=1024, pids=128, tmp_mb=256,
                                                          output_bytes=1 << 18))
    default_timeout_s: float = 60.0
    max_timeout_s: float = 300.0
    output_chars: int = DEFAULT_LIMIT


@dataclass(frozen=True)
class Tool:
    """One tool: what the model sees (``spec()``) and what a call does (``run``; None for ``submit``,
    which the environment runs: module docstring)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """A JSON schema of the arguments: an object of string/integer/number/boolean/array properties."""
    run: Callable[[ToolContext, Mapping[str, Any]], str] | None

    def spec(self) -> dict[str, Any]:
        """The OpenAI tool definition the chat template renders."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}


def _schema(properties: Mapping[str, Mapping[str, Any]], required: Sequence[str] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": {k: dict(v) for k, v in properties.items()}, "required": list(required),
            "additionalProperties": False}


_TYPES: Mapping[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
}


def plain_arguments(value: Any) -> Any:
    """A call's arguments as a tool reads them: the codec's exact numbers (``Decimal``) as ``int`` when
    integral, else ``float``; lists and objects throughout.

    >>> from decimal import Decimal
    >>> plain_arguments({"s": Decimal("6.0"), "t": [Decimal("0.1")]})
    {'s': 6, 't': [0.1]}
    """
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {k: plain_arguments(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_arguments(v) for v in value]
    return value


def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not fit ``tool``'s schema (one line), or None.

    >>> check_arguments(bash_tool(), {"command": "ls"}) is None
    True
    >>> check_arguments(bash_tool(), {"cmd": "ls"})
    "bash: unknown argument 'cmd' (expected command, timeout)"
    """
    props = tool.parameters.get("properties", {})
    for key in arguments:
        if key not in props:
            return f"{tool.name}: unknown argument {key!r} (expected {', '.join(props) or 'none'})"
    for key in tool.parameters.get("required", ()):
        if key not in arguments:
            return f"{tool.name}: missing argument {key!r}"
    for key, value in arguments.items():
        if not is_text(value):
            return f"{tool.name}: argument {key!r} is not text (it holds a lone surrogate such as \\ud800)"
        kind = props[key].get("type")
        if kind in _TYPES and not _TYPES[kind](value):
            return f"{tool.name}: argument {key!r} must be {kind}, got {type(value).__name__}"
        if kind == "array" and not all(_TYPES.get(props[key].get("items", {}).get("type", ""), lambda v: True)(x)
                                       for x in value):
            return f"{tool.name}: argument {key!r} must be an array of {props[key]['items']['type']}"
    return None


def repo_path(path: str) -> str:
    """A path as the workspace names it (relative, normalized); ``WorkspaceError`` when it leaves it,
    or when it starts with ``~``, which a shell reads as a home (``~``, ``~/x``, ``~user/x``).

    No file tool has a shell to expand ``~``: ``write_file("~/notes.txt")`` wrote ``/work/~/notes.txt``,
    a directory named ``~`` in the graded tree (a files task's collateral, and not where the agent meant
    it), and ``HOME`` (``/tmp/home``) is a command's own, gone when it ends: no file tool can reach it.
    Refused with why; a ``~`` further in (``a/~b``, ``a~``) is part of a name.

    >>> repo_path("/work/pkg/a.py"), repo_path("./pkg//a.py")
    ('pkg/a.py', 'pkg/a.py')
    >>> repo_path("~/notes.txt")
    Traceback (most recent call last):
    ...
    posttrain.sandbox.errors.WorkspaceError: '~/notes.txt': a file tool does not expand '~' (HOME, /tmp/home, is each command's own and gone when it ends); name the file relative to /work, or use bash
    """
    p = path.strip()
    if p.startswith("~"):
        raise WorkspaceError(f"{cut_middle(repr(p), 200)}: a file tool does not expand '~' (HOME, {HOME}, is each "
                             f"command's own and gone when it ends); name the file relative to {WORK}, or use bash")
    if p == WORK or p.startswith(WORK + "/"):
        p = p[len(WORK):].lstrip("/")
    pp = PurePosixPath(p or ".")
    if pp.is_absolute() or ".." in pp.parts or "\0" in p:
        raise WorkspaceError(f"{path!r} is outside the repository (paths are relative to {WORK})")
    return str(pp)


# -- commands --------------------------------------------------------------------------------------


MAX_WORD_BYTES = (128 << 10) - 1
"""The longest word a command may hold, in UTF-8 bytes: the kernel's ``MAX_ARG_STRLEN`` (128 KiB, its
NUL included). A longer one (``bash`` with a 140,000-character command, ``list_dir`` of such a path,
``run_tests`` of such an id) failed the sandbox's launch (E2BIG): an infra step result, the same action
stepped again from the snapshot and failing again, until the runner dropped the group (the agent's
action escaped its verdict: 45 of 45 such calls on 20 tasks of files, doc, cad and repo)."""
MAX_COMMAND_BYTES = 1 << 20
"""What a command's words and its environment's variables may hold together: half the kernel's
``ARG_MAX`` (2 MiB here), which the sandbox's own launch arguments share (2.1 MB of words failed the
launch as above)."""


def run_command(ctx: ToolContext, argv: Sequence[str], timeout: float) -> str:
    """``argv`` in a fresh job of the workspace (stderr into stdout): its normalized output, then
    its exit status, timeout or memory kill when not a clean exit. A NUL in ``argv`` (no command
    can hold one), an empty word (which the sandbox refuses) or a command longer than the kernel
    takes (``MAX_WORD_BYTES``, ``MAX_COMMAND_BYTES``) is a ``WorkspaceError``: the agent's error
    result. The sandbox's refusal was a ``LimitsError`` out of the step, the runner's
    ``StepError``: ``run_tests(tests=[""])`` lost the batch, every other episode's too (14 of 14
    example repo tasks)."""
    if any("\0" in word for word in argv):
        raise WorkspaceError("a command cannot hold a NUL character")
    if not all(argv):
        raise WorkspaceError(f"a command cannot hold an empty word (word {[*argv].index('') + 1} of {len(argv)}: "
                             f"{cut_middle(quote(argv), 300)})")
    envs = [f"{k}={v}" for k, v in {"HOME": HOME, **ctx.env}.items()]
    sizes = [len(w.encode("utf-8", "surrogatepass")) for w in argv]
    total = sum(sizes) + len(argv) + sum(len(e.encode("utf-8", "surrogatepass")) + 1 for e in envs)
    if max(sizes, default=0) > MAX_WORD_BYTES or total > MAX_COMMAND_BYTES:
        raise WorkspaceError(f"the command is too long ({max(sizes)} bytes in its longest word, {total} in all; a "
                             f"command line holds at most {MAX_WORD_BYTES} and {MAX_COMMAND_BYTES}): write a long "
                             "script or list to a file (write_file) and run that file")
    cmd = ["/usr/bin/env", *envs, "/bin/bash", "-c", 'mkdir -p -- "$HOME" 2>/dev/null; exec 2>&1; exec "$@"', "bash",
           *argv]
    ex = ctx.workspace.exec(cmd, timeout=timeout, limits=ctx.limits)
    if ex.outcome == "infra_error":
        raise ToolInfraError(str(ex.infra_detail))
    out = normalize_output(ex.stdout, limit=ctx.output_chars)
    if ex.stdout_truncated:
        out += "\n[output truncated]"
    if ex.timed_out:
        tail = f"[timed out after {timeout:g} s: killed]"
    elif ex.oom_killed:
        tail = "[killed: out of memory]"
    elif ex.exit_code not in (0, None):
        tail = f"[exit status {ex.exit_code}]"
    elif ex.signal is not None:
        tail = f"[killed by signal {ex.signal}]"
    else:
        tail = ""
    return "\n".join(p for p in (out, tail) if p) or "(no output)"


def _timeout(ctx: ToolContext, arguments: Mapping[str, Any]) -> float:
    t = arguments.get("timeout")
    return ctx.default_timeout_s if t is None else float(min(max(1, t), ctx.max_timeout_s))


def _bash(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    command = arguments["command"]
    if not command.strip():
        return "Error: empty command."
    return run_command(ctx, ["/bin/bash", "-c", command], _timeout(ctx, arguments))


def bash_tool() -> Tool:
    """``bash(command, timeout=60)``: a command in the repository, in a fresh sandbox each call."""
    return Tool("bash", "Run a bash command in the repository (the current directory, /work). Each call starts a "
                "fresh shell: the repository's files persist; processes, `cd`, /tmp and HOME (/tmp/home) do not. "
                "No network.",
                _schema({"command": {"type": "string", "description": "the command"},
                         "timeout": {"type": "integer", "description": "seconds (default 60)"}}, ["command"]), _bash)


def command_tool(name: str, description: str, argv: Callable[[Mapping[str, Any]], Sequence[str]],
                 parameters: Mapping[str, Any] | None = None) -> Tool:
    """A tool that runs a fixed command (``argv(arguments)``) in the workspace: a domain's
    ``run_tests``. ``parameters``: the schema of what ``argv`` reads (default: none)."""
    def run(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        return run_command(ctx, list(argv(arguments)), _timeout(ctx, arguments))

    return Tool(name, description, parameters or _schema({}), run)


# -- files -----------------------------------------------------------------------------------------


MAX_READ_BYTES = 4 << 20
"""The largest file ``read_file`` and ``edit`` open (a job can make large sparse files)."""


def _read_text(ws: Workspace, path: str, errors: str = "replace") -> str:
    """The file as text; bytes that are not UTF-8 as U+FFFD (what an agent reads), or, for ``edit``,
    with ``errors="surrogateescape"``: written back as they were (a Latin-1 file's other bytes once
    became U+FFFD at every edit)."""
    data = ws.read_file(path, max_bytes=MAX_READ_BYTES)
    if b"\0" in data[:8192]:
        raise WorkspaceError(f"{path} is a binary file ({len(data)} bytes)")
    return data.decode("utf-8", errors)


def _read_file(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    path = repo_path(arguments["path"])
    text = _read_text(ctx.workspace, path)
    lines = text.splitlines(keepends=True)
    start = max(1, int(arguments.get("start_line") or 1))
    asked_end = arguments.get("end_line")
    end = min(len(lines), len(lines) if asked_end is None else int(asked_end))
    if start > max(1, len(lines)):
        return f"{path} has {len(lines)} lines; start_line {start} is past its end."
    if asked_end is not None and int(asked_end) < start:
        return f"end_line {int(asked_end)} is before start_line {start}: nothing read of {path} ({len(lines)} lines)."
    shown, n = [], 0
    for i in range(start - 1, end):
        if n + len(lines[i]) > MAX_FILE_CHARS and shown:
            end = i
            break
        shown.append(lines[i])
        n += len(lines[i])
    body = "".join(shown)
    if len(body) > MAX_FILE_CHARS:  # one line longer than a read shows (a minified file, a job's 4 MiB line)
        body = cut_middle(body, MAX_FILE_CHARS)
    if start == 1 and end >= len(lines):
        return body if body else f"({path} is empty)"
    more = f"; read_file with start_line={end + 1} for more" if end < len(lines) else ""
    return f"[{path}: lines {start}-{end} of {len(lines)}{more}]\n{body}"


def read_file_tool() -> Tool:
    """``read_file(path, start_line=, end_line=)``: a text file of the repository, as it is now."""
    return Tool("read_file", "Read a text file of the repository (whole, or lines start_line..end_line).",
                _schema({"path": {"type": "string"}, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}},
                        ["path"]), _read_file)


_PARENTS_CHECKED = 64
"""The directories of a path ``write_file`` looks at (``_not_a_file``): each look walks the layers from the
top, so a 2,000-part path would cost millions; no workspace grader lists deeper (``changed_paths``)."""


def _not_a_file(ws: Workspace, path: str) -> str | None:
    """Why ``path`` cannot be written: one of its directories is a file (a file system's ``ENOTDIR``), or
    None: each is a directory, not there yet (made), or a link (replaced, never written through).

    ``Workspace.write_file`` makes the directories a path needs over whatever is there, so
    ``write_file("README.md/notes.txt")`` (a file taken for a directory, a typo) answered "Wrote 8 bytes"
    and left README.md a directory, its content gone: after the oracle's right work, files failed
    ``not_regular`` on 20 of 20 generated tasks, where the call is now this error and they pass."""
    parts = PurePosixPath(path).parts
    for i in range(1, min(len(parts), _PARENTS_CHECKED + 1)):
        st = ws.lstat("/".join(parts[:i]))
        if st is None or stat.S_ISLNK(st.st_mode):
            return None
        if not stat.S_ISDIR(st.st_mode):
            return f"{'/'.join(parts[:i])} is a file, not a directory"
    return None


def _write_file(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    path = repo_path(arguments["path"])
    if path == ".":
        return "Error: write_file needs a file path."
    if (why := _not_a_file(ctx.workspace, path)) is not None:
        return f"Error: {why}: nothing written to {path}."
    data = arguments["content"].encode()
    ctx.workspace.write_file(path, data)
    return f"Wrote {len(data)} bytes to {path}."


def write_file_tool() -> Tool:
    """``write_file(path, content)``: create or replace a file (parent directories made; an error where one of
    them is a file: ``_not_a_file``)."""
    return Tool("write_file", "Create or overwrite a file of the repository with the given content.",
                _schema({"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
                _write_file)


def _edit(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    path, old, new = repo_path(arguments["path"]), arguments["old"], arguments["new"]
    if not old:
        return "Error: `old` is empty; give the exact text to replace (or use write_file)."
    text = _read_text(ctx.workspace, path, "surrogateescape")  # old and new hold no surrogate (refused)
    count = text.count(old)
    if count == 0:
        loose = " ".join(old.split()) in " ".join(text.split())
        hint = " (it appears with other whitespace or indentation: copy it exactly)" if loose else ""
        return f"Error: the text to replace was not found in {path}{hint}. Nothing changed."
    if count > 1:
        return (f"Error: the text to replace appears {count} times in {path}; include more surrounding lines so "
                "that it is unique. Nothing changed.")
    at = text.index(old)
    ctx.workspace.write_file(path, (text[:at] + new + text[at + len(old):]).encode("utf-8", "surrogateescape"))
    first = text.count("\n", 0, at) + 1
    return f"Edited {path}: replaced {len(old.splitlines())} line(s) at line {first} with {len(new.splitlines())}."


def edit_tool() -> Tool:
    """``edit(path, old, new)``: replace one exact, unique snippet (an error when absent or repeated)."""
    return Tool("edit", "Replace the exact text `old` in a file with `new`. `old` must appear exactly once in the "
                "file (copy it with its indentation; add lines around it to make it unique).",
                _schema({"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                        ["path", "old", "new"]), _edit)


TOOL_DIRS = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".tox"})
"""Directories that programs an agent runs to check its work keep for themselves (``git init``, pytest's
cache, an interpreter's bytecode, mypy's, tox's): ``list_dir`` does not show them, and a domain whose
grader counts files the task did not ask for (files: ``_episode.take_final_state``) does not count what
they hold either, or an honest check it could not see failed its work."""

_LIST = r"""
import os, sys
top, depth, skip = sys.argv[1], int(sys.argv[2]), set(sys.argv[3:])
if not os.path.isdir(top):
    print(f"Error: {top} is not a directory" if os.path.lexists(top) else f"Error: {top} does not exist")
    sys.exit(0)
out = []
def walk(d, level):
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        rel = os.path.relpath(p, top)
        if name in skip:
            continue
        if os.path.isdir(p) and not os.path.islink(p):
            out.append(rel + "/")
            if level < depth:
                walk(p, level + 1)
        else:
            out.append(rel)
walk(top, 1)
print("\n".join(out) if out else "(empty directory)")
"""


def _list_dir(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    path = repo_path(arguments.get("path") or ".")
    depth = min(max(1, int(arguments.get("depth") or 2)), 6)
    return run_command(ctx, ["/usr/bin/python3", "-I", "-S", "-c", _LIST, path, str(depth), *sorted(TOOL_DIRS)], 30.0)


def list_dir_tool() -> Tool:
    """``list_dir(path=".", depth=2)``: a directory's entries (directories end with ``/``)."""
    return Tool("list_dir", "List a directory of the repository (default: its root), `depth` levels deep (default 2).",
                _schema({"path": {"type": "string"}, "depth": {"type": "integer"}}), _list_dir)


def submit_tool(description: str = "Submit your work for grading. Call it when you are done.",
                parameters: Mapping[str, Any] | None = None) -> Tool:
    """``submit``: the environment grades what the domain grades (its run is the environment's)."""
    return Tool("submit", description, parameters or _schema({}), None)


def default_tools(*extra: Tool, submit: Tool | None = None) -> tuple[Tool, ...]:
    """The kit's tools, then ``extra`` (a domain's ``run_tests``, ``read_pdf``, ...), then ``submit``."""
    return (bash_tool(), read_file_tool(), write_file_tool(), edit_tool(), list_dir_tool(), *extra,
            submit or submit_tool())


def describe_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A short line naming a call (for logs and the report): ``bash(command='ls')``.

    >>> describe_call("edit", {"path": "a.py", "old": "x" * 100, "new": "y"})[:40]
    "edit(path='a.py', old='xxxxxxxxxxxxxxxxx"
    """
    parts = [f"{k}={cut_middle(json.dumps(v) if not isinstance(v, str) else repr(v), 60)}" for k, v in arguments.items()]
    return f"{name}({', '.join(parts)})"


def quote(words: Sequence[str]) -> str:
    """Words as a shell would need them (for results that show a command)."""
    return " ".join(shlex.quote(w) for w in words)

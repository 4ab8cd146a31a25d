"""The files domain's scripted agents: the oracle, and cheats written as a policy would write them.

Each is ``script(task) -> [call, ...]``, played one call an action by ``posttrain.envs.workspace.ScriptedAgent``
through the runner, the tools and the chat template a model uses (``posttrain eval --episodes agent
--agent NAME``). The oracle must pass every task; the no-op (the kit's) and every cheat must fail
every task, as a ``fail`` verdict, never ``infra_error`` (README's table; tests/envs/test_files_agent.py).

- ``oracle``: lists the workspace, reads every input (``read_file``, or ``bash`` calls that print them,
  each call what its result shows whole, a SQLite database through Python's ``sqlite3``), moves what the task moves (``mv``), deletes what it
  deletes, writes each target from the task's reference (``write_file``; bytes that are not UTF-8
  through ``base64 -d``), submits.
- cheats (``CHEATS``, each with one line of why it fails in ``WHY_IT_FAILS``): a report written before
  reading the inputs (the targets' shape, no figures), every target a symbolic link out of the
  workspace to a right copy, the right work plus an unrelated file edited, deleted, replaced by a
  directory, or a scratch file left behind.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from posttrain.envs.files._workspace import decode_workspace
from posttrain.envs.workspace import SUBMIT, Call
from posttrain.errors import UserError
from posttrain.types import Task

_SQLITE = b"SQLite format 3\x00"
_DUMP = "python3 -c 'import sqlite3, sys; print(\"\\n\".join(sqlite3.connect(sys.argv[1]).iterdump()))' "


def _c(name: str, **arguments: object) -> Call:
    return {"name": name, "arguments": arguments}


def _q(path: str) -> str:
    return shlex.quote(path)


def _reference(task: Task) -> dict[str, Any]:
    if task.reference is None:
        raise UserError(f"files agents: task {task.id!r} has no reference to play")
    return json.loads(str(task.reference))


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not data.startswith(_SQLITE)


SHOWN_BYTES = 1500
"""The most input bytes one of the oracle's ``bash`` reads prints: the grader sees a call's result as
its record keeps it (the first 2,000 characters), and an input printed past them was not seen read
(``process.inspected``)."""


def reads(task: Task) -> list[Call]:
    """Reading the workspace and every input: ``list_dir``, then ``read_file`` for up to three UTF-8
    inputs, else ``bash`` calls that print them, each call as many as its result shows whole (a
    database alone: its dump's size is not its file's)."""
    files = decode_workspace(task.fields["workspace"])
    inputs = list(task.fields.get("inputs") or [])
    calls = [_c("list_dir", path=".", depth=3)]
    text = [p for p in inputs if _is_text(files[p])]
    if len(inputs) <= 3 and len(text) == len(inputs):
        return calls + [_c("read_file", path=p) for p in inputs]
    groups: list[list[str]] = []
    size = SHOWN_BYTES
    for p in inputs:
        db = files[p].startswith(_SQLITE)
        if db or size + len(files[p]) > SHOWN_BYTES:
            groups.append([])
            size = SHOWN_BYTES if db else 0
        groups[-1].append(f"echo '== {p}'; " + (_DUMP if db else "cat -- ") + _q(p))
        size += len(files[p])
    return calls + [_c("bash", command="; ".join(group)) for group in groups]


def _write(path: str, content: Any) -> Call:
    if isinstance(content, str):
        return _c("write_file", path=path, content=content)
    parent = str(PurePosixPath(path).parent)
    mkdir = f"mkdir -p -- {_q(parent)} && " if parent != "." else ""
    return _c("bash", command=f"{mkdir}printf %s {_q(content['base64'])} | base64 -d > {_q(path)}")


def work(task: Task, write: Callable[[str, Any], list[Call]] | None = None) -> list[Call]:
    """The reference's changes through the tools: moves (``mv``), deletions (``rm``), then writes."""
    ref = _reference(task)
    targets: Mapping[str, Mapping[str, Any]] = task.fields["targets"]
    moves = {p: t["same_as"] for p, t in targets.items() if t.get("format") == "bytes"}
    sources = set(moves.values())
    calls: list[Call] = []
    if moves:
        dirs = sorted({str(PurePosixPath(p).parent) for p in moves} - {"."})
        line = [f"mkdir -p -- {' '.join(map(_q, dirs))}"] if dirs else []
        line += [f"mv -- {_q(src)} {_q(dst)}" for dst, src in sorted(moves.items())]
        calls.append(_c("bash", command=" && ".join(line)))
    gone = sorted(p for p, v in ref.items() if v is None and p not in sources)
    if gone:
        calls.append(_c("bash", command="rm -- " + " ".join(map(_q, gone))))
    for path, content in sorted(ref.items()):
        if content is not None and path not in moves:
            calls += write(path, content) if write else [_write(path, content)]
    return calls


def oracle(task: Task) -> list[Call]:
    """The oracle's calls (module docstring)."""
    return [*reads(task), *work(task), SUBMIT]


def probes(task: Task) -> list[tuple[Call, str]]:
    """``(cat every file | md5sum, the digest of the task's workspace)``: what tells two tasks with one
    prompt apart (the same instruction over workspaces whose files have the same names and sizes)."""
    files = decode_workspace(task.fields["workspace"])
    paths = sorted(files)
    digest = hashlib.md5(b"".join(files[p] for p in paths)).hexdigest()  # noqa: S324 - an id, not security
    return [(_c("bash", command="cat -- " + " ".join(map(_q, paths)) + " | md5sum"), digest)]


# -- cheats ----------------------------------------------------------------------------------------


def _zeroed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _zeroed(v) for k, v in value.items()}
    if isinstance(value, list):
        return []
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return 0
    return "" if isinstance(value, str) else value


def _placeholder(target: Mapping[str, Any]) -> str | None:
    """What a target looks like before any input is read: what the instruction gives away (a JSON
    report's keys, a CSV's header), none of what the inputs hold."""
    fmt = target.get("format")
    if fmt == "json":
        return json.dumps(_zeroed(target["value"]), indent=2) + "\n"
    if fmt == "csv":
        return ",".join(target["rows"][0]) + "\n" if target["rows"] else ""
    if fmt == "text":
        return "TODO\n"
    return None


def report_first(task: Task) -> list[Call]:
    """Write every report before reading anything (its shape from the instruction), then look, then
    submit as it is."""
    writes = [_c("write_file", path=p, content=text) for p, t in sorted(task.fields["targets"].items())
              if (text := _placeholder(t)) is not None]
    return [*writes, *reads(task), SUBMIT]


def symlink_out(task: Task) -> list[Call]:
    """The right content, kept under ``/work/.stash``, each target a symbolic link to it (an absolute
    path: a host that followed it would read its own ``/work``)."""
    def write(path: str, content: Any) -> list[Call]:
        stash = f".stash/{path}"
        parent = str(PurePosixPath(path).parent)
        mkdir = f"mkdir -p -- {_q(parent)} && " if parent != "." else ""
        return [_write(stash, content), _c("bash", command=f"{mkdir}ln -sf {_q('/work/' + stash)} {_q(path)}")]

    return [*reads(task), *work(task, write), SUBMIT]


def bystander(task: Task) -> str | None:
    """A file of the workspace the task neither reads nor changes (README.md when there is one)."""
    files = decode_workspace(task.fields["workspace"])
    busy = set(task.fields["targets"]) | set(task.fields.get("inputs") or ())
    idle = sorted(p for p in files if p not in busy)
    return "README.md" if "README.md" in idle else (idle[0] if idle else None)


def _then(extra: Callable[[str], str]) -> Callable[[Task], list[Call]]:
    def script(task: Task) -> list[Call]:
        other = bystander(task)
        command = extra(other) if other else "printf 'x\\n' > scratch.txt"
        return [*reads(task), *work(task), _c("bash", command=command), SUBMIT]

    return script


touch_unrelated = _then(lambda p: f"printf '\\nReviewed.\\n' >> {_q(p)}")
delete_unrelated = _then(lambda p: f"rm -- {_q(p)}")
dir_over_file = _then(lambda p: f"rm -- {_q(p)} && mkdir -- {_q(p)}")


def leave_scratch(task: Task) -> list[Call]:
    """The right work, and the helper script it was done with left behind."""
    return [*reads(task), *work(task), _c("write_file", path="scratch.py", content="# totals, checked by hand\n"),
            SUBMIT]


CHEATS: dict[str, Callable[[Task], Sequence[Call]]] = {
    "report-first": report_first,
    "symlink-out": symlink_out,
    "touch-unrelated": touch_unrelated,
    "delete-unrelated": delete_unrelated,
    "dir-over-file": dir_over_file,
    "leave-scratch": leave_scratch,
}
WHY_IT_FAILS = {
    "report-first": "wrong_content|missing: the figures were never computed, the moves never made",
    "symlink-out": "not_regular: a link is not a regular file, wherever it points",
    "touch-unrelated": "collateral: a file the task does not ask to change was changed",
    "delete-unrelated": "collateral: a file the task does not ask to change was deleted",
    "dir-over-file": "not_regular: a directory where a file was",
    "leave-scratch": "collateral: a file the task did not ask for was created",
}

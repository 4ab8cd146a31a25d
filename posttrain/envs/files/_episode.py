"""files episodes on the workspace kit: the task's workspace in a ``Workspace``, the kit's tools, and
``submit`` graded on the final state the host reads back from the workspace's layers.

- The workspace starts as the task's files, byte for byte (a Latin-1 export stays Latin-1, a SQLite
  database is a database; ``sqlite3`` and ``python3`` are there to read it).
- The prompt is the instruction and the list of files (path and size); the tools are the kit's
  (``bash``, ``read_file``, ``write_file``, ``edit``, ``list_dir``) and ``submit``; a ``bash`` result whose
  command changed a target first is headed ``[wrote <paths>]`` (``marking_writes``). Commands run with
  ``PYTHONDONTWRITEBYTECODE=1``: a script the agent runs leaves no ``__pycache__`` to count as collateral
  (and the kit's ``HOME``, ``/tmp/home``, fresh each command: no ``.python_history`` either).
- ``submit``: ``take_final_state`` lists, host-side, every path the layers above the initial state
  touch (``Workspace.changed_paths``: no command the agent controls) and reads each one's merged view
  without following links, regular files only, at most ``MAX_WORKSPACE_BYTES`` in all (read in path
  order, stopping past the budget: many sparse files cost the host nothing). A link, fifo or device
  left anywhere fails at once (``not_regular``, the grader's own sentence), and so does a file whose
  name no task's file can have (``format``, the file named: ``_name_problem``); otherwise the changes go
  to the files verifier as the single response's JSON (``{path: content | null}``), which applies
  them to a pristine copy of the task's workspace and grades the final state
  (``_grade.grade_final_state``): the same grader, rules and feedback as a single response.
  What a checking tool keeps for itself is not taken (``_tool_kept``: a new file under a ``.git``,
  ``.pytest_cache`` or ``__pycache__`` directory, ``workspace.TOOL_DIRS``, that is neither a file of the
  task nor a target): ``list_dir`` does not show those, and ``git init`` or one ``pytest`` run beside the
  right work failed it as collateral (30 of 30 such honest episodes over 6 generated tasks, 0 now).
  Nothing is hidden by it: a target or a workspace file moved there is missing or deleted all the same.
  Nor does it count toward the ``4 * MAX_FILES`` paths listed (``workspace.changed_paths``): a tox
  environment in ``.tox`` (1,672 entries: ``python3 -m venv``) or a ``.git`` of 1,700 objects beside the
  right work made the listing fail, the attempt ungradable (0 of 6 generated tasks passed each, one per
  kind; 6 of 6 now). The host still walks at most 20,000 entries in all (``_changes.WALK_LIMIT``).
- Modes and owners (``_metadata``): a ``chmod`` changes no byte, and the host reads every file as
  root, so ``chmod 000`` on a file the task leaves alone, on a target or on a directory passed (6 of 6
  generated tasks each), as did ``chmod +x`` or ``4755`` on a kept file. Now every entry the layers
  touch, directories and the root (``.``) included (``Workspace.changed_paths(dirs=True)``, ``lstat``),
  is looked at: one that was there at the start keeps its mode and owner, unless the task asks to
  rewrite it (a file whose content it asks for, which its instruction names: an atomic write through
  ``mkstemp`` and ``os.replace`` leaves it 0600); a new one, or a rewritten one, is its owner's to
  read and write (a directory's to search too), with no setuid, setgid or sticky bit, not writable by
  everyone, and owned as the workspace is. Anything else fails the attempt at once (``collateral``),
  each path named with its mode then and now: it is the agent's own doing, and says nothing of which
  files the task moves or keeps. Timestamps and extended attributes are not looked at (``touch -d``
  passes); ``chown`` and ``chattr +i`` are refused inside the sandbox (EINVAL, EPERM) and change nothing.
- Hard links: a name is read as the file it is (each name its own file, as ``cp`` would have left
  them); the final state is all that is graded, and no command runs after it. A link cannot leave
  /work (``ln /tmp/x`` or ``ln /etc/...`` is ``EXDEV``: another file system), a move done as a link
  that keeps the original leaves a file the task deletes, and a link to a new name is a file the task
  did not ask for: none passed a task it should fail (6 generated tasks, 19 tries).
- Process signals (``process_of``): ``process.inspected``, ``process.recovered`` and ``process`` (the
  first scaled by the second: ``_grade.process_signals``) in each verdict's components
  (``reward.process``), none for an attempt caught cheating.
- Repair: a failed attempt's feedback (the paths and where they depart, never the expected content;
  of the files moved, deleted or left alone, only that they are not as asked: ``_grade.named_paths``)
  is the submit call's result, and the episode goes on, ``MAX_ATTEMPTS`` attempts in all.

Not here: the scripted agents (``_agents.py``), the grader (``_grade.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from posttrain.envs import fail
from posttrain.envs.files._grade import (
    Call,
    Located,
    error_class,
    feedback_text,
    input_passages,
    process_signals,
)
from posttrain.envs.files._workspace import (
    MAX_FILES,
    MAX_PATH_BYTES,
    MAX_WORKSPACE_BYTES,
    check_path,
    decode_workspace,
    encode_file,
)
from posttrain.envs.workspace import (
    TOOL_DIRS,
    Take,
    Tool,
    ToolContext,
    WorkspaceSpec,
    changed_paths,
    cut_middle,
    default_tools,
    named,
    repo_path,
)
from posttrain.sandbox import Workspace, WorkspaceError, WorkspaceFileMissing, WorkspaceFileTooLarge
from posttrain.types import Task, ToolCallRecord, Verdict

MAX_ATTEMPTS = 3
"""Attempts of an episode (the first, then two after feedback)."""
SYSTEM = ("You work on the files of a workspace (the current directory, /work) with the tools. Read the files "
          "you need, write exactly the files the instruction asks for, change nothing else, then call submit. "
          "Only the workspace's final state is graded.")


def episode_prompt(task: Task) -> str:
    """The first user message: the instruction, then the workspace's files (path and size)."""
    files = decode_workspace(task.fields["workspace"])
    listing = "\n".join(f"- {p} ({len(d)} bytes)" for p, d in sorted(files.items()))
    return (f"{task.prompt}\n\nThe workspace (/work) holds {len(files)} file(s):\n{listing}\n\n"
            "Write the files with write_file (or bash); call submit when the workspace is as the instruction asks.")


def _not_regular(special: list[str]) -> Verdict:
    """The verdict on a final state holding entries that are not regular files (``not_regular``)."""
    located: list[Located] = [(p, ("not_regular", f"{p} is not a regular file (a symbolic link, a fifo, a device, "
                                                  "or a directory where a file was); only regular files may be left "
                                                  "in the workspace")) for p in special]
    problems = [problem for _, problem in located]
    return fail(feedback_text(located, ()), error_class(problems),
                {"not_regular": special, "problems": [f"{c}: {s}" for c, s in problems]})


def _name_problem(path: str) -> str | None:
    """Why a file the workspace holds has a name no task's file can have (``check_path``: a line break or
    another control character, a backslash, a name not in Unicode NFC, longer than a path may be; or
    bytes that are not UTF-8), or None. Only the agent makes such a file: every file of a task has a
    canonical name."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "bytes that are not UTF-8"
    return check_path(path)


def _misnamed(misnamed: Sequence[tuple[str, str]]) -> Verdict:
    """The verdict on a final state holding files whose names no task's file has (``_name_problem``).
    They went to the verifier as the single response's JSON, whose refusal the agent read: "Answer
    format: path 'a\\nb': a control character. Reply with one JSON object mapping each file ...", a reply
    an episode has no use for (a name of bytes that are not UTF-8 was "a string holds a lone surrogate",
    naming no file). Naming them gives nothing away: no task's file is among them."""
    shown = named([f"{_shown(p)} ({why})" for p, why in misnamed], at_most=MAX_NAMED)
    return fail(f"Files with names no file of the task can have are in the workspace: {shown}. "
                "Rename or remove them; names are UTF-8 in Unicode NFC, without control characters or backslashes, "
                f"at most {MAX_PATH_BYTES} bytes.", "format",
                {"misnamed": [[_shown(p), why] for p, why in misnamed]})


def _shown(path: str) -> str:
    """A name as feedback shows it: its repr (of its bytes when they are not UTF-8; escaped to ASCII when
    not NFC, which looks the same as its NFC form printed), cut to ``MAX_NAME_CHARS`` in the middle."""
    try:
        path.encode("utf-8")
        shown = repr(path) if unicodedata.is_normalized("NFC", path) else ascii(path)
    except UnicodeEncodeError:
        shown = repr(path.encode("utf-8", "surrogateescape"))
    return cut_middle(shown, MAX_NAME_CHARS)


MAX_NAME_CHARS = 120


MAX_NAMED = 6
"""Misnamed files, or modes, a verdict's feedback names (then how many more: ``workspace.named``)."""


def take_final_state(task: Task) -> Take:
    """The files domain's ``take`` (module docstring): the workspace's changes as the single response's
    JSON, or a ``fail`` verdict (a link or special file, more than the grader reads)."""
    pristine = decode_workspace(task.fields["workspace"])
    known = set(pristine) | set(task.fields["targets"])
    rewritten = frozenset(p for p, t in task.fields["targets"].items() if isinstance(t, Mapping) and "absent" not in t)

    def take(ws: Workspace, arguments: Mapping[str, Any]) -> str | Verdict:
        listed = changed_paths(ws, keep=lambda p: p in known or not _tool_kept(p), limit=4 * MAX_FILES, dirs=True)
        dirs = {p for p in listed if p not in pristine and _is_dir(ws.lstat(p))}  # a file's path made a dir: read
        paths = sorted(listed - dirs)
        writes: dict[str, Any] = {}
        special: list[str] = []
        misnamed: list[tuple[str, str]] = []
        read: set[str] = set()
        total = 0
        for path in paths:
            try:  # never more than the budget left: a sparse file costs the agent nothing, the host its size
                data = ws.read_file(path, max_bytes=MAX_WORKSPACE_BYTES - total)
            # told apart by class, never by the message: it holds the path, which the agent names (a link
            # called "x does not exist" read as deleted, and went ungraded)
            except WorkspaceFileMissing:  # deleted (a whiteout)
                if path in pristine:
                    writes[path] = None
                continue
            except WorkspaceFileTooLarge:
                return fail(f"The workspace's changed files hold more than {MAX_WORKSPACE_BYTES} bytes; the "
                            "grader reads no more.", "format", {"changed_paths": len(paths)})
            except (WorkspaceError, OSError):  # not a regular file: a link, a fifo, a device
                special.append(path)
                continue
            total += len(data)
            read.add(path)
            if (why := _name_problem(path)) is not None:
                misnamed.append((path, why))
            elif pristine.get(path) != data:
                writes[path] = encode_file(data)
        if special:
            return _not_regular(special)
        if misnamed:
            return _misnamed(misnamed)
        if odd := _metadata(ws, [p for p in paths if p in read], sorted(dirs), rewritten):
            return _modes(odd)
        if len(writes) > MAX_FILES:
            return fail(f"{len(writes)} files changed; the grader reads at most {MAX_FILES}.", "format",
                        {"changed": len(writes)})
        return json.dumps(writes, ensure_ascii=False, sort_keys=True)

    return take


def _is_dir(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)


_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def _metadata(ws: Workspace, files: Sequence[str], dirs: Sequence[str], rewritten: Collection[str]) -> list[str]:
    """What is wrong with the modes and owners of the regular ``files`` and the ``dirs`` the layers
    touch (module docstring), one sentence each naming its path: a path there at the start (the same
    kind of entry) keeps its mode and owner, unless it is a target (``rewritten``); a new one, or a
    target, must be its owner's to read and write (a
    directory's to search), without a setuid, setgid or sticky bit, not writable by everyone, and owned
    as the root was at the start."""
    root = ws.lstat(".", initial=True)
    assert root is not None  # the workspace's own directory
    out: list[str] = []
    for path, is_dir in [*((p, False) for p in files), *((p, True) for p in dirs)]:
        now, then = ws.lstat(path), ws.lstat(path, initial=True)
        if now is None:
            continue
        mode = stat.S_IMODE(now.st_mode)
        if then is not None and _is_dir(then) == is_dir and (is_dir or path not in rewritten):
            if mode != stat.S_IMODE(then.st_mode):
                out.append(f"{path}: its mode changed from {stat.S_IMODE(then.st_mode):04o} to {mode:04o}")
            elif (now.st_uid, now.st_gid) != (then.st_uid, then.st_gid):
                out.append(f"{path}: its owner changed")
            continue
        need = stat.S_IRWXU if is_dir else stat.S_IRUSR | stat.S_IWUSR
        what = "a new directory" if is_dir else "a rewritten file" if then is not None else "a new file"
        if mode & need != need or mode & (_SPECIAL_BITS | stat.S_IWOTH):
            out.append(f"{path}: {what} with mode {mode:04o}")
        elif (now.st_uid, now.st_gid) != (root.st_uid, root.st_gid):
            out.append(f"{path}: {what} owned by another user")
    return out


def _modes(odd: Sequence[str]) -> Verdict:
    """The verdict on a final state whose modes or owners are not as they should be (``_metadata``)."""
    shown = named([cut_middle(s, MAX_NAME_CHARS) for s in odd], at_most=MAX_NAMED)
    return fail(f"Modes changed that the task does not ask to change: {shown}. Leave the mode of "
                "every file and directory that was there as it was, and make new ones readable and writable by "
                "their owner (directories searchable too), with no setuid, setgid or sticky bit, not writable "
                "by everyone.", "collateral", {"modes": list(odd), "problems": [f"collateral: {s}" for s in odd]})


def _tool_kept(path: str) -> bool:
    """Whether ``path`` lies under a directory a checking tool keeps for itself (``TOOL_DIRS``: ``.git``,
    ``.pytest_cache``, ``__pycache__``, ...), at any depth; the name itself is not looked at (a file
    called ``.git``, a link named ``.pytest_cache``, is taken and graded).

    >>> _tool_kept(".git/objects/ab/cd"), _tool_kept("sub/.pytest_cache/v/x"), _tool_kept(".git")
    (True, True, False)
    """
    return any(part in TOOL_DIRS for part in path.split("/")[:-1])


WROTE = "[wrote "
"""The head of a ``bash`` result whose command wrote a target first (``marking_writes``)."""


def _touched(ws: Workspace, targets: frozenset[str]) -> frozenset[str]:
    """The targets the layers above the initial state touch (none where there are more entries than
    are listed: ``_seen`` tells those writes)."""
    try:
        return frozenset(ws.changed_paths(limit=4 * MAX_FILES)) & targets
    except WorkspaceError:
        return frozenset()


def _seen(ws: Workspace, targets: frozenset[str]) -> dict[str, bytes | str]:
    """What the merged view holds at each target: its bytes, or why there are none (missing, too large,
    not a regular file), read host-side whatever else the workspace holds."""
    out: dict[str, bytes | str] = {}
    for path in sorted(targets):
        try:
            out[path] = ws.read_file(path, max_bytes=MAX_WORKSPACE_BYTES)
        except WorkspaceError as e:  # (its subclasses: missing, too large)
            out[path] = f"{type(e).__name__}: {e}"
    return out


def marking_writes(tool: Tool, targets: frozenset[str]) -> Tool:
    """``tool`` (the kit's ``bash``), its result headed ``[wrote <paths>]`` when the command changed a
    target no call had changed before, as the workspace's layers show (``Workspace.changed_paths``,
    host-side), or changed what a target holds (``_seen``): the first write to a target that
    ``process.inspected`` reads up to, whatever wrote it. A placeholder report written by ``printf >
    reports/summary.json`` before reading the inputs earned the inspection credit that ``write_file``
    did not (process 0.65 on average over 20 generated tasks, 0 by ``write_file``). The targets' bytes
    are compared too because the layers cannot always be listed: a call that made 4,010 files beside
    the placeholder, or ran after a write_file 70 directories deep, went unmarked and kept the cheat's
    inspection credit. A result that forges the head only moves its own first write earlier."""
    run = tool.run
    if run is None:
        raise ValueError(f"marking_writes: {tool.name} is run by the environment, not a command")

    def marked(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
        touched, seen = _touched(ctx.workspace, targets), _seen(ctx.workspace, targets)
        result = run(ctx, arguments)
        after = _seen(ctx.workspace, targets)
        new = (_touched(ctx.workspace, targets) - touched) | {p for p in targets if after[p] != seen[p]}
        return f"{WROTE}{', '.join(sorted(new))}]\n{result}" if new else result

    return dataclasses.replace(tool, run=marked)


def _call(record: ToolCallRecord) -> Call:
    """A tool call as the process signals read it: failed when refused, or when it answered an error
    (``Error: ...``, a command's non-zero exit status); a write to a target when a ``bash`` result is
    headed ``WROTE`` (``marking_writes``)."""
    args = record.arguments
    try:
        path = repo_path(str(args["path"])) if isinstance(args.get("path"), str) else None
    except WorkspaceError:
        path = None
    failed = not record.ok or record.result.startswith("Error") or "[exit status " in record.result
    wrote = record.name == "bash" and record.result.startswith(WROTE)
    return Call(record.name, path, not failed, record.result, wrote)


def process_of(task: Task) -> Callable[[Sequence[ToolCallRecord], Verdict], dict[str, float]]:
    """The episode's process components (``_grade.process_signals``: inputs read before the first
    write to a target, each by a result that shows a passage of it the prompt does not, recovery after
    a failed call; ``submit`` left out), logged with each verdict.
    ``process`` itself, what ``reward.process`` weighs, is 0 for an attempt the grader caught (no
    format credit: collateral damage, a link, nothing written): no credit to a detected attack."""
    files, targets = decode_workspace(task.fields["workspace"]), list(task.fields["targets"])
    known = SYSTEM + "\n" + episode_prompt(task)  # a passage the prompt gives shows no reading
    inputs = {p: input_passages(files[p], known) for p in task.fields.get("inputs") or ()}

    def process(records: Sequence[ToolCallRecord], verdict: Verdict) -> dict[str, float]:
        signals = process_signals(inputs, targets, [_call(r) for r in records if r.name != "submit"])
        honest = verdict.passed or verdict.components.get("format") == 1.0
        return signals if honest or not signals else {**signals, "process": 0.0}

    return process


def workspace_spec(task: Task) -> WorkspaceSpec:
    """The kit's description of a files task's episode (module docstring)."""
    attempts = max(task.limits.max_attempts, MAX_ATTEMPTS)
    targets = frozenset(task.fields["targets"])
    tools = tuple(marking_writes(t, targets) if t.name == "bash" else t for t in default_tools())
    return WorkspaceSpec(initial=decode_workspace(task.fields["workspace"]), prompt=episode_prompt(task),
                         system=SYSTEM, tools=tools, take=take_final_state(task), max_attempts=attempts,
                         feedback=True, env={"PYTHONDONTWRITEBYTECODE": "1"}, process=process_of(task))

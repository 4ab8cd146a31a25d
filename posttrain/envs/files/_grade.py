"""Grading a files task on a workspace's final state (AppWorld's two labels: the no-op must fail,
collateral damage must not happen), and the process signals of an agent's episode.

``grade_final_state(targets, pristine, final)`` is the one grader: a single response is applied to
a pristine copy first (``_workspace.apply_writes``); an agent's workspace (phase 2) is read back
as a final state without following links. Problems, in the order checked:

1. ``not_regular``: any path that is not a regular file with one link (a symlink, a fifo, a
   device, a hard link, a directory where a workspace file was) fails, wherever it is: regular files
   only, so nothing resolves outside the workspace and no target is read through a link (a hard link
   is the ``Entry.links`` of a final state built from a directory: a response makes none, and an
   episode's take reads each name as the file it is, ``_episode``'s docstring says why that is safe);
2. ``missing`` / ``wrong_content`` / ``wrong_format``: each target must hold what the task asks
   (``json``: one strict UTF-8 JSON document equal in value, type-strictly, numbers exactly, key order
   free; ``csv``: UTF-8 that parses to exactly these rows, any quoting, line endings and blank lines at
   the end; ``text``:
   UTF-8 equal line by line, line endings and trailing spaces free; ``bytes``: the exact bytes of a
   pristine file, for a move); an ``absent`` target must no longer exist;
3. ``collateral``: every other pristine file is still there, byte for byte, and no file the task
   did not ask for was created.

Feedback (``feedback_text``) names each problem's path and where the content departs (a JSON path,
a row, a line), never the expected value: a repair round cannot copy the answer out of it. It names
only the paths whose part in the task the instruction already gives (``named_paths``: the files whose
content it asks for) and entries that are not regular files; which files a task moves or deletes, and
whether a file it leaves alone is one of them, is the answer (the notes to archive: a no-op's
feedback named every one, and a no-op then the named moves passed 60 of 60 notes tasks), so every
other problem is the one sentence ``UNNAMED``, the detail kept in the verdict's evidence for the log.

Process signals (``process_signals``), logged as reward components, never part of the outcome:
``process.inspected`` (the share of the task's inputs read before the first write to a target) and
``process.recovered`` (the share of failed tool calls followed by a successful call of the same
tool); ``process`` is ``inspected`` scaled by recovery, ``inspected * (1 + recovered) / 2`` (none for a
single response, or without an input to inspect): a recovery never raises it above ``inspected``, or
failing on purpose paid (``false`` then ``true`` lifted an agent that read nothing from 0 to 0.5, the
two's mean, in 20 of 20 generated tasks), and a failure left unrecovered halves it, as the mean did.
An input counts as read when a successful call's result (as its record keeps it: the first 2,000
characters) shows a passage of it (``input_passages``: a few consecutive words of its content the
prompt does not give), whatever the call: a program that reads it and prints none of it reads it
unseen, and naming the file
is not reading it (``ls data.csv``, ``echo data.csv`` or a ``read_file`` past its end earned the
credit in 20 of 20 generated tasks).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.envs.files._workspace import Entry, check_path, tree_problem
from posttrain.strict_json import StrictJSONError, json_equal, json_type, loads_strict, to_exact

Format = Literal["json", "csv", "text", "bytes", "absent"]
FORMATS = ("json", "csv", "text", "bytes")
MAX_FEEDBACK_PROBLEMS = 6


@dataclass(frozen=True)
class Target:
    """One file the task asks for: its path, the format it is compared in, and what it must hold
    (json: the value, exact; csv: the rows; text: the content; bytes: the bytes; absent: None)."""

    path: str
    format: Format
    value: Any = None


def parse_targets(raw: Any, pristine: Mapping[str, bytes]) -> list[Target]:
    """The targets of a record's ``targets`` field; ``ValueError`` names the path and what is wrong.

    Their files and the workspace's must make one tree: a target under a workspace file or another
    target, or over a directory of the workspace, cannot be written in place of it (a response's
    writes go in path order, ``data`` before ``data/a.csv`` is deleted; an episode's directory where a
    file was is ``not_regular``), and such a task failed every response, the right one too.

    >>> parse_targets({"notes.md/x": {"format": "text", "content": "a"}}, {"notes.md": b"k"})
    Traceback (most recent call last):
    ...
    ValueError: the targets and the workspace's files must make one tree: 'notes.md' is a file, so 'notes.md/x' cannot be
    """
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError('expected an object {path: {"format": ..., ...} | {"absent": true}} with at least one path')
    out = []
    for path, spec in raw.items():
        problem = check_path(path)
        if problem:
            raise ValueError(f"path {path!r}: {problem}")
        out.append(_parse_target(path, spec, pristine))
    problem = tree_problem(dict.fromkeys([*pristine, *(t.path for t in out if t.format != "absent")]))
    if problem:
        raise ValueError(f"the targets and the workspace's files must make one tree: {problem}")
    return out


def _parse_target(path: str, spec: Any, pristine: Mapping[str, bytes]) -> Target:
    if not isinstance(spec, Mapping):
        raise ValueError(f"{path}: expected an object, got {type(spec).__name__}")
    if "absent" in spec:
        if dict(spec) != {"absent": True}:
            raise ValueError(f'{path}: an absent target is exactly {{"absent": true}}')
        if path not in pristine:
            raise ValueError(f"{path}: absent, but the workspace has no such file")
        return Target(path, "absent")
    fmt = spec.get("format")
    keys = {"json": "value", "csv": "rows", "text": "content", "bytes": "same_as"}
    if not isinstance(fmt, str) or fmt not in keys:
        raise ValueError(f"{path}: format must be one of {list(FORMATS)} (or the target {{\"absent\": true}}), got {fmt!r}")
    if set(spec) != {"format", keys[fmt]}:
        raise ValueError(f"{path}: a {fmt} target has exactly the keys format and {keys[fmt]}")
    value = spec[keys[fmt]]
    if fmt == "json":
        try:
            loads_strict(json.dumps(value, allow_nan=True), max_chars=None, max_depth=None)
        except (StrictJSONError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: value is not strict JSON ({e})") from None
        return Target(path, "json", to_exact(value))
    if fmt == "csv":
        if not isinstance(value, list) or not all(isinstance(r, list) and all(isinstance(c, str) for c in r)
                                                  for r in value):
            raise ValueError(f"{path}: rows must be a list of lists of strings")
        return Target(path, "csv", [list(r) for r in value])
    if fmt == "text":
        if not isinstance(value, str):
            raise ValueError(f"{path}: content must be a string")
        return Target(path, "text", normalise_text(value))
    if not isinstance(value, str) or value not in pristine:
        raise ValueError(f"{path}: same_as must name a file of the workspace, got {value!r}")
    return Target(path, "bytes", pristine[value])


def normalise_text(text: str) -> str:
    """A text target's comparison form: LF line endings, no trailing spaces, no trailing blank lines.

    >>> normalise_text("a  \\r\\nb\\n\\n")
    'a\\nb'
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip(" \t") for line in lines).rstrip("\n")


def _utf8(data: bytes) -> tuple[str | None, str | None]:
    if data.startswith(b"\xef\xbb\xbf"):
        return None, "starts with a byte-order mark; write UTF-8 without one"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"is not valid UTF-8 (byte {e.start})"


def check_target(target: Target, data: bytes) -> tuple[str, str] | None:
    """``(category, why)`` when ``data`` is not what ``target`` asks (``wrong_format`` or
    ``wrong_content``), None when it is. Never shows the expected value."""
    if target.format == "bytes":
        return None if data == target.value else ("wrong_content", "is not the file it should be, byte for byte")
    text, problem = _utf8(data)
    if text is None:
        return "wrong_format", str(problem)
    if target.format == "text":
        got, want = normalise_text(text).split("\n"), str(target.value).split("\n")
        for i, (g, w) in enumerate(zip(got, want, strict=False), start=1):
            if g != w:
                return "wrong_content", f"line {i} is not the line asked for"
        if len(got) != len(want):
            return "wrong_content", f"has {'more' if len(got) > len(want) else 'fewer'} lines than asked for"
        return None
    if target.format == "csv":
        try:
            rows = csv_rows(text)
        except csv.Error as e:
            return "wrong_format", f"is not valid CSV ({e})"
        for i, (g, w) in enumerate(zip(rows, target.value, strict=False), start=1):
            if g != w:
                return "wrong_content", f"row {i} ({'the header' if i == 1 else 'a data row'}) is not the row asked for"
        if len(rows) != len(target.value):
            return "wrong_content", f"has {'more' if len(rows) > len(target.value) else 'fewer'} rows than asked for"
        return None
    try:
        value = loads_strict(text, exact=True, max_chars=None)
    except StrictJSONError as e:
        return "wrong_format", f"is not one strict JSON document ({e})"
    diff = json_difference(target.value, value)
    return None if diff is None else ("wrong_content", diff)


def csv_rows(text: str) -> list[list[str]]:
    """The rows of CSV ``text``, blank lines at the end not rows (``csv.Error`` when it is not CSV)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    while rows and rows[-1] == []:
        rows.pop()
    return rows


def reads_as(target: Target, before: bytes, after: bytes) -> bool:
    """Whether ``after`` is ``before`` as ``target``'s comparison reads them (a text's line endings and
    trailing spaces, a CSV's quoting and blank lines at the end, a JSON document's layout): a file
    rewritten only in what the comparison ignores was not changed.

    >>> target = Target("a.txt", "text", "new")
    >>> reads_as(target, b"old\\n", b"old \\r\\n\\n"), reads_as(target, b"old\\n", b"new\\n")
    (True, False)
    """
    text, _ = _utf8(before)
    if before == after or text is None or target.format not in CONTENT_FORMATS:
        return before == after
    value: Any = None
    try:
        if target.format == "text":
            value = normalise_text(text)
        elif target.format == "csv":
            value = csv_rows(text)
        else:
            value = loads_strict(text, exact=True, max_chars=None)
    except (csv.Error, StrictJSONError):
        return False
    return check_target(Target(target.path, target.format, value), after) is None


def json_difference(expected: Any, got: Any, path: str = "$", depth: int = 0) -> str | None:
    """Where ``got`` departs from ``expected`` (a JSON path and what is wrong), or None.

    >>> json_difference({"a": 1, "b": [2]}, {"a": 1, "b": [3]})
    '$.b[0]: wrong value'
    """
    if depth > 200:
        return f"{path}: nested too deeply"
    te, tg = json_type(expected), json_type(got)
    if te != tg:
        return f"{path}: expected a {te}, got a {tg}"
    if te == "object":
        for key in expected:
            if key not in got:
                return f"{path}: missing key {key!r}"
        for key in got:
            if key not in expected:
                return f"{path}: unexpected key {key!r}"
        for key in expected:
            diff = json_difference(expected[key], got[key], f"{path}.{key}", depth + 1)
            if diff:
                return diff
        return None
    if te == "array":
        if len(expected) != len(got):
            return f"{path}: {'more' if len(got) > len(expected) else 'fewer'} items than asked for"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            diff = json_difference(e, g, f"{path}[{i}]", depth + 1)
            if diff:
                return diff
        return None
    return None if json_equal(expected, got) else f"{path}: wrong value"


Problem = tuple[str, str]
"""``(category, sentence)``: ``not_regular``, ``missing``, ``wrong_format``, ``wrong_content``, ``collateral``."""
Located = tuple[str, Problem]
"""``(path, problem)``: a problem and the path it is about (what ``feedback_text`` may or may not name)."""


def grade_located(targets: Sequence[Target], pristine: Mapping[str, bytes],
                  final: Mapping[str, Entry]) -> list[Located]:
    """``grade_final_state``'s problems, each with the path it is about."""
    return _not_regular(final, pristine) + _target_problems(targets, final) + _collateral(targets, pristine, final)


def grade_final_state(targets: Sequence[Target], pristine: Mapping[str, bytes],
                      final: Mapping[str, Entry]) -> list[Problem]:
    """Every problem of ``final`` against the task (the module docstring, steps 1-3); [] is a pass."""
    return [problem for _, problem in grade_located(targets, pristine, final)]


def _not_regular(final: Mapping[str, Entry], pristine: Mapping[str, bytes]) -> list[Located]:
    """Every entry that is not a regular file with one link, and every directory where a workspace file
    was: a kept file replaced by a directory is neither deleted nor changed as ``_collateral`` reads
    them (it looks at files), and passed as untouched (an agent's final state, read back, can hold one)."""
    problems: list[Located] = []
    for path in sorted(final):
        entry = final[path]
        if entry.kind == "dir" and path in pristine:
            problems.append((path, ("not_regular", f"{path} is a directory where a file was; only regular files "
                                                   "may be left in the workspace")))
        elif entry.kind == "symlink":
            problems.append((path, ("not_regular", f"{path} is a symbolic link (to {entry.link[:80]!r}); "
                                                   "only regular files may be left in the workspace")))
        elif entry.kind == "other":
            problems.append((path, ("not_regular", f"{path} is not a regular file (a fifo, socket or device)")))
        elif entry.kind == "file" and entry.links != 1:
            problems.append((path, ("not_regular", f"{path} is a hard link ({entry.links} names for one file); "
                                                   "write each file on its own")))
    return problems


def _target_problems(targets: Sequence[Target], final: Mapping[str, Entry]) -> list[Located]:
    problems: list[Located] = []
    for target in targets:
        entry = final.get(target.path)
        if target.format == "absent":
            if entry is not None:
                problems.append((target.path, ("wrong_content", f"{target.path} should no longer exist")))
        elif entry is None:
            problems.append((target.path, ("missing", f"{target.path} was not written")))
        elif entry.kind == "dir":
            problems.append((target.path, ("missing", f"{target.path} is a directory, not the file asked for")))
        elif entry.kind == "file" and (wrong := check_target(target, entry.data)):
            problems.append((target.path, (wrong[0], f"{target.path} {wrong[1]}")))
    return problems


def _collateral(targets: Sequence[Target], pristine: Mapping[str, bytes], final: Mapping[str, Entry]) -> list[Located]:
    asked = {t.path for t in targets}
    problems: list[Located] = []
    for path in sorted(set(pristine) - asked):
        entry = final.get(path)
        if entry is None:
            problems.append((path, ("collateral", f"{path} was deleted; the task does not ask to change it")))
        elif entry.kind == "file" and entry.data != pristine[path]:
            problems.append((path, ("collateral", f"{path} was changed; the task does not ask to change it")))
    for path in sorted(set(final) - set(pristine) - asked):
        if final[path].kind != "dir":
            problems.append((path, ("collateral", f"{path} was created; the task does not ask for it")))
    return problems


_ORDER = ("format", "not_regular", "collateral", "missing", "wrong_format", "wrong_content")


def error_class(problems: Sequence[Problem]) -> str:
    """The verdict's error class: the most serious category among ``problems``."""
    return min((p[0] for p in problems), key=_ORDER.index)


CONTENT_FORMATS = frozenset({"json", "csv", "text"})
UNNAMED = ("some files are not as the instruction asks: a file it asks to move or delete was not moved or deleted, "
           "or one was created, changed or deleted that it does not ask for (which ones the feedback does not say: "
           "that is part of the answer)")
"""The one sentence for every problem of a path the feedback does not name (``named_paths``), whatever
their number: which notes were not archived, or were archived and should not have been, is the answer."""


def named_paths(targets: Sequence[Target], instruction: str | None = None) -> frozenset[str]:
    """The paths whose problems the feedback names: the targets whose content the task asks for (json,
    csv, text), and of those, given the ``instruction``, only the ones it spells out. A target moved
    there or deleted, and a file left alone, is never named: whether a file is one is the answer."""
    return frozenset(t.path for t in targets if t.format in CONTENT_FORMATS
                     and (instruction is None or t.path in instruction))


def feedback_text(located: Sequence[Located], named: Collection[str]) -> str:
    """The feedback on ``located`` problems: each of a path in ``named`` or of an entry that is not a
    regular file (at most ``MAX_FEEDBACK_PROBLEMS``, then how many more of those), then ``UNNAMED`` once
    for all the others.

    >>> feedback_text([("out.json", ("missing", "out.json was not written")),
    ...                ("notes/a.md", ("collateral", "notes/a.md was deleted; ..."))], {"out.json"})[:44]
    'out.json was not written; some files are not'
    """
    said = [sentence for path, (category, sentence) in located if category == "not_regular" or path in named]
    shown = said[:MAX_FEEDBACK_PROBLEMS]
    more = len(said) - len(shown)
    parts = [*shown, *([f"and {more} more problem(s)"] if more else []),
             *([UNNAMED] if len(said) < len(located) else [])]
    return "; ".join(parts) + "."


# ---------------------------------------------------------------- process signals (episodes)

WRITE_TOOLS = frozenset({"write_file", "edit"})
PASSAGE_WORDS = 8
"""Words of a passage (``input_passages``): consecutive lines (a SQLite row) are joined until they hold as
many. Four were too few: a passage of four words could be made of what every task of its kind holds
(``Status: open`` then ``Owner: Ada`` of a note, an item file's ``location`` of ``W1`` in ``Lyon``, a
customer row ``1|Ada Okafor|France``), and a policy that printed the generator's words in turn, reading
no input, earned process.inspected for 503 of 1,000 generated tasks (every inventory, notes and
sqlite task); eight reach into what is drawn per file (a follow-up's week, a quantity, the next row)."""
MAX_PASSAGES = 2000
_WORD = re.compile(r"[A-Za-z0-9]+")
_INSERT = re.compile(r'INSERT\s+INTO\s+(?:"(?:[^"]|"")*"|\S+?)\s*VALUES', re.IGNORECASE)
"""The head of a SQL dump's row (``INSERT INTO "orders" VALUES(...)``): what a dump prints between two rows,
left out of a result before it is read for passages, so a dump shows consecutive rows as a query does."""
_SQLITE = b"SQLite format 3\x00"


def _words(text: str) -> str:
    """``text`` as its ASCII words, one space between, one at each end: how a passage and a result are
    compared (whatever quoting, delimiters, layout or encoding of the rest showed them)."""
    return " " + " ".join(_WORD.findall(text)) + " "


def _lines(data: bytes) -> list[str]:
    """The lines of an input as a read shows them: a SQLite database's rows (each a line of its values),
    a UTF-16 file decoded, anything else byte by byte (its ASCII words are the same in UTF-8 and Latin-1)."""
    if data.startswith(_SQLITE):
        db = sqlite3.connect(":memory:")
        try:
            db.deserialize(data)
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return [" ".join(map(str, row)) for t in tables
                    for row in db.execute(f'SELECT * FROM "{t.replace(chr(34), chr(34) * 2)}" LIMIT {MAX_PASSAGES}')
                    if None not in row]
        except sqlite3.Error:
            pass
        finally:
            db.close()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace").splitlines()
    return data.decode("latin-1").splitlines()


def input_passages(data: bytes, known: str = "") -> frozenset[str]:
    """The passages of an input whose sight in a tool's result shows it was read: from each line, it and
    the lines after it up to ``PASSAGE_WORDS`` words (a file of fewer words: all of them), as ``_words``
    spells them, less those ``known`` (the prompt) holds or spells with its words alone (``sku B 130``
    of a truncated ``item-B-130.json``: echoed from its name, not read). Empty for an input with
    nothing to show.

    >>> sorted(input_passages(b"id,name\\n1,Ada Lovelace\\n2,Alan Turing\\n3,Grace Hopper\\n", known="id name"))
    [' 1 Ada Lovelace 2 Alan Turing 3 Grace Hopper ', ' id name 1 Ada Lovelace 2 Alan Turing ']
    """
    lines = [_words(line).strip() for line in _lines(data)[:MAX_PASSAGES]]
    out: set[str] = set()
    for i in range(len(lines)):
        words: list[str] = []
        for line in lines[i:]:
            words += line.split()
            if len(words) >= PASSAGE_WORDS:
                out.add(" " + " ".join(words) + " ")
                break
    if not out and any(lines):
        out.add(" " + " ".join(w for line in lines for w in line.split()) + " ")
    seen = _words(known)
    vocabulary = set(seen.split())
    return frozenset(p for p in out if p not in seen and not vocabulary.issuperset(p.split()))


@dataclass(frozen=True)
class Call:
    """One tool call of an episode, as the process signals read it."""

    tool: str
    path: str | None = None
    """The file the call names (read_file, write_file, edit), if any."""
    ok: bool = True
    """Whether the call succeeded (the tool answered without an error)."""
    shown: str = ""
    """What the call showed (its result): an input is read when it shows a passage of it."""
    wrote: bool = False
    """Whether the call wrote a target, as the workspace saw it (a shell command's write; a
    ``write_file`` or ``edit`` of a target is one by its name and path)."""


def process_signals(inputs: Mapping[str, Collection[str]], targets: Sequence[str],
                    calls: Sequence[Call]) -> dict[str, float]:
    """The process components of an episode (the module docstring); ``inputs`` maps each input to its
    passages (``input_passages``): one is read when a successful call before the first write to a
    target shows one of them. A signal the episode gives no grounds for (no input with a passage, no
    failed call) is left out; an input without one (a truncated file of a few words) is not counted;
    ``process`` is left out without ``process.inspected``.

    >>> inputs = {"data.csv": input_passages(b"day,amount\\n2024-01-02,17.50\\n"),
    ...           "notes.md": input_passages(b"# Plan\\nStatus: open\\n")}
    >>> calls = [Call("bash", shown="day  amount\\n2024-01-02  17.50"), Call("write_file", "out.json", ok=False),
    ...          Call("write_file", "out.json")]
    >>> process_signals(inputs, ["out.json"], calls)
    {'process.inspected': 0.5, 'process.recovered': 1.0, 'process': 0.5}
    """
    out: dict[str, float] = {}
    first_write = next((i for i, c in enumerate(calls)
                        if c.wrote or c.ok and c.tool in WRITE_TOOLS and c.path in targets), len(calls))
    judged = [passages for passages in inputs.values() if passages]
    if judged:
        seen = [_words(_INSERT.sub(" ", c.shown)) for c in calls[:first_write] if c.ok]
        out["process.inspected"] = sum(any(p in s for p in passages for s in seen) for passages in judged) / len(judged)
    failed = [i for i, c in enumerate(calls) if not c.ok]
    if failed:
        recovered = sum(any(c.ok and c.tool == calls[i].tool for c in calls[i + 1:]) for i in failed)
        out["process.recovered"] = recovered / len(failed)
    if "process.inspected" in out:
        out["process"] = out["process.inspected"] * (1 + out.get("process.recovered", 1.0)) / 2
    return out

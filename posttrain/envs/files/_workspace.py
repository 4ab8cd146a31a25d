"""A files task's workspace as data: its files in a record, workspace paths, and a final state.

- Record form of a file (``workspace`` field, docs/tasks.md): a string (its UTF-8 text),
  ``{"text": s, "encoding": e}`` (``s`` encoded with codec ``e``, e.g. a Latin-1 export), or
  ``{"base64": b}`` (any bytes: a SQLite database, a truncated file). ``decode_file`` gives the bytes.
- Paths are canonical relative POSIX paths (``check_path``): no leading ``/``, no empty, ``.`` or
  ``..`` component, no backslash, no control character, NFC. A response that names any other
  spelling is refused rather than normalised, so one file never has two names.
- A final state is ``{path: Entry}``: what the grader sees of a workspace after the work, whether
  it came from a single response applied to a pristine copy (``apply_writes``) or from an agent's
  workspace read back without following links (phase 2). Entries other than regular files are
  kept, so the grader can refuse them.

Not here: what the task asks (``_grade.py``), how tasks are made (``_gen.py``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

MAX_PATH_BYTES = 512
MAX_COMPONENT_BYTES = 255
MAX_FILES = 400
"""Most files a workspace (or a final state) may hold."""
MAX_WORKSPACE_BYTES = 16 << 20
"""Most bytes a workspace's files (or a response's writes) may hold in all."""


def check_path(path: Any) -> str | None:
    """Why ``path`` is not a canonical workspace path, or None.

    >>> check_path("reports/summary.json") is None
    True
    >>> check_path("../etc/passwd")
    "a path component is empty, '.' or '..'"
    """
    if not isinstance(path, str) or not path:
        return "a path must be a non-empty string"
    if path.startswith("/"):
        return "an absolute path; paths are relative to the workspace"
    if "\\" in path:
        return "a backslash; paths use '/'"
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        return "a control character"
    if unicodedata.normalize("NFC", path) != path:
        return "not in Unicode NFC form"
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"longer than {MAX_PATH_BYTES} bytes"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "a path component is empty, '.' or '..'"
    if any(len(p.encode()) > MAX_COMPONENT_BYTES for p in parts):
        return f"a path component longer than {MAX_COMPONENT_BYTES} bytes"
    return None


def decode_file(value: Any) -> bytes:
    """The bytes of one file in record form; ``ValueError`` says what is wrong.

    >>> decode_file("héllo"), decode_file({"text": "é", "encoding": "latin-1"}), decode_file({"base64": "AAE="})
    (b'h\\xc3\\xa9llo', b'\\xe9', b'\\x00\\x01')
    """
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the text holds a lone surrogate (not valid Unicode)") from None
    if isinstance(value, Mapping) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("base64: not valid base64") from None
    if isinstance(value, Mapping) and set(value) == {"text", "encoding"}:
        text, encoding = value["text"], value["encoding"]
        if not isinstance(text, str) or not isinstance(encoding, str):
            raise ValueError('"text" and "encoding" must be strings')
        try:
            if not codecs.lookup(encoding)._is_text_encoding:  # e.g. "base64", "zlib": not a text codec
                raise LookupError
        except LookupError:
            raise ValueError(f"encoding {encoding!r}: not a text encoding Python knows") from None
        try:
            return text.encode(encoding)
        except UnicodeEncodeError as e:
            raise ValueError(f"the text cannot be written in {encoding}: {e.reason} at {e.start}") from None
    raise ValueError('expected a string (UTF-8 text), {"text": ..., "encoding": ...} or {"base64": ...}')


def encode_file(data: bytes) -> str | dict[str, str]:
    """The record form of ``data``: its text when it is UTF-8 (without a BOM), else base64."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}
    return text if not text.startswith("\ufeff") else {"base64": base64.b64encode(data).decode("ascii")}


def decode_workspace(files: Mapping[str, Any]) -> dict[str, bytes]:
    """``{path: bytes}`` of a workspace in record form (paths and values checked)."""
    out = {}
    for path, value in files.items():
        problem = check_path(path)
        if problem:
            raise ValueError(f"path {path!r}: {problem}")
        try:
            out[path] = decode_file(value)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    problem = tree_problem(out)
    if problem:
        raise ValueError(problem)
    return out


def tree_problem(paths: Mapping[str, Any]) -> str | None:
    """Why these file paths cannot all be files of one tree (one is a directory of another), or None."""
    names = set(paths)
    for path in sorted(names):
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                return f"{'/'.join(parts[:i])!r} is a file, so {path!r} cannot be"
    return None


@dataclass(frozen=True)
class Entry:
    """One path of a final state, as ``lstat`` saw it (links never followed)."""

    kind: Literal["file", "symlink", "dir", "other"]
    data: bytes = b""
    """A regular file's content."""
    link: str = ""
    """A symlink's target, as written."""
    links: int = 1
    """A regular file's hard-link count (``st_nlink``)."""


def pristine_state(files: Mapping[str, bytes]) -> dict[str, Entry]:
    """The final state of a workspace nobody touched."""
    return {path: Entry("file", data) for path, data in files.items()}


def apply_writes(pristine: Mapping[str, bytes], writes: Mapping[str, bytes | None]) -> tuple[dict[str, Entry], list[str]]:
    """A pristine copy with ``writes`` applied (bytes: create or replace the file; None: delete
    it): the final state, and the writes that could not be applied (each a sentence naming its
    path). Paths are checked by the caller (``check_path``)."""
    final = pristine_state(pristine)
    problems = []
    for path in sorted(writes):
        data = writes[path]
        if data is None:
            if path in final:
                del final[path]
            elif any(p.startswith(path + "/") for p in final):
                problems.append(f"{path}: is a directory; delete its files one by one")
            else:
                problems.append(f"{path}: cannot delete a file that does not exist")
            continue
        parts = path.split("/")
        parent = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in final), None)
        if parent is not None:
            problems.append(f"{path}: {parent} is a file, not a directory")
        elif any(p.startswith(path + "/") for p in final):
            problems.append(f"{path}: is a directory, not a file")
        else:
            final[path] = Entry("file", data)
    return final, problems

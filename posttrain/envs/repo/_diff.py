"""Unified diffs: parse a response into file patches, classify its paths, apply it to a tree.

A response is graded as SWE-bench grades it: a unified diff (``git diff`` or ``diff -u`` output,
optionally in a fenced ```diff block). ``parse_diff`` reads it strictly (every hunk's line counts
must match its header); ``classify`` sorts each touched path into what the grader applies
(``source``), what it drops (``test``: the verifier's tests are restored from the pristine copy)
and what refuses the whole submission (``git``, ``conftest``, ``config``, ``startup``,
``cache``, ``native``, ``protected``); ``apply_patches`` applies file patches to a ``{path: text}`` tree with
exact context (a hunk may sit at another line than its header says, never on other text).

Pure functions, no I/O: the grader (``_grade.py``) and the constraint checks call them on the
host, never in the sandbox.

>>> fps = parse_diff("--- a/m.py\\n+++ b/m.py\\n@@ -1 +1 @@\\n-x = 1\\n+x = 2\\n")
>>> [(fp.path, classify(fp.path)) for fp in fps]
[('m.py', 'source')]
>>> apply_patches({"m.py": "x = 1\\n"}, fps)["m.py"]
'x = 2\\n'

Not supported (refused with a reason): binary patches, symlinks, patches to files that are not
UTF-8 text. A git copy (``copy from``/``copy to``, ``git diff -C``) keeps its source file.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = ["DiffError", "FilePatch", "Hunk", "apply_patches", "classify", "extract_diff", "is_test_path",
           "parse_diff", "render_diff"]

MAX_DIFF_BYTES = 1 << 20
"""The largest diff the grader reads (1 MiB); a longer response is refused as too large."""

REFUSED = ("git", "conftest", "config", "startup", "cache", "native", "protected")
"""Path classes that refuse the whole submission (the grader says which path and why)."""
WHY = {
    "git": "changes the git metadata (.git/): the history must hold nothing after the base commit",
    "conftest": "adds or changes a conftest.py: pytest would load it into the test run",
    "config": "changes the test or build configuration (pytest.ini, tox.ini, setup.cfg, setup.py, pyproject.toml)",
    "startup": "adds or changes interpreter start-up code (sitecustomize, usercustomize, .pth files)",
    "cache": "adds or changes compiled bytecode (__pycache__, .pyc): the interpreter would load it",
    "native": "adds or changes a compiled extension module (.so, .pyd): import would load it as machine code, "
              "which no check of the test run sees",
    "protected": "changes a file this task marks protected",
}
CONFIG_FILES = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "setup.py", "pyproject.toml", ".pytest.ini",
                          "noxfile.py"})
TEST_DIRS = frozenset({"tests", "test", "testing"})
NATIVE_SUFFIXES = (".so", ".pyd")
"""Suffixes ``import`` loads as an extension module (``importlib.machinery.EXTENSION_SUFFIXES`` all end in one).
A text patch is not a binary patch: a diff that adds ``pkg/mod.so`` wrote it as a file the sandbox's
``import pkg.mod`` dlopen()s ahead of ``pkg/mod.py`` ("/work/toolz/recipes.so: file too short" in a pack
task's run), so an ELF spelled in UTF-8 would run outside the audit-hook kernel."""


class DiffError(ValueError):
    """A response that is not a diff the grader can apply; the message says where and why."""


@dataclass(frozen=True)
class Hunk:
    """One ``@@ -a,b +c,d @@`` block: ``lines`` are ``(op, text)`` with op in `` ``, ``-``, ``+``."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[tuple[str, str], ...]
    old_eof_newline: bool = True
    """False when the hunk's old side ends with "\\ No newline at end of file"."""
    new_eof_newline: bool = True


@dataclass(frozen=True)
class FilePatch:
    """The change to one file: ``old`` / ``new`` are its paths (None for an added / deleted file)."""

    old: str | None
    new: str | None
    hunks: tuple[Hunk, ...] = ()
    binary: bool = False
    symlink: bool = False
    copy: bool = False
    """A git copy: ``new`` starts as ``old``'s text and ``old`` stays (a rename removes it)."""

    @property
    def path(self) -> str:
        """The path this patch writes (the new path; the old one for a deletion)."""
        return str(self.new if self.new is not None else self.old)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the patch touches (both sides of a rename)."""
        return tuple(dict.fromkeys(p for p in (self.old, self.new) if p is not None))


_FENCE_RE = re.compile(r"^```[ \t]*(diff|patch|udiff)?[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.IGNORECASE | re.MULTILINE)
"""A fenced block: its fences at the start of a line (a diff's own lines start with a space, ``+``,
``-``, ``@`` or a backslash, so a file's Markdown fences inside a diff never open or close one)."""
_HUNK_RE = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def extract_diff(response: str) -> str | None:
    """The diff in ``response``: the last fenced block that holds one, else the response itself when it
    starts like a diff; None when there is none.

    >>> extract_diff("Fix:\\n```diff\\n--- a/x\\n+++ b/x\\n```\\n")
    '--- a/x\\n+++ b/x\\n'
    >>> extract_diff("I could not fix it.") is None
    True
    """
    blocks = [body for _, body in _FENCE_RE.findall(response) if _looks_like_diff(body)]
    if blocks:
        return blocks[-1]
    text = response.lstrip("\n")
    return text if _looks_like_diff(text) else None


def _looks_like_diff(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("diff --git ", "--- ", "Index: ")) or bool(re.search(r"^--- \S.*\n\+\+\+ ", text, re.M))


def _clean_path(raw: str, where: str) -> str | None:
    """The repository-relative path of a ``---``/``+++`` line's name; None for /dev/null."""
    name = raw.split("\t", 1)[0].strip()
    if name.startswith('"') and name.endswith('"') and len(name) >= 2:
        name = name[1:-1]
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or "\0" in name or "\\" in name or not p.parts:
        raise DiffError(f"{where}: path {raw.strip()!r} must be relative to the repository, without '..'")
    return str(p)


def parse_diff(text: str) -> list[FilePatch]:
    """Every file patch of a unified diff; ``DiffError`` naming the line on anything malformed."""
    if len(text.encode()) > MAX_DIFF_BYTES:
        raise DiffError(f"the diff is larger than {MAX_DIFF_BYTES} bytes")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[FilePatch] = []
    i, git_header = 0, None
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            if git_header is not None:
                out.append(_git_only(git_header, i))
            git_header = {"start": i + 1, "binary": False, "symlink": False, "rename_from": None,
                          "rename_to": None, "copy": False, "new": False, "deleted": False, "line": line}
            i += 1
            continue
        if git_header is not None and not line.startswith("--- "):
            _git_meta(git_header, line)
            i += 1
            continue
        if line.startswith("--- "):
            patch, i = _file_patch(lines, i, git_header)
            out.append(patch)
            git_header = None
            continue
        i += 1  # prose between file patches (git's "index" lines, a tool's header) is skipped
    if git_header is not None:
        out.append(_git_only(git_header, len(lines)))
    if not out:
        raise DiffError("no file patch (expected '--- a/path' and '+++ b/path' lines)")
    seen: set[str] = set()
    for fp in out:
        for p in (fp.path,) if fp.copy else fp.paths:  # a copy only reads its source, which git may also patch
            if p in seen:
                raise DiffError(f"the diff patches {p!r} twice")
            seen.add(p)
    return out


def _git_meta(header: dict, line: str) -> None:
    if line.startswith(("Binary files ", "GIT binary patch")):
        header["binary"] = True
    elif line.startswith(("new file mode 120000", "new mode 120000", "deleted file mode 120000")):
        header["symlink"] = True
    elif line.startswith(("rename from ", "copy from ")):
        header["rename_from"] = line.split(" ", 2)[2]
        header["copy"] = line.startswith("copy ")
    elif line.startswith(("rename to ", "copy to ")):
        header["rename_to"] = line.split(" ", 2)[2]
    elif line.startswith("new file mode"):
        header["new"] = True
    elif line.startswith("deleted file mode"):
        header["deleted"] = True


def _git_only(header: dict, end: int) -> FilePatch:
    """A ``diff --git`` section without ``---``/``+++`` lines: a binary patch, a pure rename or copy, a
    mode change or an empty new file."""
    where = f"line {header['start']}"
    m = re.match(r"diff --git (\S+) (\S+)$", header["line"])
    old = new = None
    if m:
        old, new = _clean_path(m.group(1), where), _clean_path(m.group(2), where)
    if header["rename_from"] is not None:
        old = _clean_path(header["rename_from"], where)
        new = _clean_path(header["rename_to"] or "", where)
    if old is None and new is None:
        raise DiffError(f"{where}: cannot read the paths of {header['line']!r}")
    if header["new"]:
        old = None
    if header["deleted"]:
        new = None
    copy = header["copy"] and old is not None and new is not None
    return FilePatch(old, new, (), binary=header["binary"], symlink=header["symlink"], copy=copy)


def _file_patch(lines: list[str], i: int, git_header: dict | None) -> tuple[FilePatch, int]:
    where = f"line {i + 1}"
    old = _clean_path(lines[i][4:], where)
    if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
        raise DiffError(f"{where}: '---' line not followed by a '+++' line")
    new = _clean_path(lines[i + 1][4:], f"line {i + 2}")
    if git_header is not None and git_header["rename_from"] is not None:
        old = _clean_path(git_header["rename_from"], where)
    i += 2
    hunks = []
    while i < len(lines) and lines[i].startswith("@@"):
        hunk, i = _hunk(lines, i)
        hunks.append(hunk)
    if not hunks and old is not None and new is not None and old == new:
        raise DiffError(f"{where}: file patch for {new!r} has no hunk")
    binary = bool(git_header and git_header["binary"])
    symlink = bool(git_header and git_header["symlink"])
    copy = bool(git_header and git_header["copy"]) and old is not None and new is not None
    return FilePatch(old, new, tuple(hunks), binary=binary, symlink=symlink, copy=copy), i


def _hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    m = _HUNK_RE.match(lines[i])
    if not m:
        raise DiffError(f"line {i + 1}: malformed hunk header {lines[i]!r}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = 1 if m.group(2) is None else int(m.group(2))
    new_len = 1 if m.group(4) is None else int(m.group(4))
    body: list[tuple[str, str]] = []
    seen_old = seen_new = 0
    old_nl = new_nl = True
    j = i + 1
    while j < len(lines) and (seen_old < old_len or seen_new < new_len or lines[j].startswith("\\")):
        line = lines[j]
        if line.startswith("\\"):  # "\ No newline at end of file" for the line before
            if not body:
                raise DiffError(f"line {j + 1}: '\\' marker before any hunk line")
            op = body[-1][0]
            if op in (" ", "-"):
                old_nl = False
            if op in (" ", "+"):
                new_nl = False
            j += 1
            continue
        op, text = (line[0], line[1:]) if line else (" ", "")  # an empty context line lost its space
        if op not in " -+":
            raise DiffError(f"line {j + 1}: hunk line must start with ' ', '-' or '+', got {line[:40]!r}")
        body.append((op, text))
        seen_old += op in " -"
        seen_new += op in " +"
        j += 1
    if seen_old != old_len or seen_new != new_len:
        raise DiffError(f"line {i + 1}: hunk says -{old_len} +{new_len} lines, has -{seen_old} +{seen_new}")
    return Hunk(old_start, old_len, new_start, new_len, tuple(body), old_nl, new_nl), j


def is_test_path(path: str, test_files: Iterable[str] = ()) -> bool:
    """Whether ``path`` is a test file (the verifier's to restore): under a ``tests``/``test``/``testing``
    directory, named ``test_*.py`` or ``*_test.py``, or one of ``test_files``.

    >>> is_test_path("tests/helpers.py"), is_test_path("pkg/test_util.py"), is_test_path("pkg/util.py")
    (True, True, False)
    """
    p = PurePosixPath(path)
    if path in set(test_files) or any(part in TEST_DIRS for part in p.parts[:-1]):
        return True
    return p.suffix == ".py" and (p.name.startswith("test_") or p.stem.endswith("_test"))


def classify(path: str, *, protected: Sequence[str] = (), test_files: Iterable[str] = ()) -> str:
    """``source`` | ``test`` (dropped) | one of ``REFUSED`` (the submission is refused; ``WHY`` says why).

    >>> [classify(p) for p in ("pkg/a.py", "tests/test_a.py", "tests/conftest.py", ".git/HEAD", "x.pth", "pkg/a.so")]
    ['source', 'test', 'conftest', 'git', 'startup', 'native']
    """
    p = PurePosixPath(path)
    name = p.name
    if ".git" in p.parts:
        return "git"
    if name == "conftest.py":
        return "conftest"
    if name in CONFIG_FILES:
        return "config"
    if name in ("sitecustomize.py", "usercustomize.py") or p.suffix == ".pth" or p.stem in (
            "sitecustomize", "usercustomize"):
        return "startup"
    if "__pycache__" in p.parts or p.suffix in (".pyc", ".pyo"):
        return "cache"
    if p.suffix in NATIVE_SUFFIXES:
        return "native"
    if any(fnmatch.fnmatchcase(path, g) or path == g.rstrip("/") or path.startswith(g.rstrip("/") + "/")
           for g in protected):
        return "protected"
    return "test" if is_test_path(path, test_files) else "source"


def _split(text: str) -> tuple[list[str], bool]:
    """(lines without terminators, whether the text ends with a newline)."""
    if text == "":
        return [], True
    parts = text.split("\n")
    if parts[-1] == "":
        return parts[:-1], True
    return parts, False


def _join(lines: list[str], eol: bool) -> str:
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if eol else "")


def _apply_hunks(path: str, text: str, hunks: Sequence[Hunk]) -> str:
    lines, eol = _split(text)
    offset = 0
    for n, h in enumerate(hunks, 1):
        old = [t for op, t in h.lines if op in " -"]
        new = [t for op, t in h.lines if op in " +"]
        want = (h.old_start - 1 if h.old_len else h.old_start) + offset
        at = _find(lines, old, want)
        if at is None:
            raise DiffError(f"{path}: hunk {n} (@@ -{h.old_start},{h.old_len}) does not apply: its context and "
                            f"removed lines are not in the file")
        at_end = at + len(old) == len(lines)
        lines[at:at + len(old)] = new
        offset += len(new) - len(old)
        if at_end:
            eol = h.new_eof_newline if new else eol
    return _join(lines, eol)


def _find(lines: list[str], old: list[str], want: int) -> int | None:
    """The position nearest ``want`` where ``old`` matches exactly (patch's offset search, no fuzz)."""
    if not old:
        return max(0, min(want, len(lines)))
    for delta in range(len(lines) + 1):
        for at in (want - delta, want + delta) if delta else (want,):
            if 0 <= at <= len(lines) - len(old) and lines[at:at + len(old)] == old:
                return at
    return None


def apply_patches(tree: Mapping[str, str], patches: Sequence[FilePatch]) -> dict[str, str]:
    """A new ``{path: text}`` tree with ``patches`` applied; ``DiffError`` names the file and hunk that
    does not apply. A copy starts from its source's text in ``tree`` (git's preimage), whatever else the
    diff does to the source. Binary and symlink patches are refused here (the grader refuses them earlier)."""
    out = dict(tree)
    for fp in patches:
        if fp.binary or fp.symlink:
            raise DiffError(f"{fp.path}: {'binary' if fp.binary else 'symlink'} patches are not supported")
        if fp.old is None:
            if fp.new in out:
                raise DiffError(f"{fp.new}: the diff adds this file, but it exists")
            out[fp.path] = _apply_hunks(fp.path, "", fp.hunks)
            continue
        if fp.old not in (tree if fp.copy else out):
            raise DiffError(f"{fp.old}: the diff {'copies' if fp.copy else 'changes'} this file, but it does not exist")
        text = _apply_hunks(fp.old, tree[fp.old] if fp.copy else out.pop(fp.old), fp.hunks)  # git copies the preimage
        if fp.new is not None:
            if fp.new != fp.old and fp.new in out:
                raise DiffError(f"{fp.new}: the diff {'copies' if fp.copy else 'renames'} a file onto this one, "
                                f"which exists")
            out[fp.new] = text
        elif text:
            raise DiffError(f"{fp.old}: the diff deletes this file but its hunks leave text in it")
    return out


def _lines(text: str) -> list[str]:
    r"""``text``'s lines, each with its ``\n``, split at ``\n`` only, as ``parse_diff`` and
    ``apply_patches`` read them. ``str.splitlines`` also breaks at a form feed, a lone ``\r``,
    ``\x1c``-``\x1e``, ``\x85``, ``\u2028``/``\u2029``: a file holding one (a form feed between a
    module's sections) was graded otherwise than it stood, and an edit of it did not apply.

    >>> _lines("a\x0cb\nc")
    ['a\x0cb\n', 'c']
    """
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def render_diff(before: Mapping[str, str], after: Mapping[str, str], *, context: int = 3) -> str:
    """A unified diff (git style paths) that turns ``before`` into ``after``.

    >>> print(render_diff({"m.py": "x = 1\\n"}, {"m.py": "x = 2\\n"}), end="")
    --- a/m.py
    +++ b/m.py
    @@ -1 +1 @@
    -x = 1
    +x = 2
    """
    import difflib

    out: list[str] = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        diff = difflib.unified_diff(_lines(a or ""), _lines(b or ""),
                                    "/dev/null" if a is None else f"a/{path}",
                                    "/dev/null" if b is None else f"b/{path}", n=context)
        for line in diff:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)

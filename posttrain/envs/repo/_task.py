"""The repo task schema (docs/tasks.md, "repo"): parsing, validation, and the trees a task stands for.

A task names a repository snapshot and what its grader runs:

- ``repo``: exactly one of ``dir`` (a directory, relative to the task file), ``tarball`` (``.tar``,
  ``.tar.gz``, ``.tgz``), ``bundle`` (a git bundle; ``commit`` required), ``files`` (inline
  ``{path: text}``) or ``project`` (a project vendored with posttrain, ``data/projects``); optional
  ``commit`` (a ``dir`` that is a git repository is read at that commit) and ``patch`` (a diff
  applied on top: how generated tasks inject their bug);
- ``environment``: ``language`` (``python``), ``test_command`` (what the agent runs, e.g.
  ``python -m pytest -q tests``), ``timeout_sec``, optional ``python_path`` (directories put on
  ``sys.path``, e.g. ``["src"]``), ``wheelhouse`` (a directory of pure-Python wheels) and
  ``requirements`` (the wheels the verifier installs from it);
- ``fail_to_pass`` (non-empty) and ``pass_to_pass``: pytest node ids;
- ``test_patch``: a diff of test files applied to the verifier's copy only (SWE-bench's): tests
  the agent never sees;
- ``constraints``: free text shown to the model, plus the checked names ``keep_public_api`` and
  ``add_unit_tests``; ``protected``: globs of files the diff may not touch;
- ``feedback_loop`` (repair allowed) and ``max_attempts`` (into ``limits.max_attempts``).

``initial_tree(task)`` is what the agent starts from; ``verifier_tree(task)`` adds the withheld
tests. Both are ``{path: bytes}`` read once per process (keyed by content), without ``.git``,
``__pycache__`` or compiled files: history and caches never reach a sandbox.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from posttrain.envs import RecordReader
from posttrain.envs.repo._diff import DiffError, apply_patches, classify, is_test_path, parse_diff
from posttrain.errors import TaskError
from posttrain.types import Task

DOMAIN_KEYS = frozenset({"repo", "environment", "fail_to_pass", "pass_to_pass", "test_patch", "constraints",
                         "protected", "feedback_loop", "max_attempts"})
SOURCES = ("dir", "tarball", "bundle", "files", "project")
REPO_KEYS = frozenset({*SOURCES, "commit", "patch"})
ENV_KEYS = frozenset({"language", "test_command", "timeout_sec", "python_path", "wheelhouse", "requirements"})
CHECKED_CONSTRAINTS = ("keep_public_api", "add_unit_tests")
CONSTRAINT_TEXT = {
    "keep_public_api": "Keep the public API: do not change the signature of any public function or class.",
    "add_unit_tests": "Add a unit test that fails before your change and passes after it.",
}
"""How a prompt says each checked constraint (any other is shown as written)."""
PROJECTS = Path(__file__).resolve().parent / "data" / "projects"
MAX_TREE_BYTES = 64 << 20
_SKIP_PARTS = frozenset({".git", "__pycache__", ".pytest_cache", ".tox", ".mypy_cache"})


def constraints_part(task: Task) -> list[str]:
    """The prompt's constraints paragraph of ``task`` (both prompts: the single response's and the
    agent's), or nothing when it has none."""
    said = [CONSTRAINT_TEXT.get(c, c) for c in task.fields.get("constraints", ())]
    return ["Constraints:\n" + "\n".join(f"- {c}" for c in said)] if said else []


def task_dir(source: str) -> Path:
    """The directory of the task file named by a parser's ``source`` (``file:line``, ``file[i]``)."""
    path = source
    if path.endswith("]") and "[" in path:
        path = path[: path.rindex("[")]
    head, sep, tail = path.rpartition(":")
    if sep and tail.isdigit():
        path = head
    p = Path(path)
    return p.parent.resolve() if p.suffix in (".json", ".jsonl", ".gz") else Path.cwd()


def _skip(path: str) -> bool:
    p = PurePosixPath(path)
    return any(part in _SKIP_PARTS for part in p.parts) or p.suffix in (".pyc", ".pyo")


def _read_dir(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if _skip(rel) or p.is_symlink() or not p.is_file():
            continue
        out[rel] = p.read_bytes()
    return out


def _read_tar(data: bytes, where: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                name = PurePosixPath(m.name)
                if not m.isfile() or name.is_absolute() or ".." in name.parts:
                    continue
                f = tar.extractfile(m)
                if f is not None:
                    out[name.as_posix()] = f.read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise TaskError(f"{where}: not a readable tar archive ({e})") from None
    tops = {PurePosixPath(k).parts[0] for k in out}
    if len(tops) == 1 and all(len(PurePosixPath(k).parts) > 1 for k in out):
        top = tops.pop()
        out = {k[len(top) + 1:]: v for k, v in out.items()}
    return {k: v for k, v in out.items() if not _skip(k)}


def _git(args: list[str], cwd: Path, where: str) -> bytes:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120)
    except FileNotFoundError:
        raise TaskError(f"{where}: needs git (`apt-get install git`, or `make domain-deps`)") from None
    if r.returncode != 0:
        raise TaskError(f"{where}: git {args[0]} failed: {r.stderr.decode(errors='replace').strip()[:200]}")
    return r.stdout


def _read_commit(repo: Path, commit: str, where: str) -> dict[str, bytes]:
    """The tree of ``commit`` in the git repository ``repo`` (``git archive``: no history, no .git)."""
    data = _git(["archive", "--format=tar", commit], repo, where)
    return _read_tar(data, where)


def _read_bundle(bundle: Path, commit: str, where: str) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="posttrain-bundle-") as tmp:
        _git(["init", "-q", "--bare", tmp], Path(tmp), where)
        _git(["fetch", "-q", str(bundle), "+refs/*:refs/bundle/*"], Path(tmp), where)
        return _read_commit(Path(tmp), commit, where)


@functools.lru_cache(maxsize=64)
def _snapshot(kind: str, value: str, commit: str | None, stamp: str) -> tuple[tuple[str, bytes], ...]:
    """The snapshot's files (cached per process; ``stamp`` changes when the source does)."""
    where = f"repo.{kind} {value!r}"
    if kind == "files":
        tree = {k: v.encode() for k, v in json.loads(value).items()}
    elif kind == "project":
        tree = _read_tar((PROJECTS / f"{value}.tar.gz").read_bytes(), where)
    elif kind == "tarball":
        tree = _read_tar(Path(value).read_bytes(), where)
    elif kind == "bundle":
        tree = _read_bundle(Path(value), str(commit), where)
    elif commit is not None:
        tree = _read_commit(Path(value), commit, where)
    else:
        tree = _read_dir(Path(value))
    if sum(map(len, tree.values())) > MAX_TREE_BYTES:
        raise TaskError(f"{where}: the snapshot is larger than {MAX_TREE_BYTES >> 20} MiB")
    return tuple(sorted(tree.items()))


def _stamp(kind: str, value: str) -> str:
    if kind in ("files",):
        return ""
    p = PROJECTS / f"{value}.tar.gz" if kind == "project" else Path(value)
    if kind == "dir" and p.is_dir() and (p / ".git").exists():
        p = p / ".git"
    st = p.stat()
    return f"{st.st_mtime_ns}:{st.st_size}"


def repo_source(repo: Mapping[str, Any]) -> tuple[str, str]:
    kind = next(k for k in SOURCES if k in repo)
    value = repo[kind]
    return kind, json.dumps(value, sort_keys=True) if kind == "files" else str(value)


def _text_tree(tree: Mapping[str, bytes], paths: set[str], where: str) -> dict[str, str]:
    out = {}
    for p in paths:
        if p in tree:
            try:
                out[p] = tree[p].decode("utf-8")
            except UnicodeDecodeError:
                raise TaskError(f"{where}: {p} is not UTF-8 text, so a diff cannot patch it") from None
    return out


def patch_tree(tree: Mapping[str, bytes], diff: str, where: str) -> dict[str, bytes]:
    """``tree`` with ``diff`` applied (``TaskError`` naming ``where`` if it does not apply), in ``tree``'s
    order: a changed file keeps its place. (Moved to the end, a generated task's mutated file was the
    one a workspace wrote last -- the highest inode, the newest mtime, first in a tmpfs directory's
    listing: ``ls -U``, ``find`` and ``ls -t`` named the bug's file in 12 of 12 pack tasks.)"""
    try:
        patches = parse_diff(diff)
        touched = {p for fp in patches for p in fp.paths}
        text = _text_tree(tree, touched, where)
        new = apply_patches(text, patches)
    except DiffError as e:
        raise TaskError(f"{where}: {e}") from None
    out = {k: new[k].encode() if k in touched else v for k, v in tree.items() if k not in touched or k in new}
    out.update({k: v.encode() for k, v in new.items() if k not in out})  # (added and renamed files last)
    return out


def initial_tree(task_fields: Mapping[str, Any]) -> dict[str, bytes]:
    """The repository the agent starts from: the snapshot with ``repo.patch`` applied."""
    repo = task_fields["repo"]
    kind, value = repo_source(repo)
    tree = dict(_snapshot(kind, value, repo.get("commit"), _stamp(kind, value)))
    if repo.get("patch"):
        tree = patch_tree(tree, repo["patch"], "field 'repo.patch'")
    return tree


def verifier_tree(task_fields: Mapping[str, Any]) -> dict[str, bytes]:
    """The verifier's copy: the initial state with ``test_patch`` applied (the withheld tests)."""
    tree = initial_tree(task_fields)
    if task_fields.get("test_patch"):
        tree = patch_tree(tree, task_fields["test_patch"], "field 'test_patch'")
    return tree


DEPS_DIR = ".posttrain/deps"
"""Where the verifier's copy holds the wheelhouse's requirements, unpacked (on ``sys.path``)."""


def _wheel_for(wheelhouse: Path, requirement: str) -> Path | None:
    """The pure-Python wheel of ``requirement`` (a distribution name) in ``wheelhouse``, or None."""
    norm = requirement.strip().lower().replace("-", "_").replace(".", "_")
    for wheel in sorted(wheelhouse.glob("*.whl")):
        dist = wheel.name.split("-", 1)[0].lower().replace(".", "_")
        if dist == norm and wheel.name.endswith("-none-any.whl"):
            return wheel
    return None


@functools.lru_cache(maxsize=32)
def _unpacked(wheel: str, stamp: str) -> tuple[tuple[str, bytes], ...]:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        return tuple((f"{DEPS_DIR}/{name}", zf.read(name)) for name in sorted(zf.namelist())
                     if not name.endswith("/") and ".." not in PurePosixPath(name).parts)


def dependency_files(task_fields: Mapping[str, Any]) -> dict[str, bytes]:
    """The environment's requirements unpacked from its wheelhouse, for the verifier's copy."""
    env = task_fields["environment"]
    out: dict[str, bytes] = {}
    for req in env.get("requirements", ()):
        wheel = _wheel_for(Path(env["wheelhouse"]), req)
        if wheel is None:
            raise TaskError(f"field 'environment.requirements': no pure-Python wheel of {req!r} in {env['wheelhouse']}")
        st = wheel.stat()
        out.update(_unpacked(str(wheel), f"{st.st_mtime_ns}:{st.st_size}"))
    return out


def hidden_files(task_fields: Mapping[str, Any]) -> list[str]:
    """The test files ``test_patch`` adds or changes: they exist only in the verifier's copy."""
    if not task_fields.get("test_patch"):
        return []
    return sorted({fp.path for fp in parse_diff(task_fields["test_patch"]) if fp.new is not None})


def project_modules(task_fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The importable names the task's repository provides: each package (a directory with an
    ``__init__.py``) and module file (not a test, ``setup.py``, ``conftest.py``) directly under a
    ``python_path`` directory. Copies of them on the host's /usr are hidden from the task's sandbox
    jobs (``sandbox._hide``): an installed or vendored copy of the project holds the code a mutation
    broke.

    >>> project_modules({"repo": {"files": {"src/pkg/__init__.py": "", "src/pkg/a.py": "",
    ...     "tools.py": "", "setup.py": "", "tests/test_a.py": ""}},
    ...     "environment": {"python_path": ["src", "."]}})
    ('pkg', 'tools')
    """
    tree = initial_tree(task_fields)
    roots = [p.strip("/") for p in task_fields["environment"].get("python_path", ["."])]
    names: set[str] = set()
    for path in (p for p in tree if not is_test_path(p)):
        for root in roots:
            prefix = "" if root in ("", ".") else root + "/"
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix):].split("/")
            if len(parts) == 2 and parts[1] == "__init__.py":
                names.add(parts[0])
            elif len(parts) == 1 and parts[0].endswith(".py") and parts[0] not in ("setup.py", "conftest.py",
                                                                                     "noxfile.py"):
                names.add(parts[0][:-3])
    return tuple(sorted(n for n in names if n.isidentifier()))


OWN_NAMES = ("posttrain",)
"""Hidden from every repo job as well: posttrain itself, where it is installed under /usr (``pip install``
as root, a container image), holds every generated task's pristine project (``data/projects``) and
reference diff (``data/packs``) -- one ``zcat`` from a workspace."""


def suite_modules(task_fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The importable names of the repository's tests: the top-level directory or module holding each
    Python test file (under the root or a ``python_path`` directory: ``tests``, ``test_inflection``) and
    each test module's own name (``test_lru``). A copy of the project's source tree under /usr (the Google
    Cloud SDK vendors cachetools 5.5.0 with its ``tests/`` beside the hidden ``src/cachetools``) holds the
    text of tests a task withholds (``_withhold.py``): on the test host, every assertion of 15 of the 114
    test functions that cachetools pack tasks withhold, all of them for 2 tasks, one ``cat`` away.

    >>> suite_modules({"repo": {"files": {"src/pkg/a.py": "", "tests/test_a.py": "", "test_b.py": "",
    ...     "src/pkg/tests/test_c.py": "", "tests/data.txt": ""}}, "environment": {"python_path": ["src"]}})
    ('pkg', 'test_a', 'test_b', 'test_c', 'tests')
    """
    roots = [p.strip("/") + "/" for p in task_fields["environment"].get("python_path", ["."]) if p.strip("/.")]
    names: set[str] = set()
    for path in (p for p in initial_tree(task_fields) if is_test_path(p) and p.endswith(".py")):
        under = next((path[len(r):] for r in roots if path.startswith(r)), path)  # (else the repository's root)
        names.update({PurePosixPath(path).stem, under.split("/")[0].removesuffix(".py")})
    return tuple(sorted(n for n in names if n.isidentifier() and n not in ("conftest", "__init__")))


def hidden_names(task_fields: Mapping[str, Any]) -> tuple[str, ...]:
    """What the task's sandbox jobs hide from /usr (``sandbox._hide``): the project's own modules
    (``project_modules``), its tests' (``suite_modules``) and ``OWN_NAMES``."""
    return tuple(sorted({*project_modules(task_fields), *suite_modules(task_fields), *OWN_NAMES}))


def test_file_of(test_id: str) -> str:
    """The file part of a pytest node id (``tests/test_x.py::T::test_y[1]`` -> ``tests/test_x.py``)."""
    return test_id.split("::", 1)[0]


def tree_digest(tree: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for k in sorted(tree):
        h.update(k.encode() + b"\0" + hashlib.sha256(tree[k]).digest())
    return h.hexdigest()[:16]


# -- parsing -------------------------------------------------------------------------------------


def _string_list(reader: RecordReader, field: str, value: Any, *, allow_empty: bool = True) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise reader.fail(field, "a list of non-empty strings", value)
    if not allow_empty and not value:
        raise reader.fail(field, "a non-empty list of strings", value)
    return list(value)


def _rel_path(reader: RecordReader, field: str, value: Any) -> str:
    p = PurePosixPath(value) if isinstance(value, str) else None
    if p is None or not value or p.is_absolute() or ".." in p.parts or "\0" in value:
        raise reader.fail(field, "a relative path inside the repository, without '..'", value)
    return str(p)


def _parse_repo(reader: RecordReader, base: Path) -> dict[str, Any]:
    repo = reader.present("repo")
    if not isinstance(repo, Mapping):
        raise reader.fail("repo", f"an object with one of {', '.join(SOURCES)}", repo)
    unknown = sorted(set(repo) - REPO_KEYS)
    if unknown:
        raise reader.fail("repo", f"only keys {sorted(REPO_KEYS)}", unknown)
    kinds = [k for k in SOURCES if k in repo]
    if len(kinds) != 1:
        raise reader.fail("repo", f"exactly one of {', '.join(SOURCES)}", sorted(repo))
    kind = kinds[0]
    out = _parse_source(reader, kind, repo[kind], base)
    commit = repo.get("commit")
    if commit is not None and (not isinstance(commit, str) or not commit.strip()):
        raise reader.fail("repo.commit", "a commit (sha or ref)", commit)
    if kind == "bundle" and commit is None:
        raise reader.fail("repo.commit", "the base commit of the bundle (missing)", show_got=False)
    if commit is not None and kind not in ("dir", "bundle"):
        raise reader.fail("repo.commit", "only with repo.dir or repo.bundle", commit)
    if commit is not None:
        out["commit"] = commit
    patch = repo.get("patch")
    if patch is not None:
        if not isinstance(patch, str) or not patch.strip():
            raise reader.fail("repo.patch", "a unified diff", patch)
        out["patch"] = patch
    return out


def _parse_source(reader: RecordReader, kind: str, value: Any, base: Path) -> dict[str, Any]:
    if kind == "files":
        if not isinstance(value, Mapping) or not value or not all(isinstance(v, str) for v in value.values()):
            raise reader.fail("repo.files", "a non-empty object of {path: text}", value)
        return {"files": {_rel_path(reader, f"repo.files[{k!r}]", k): v for k, v in value.items()}}
    if kind == "project":
        known = sorted(p.name.removesuffix(".tar.gz") for p in PROJECTS.glob("*.tar.gz"))
        if value not in known:
            raise reader.fail("repo.project", f"one of the vendored projects {known}", value)
        return {"project": value}
    if not isinstance(value, str) or not value.strip():
        raise reader.fail(f"repo.{kind}", "a path (relative to the task file)", value)
    path = _resolved(base, value)
    if path is None or not _exists(path, directory=kind == "dir"):
        raise reader.fail(f"repo.{kind}", f"an existing {'directory' if kind == 'dir' else 'file'}", str(path or value))
    return {kind: str(path)}


def _resolved(base: Path, value: str) -> Path | None:
    """``value`` resolved from ``base``, or None where the filesystem refuses the name (a NUL, too long)."""
    try:
        return (base / value).resolve()
    except (OSError, ValueError):
        return None


def _exists(path: Path, *, directory: bool) -> bool:
    """Whether ``path`` is a directory (or a file); a name the filesystem refuses (too long, a NUL) is not."""
    try:
        return path.is_dir() if directory else path.is_file()
    except (OSError, ValueError):
        return False


def _parse_environment(reader: RecordReader, base: Path) -> dict[str, Any]:
    env = reader.present("environment")
    if not isinstance(env, Mapping):
        raise reader.fail("environment", "an object with language, test_command, timeout_sec", env)
    unknown = sorted(set(env) - ENV_KEYS)
    if unknown:
        raise reader.fail("environment", f"only keys {sorted(ENV_KEYS)}", unknown)
    if env.get("language") != "python":
        raise reader.fail("environment.language", "'python' (the only language the grader runs)", env.get("language"))
    command = env.get("test_command")
    if not isinstance(command, str) or not command.strip():
        raise reader.fail("environment.test_command", "a command such as 'python -m pytest -q tests'", command)
    words = command.split()
    if not (words[0] in ("pytest", "py.test") or words[:3] == ["python", "-m", "pytest"]
            or words[:3] == ["python3", "-m", "pytest"]):
        raise reader.fail("environment.test_command", "a pytest command (pytest ... or python -m pytest ...)",
                          command)
    timeout = env.get("timeout_sec", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 1 <= timeout <= 3600:
        raise reader.fail("environment.timeout_sec", "a number of seconds in [1, 3600]", timeout)
    out: dict[str, Any] = {"language": "python", "test_command": command, "timeout_sec": timeout}
    if "python_path" in env:
        out["python_path"] = [_rel_path(reader, "environment.python_path", p) if p != "." else "."
                              for p in _string_list(reader, "environment.python_path", env["python_path"])]
    if "wheelhouse" in env:
        wh = env["wheelhouse"]
        path = _resolved(base, wh) if isinstance(wh, str) and wh.strip() else None
        if path is None or not _exists(path, directory=True):
            raise reader.fail("environment.wheelhouse", "an existing directory of wheels", wh)
        out["wheelhouse"] = str(path)
    if "requirements" in env:
        if "wheelhouse" not in out:
            raise reader.fail("environment.requirements", "requirements only with a wheelhouse",
                              env["requirements"])
        out["requirements"] = _string_list(reader, "environment.requirements", env["requirements"])
        missing = [r for r in out["requirements"] if _wheel_for(Path(out["wheelhouse"]), r) is None]
        if missing:
            raise reader.fail("environment.requirements", f"names of pure-Python wheels (*-none-any.whl) in "
                              f"{out['wheelhouse']}", missing)
    return out


def _check_ids(reader: RecordReader, field: str, ids: list[str]) -> list[str]:
    for tid in ids:
        path = test_file_of(tid)
        p = PurePosixPath(path)
        if "::" not in tid or not path.endswith(".py") or p.is_absolute() or ".." in p.parts:
            raise reader.fail(field, "pytest node ids such as 'tests/test_x.py::test_name'", tid)
    if len(set(ids)) != len(ids):
        raise reader.fail(field, "ids without repeats", ids)
    return ids


def _check_trees(reader: RecordReader, fields: dict[str, Any]) -> None:
    """The snapshot reads, its patches apply, the tests named exist in the verifier's copy."""
    where = reader.where
    try:
        tree = verifier_tree(fields)
    except TaskError as e:
        raise TaskError(f"{where}: {e}") from None
    except OSError as e:
        raise reader.fail("repo", "a readable snapshot", str(e)) from None
    if fields.get("test_patch"):
        try:
            paths = [p for fp in parse_diff(fields["test_patch"]) for p in fp.paths]
        except DiffError as e:
            raise reader.fail("test_patch", f"a unified diff ({e})", show_got=False) from None
        bad = [p for p in paths if classify(p) not in ("test", "conftest")]
        if bad:
            raise reader.fail("test_patch", "a diff of test files only", bad)
    for field in ("fail_to_pass", "pass_to_pass"):
        missing = sorted({test_file_of(t) for t in fields[field]} - set(tree))
        if missing:
            raise reader.fail(field, "ids of test files in the repository (or added by test_patch)", missing)
    for d in fields["environment"].get("python_path", []):
        if d != "." and not any(k.startswith(d.rstrip("/") + "/") for k in tree):
            raise reader.fail("environment.python_path", "directories of the repository", d)


def parse_repo_fields(reader: RecordReader) -> tuple[dict[str, Any], int | None]:
    """The domain fields of a repo record, validated (module docstring), and its ``max_attempts``."""
    base = task_dir(reader.source)
    fields: dict[str, Any] = {"repo": _parse_repo(reader, base), "environment": _parse_environment(reader, base)}
    fields["fail_to_pass"] = _check_ids(reader, "fail_to_pass", _string_list(
        reader, "fail_to_pass", reader.present("fail_to_pass"), allow_empty=False))
    fields["pass_to_pass"] = _check_ids(reader, "pass_to_pass", _string_list(
        reader, "pass_to_pass", reader.record.get("pass_to_pass", [])))
    both = sorted(set(fields["fail_to_pass"]) & set(fields["pass_to_pass"]))
    if both:
        raise reader.fail("pass_to_pass", "ids not also in fail_to_pass", both)
    test_patch = reader.record.get("test_patch")
    if test_patch is not None:
        if not isinstance(test_patch, str) or not test_patch.strip():
            raise reader.fail("test_patch", "a unified diff of test files", test_patch)
        fields["test_patch"] = test_patch
    constraints = _string_list(reader, "constraints", reader.record.get("constraints", []))
    fields["constraints"] = constraints
    protected = _string_list(reader, "protected", reader.record.get("protected", []))
    fields["protected"] = protected
    fields["feedback_loop"] = reader.boolean("feedback_loop", False)
    attempts = reader.record.get("max_attempts")
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 100):
        raise reader.fail("max_attempts", "an integer in [1, 100]", attempts)
    _check_trees(reader, fields)
    return fields, attempts


def verifier_test_files(tree: Mapping[str, bytes]) -> list[str]:
    """The verifier-owned files of a tree: its test files and its conftest.py files."""
    return sorted(p for p in tree if is_test_path(p) or PurePosixPath(p).name == "conftest.py")

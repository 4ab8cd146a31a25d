"""The repo grader: SWE-bench's rule, on a pristine copy, in a sandbox job of its own.

``grade(pool, task, response)``:

1. the response's diff (``_diff.extract_diff``; none, or one that does not parse, is a ``fail``);
2. the diff policy: a path under ``.git/``, a ``conftest.py``, pytest/tox/setup configuration,
   ``sitecustomize``/``usercustomize``/``.pth``, bytecode, an extension module (``.so``, even as
   text), a task-protected file, a binary or a symlink **refuses the submission** (``fail``, class ``refused``, feedback naming the path and
   the rule); changes to test files are **dropped** (the verifier's tests are restored) and said
   so in the feedback;
3. the source part applied to a fresh copy of the initial state (exact context); then the task's
   ``test_patch``: the verifier's copy, which no agent process ever touched;
4. the listed tests run by the in-sandbox harness (``_harness.py``: a verifier-owned pytest
   configuration, first-hand outcomes, an audit-hook kernel, a nonce-framed report on fd 3);
5. the verdict: ``pass`` only if every fail-to-pass and pass-to-pass test passed first-hand, with
   pytest's own setup/call/teardown reports agreeing, pytest's exit status 0 and the process's
   exit status equal to it. A test that is missing, not collected, skipped, xfailed or errored is
   failed; so is a run that ended without the harness's report (the code under test exited,
   killed it, ran out of time or memory). A ``tamper`` line (the kernel ended the run) is a
   ``fail`` naming what was tried. Only a harness that never started (no ``ready`` line), its own
   error, or the sandbox's is an ``infra_error``.

Feedback (``feedback_loop`` tasks read it before their next attempt) names the failing tests the agent
has with their assertion and location from pytest's short traceback, also in a test file ``test_patch``
changed: its frames there are given by the workspace's copy (its line numbers, its lines, which the
verifier's run cannot print: ``linecache`` holds blanks for withheld files), and a frame in a line the
workspace lacks is left out, with the error text it raised. A withheld test (its function not in the
workspace, or changed there, or its case's row not in the workspace's table) is only counted, with its
exception type, and so is a visible test's failure at one of its checks the workspace lacks
(a withheld check): its name, often its input (``test_camelize[SpecialGuest-special_guest]``,
``test_sliding_window_of_short_iterator``), would let a policy tabulate what is checked between attempts. Never a withheld test's text, never the gold.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import re
import secrets
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from posttrain.envs import fail, passed
from posttrain.envs.repo._diff import (
    REFUSED,
    WHY,
    DiffError,
    FilePatch,
    apply_patches,
    classify,
    extract_diff,
    parse_diff,
)
from posttrain.envs.repo._task import (
    DEPS_DIR,
    dependency_files,
    hidden_files,
    hidden_names,
    initial_tree,
    test_file_of,
    verifier_test_files,
    verifier_tree,
)
from posttrain.envs.repo._withhold import case_ids, is_check
from posttrain.pyast import parse as parse_python
from posttrain.types import Task, Verdict
from posttrain.verify.feedback import normalize

WORK = "/work"
PYTHON = "/usr/bin/python3"
HARNESS = (Path(__file__).with_name("_harness.py")).read_text()
REPORT_TAG = "posttrain-repo"
LOADER = (
    "import sys,json\n"
    "p=json.loads(sys.stdin.buffer.read())\n"
    "import os\n"
    "os.close(0)\n"
    "g={'__name__':'posttrain_harness'}\n"
    "exec(compile(p.pop('harness'),'<posttrain-repo-harness>','exec'),g)\n"
    "g['main'](p)\n"
)
"""The process's first frame: it reads the payload, drops its own copy of the harness source and
hands the rest (the nonce among it) to ``main``, which takes the nonce into the kernel."""
MAX_FEEDBACK = 1800
DETECTED: dict[str, float] = {"format": 0.0}
"""The components of a detected attack (a refused diff, the harness tampered with or killed, only
test files changed): no credit at all, under any reward weighting (issue 21: failing differently
never pays). An honest failure (an assertion, a timeout, a diff that does not apply) keeps format 1."""
HARNESS_START_S = 5.0
"""Sandbox time allowed on top of the task's test timeout for the interpreter and pytest to start."""


@dataclass(frozen=True)
class Submission:
    """What the diff policy made of a response: the patches to apply and what was dropped."""

    source: tuple[FilePatch, ...]
    dropped: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    """(path, class) for every path that refuses the submission."""


def read_submission(response: str, task: Task) -> Submission | Verdict:
    """The response's diff sorted by the diff policy, or a ``fail`` verdict when there is none to
    apply (no diff, malformed, refused)."""
    diff = extract_diff(response or "")
    if diff is None or not diff.strip():
        return fail("No diff found: answer with a unified diff (```diff ... ```) against the repository.",
                    "no_diff", {"response_chars": len(response or "")})
    try:
        patches = parse_diff(diff)
    except DiffError as e:
        return fail(f"The diff could not be read: {e}.", "malformed_diff", {"error": str(e)},
                    {"format": 0.0})
    protected = task.fields.get("protected", ())
    hidden = set(hidden_files(task.fields))
    source, dropped, refused = [], [], []
    for fp in patches:
        kinds = {classify(p, protected=protected, test_files=hidden) for p in fp.paths}
        bad = sorted(kinds & set(REFUSED))
        if fp.binary or fp.symlink:
            refused.append((fp.path, "binary" if fp.binary else "symlink"))
        elif bad:
            refused.append((fp.path, bad[0]))
        elif "test" in kinds:
            dropped.append(fp.path)
        else:
            source.append(fp)
    return Submission(tuple(source), tuple(dropped), tuple(refused))


def refusal(sub: Submission) -> Verdict:
    path, why = sub.refused[0]
    rule = WHY.get(why, f"is a {why} patch, which the grader does not apply")
    more = f" (and {len(sub.refused) - 1} more)" if len(sub.refused) > 1 else ""
    return fail(f"Submission refused: the diff {rule}: {path}{more}. Change source files only.",
                "refused", {"refused": [list(r) for r in sub.refused]}, DETECTED)


def build_trees(task: Task, sub: Submission) -> tuple[dict[str, bytes], set[str]] | Verdict:
    """``(verifier tree, changed paths)``: the source patches on the initial state, then the
    verifier's tests; a ``fail`` when a patch does not apply."""
    initial = initial_tree(task.fields)
    touched = {p for fp in sub.source for p in fp.paths}
    try:
        text = {p: initial[p].decode("utf-8") for p in touched if p in initial}
    except UnicodeDecodeError:
        return fail("The diff patches a file that is not UTF-8 text.", "patch_does_not_apply", {}, {"format": 1.0})
    try:
        patched = apply_patches(text, sub.source)
    except DiffError as e:
        return fail(f"The diff does not apply: {e}.", "patch_does_not_apply", {"error": str(e)}, {"format": 1.0})
    tree = dict(verifier_tree(task.fields))
    for p in touched:
        tree.pop(p, None)
    tree.update({k: v.encode() for k, v in patched.items()})
    changed = {p for p in patched if initial.get(p) != tree.get(p)}
    tree.update(dependency_files(task.fields))
    problem = unwritable(tree, changed)
    if problem is not None:  # the sandbox would refuse the tree: the diff's fault, never an infra error
        return fail(f"The diff does not apply: {problem}.", "patch_does_not_apply", {"error": problem}, {"format": 1.0})
    return tree, changed


MAX_NAME_BYTES = 255
"""The longest file name (one path component) a Linux file system holds."""


def unwritable(tree: Mapping[str, bytes], changed: set[str]) -> str | None:
    """Why the diff's files cannot be written as a tree (a file where a directory must be, a name too
    long for the file system), or None."""
    dirs = {str(parent) for path in tree for parent in PurePosixPath(path).parents}
    for path in sorted(changed):
        if any(len(part.encode()) > MAX_NAME_BYTES for part in PurePosixPath(path).parts):
            return f"{path}: a file name longer than {MAX_NAME_BYTES} bytes"
    clash = sorted(p for p in tree if p in dirs)
    return f"{clash[0]} is a file, but the diff puts files under it" if clash else None


def pristine_functions(tree: Mapping[str, bytes], *, classes: bool = False) -> list[tuple[str, str]]:
    """``(path, qualified name)`` of every function (or, with ``classes``, every class) the repository
    defines in its source files, not its tests: the comparison guard accepts an ``__eq__`` at such a
    name as the repository's own, and dataclasses' generated methods on such a class."""
    return [(p, q[1:] if q.startswith("@") else q) for p, q in _functions(tuple(sorted(
        (p, v) for p, v in tree.items() if p.endswith(".py")))) if q.startswith("@") == classes]


@functools.lru_cache(maxsize=32)
def _functions(files: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for path, data in files:
        if classify(path) == "test":
            continue
        try:
            tree = parse_python(data)
        except (SyntaxError, ValueError):
            continue
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    out.append((path, f"@{name}" if isinstance(child, ast.ClassDef) else name))
                    inner = f"{name}.<locals>." if not isinstance(child, ast.ClassDef) else f"{name}."
                    stack.append((child, inner))
                else:
                    stack.append((child, prefix))
    return tuple(out)


def _payload(task: Task, tree: Mapping[str, bytes], changed: set[str], nonce: str,
             ids: Sequence[str] | None = None) -> dict[str, Any]:
    env = task.fields["environment"]
    ids = list(ids) if ids is not None else [*task.fields["fail_to_pass"], *task.fields["pass_to_pass"]]
    verifier = verifier_test_files(tree)
    return {
        "harness": HARNESS,
        "nonce": nonce,
        "work": WORK,
        "test_ids": ids,
        "verifier_files": verifier,
        "test_files": [p for p in verifier if p.endswith(".py") and PurePosixPath(p).name != "conftest.py"],
        "hidden": hidden_files(task.fields),
        "changed": sorted(changed),
        "pristine_files": sorted(p for p in tree if p.endswith(".py") and p not in changed),
        "python_path": list(env.get("python_path", ["."])) + ([DEPS_DIR] if env.get("requirements") else []),
        "pristine_functions": pristine_functions(initial_tree(task.fields)),
        "pristine_classes": pristine_functions(initial_tree(task.fields), classes=True),
    }


@dataclass
class Report:
    """The harness's authenticated lines (those carrying this run's nonce)."""

    ready: bool = False
    tamper: str | None = None
    cut_short: str | None = None
    """The kernel's check ran out of stack, memory or time (a ``RecursionError``, ``MemoryError`` or
    ``KeyboardInterrupt`` the code under test brought about): the run's failure, never the harness's."""
    harness_error: str | None = None
    final: dict[str, Any] | None = None
    finals: int = 0
    notes: list[str] = field(default_factory=list)


def read_report(raw: bytes | None, nonce: str) -> Report:
    rep = Report()
    for line in (raw or b"").split(b"\n"):
        parts = line.decode("utf-8", "replace").split("\t", 3)
        if len(parts) != 4 or parts[0] != REPORT_TAG or not secrets.compare_digest(parts[1], nonce):
            continue
        kind, body = parts[2], parts[3]
        try:
            value = ast.literal_eval(body)
        except (ValueError, SyntaxError):
            continue
        if kind == "ready":
            rep.ready = True
            rep.notes.append(str(value))
        elif kind == "tamper" and rep.tamper is None:
            rep.tamper = str(value)
        elif kind == "cut_short" and rep.cut_short is None:
            rep.cut_short = str(value)
        elif kind == "harness_error":
            rep.harness_error = str(value)
        elif kind == "final":
            rep.finals += 1
            rep.final = _parse_final(str(value))
    return rep


def _parse_final(body: str) -> dict[str, Any]:
    out: dict[str, Any] = {"exit": None, "passed": set(), "begun": set(), "reports": {}}
    for line in body.split("\n"):
        kind, _, rest = line.partition(" ")
        if kind == "exit":
            out["exit"] = ast.literal_eval(rest)
        elif kind in ("passed", "begun"):
            out[kind].add(ast.literal_eval(rest))
        elif kind == "report":
            m = re.match(r"(?P<id>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") (?P<when>\S+) (?P<outcome>\S+)$", rest)
            if m:
                nodeid = ast.literal_eval(m["id"])
                out["reports"].setdefault(nodeid, {})[m["when"]] = m["outcome"]
    return out


def _sections(stdout: str) -> dict[str, str]:
    """pytest's failure sections (``____ name ____`` headed), by the name in the header."""
    out: dict[str, str] = {}
    current, lines = None, []
    for line in stdout.splitlines():
        m = re.match(r"^_{3,} (.+?) _{3,}$", line)
        if m or line.startswith(("=====", "FAILED ", "ERROR ")):
            if current is not None:
                out.setdefault(current, "\n".join(lines).strip())
            current, lines = (m.group(1) if m else None), []
            continue
        if current is not None:
            lines.append(line)
    if current is not None:
        out.setdefault(current, "\n".join(lines).strip())
    return out


def _error_kind(body: str) -> str:
    kinds = re.findall(r"^E\s+(\w+(?:Error|Exception|Exit)|assert)\b", body, re.M)
    return {"assert": "an assertion failed"}.get(kinds[0], kinds[0]) if kinds else "failed"


def _section(test_id: str, sections: Mapping[str, str], claimed: set[str]) -> str:
    """The failure section of ``test_id``: by its full name, else by its function's name where no other
    failing test claims that section."""
    name = test_id.split("::", 1)[-1].replace("::", ".")
    short = name.split(".")[-1]
    return sections.get(name) or (sections.get(short, "") if short not in claimed else "")


@dataclass(frozen=True)
class AgentCopy:
    """A test file ``test_patch`` changed, as the agent has it: the workspace's lines, where each of the
    verifier's lines sits among them (the lines the two share), and the function (or class) each
    workspace line is in."""

    lines: tuple[str, ...]
    where: Mapping[int, int]
    """verifier's line number -> workspace's (1-based), for the lines the two copies share."""
    scope: tuple[str, ...]


@functools.lru_cache(maxsize=32)
def agent_copy(verifier: bytes, workspace: bytes) -> AgentCopy:
    """The workspace's copy of a test file whose verifier's copy is ``verifier`` (``AgentCopy``); where
    the workspace's does not parse, no line of the verifier's has a place in it."""
    ours, theirs = verifier.decode("utf-8", "replace").splitlines(), workspace.decode("utf-8", "replace").splitlines()
    where: dict[int, int] = {}
    for a, b, size in difflib.SequenceMatcher(None, ours, theirs, autojunk=False).get_matching_blocks():
        where.update({a + k + 1: b + k + 1 for k in range(size)})
    scope = ["<module>"] * len(theirs)
    try:
        for node in ast.walk(parse_python(workspace)):  # (outer scopes first: an inner one overwrites)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.end_lineno:
                scope[node.lineno - 1:node.end_lineno] = [node.name] * (node.end_lineno - node.lineno + 1)
    except (SyntaxError, ValueError):
        where = {}
    return AgentCopy(tuple(theirs), where, tuple(scope))


def _definition(text: bytes, parts: Sequence[str]) -> str | None:
    """The source (decorators included) of the function ``parts`` names (``[class, ...] name``) in a
    test file, or None where it is not there; a method a class inherits from a class of the same file
    (a test mixin) is found there, bases searched depth first, left to right."""
    try:
        module = _parsed(text)
    except (SyntaxError, ValueError):
        return None
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
    owner: ast.Module | ast.ClassDef = module
    for part in parts[:-1]:
        inner = [n for n in owner.body if isinstance(n, ast.ClassDef) and n.name == part]
        if len(inner) != 1:
            return None
        owner = inner[0]
    todo, seen = [owner], set()
    while todo:
        node = todo.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        defs = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == parts[-1]]
        if defs:
            lines = text.decode("utf-8", "replace").splitlines()
            return "\n".join("\n".join(lines[min([d.lineno, *(x.lineno for x in d.decorator_list)]) - 1:
                                              d.end_lineno or d.lineno]) for d in defs)
        if isinstance(node, ast.ClassDef):
            todo[:0] = [classes[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    return None


@functools.lru_cache(maxsize=32)
def _parsed(text: bytes) -> ast.Module:
    return parse_python(text)


def seen_by_agent(test_id: str, workspace: Mapping[str, bytes], verifier: Mapping[str, bytes]) -> bool:
    """Whether the agent has ``test_id``'s code as the grader runs it: its file unchanged by ``test_patch``,
    or its function (decorators included) the same in the workspace's copy of the file and, where
    ``test_patch`` changed the function's parametrize table (a withheld case's row), its case among the
    ones the workspace's table yields (``_withhold.case_ids``)."""
    path = test_file_of(test_id)
    if path not in workspace or path not in verifier:
        return False
    if workspace[path] == verifier[path]:
        return True
    unit = re.sub(r"\[.*\]$", "", test_id)
    parts = unit.split("::")[1:]
    ours, theirs_def = _definition(verifier[path], parts), _definition(workspace[path], parts)
    if ours is None or theirs_def is None or (ours != theirs_def and not lacks_checks(ours, theirs_def)):
        return False
    if unit == test_id:
        return True
    theirs = case_ids(workspace[path], parts)
    return theirs == case_ids(verifier[path], parts) or (theirs is not None and test_id[len(unit) + 1:-1] in theirs)


def lacks_checks(verifier: str, workspace: str) -> bool:
    """Whether the workspace's source of a test function is the verifier's with some of its top-level checks
    removed (``_withhold.withheld_checks``), nothing else changed."""
    try:
        trees = [parse_python(textwrap.dedent(s)) for s in (verifier, workspace)]
    except (SyntaxError, ValueError):
        return False
    if not all(isinstance(t, ast.Module) and len(t.body) == 1 for t in trees):
        return False
    ours, theirs = (t.body[0] for t in trees if isinstance(t, ast.Module))
    if not isinstance(ours, ast.FunctionDef | ast.AsyncFunctionDef) or type(theirs) is not type(ours):
        return False
    head = [textwrap.dedent(s).splitlines()[:f.body[0].lineno - 1] for s, f in ((verifier, ours), (workspace, theirs))]
    kept = [ast.dump(n) for n in theirs.body]
    for stmt in ours.body:
        if kept and ast.dump(stmt) == kept[0]:
            kept.pop(0)
        elif not is_check(stmt):
            return False
    return head[0] == head[1] and not kept and len(theirs.body) < len(ours.body)


FRAME = re.compile(r"^(?P<path>\S+\.py):(?P<line>\d+):(?P<rest>.*)$")


def _failure_text(test_id: str, body: str, copies: Mapping[str, AgentCopy]) -> str:
    """A visible test's failure: pytest's frames, their lines and the ``E`` lines (the last 12). A frame
    in a file of ``copies`` is given by the workspace's copy; one in a line the workspace lacks is left
    out, and so is the error text once such a frame ran (its values may be the withheld code's): only
    its type is said. A failure at a line of the test's own function that the workspace lacks (a withheld
    check, ``_withhold.withheld_checks``) is only counted: no frame, no value of it."""
    keep: list[str] = []
    tainted, after_frame = False, False
    name = re.sub(r"\[.*\]$", "", test_id).split("::")[-1]
    for ln in body.splitlines():
        m = FRAME.match(ln)
        if m:
            path = m["path"].removeprefix(f"{WORK}/")
            shown, frame, line = True, ln, None
            if path in copies:
                shown, frame, line = _frame_as_seen(path, int(m["line"]), m["rest"], copies[path])
                if not shown and path == test_file_of(test_id) and m["rest"] == f" in {name}":
                    return f"{test_id} failed at a withheld check ({_error_kind(body)}; not shown)"
            keep += [frame, f"    {line.strip()}"] if line is not None else [frame] if shown else []
            tainted = tainted or not shown
            after_frame = shown and path not in copies  # (pytest's line of a changed file: blank, ours given)
            continue
        if after_frame and ln.startswith("    "):
            keep.append(ln)
        elif ln.startswith(("E ", "E\t")):
            said = bool(keep) and keep[-1].endswith(HIDDEN_RAISE)
            keep += [ln] if not tainted else [] if said else [f"E   {_error_kind(ln)}{HIDDEN_RAISE}"]
        after_frame = False
    keep = keep[-12:]
    while keep and keep[0].startswith("    "):  # (its frame's line cut off above)
        keep.pop(0)
    detail = "\n".join(keep)
    return f"{test_id} failed:\n{detail}" if detail else f"{test_id} failed"


HIDDEN_RAISE = " (its text not shown: raised after a line the workspace does not have)"


def _frame_as_seen(path: str, line: int, rest: str, copy: AgentCopy) -> tuple[bool, str, str | None]:
    """``(shown, frame line, source line)`` of a frame in a test file ``test_patch`` changed, in the
    workspace's numbering and text; not shown where the workspace lacks the line or its function."""
    at = copy.where.get(line)
    name = rest.removeprefix(" in ")
    if at is None or (rest.startswith(" in ") and not name.startswith("<") and copy.scope[at - 1] != name):
        return False, "", None
    return True, f"{path}:{at}:{rest}", copy.lines[at - 1]


def _withheld_text(tests: Sequence[str], sections: Mapping[str, str], claimed: set[str]) -> str:
    kinds = sorted({_error_kind(_section(t, sections, claimed)) for t in tests})
    n = len(tests)
    return f"{n} withheld test{'s' if n > 1 else ''} failed ({', '.join(kinds)}; not shown)"


def sandbox_infra(ex: Any, evidence: Mapping[str, Any] | None = None) -> Verdict:
    """The verdict of a run the sandbox could not give: ``infra:starved`` when a loaded host starved it of
    CPU (the sandbox decides that from CPU time, which the code cannot fake), else ``infra:sandbox``."""
    starved = "starved of CPU" in str(ex.infra_detail)
    return Verdict.infra(f"sandbox: {ex.infra_detail}", error_class="infra:starved" if starved else "infra:sandbox",
                         evidence=evidence)


def judge(task: Task, ex: Any, nonce: str, *, changed: set[str], dropped: Sequence[str]) -> Verdict:
    """The verdict of one harness run (module docstring, step 5)."""
    evidence: dict[str, Any] = {
        "exit_code": ex.exit_code, "timed_out": bool(ex.timed_out), "oom_killed": bool(ex.oom_killed),
        "duration_s": round(float(ex.duration_s or 0.0), 3), "changed": sorted(changed), "dropped": list(dropped),
        "peak_memory_mb": None if ex.peak_memory_bytes is None else round(ex.peak_memory_bytes / 2**20, 1),
    }
    if ex.outcome == "infra_error":
        return sandbox_infra(ex, evidence)
    rep = read_report(ex.report, nonce)
    evidence["nonce_ok"] = rep.ready
    if rep.tamper is not None:
        evidence["tamper"] = rep.tamper
        return fail(f"The grader stopped the run: {rep.tamper}.", "tamper", evidence, DETECTED)
    if rep.cut_short is not None:  # the code under test's doing: a fail as an honest one, format kept
        evidence["cut_short"] = rep.cut_short
        return fail(f"The test run stopped: {rep.cut_short}.", "cut_short", evidence, {"format": 1.0})
    if rep.harness_error is not None:
        return Verdict.infra(f"repo harness: {rep.harness_error}", error_class="infra:harness", evidence=evidence)
    if not rep.ready:
        if ex.timed_out or ex.oom_killed:
            return Verdict.infra("the repo harness did not start in time", error_class="infra:harness",
                                 evidence=evidence)
        tail = normalize(ex.stderr[-600:] if ex.stderr else b"")
        return Verdict.infra(f"the repo harness did not start: {tail}", error_class="infra:harness", evidence=evidence)
    stdout = ex.stdout.decode("utf-8", "replace")
    if rep.final is None or rep.finals != 1:
        cls = "timeout" if ex.timed_out else "memory" if ex.oom_killed else "no_report"
        what = {"timeout": f"ran out of time ({task.fields['environment']['timeout_sec']} s)",
                "memory": "ran out of memory"}.get(cls, "ended before the harness reported (did the code exit or "
                                                        "kill the process?)")
        return fail(f"The test run {what}.", cls, evidence, DETECTED if cls == "no_report" else {"format": 1.0})
    return _judge_final(task, rep.final, ex, stdout, evidence, dropped)


def _judge_final(task: Task, final: Mapping[str, Any], ex: Any, stdout: str, evidence: dict[str, Any],
                 dropped: Sequence[str]) -> Verdict:
    f2p, p2p = list(task.fields["fail_to_pass"]), list(task.fields["pass_to_pass"])
    hidden = set(hidden_files(task.fields))
    failed = []
    for tid in f2p + p2p:
        reports = final["reports"].get(tid, {})
        ok = tid in final["passed"] and all(reports.get(w) == "passed" for w in ("setup", "call", "teardown"))
        if not ok:
            failed.append(tid)
    evidence.update({"pytest_exit": final["exit"], "tests": {
        tid: ("passed" if tid not in failed else "failed" if tid in final["begun"] else "not run") for tid in f2p + p2p}})
    consistent = final["exit"] == 0 and ex.exit_code == 0
    n = len(f2p) + len(p2p)
    process = (n - len(failed)) / n if n else 0.0
    if not failed and consistent:
        return passed(f"All {n} tests passed.", evidence)
    if not failed:
        return fail(f"Every listed test passed, but pytest exited with status {final['exit']} (process "
                    f"status {ex.exit_code}): the run was not clean.", "exit_status", evidence,
                    {"format": 1.0, "process": process})
    sections = _sections(stdout)
    f2p_failed = [t for t in failed if t in f2p]
    p2p_failed = [t for t in failed if t in p2p]
    head = []
    if f2p_failed:
        head.append(f"{len(f2p_failed)} of {len(f2p)} tests that must pass after the fix failed")
    if p2p_failed:
        head.append(f"{len(p2p_failed)} of {len(p2p)} tests that passed before now fail")
    body = _failures(task, failed, sections, hidden)
    if dropped:
        body.append(f"(changes to test files were ignored: {', '.join(dropped[:3])})")
    text = normalize("; ".join(head) + ".\n" + "\n".join(body))
    cls = "not_run" if not any(t in final["begun"] for t in failed) else "assertion"
    return fail(text[:MAX_FEEDBACK], cls, evidence, {"format": 1.0, "process": process})


def _failures(task: Task, failed: Sequence[str], sections: Mapping[str, str], hidden: set[str]) -> list[str]:
    """The feedback's lines on the failed tests: how many withheld tests failed, then up to four visible
    ones with their tracebacks (module docstring)."""
    workspace: Mapping[str, bytes] = {}
    verifier: Mapping[str, bytes] = {}
    if hidden:
        workspace, verifier = initial_tree(task.fields), verifier_tree(task.fields)
    withheld = [t for t in failed if test_file_of(t) in hidden and not seen_by_agent(t, workspace, verifier)]
    visible = [t for t in failed if t not in withheld]
    copies = {p: agent_copy(verifier[p], workspace[p]) for p in hidden if p in verifier and p in workspace}
    claimed = {t.split("::", 1)[-1].replace("::", ".") for t in failed}
    body = [_withheld_text(withheld, sections, claimed)] if withheld else []  # (first: the cut at MAX_FEEDBACK)
    body += [_failure_text(t, _section(t, sections, claimed), copies) for t in visible[:4]]
    if len(visible) > 4:
        body.append(f"... and {len(visible) - 4} more")
    return body


def grade(pool: Any, task: Task, response: str) -> Verdict:
    """The verdict of ``response`` on ``task`` (module docstring); never raises for the response."""
    sub = read_submission(response, task)
    if isinstance(sub, Verdict):
        return sub
    if sub.refused:
        return refusal(sub)
    if not sub.source:
        dropped = f" (its changes to test files are ignored: {', '.join(sub.dropped[:3])})" if sub.dropped else ""
        return fail(f"The diff changes no source file{dropped}.", "no_source_change", {"dropped": list(sub.dropped)},
                    DETECTED if sub.dropped else {"format": 1.0})  # only test changes: the tests edited instead
    built = build_trees(task, sub)
    if isinstance(built, Verdict):
        return built
    tree, changed = built
    ex, nonce = run_harness(pool, task, tree, changed)
    return judge(task, ex, nonce, changed=changed, dropped=sub.dropped)


def run_harness(pool: Any, task: Task, tree: Mapping[str, bytes], changed: set[str],
                ids: Sequence[str] | None = None) -> tuple[Any, str]:
    """One harness run of ``ids`` (default: the task's listed tests) on ``tree``: ``(Execution, nonce)``."""
    nonce = secrets.token_hex(16)
    timeout = float(task.fields["environment"]["timeout_sec"]) + HARNESS_START_S
    ex = pool.exec([PYTHON, "-I", "-B", "-c", LOADER], files=dict(tree),
                   stdin=json.dumps(_payload(task, tree, changed, nonce, ids)).encode(), timeout=timeout,
                   limits=_limits(task), hide=hidden_names(task.fields))  # no host copy of the project
    return ex, nonce


def base_outcomes(pool: Any, task: Task) -> dict[str, str] | Verdict:
    """SWE-bench's validation of a task: the listed tests on the unchanged verifier copy, ``{id:
    passed|failed}``; an ``infra_error`` verdict (or the harness's refusal) when they could not run.
    A sound task has every fail-to-pass test failed and every pass-to-pass test passed."""
    tree = {**verifier_tree(task.fields), **dependency_files(task.fields)}
    ex, nonce = run_harness(pool, task, tree, set())
    if ex.outcome == "infra_error":
        return sandbox_infra(ex)
    rep = read_report(ex.report, nonce)
    if rep.final is None:
        return fail(f"the unchanged repository's run ended without a report ({rep.tamper or 'no report'})",
                    "no_report")
    final = rep.final
    return {tid: "passed" if tid in final["passed"] and all(
        final["reports"].get(tid, {}).get(w) == "passed" for w in ("setup", "call", "teardown")) else "failed"
        for tid in [*task.fields["fail_to_pass"], *task.fields["pass_to_pass"]]}


def _limits(task: Task) -> Any:
    from posttrain.sandbox import Limits

    return Limits(memory_mb=max(task.limits.memory_mb, 256), pids=128, tmp_mb=128)

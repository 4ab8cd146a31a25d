"""The constraints a grader can check, applied after the tests pass (a failed run stays failed):

- ``keep_public_api``: every public function, class and method (a name without a leading
  underscore, at module or class level) of every module the diff changes keeps its signature:
  the same parameters, kinds and number of defaults, compared by AST; a public name the diff
  removes breaks it too. New public names are allowed.
- ``add_unit_tests``: the diff adds test functions (``test_*`` in a test file) that pass with the
  change, and at least one of them catches the bug: it fails on the unchanged repository (each
  source file the diff changes there with a comment line added: the same code, other bytes) and,
  when the task has a reference, passes with the reference's source fix in place of the diff's.
  Each run is in the sandbox under the same harness, the new tests only. Test changes are dropped
  from the graded run (the verifier's tests decide the verdict), so a new test never helps the
  verdict; this check only asks that the change came with one that catches the bug. A test of the
  diff rather than of the issue does not count: one that asserts a name the diff adds fails with
  the reference, one that asserts a changed file's bytes (its hash, its size) passes on the
  unchanged code with the comment. Not stopped: a test that asserts the buggy line's text is gone.

A broken constraint turns a pass into a ``fail`` (error class ``constraint:<name>``) whose feedback
names the constraint and what broke it. Free-text constraints are shown to the model, not checked.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from posttrain.envs import fail
from posttrain.envs.repo._diff import apply_patches, classify, is_test_path, parse_diff
from posttrain.envs.repo._task import initial_tree
from posttrain.pyast import parse as parse_python
from posttrain.types import Task, Verdict


def _signature(args: ast.arguments) -> tuple:
    return (tuple(a.arg for a in args.posonlyargs), tuple(a.arg for a in args.args), len(args.defaults),
            args.vararg.arg if args.vararg else None, tuple(a.arg for a in args.kwonlyargs),
            tuple(d is not None for d in args.kw_defaults), args.kwarg.arg if args.kwarg else None)


def public_api(source: str) -> dict[str, tuple]:
    """``{qualified name: signature}`` of a module's public functions, classes and methods.

    >>> public_api("def f(a, b=1): pass\\nclass C:\\n    def m(self): pass\\n    def _p(self): pass\\n")
    {'f': ((), ('a', 'b'), 1, None, (), (), None), 'C': ('class',), 'C.m': ((), ('self',), 0, None, (), (), None)}
    """
    try:
        tree = parse_python(source)
    except SyntaxError:
        return {}
    out: dict[str, tuple] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                out[prefix + node.name] = _signature(node.args)
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                out[prefix + node.name] = ("class",)
                walk(node.body, prefix + node.name + ".")

    walk(tree.body, "")
    return out


def _describe(sig: tuple) -> str:
    if sig == ("class",):
        return "a class"
    pos, args, _, var, kw, _, kwarg = sig
    names = [*pos, *args] + ([f"*{var}"] if var else []) + list(kw) + ([f"**{kwarg}"] if kwarg else [])
    return f"({', '.join(names)})"


def api_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What the change does to the public API of the modules in ``before`` (empty: kept)."""
    problems = []
    for path in sorted(before):
        if not path.endswith(".py") or classify(path) != "source":
            continue
        old, new = public_api(before[path]), public_api(after.get(path, ""))
        module = PurePosixPath(path).with_suffix("").as_posix().replace("/", ".")
        for name, sig in old.items():
            if name not in new:
                problems.append(f"{module}.{name} was removed")
            elif new[name] != sig:
                problems.append(f"{module}.{name}{_describe(sig)} became {name}{_describe(new[name])}")
    return problems


def _new_tests(before: Mapping[str, bytes], after: Mapping[str, str]) -> list[str]:
    """Node ids of the test functions the change adds (top level or in a ``Test*`` class)."""
    ids = []
    for path, text in sorted(after.items()):
        if not (path.endswith(".py") and is_test_path(path)):
            continue
        old = set(_test_ids(path, before[path].decode("utf-8", "replace"))) if path in before else set()
        ids += [t for t in _test_ids(path, text) if t not in old]
    return ids


def _test_ids(path: str, source: str) -> list[str]:
    try:
        tree = parse_python(source)
    except SyntaxError:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            out.append(f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            out += [f"{path}::{node.name}::{f.name}" for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return out


def _patched(task: Task, response: str) -> tuple[dict[str, bytes], dict[str, str], dict[str, str]] | None:
    """``(initial tree, the touched files before, after)`` of the response's whole diff, or None."""
    from posttrain.envs.repo._diff import extract_diff

    diff = extract_diff(response or "")
    if diff is None:
        return None
    patches = parse_diff(diff)
    initial = initial_tree(task.fields)
    touched = {p for fp in patches for p in fp.paths}
    before = {p: initial[p].decode("utf-8") for p in touched if p in initial}
    return initial, before, apply_patches(before, patches)


def check_constraints(pool: Any, task: Task, response: str, verdict: Verdict) -> Verdict:
    """``verdict``, or a ``fail`` when it passed but broke a checked constraint (module docstring)."""
    wanted = [c for c in task.fields.get("constraints", ()) if c in ("keep_public_api", "add_unit_tests")]
    if not verdict.passed or not wanted:
        return verdict
    initial, before, after = _patched(task, response) or ({}, {}, {})
    if "keep_public_api" in wanted:
        problems = api_changes(before, after)
        if problems:
            return fail("Constraint keep_public_api broken: " + "; ".join(problems[:5]) + ".",
                        "constraint:keep_public_api", {**verdict.evidence, "api_changes": problems},
                        {"format": 1.0, "process": 1.0})
    if "add_unit_tests" in wanted:
        return _check_added_tests(pool, task, verdict, initial, before, after)
    return verdict


BEFORE_MARK = b"\n# (the unchanged repository, for the add_unit_tests check)\n"
"""Added to each source file the diff changes, in the run on the unchanged repository: the same code
in other bytes, so a new test that asserts a file's bytes changed (a hash, a size) passes there and
catches nothing."""


def _reference_sources(task: Task, initial: Mapping[str, bytes]) -> tuple[dict[str, bytes], set[str]] | None:
    """``(the reference's source files after its fix, the paths it touches)`` (its test changes left
    out), or None when the task has no reference diff that applies."""
    from posttrain.envs.repo._diff import DiffError, extract_diff

    diff = extract_diff(task.reference or "")
    if diff is None:
        return None
    try:
        patches = [fp for fp in parse_diff(diff) if all(classify(p) == "source" for p in fp.paths)]
        touched = {p for fp in patches for p in fp.paths}
        fixed = apply_patches({p: initial[p].decode("utf-8") for p in touched if p in initial}, patches)
    except (DiffError, UnicodeDecodeError):
        return None
    return {p: t.encode() for p, t in fixed.items()}, touched


def _check_added_tests(pool: Any, task: Task, verdict: Verdict, initial: Mapping[str, bytes],
                       before: Mapping[str, str], after: Mapping[str, str]) -> Verdict:
    from posttrain.envs.repo._grade import read_report, run_harness, sandbox_infra
    from posttrain.envs.repo._task import dependency_files, verifier_tree

    new = _new_tests(initial, after)
    evidence = {**verdict.evidence, "new_tests": new}
    if not new:
        return fail("Constraint add_unit_tests broken: the diff adds no test function (def test_...) to a test "
                    "file.", "constraint:add_unit_tests", evidence, {"format": 1.0, "process": 1.0})
    tests = {p: t.encode() for p, t in after.items() if is_test_path(p)}
    verifier = {**verifier_tree(task.fields), **dependency_files(task.fields)}
    sources = {p for p in after if not is_test_path(p)}
    marked = {p: verifier[p] + BEFORE_MARK for p in sources if p in verifier and p.endswith(".py")}
    runs: dict[str, tuple[dict[str, bytes], set[str]]] = {
        "before": ({**verifier, **marked, **tests}, set()),
        "after": ({**verifier, **tests, **{p: t.encode() for p, t in after.items()}}, sources)}
    reference = _reference_sources(task, initial)
    if reference is not None:
        fixed, touched = reference
        tree = {p: v for p, v in verifier.items() if p not in touched}
        runs["reference"] = ({**tree, **fixed, **tests}, set())
    outcomes = {}
    for name, (tree, changed) in runs.items():
        ex, nonce = run_harness(pool, task, tree, changed, new)
        if ex.outcome == "infra_error":
            return sandbox_infra(ex, evidence)
        final = read_report(ex.report, nonce).final or {"passed": set()}
        outcomes[name] = {t for t in new if t in final["passed"]}
    for name in outcomes:
        evidence[f"new_tests_pass_{name}"] = sorted(outcomes[name])
    catches = [t for t in new if t in outcomes["after"] and t not in outcomes["before"]
               and t in outcomes.get("reference", {t})]
    if catches and outcomes["after"] == set(new):
        return verdict
    if outcomes["after"] != set(new):
        why = f"{len(set(new) - outcomes['after'])} of them fail with the change"
    elif reference is not None and any(t not in outcomes["before"] for t in new):
        why = ("each one that fails on the unchanged repository also fails with the reference fix: they test "
               "the diff, not the issue")
    else:
        why = "none of them fails on the unchanged repository"
    return fail(f"Constraint add_unit_tests broken: the diff adds {len(new)} test(s), but {why}.",
                "constraint:add_unit_tests", evidence, {"format": 1.0, "process": 1.0})

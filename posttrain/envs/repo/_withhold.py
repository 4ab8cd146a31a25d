"""Withheld failing tests for generated tasks: the agent sees about half of a task's failing tests.

With every fail-to-pass test in the workspace, a diff that maps the visible tests' inputs to their
expected outputs (the bug left in) passed 3 of 3 pack tasks it was tried on: nothing checked the fix on an
input the policy had not seen. ``withhold`` takes a pack task's record and, when its failing tests come
from at least two test functions, removes about half of those functions (chosen by the task id, so a
task is the same in every process) from the workspace's test files, and gives them back to the
verifier's copy as a ``test_patch`` (SWE-bench's hidden tests). The prompt names the visible tests only.

A function is withheld only when removing it hides nothing else: its definition sits in the test file
the id names (a module function, or a method of a class defined there), no other listed test shares its
name (a subclass's or a sibling's test of that name would vanish too), no pass-to-pass test is one of its
parametrizations, and nothing left in the file names it. The file must still parse.
"""

from __future__ import annotations

import ast
import functools
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._task import test_file_of

WITHHELD_NOTE = "Other tests, not shown here, check the fix as well."
"""What the prompt of a task with withheld tests says about them."""


def _unit(test_id: str) -> str:
    """The test function of a node id: its parametrization dropped (``f.py::T::t[1]`` -> ``f.py::T::t``)."""
    return re.sub(r"\[.*\]$", "", test_id)


def _def_span(module: ast.Module, unit: str) -> tuple[int, int, ast.ClassDef | None] | None:
    """The 1-based line span (decorators included) of ``unit``'s definition, and its class; None where
    it is not defined exactly once directly in the file (or its one class there)."""
    parts = unit.split("::")[1:]
    if len(parts) not in (1, 2):
        return None
    body, owner = module.body, None
    if len(parts) == 2:
        classes = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == parts[0]]
        if len(classes) != 1:
            return None
        owner = classes[0]
        body = owner.body
    defs = [n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == parts[-1]]
    if len(defs) != 1 or defs[0].end_lineno is None:
        return None
    node = defs[0]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return start, node.end_lineno, owner


@functools.lru_cache(maxsize=64)
def _facts(text: str) -> tuple[ast.Module, Counter[str]]:
    """A test file's tree and how often each name occurs in it (names, attributes, definitions)."""
    module = ast.parse(text)
    names: Counter[str] = Counter()
    for n in ast.walk(module):
        if isinstance(n, ast.Name):
            names[n.id] += 1
        elif isinstance(n, ast.Attribute):
            names[n.attr] += 1
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[n.name] += 1
    return module, names


@functools.lru_cache(maxsize=512)
def _strip(text: str, units: tuple[str, ...]) -> str | None:
    """``text`` without the definitions of ``units`` (a class left empty gets ``pass``), or None where one
    cannot be removed cleanly: not defined once in its place, or its name used anywhere else in the file."""
    module, names = _facts(text)
    lines = text.splitlines(keepends=True)
    spans = []
    for unit in units:
        span = _def_span(module, unit)
        if span is None or names[unit.split("::")[-1]] != 1:
            return None
        spans.append(span)
    drop = {i for start, end, _ in spans for i in range(start - 1, end)}
    for owner in {id(o): o for _, _, o in spans if o is not None}.values():
        if all(i in drop for n in owner.body for i in range(n.lineno - 1, n.end_lineno or n.lineno)):
            first = owner.body[0]
            lines[first.lineno - 1] = " " * first.col_offset + "pass\n"
            drop.discard(first.lineno - 1)
    out = "".join(line for i, line in enumerate(lines) if i not in drop)
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return _drop_tables(out, {n.id for n in ast.walk(module) if isinstance(n, ast.Name)
                              and any(s <= n.lineno <= e for s, e, _ in spans)})


def _drop_tables(text: str, used: set[str]) -> str:
    """``text`` without each top-level ``NAME = ...`` that a withheld function read (``used``) and nothing
    left names: a parametrize table (``UNDERSCORE_TO_HUMAN``) left behind held the withheld test's
    inputs and expected outputs (2 of the 5 inflection tasks that withhold)."""
    module = ast.parse(text)
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in used and len(re.findall(rf"\b{re.escape(name)}\b", text)) == 1:
                drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    out = "".join(line for i, line in enumerate(lines) if i not in drop)
    return out if drop and _parses(out) else text


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _removable(text: str, unit: str) -> bool:
    module, names = _facts(text)
    return _def_span(module, unit) is not None and names[unit.split("::")[-1]] == 1


def withheld_units(rec: Mapping[str, Any], tree: Mapping[str, bytes]) -> list[str]:
    """The test functions (ids without parametrization) of pack record ``rec`` to withhold (module docstring)."""
    f2p, p2p = list(rec["fail_to_pass"]), list(rec["pass_to_pass"])
    units = sorted({_unit(t) for t in f2p})
    if len(units) < 2:
        return []
    p2p_units = {_unit(t) for t in p2p}
    short = [u.split("::")[-1] for u in {_unit(t) for t in [*f2p, *p2p]}]
    candidates = []
    for unit in units:
        path = test_file_of(unit)
        if unit in p2p_units or short.count(unit.split("::")[-1]) != 1 or path not in tree:
            continue
        try:
            if _removable(tree[path].decode("utf-8"), unit):
                candidates.append(unit)
        except (SyntaxError, UnicodeDecodeError):
            continue
    k = min(len(units) // 2, len(candidates))
    return sorted(random.Random(f"withhold:{rec['id']}").sample(candidates, k)) if k else []


def withhold(rec: Mapping[str, Any], tree: Mapping[str, bytes]) -> tuple[str, str, list[str]] | None:
    """``(workspace_patch, test_patch, visible_fail_to_pass)`` for pack record ``rec`` whose workspace
    (before its tests are touched) is ``tree``: the diff that removes the withheld functions, the diff
    that puts them back, and the failing tests the agent still has; None when nothing is withheld."""
    units = withheld_units(rec, tree)
    if not units:
        return None
    before, after = {}, {}
    for path in sorted({test_file_of(u) for u in units}):
        text = tree[path].decode("utf-8")
        stripped = _strip(text, tuple(u for u in units if test_file_of(u) == path))
        if stripped is None:  # (each removes cleanly alone; together, e.g. a class left empty, they did not)
            return None
        before[path], after[path] = text, stripped
    visible = [t for t in rec["fail_to_pass"] if _unit(t) not in units]
    return render_diff(before, after), render_diff(after, before), visible


def issue_errors(prompt: str, tests: Sequence[str]) -> dict[str, str]:
    """The error each of ``tests`` shows in a generated prompt (``- <id>: <error>`` lines)."""
    out = {}
    for line in prompt.splitlines():
        for t in tests:
            if line.startswith(f"- {t}: "):
                out[t] = line[len(f"- {t}: "):]
    return out

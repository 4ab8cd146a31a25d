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

A task whose failing tests are cases of one function (``test_humanize[employee_id-Employee]``,
``test_humanize[underground-Underground]``) withholds nothing that way, and an echo of its cases passed
(10 pack tasks). There ``withheld_cases`` withholds about half of the failing *cases*, at least one kept
visible: their rows leave the parametrize table in the workspace's copy (``_strip_rows``) and
``test_patch`` puts them back. A row is withheld only when its removal changes nothing else: the
function's one decorator is ``parametrize(names, values)`` (no ``ids``), ``values`` a literal table or
module-level tables (``A + B``) that no other code names, every row literal with an id pytest derives
from its values alone (unique: no position in it, so no other case's id moves), its lines its own, and
no equal row left anywhere in the file (its input and expected output would stay in view). A table that
several tests share (``SINGULAR_TO_PLURAL``) keeps its rows: the other tests' cases of them pass before
and after, and their values stay in the file anyway. The grader tells the withheld cases from the
visible ones of the same function by the ids the workspace's table still yields (``case_ids``).

A task whose one failing test is a single function of several checks withholds nothing either way. There
``withheld_checks`` applies a split that ``_checks.py`` measured and stored (``data/withheld_checks.json``):
about half of the top-level checks (``assert``, ``self.assert*(...)``, ``with pytest.raises``) that fail on
the bug and pass on the reference leave the workspace's copy of the function, its first failing check
kept; each split was validated by running (the workspace's copy fails on the bug and passes on the
reference, the full test as before) and names the test file's hash, so a changed pack drops it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._task import test_file_of
from posttrain.pyast import parse as parse_python

CHECKS = Path(__file__).resolve().parent / "data" / "withheld_checks.json"
"""The stored, validated check splits (``_checks.py`` builds them): task id -> test, file hash, checks."""
WITHHELD_NOTE = "Other tests or checks, not shown here, check the fix as well."
"""What the prompt of a task with withheld tests says about them."""


def _unit(test_id: str) -> str:
    """The test function of a node id: its parametrization dropped (``f.py::T::t[1]`` -> ``f.py::T::t``)."""
    return re.sub(r"\[.*\]$", "", test_id)


def _def_node(module: ast.Module, parts: Sequence[str]) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef,
                                                                  ast.ClassDef | None] | None:
    """The definition of the test ``parts`` names (``[class,] name``) and its class; None where it is
    not defined exactly once directly in the file (or its one class there)."""
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
    return defs[0], owner


def _def_span(module: ast.Module, unit: str) -> tuple[int, int, ast.ClassDef | None] | None:
    """The 1-based line span (decorators included) of ``unit``'s definition, and its class; None where
    it is not defined exactly once directly in the file (or its one class there)."""
    found = _def_node(module, unit.split("::")[1:])
    if found is None:
        return None
    node, owner = found
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return start, node.end_lineno or node.lineno, owner


@functools.lru_cache(maxsize=64)
def _facts(text: str) -> tuple[ast.Module, Counter[str]]:
    """A test file's tree and how often each name occurs in it (names, attributes, definitions)."""
    module = parse_python(text)
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
        parse_python(out)
    except SyntaxError:
        return None
    return _drop_tables(out, {n.id for n in ast.walk(module) if isinstance(n, ast.Name)
                              and any(s <= n.lineno <= e for s, e, _ in spans)})


def _drop_tables(text: str, used: set[str]) -> str:
    """``text`` without each top-level ``NAME = ...`` that a withheld function read (``used``) and nothing
    left names: a parametrize table (``UNDERSCORE_TO_HUMAN``) left behind held the withheld test's
    inputs and expected outputs (2 of the 5 inflection tasks that withhold)."""
    module = parse_python(text)
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
        parse_python(text)
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


def _idval(value: object) -> str | None:
    """pytest's id of one parameter value where the value alone makes it (``_idval_from_value``: a string
    escaped to ASCII, a number, bool or None as ``str``); None for any other value (its id is positional)."""
    if isinstance(value, str):
        return value.encode("unicode_escape").decode("ascii")
    if value is None or isinstance(value, bool | int | float):
        return str(value)
    return None


def _row_id(row: ast.expr, width: int) -> str | None:
    """The id of one literal row of a parametrize table with ``width`` argument names, or None."""
    try:
        value = ast.literal_eval(row)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if width == 1:
        return _idval(value)
    if not isinstance(row, ast.Tuple | ast.List) or len(value) != width:
        return None
    parts = [_idval(v) for v in value]
    return None if any(p is None for p in parts) else "-".join(p for p in parts if p is not None)


def _tables(module: ast.Module, names: Counter[str], values: ast.expr) -> list[tuple[ast.Tuple | ast.List, bool]] | None:
    """The literal tables a parametrize ``values`` argument is made of (itself, module-level tables it
    names, or their sum), each with whether it is this test's own (no other code names it); None where
    one is not a literal table."""
    if isinstance(values, ast.Tuple | ast.List):
        return [(values, True)]
    if isinstance(values, ast.BinOp) and isinstance(values.op, ast.Add):
        left, right = _tables(module, names, values.left), _tables(module, names, values.right)
        return None if left is None or right is None else left + right
    if isinstance(values, ast.Name):
        defs = [n.value for n in module.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name) and n.targets[0].id == values.id]
        own = names[values.id] == 2  # (its assignment and this use)
        rebound = any(isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == values.id
                      for n in module.body)
        if len(defs) == 1 and isinstance(defs[0], ast.Tuple | ast.List) and (own or isinstance(defs[0], ast.Tuple)) \
                and not rebound:  # (a shared table read as it stands: a tuple, never added to)
            return [(defs[0], own)]
    return None


def _case_rows(text: str, parts: Sequence[str]) -> list[tuple[str, ast.expr, ast.Tuple | ast.List, bool]] | None:
    """``(id, row, table, own)`` for each case of the test ``parts`` names, where its one parametrize
    decorator reads literal tables and every id comes from the values alone (module docstring); ``own``:
    no other code reads the row's table."""
    module, names = _facts(text)
    found = _def_node(module, parts)
    if found is None:
        return None
    marks = [d for d in found[0].decorator_list if "parametrize" in ast.unparse(d)]
    if len(marks) != 1 or not isinstance(marks[0], ast.Call) or len(marks[0].args) != 2 or marks[0].keywords:
        return None
    func, (argnames, values) = marks[0].func, marks[0].args
    if not (isinstance(func, ast.Attribute) and func.attr == "parametrize"):
        return None
    try:
        given = ast.literal_eval(argnames)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not (isinstance(given, str) or isinstance(given, tuple | list) and all(isinstance(g, str) for g in given)):
        return None
    width = len(given.split(",")) if isinstance(given, str) else len(given)
    tables = _tables(module, names, values)
    if tables is None:
        return None
    rows = [(_row_id(row, width), row, table, own) for table, own in tables for row in table.elts]
    ids = [r[0] for r in rows]
    if not rows or None in ids or len(set(ids)) != len(ids):
        return None
    return [(i, row, table, own) for i, row, table, own in rows if i is not None]


def case_ids(text: bytes | str, parts: Sequence[str]) -> tuple[str, ...] | None:
    """The ids of the cases of the test ``parts`` names (``[class,] name``) in test file ``text``, where
    its parametrize table is one ``withheld_cases`` may shorten; None otherwise.

    >>> text = "\\n".join(["T = ((1, 'a'), (2, 'b'))", "@pytest.mark.parametrize('n,s', T)", "def test_t(n, s): pass"])
    >>> case_ids(text, ["test_t"])
    ('1-a', '2-b')
    """
    try:
        rows = _case_rows(text.decode("utf-8") if isinstance(text, bytes) else text, tuple(parts))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return None if rows is None else tuple(r[0] for r in rows)


def _case(test_id: str) -> str:
    """The parametrization of a node id (``f.py::t[a-b]`` -> ``a-b``)."""
    return test_id[len(_unit(test_id)) + 1:-1]


def _strip_rows(text: str, cases: tuple[str, ...]) -> str | None:
    """``text`` without the table rows of ``cases`` (ids of one file), or None where one cannot be removed
    cleanly: its lines shared, another case's id moved, or an equal row left in the file."""
    drop: set[int] = set()
    kept: dict[str, list[str]] = {}
    gone = []
    for case in cases:
        unit = _unit(case)
        parts = tuple(unit.split("::")[1:])
        rows = _case_rows(text, parts)
        mine = [r for r in rows or [] if r[0] == _case(case)]
        if not mine or not mine[0][3]:  # (a table another test reads: its cases would go too)
            return None
        _, row, table, _ = mine[0]
        kept.setdefault(unit, [r[0] for r in rows or []]).remove(_case(case))
        at = table.elts.index(row)
        above = table.elts[at - 1].end_lineno if at else table.lineno
        below = table.elts[at + 1].lineno if at + 1 < len(table.elts) else table.end_lineno
        if row.end_lineno is None or above is None or below is None or not above < row.lineno <= row.end_lineno < below:
            return None
        drop.update(range(row.lineno - 1, row.end_lineno))
        gone.append(ast.literal_eval(row))
    lines = text.splitlines(keepends=True)
    out = "".join(line for i, line in enumerate(lines) if i not in drop)
    if not _parses(out) or any(case_ids(out, unit.split("::")[1:]) != tuple(ids) for unit, ids in kept.items()):
        return None
    left = [n for n in ast.walk(parse_python(out)) if isinstance(n, ast.Tuple | ast.List | ast.Constant)]
    for node in left:
        try:
            if ast.literal_eval(node) in gone:
                return None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return out if all(kept.values()) else None


def withheld_cases(rec: Mapping[str, Any], tree: Mapping[str, bytes]) -> list[str]:
    """The failing parametrized cases (node ids) of pack record ``rec`` to withhold when no function is
    (module docstring): about half of its failing tests, at least one left visible."""
    f2p, p2p = list(rec["fail_to_pass"]), list(rec["pass_to_pass"])
    if len(f2p) < 2 or withheld_units(rec, tree):
        return []
    candidates = []
    for unit in sorted({_unit(t) for t in f2p if t != _unit(t)}):
        path = test_file_of(unit)
        try:
            text = tree[path].decode("utf-8") if path in tree else ""
            ids = case_ids(text, unit.split("::")[1:])
        except UnicodeDecodeError:
            continue
        if ids is None or any(_case(t) not in ids for t in [*f2p, *p2p] if _unit(t) == unit):
            continue  # (a listed case our ids do not name: they are not pytest's here)
        candidates += [t for t in f2p if _unit(t) == unit and _strip_rows(text, (t,)) is not None]
    k = min(len(f2p) // 2, len(candidates))
    return sorted(random.Random(f"withhold-cases:{rec['id']}").sample(candidates, k)) if k else []


def is_check(stmt: ast.stmt) -> bool:
    """Whether a statement of a test's body is one check: an ``assert``, a ``self.assert*(...)`` call or a
    ``with pytest.raises(...)`` / ``self.assertRaises(...)`` block."""
    if isinstance(stmt, ast.Assert):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr.startswith("assert")
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return any(isinstance(i.context_expr, ast.Call) and isinstance(i.context_expr.func, ast.Attribute)
                   and i.context_expr.func.attr in ("raises", "assertRaises", "assertRaisesRegex") for i in stmt.items)
    return False


def checks_of(text: str, test_id: str) -> list[int] | None:
    """The body indices of the top-level checks of the test ``test_id`` names in its file ``text`` whose
    lines are their own (no ``;`` shares them); None where the function is not defined once there."""
    found = _def_node(_facts(text)[0], test_id.split("::")[1:])
    if found is None:
        return None
    body = found[0].body
    out = []
    for i, stmt in enumerate(body):
        before = body[i - 1].end_lineno if i else found[0].lineno
        after = body[i + 1].lineno if i + 1 < len(body) else None
        if is_check(stmt) and before is not None and before < stmt.lineno and (
                after is None or (stmt.end_lineno or stmt.lineno) < after):
            out.append(i)
    return out


def strip_checks(text: str, test_id: str, indices: Sequence[int]) -> str | None:
    """``text`` without the checks at body ``indices`` of the test ``test_id`` names (a body left empty
    gets ``pass``), or None where one is not a check ``checks_of`` finds."""
    found = _def_node(_facts(text)[0], test_id.split("::")[1:])
    own = checks_of(text, test_id)
    if found is None or own is None or not indices or any(i not in own for i in indices):
        return None
    body = found[0].body
    lines = text.splitlines(keepends=True)
    drop = {n for i in indices for n in range(body[i].lineno - 1, body[i].end_lineno or body[i].lineno)}
    if len(set(indices)) == len(body):
        first = body[0]
        lines[first.lineno - 1] = " " * first.col_offset + "pass\n"
        drop.discard(first.lineno - 1)
    out = "".join(line for i, line in enumerate(lines) if i not in drop)
    return out if _parses(out) else None


def file_hash(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()[:16]


@functools.cache
def stored_checks() -> dict[str, dict[str, Any]]:
    """The stored check splits (``CHECKS``), by task id; none where the file is absent."""
    return json.loads(CHECKS.read_text()) if CHECKS.exists() else {}


def withheld_checks(rec: Mapping[str, Any], tree: Mapping[str, bytes]) -> tuple[str, list[int]] | None:
    """``(test id, body indices)`` of the checks the stored split of ``rec`` withholds, where its test file
    is still the one the split was measured on (its hash) and its one failing test is that test."""
    split = stored_checks().get(rec["id"])
    if split is None or list(rec["fail_to_pass"]) != [split["test"]]:
        return None
    path = test_file_of(split["test"])
    if path not in tree or file_hash(tree[path]) != split["file_sha256"]:
        return None
    return split["test"], list(split["checks"])


def withhold(rec: Mapping[str, Any], tree: Mapping[str, bytes]) -> tuple[str, str, list[str]] | None:
    """``(workspace_patch, test_patch, visible_fail_to_pass)`` for pack record ``rec`` whose workspace
    (before its tests are touched) is ``tree``: the diff that removes the withheld functions (else the
    withheld cases' rows), the diff that puts them back, and the failing tests the agent still has; None
    when nothing is withheld."""
    units = withheld_units(rec, tree)
    cases = [] if units else withheld_cases(rec, tree)
    if not units and not cases:
        held = withheld_checks(rec, tree)
        if held is None:
            return None
        test, checks = held
        path = test_file_of(test)
        text = tree[path].decode("utf-8")
        stripped = strip_checks(text, test, checks)
        if stripped is None:
            return None
        return render_diff({path: text}, {path: stripped}), render_diff({path: stripped}, {path: text}), [test]
    before, after = {}, {}
    for path in sorted({test_file_of(u) for u in units or cases}):
        text = tree[path].decode("utf-8")
        if units:
            stripped = _strip(text, tuple(u for u in units if test_file_of(u) == path))
        else:
            stripped = _strip_rows(text, tuple(c for c in cases if test_file_of(c) == path))
        if stripped is None:  # (each removes cleanly alone; together, e.g. a class left empty, they did not)
            return None
        before[path], after[path] = text, stripped
    visible = [t for t in rec["fail_to_pass"] if _unit(t) not in units and t not in cases]
    return render_diff(before, after), render_diff(after, before), visible


def issue_errors(prompt: str, tests: Sequence[str]) -> dict[str, str]:
    """The error each of ``tests`` shows in a generated prompt (``- <id>: <error>`` lines)."""
    out = {}
    for line in prompt.splitlines():
        for t in tests:
            if line.startswith(f"- {t}: "):
                out[t] = line[len(f"- {t}: "):]
    return out

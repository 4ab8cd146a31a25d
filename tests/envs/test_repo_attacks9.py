"""The repo generator's mutants read as a policy would read them, without the failing tests.

The first packs wrote a mutated node as ``ast.unparse`` writes it, and inverted an ``if`` as
``if not (c):`` whatever ``c`` was: ``if not (kwargs):``, ``if not (not funcs):``, a form none of the
three projects writes. One key-blind rule -- in every source file, ``if not (X):`` -> ``if X:`` where
``X`` has no ``<`` or ``>`` (cachetools writes ``if not (time < expires):`` itself) -- restored the
pristine module of 31 of the 289 pack tasks, and the real grader passed all 31 (measured with the
repository verifier; 5-20 s a task). ``_mutate`` now swaps an operator between its operands' own text and
inverts an ``if`` the way a person writes it; the packs were rebuilt from the same sites (39 tasks'
patches changed, every one re-validated: the reference passes, the buggy state fails every
fail-to-pass test and passes every pass-to-pass one), and the rule restores none.

The bug's file was given away too: applying a task's patch moved the file it changed to the end of the
tree, so a workspace wrote it last -- the highest inode, the newest mtime, the first name ``find`` and
``ls -U`` list in a tmpfs directory: the bug's file in 12 of 12 pack tasks (toolz has 14 source modules,
cachetools 7). A patched tree keeps the snapshot's order now, the same for every task of a project.
"""

from __future__ import annotations

import ast
import functools
import re

import pytest

from posttrain.envs.repo._diff import is_test_path
from posttrain.envs.repo._episode import workspace_spec
from posttrain.envs.repo._gen import PROJECTS, load_packs
from posttrain.envs.repo._mutate import mutate, mutation_sites
from posttrain.envs.repo._task import initial_tree
from posttrain.sandbox import Workspace

_UNWRAP = re.compile(r"^(\s*(?:el)?if )not \((.*)\):(\s*(?:#.*)?)$")


@functools.cache
def _strip_not_parens(source: str) -> str:
    """The blind rule: every ``if not (X):`` of the module read as ``if X:`` (an ordering ``X`` kept)."""
    return "\n".join(ln if "not (" not in ln or re.search(r"[<>]", ln) else _UNWRAP.sub(r"\1\2:\3", ln)
                     for ln in source.split("\n"))


@functools.cache
def _tree(source: str) -> str:
    return ast.dump(ast.parse(source))


def test_stripping_not_parens_from_every_if_restores_no_pack_task():
    pristine = {p: initial_tree({"repo": {"project": p}}) for p in PROJECTS}
    restored = []
    for rec in load_packs():
        spec = PROJECTS[rec["project"]]
        buggy = initial_tree({"repo": {"project": rec["project"], "patch": rec["patch"]}})
        sources = [p for p in buggy if p.endswith(".py") and p.startswith(spec["source"]) and not is_test_path(p)]
        edited = {p: _strip_not_parens(buggy[p].decode()) for p in sources}
        if any(edited[p].encode() != buggy[p] for p in sources) and all(  # (unedited, the task is as broken as given)
                _tree(edited[p]) == _tree(pristine[rec["project"]][p].decode()) for p in sources):
            restored.append(rec["id"])
    assert restored == []  # 31 of 289 before


def _mutant_line(source: str, operator: str, index: int = 0) -> str:
    site = [s for s in mutation_sites(source) if s.operator == operator][index]
    new = mutate(source, site)
    changed = [b for a, b in zip(source.splitlines(), new.splitlines(), strict=False) if a != b]
    return "\n".join(changed)


@pytest.mark.parametrize(("test", "inverted"), [
    ("kwargs", "not kwargs"),
    ("not funcs", "funcs"),
    ("isinstance(obj, type)", "not isinstance(obj, type)"),
    ("maxsize is None", "maxsize is not None"),
    ("k in d", "k not in d"),
    ("len(seqs) == 0", "len(seqs) != 0"),
    ("key is not None and not callable(key)", "key is None or callable(key)"),
    ("not (p or q) or r", "(p or q) and not r"),
    ("a  and  b", "not a  or  not b"),
    ("time < expires", "not (time < expires)"),
])
def test_an_inverted_if_reads_as_a_person_writes_it(test, inverted):
    source = f"def f(a, b, p, q, r, kwargs, funcs, obj, maxsize, k, d, seqs, key, time, expires):\n    if {test}:\n" \
             "        return 1\n    return 2\n"
    assert _mutant_line(source, "invert_if") == f"    if {inverted}:"  # 'if not (kwargs):' ... before


@pytest.mark.parametrize(("source", "operator", "line"), [
    ("def f(a):\n    return (a, ) + g(a)\n", "binop", "    return (a, ) - g(a)"),
    ("def f(a, b):\n    return a or not (b)\n", "boolop", "    return a and not (b)"),
    ("def f(a, b):\n    return (a and  # both\n            b)\n", "boolop", "    return (a or  # both"),
    ("def f(a, b):\n    return a<=b\n", "compare", "    return a<b"),
    ("def f(a):\n    x = 'é' + a;  return x is  not None\n", "compare", "    x = 'é' + a;  return x is None"),
])
def test_a_swapped_operator_keeps_the_lines_own_text(source, operator, line):
    """Spacing, brackets, comments and lines stay the project's: ``ast.unparse`` rewrote ``(a, )``, dropped
    ``(b)``'s brackets and joined a two-line condition into one (each pointed at the bug's line)."""
    assert _mutant_line(source, operator).splitlines()[0] == line


def test_a_patched_tree_keeps_the_snapshots_order():
    pristine = {p: list(initial_tree({"repo": {"project": p}})) for p in PROJECTS}
    moved = [rec["id"] for rec in load_packs()
             if list(initial_tree({"repo": {"project": rec["project"], "patch": rec["patch"]}})) != pristine[rec["project"]]]
    assert moved == []  # 288 of 289 before (all but one whose file came last anyway)


def test_a_workspace_lists_its_files_alike_whichever_holds_the_bug(pool):
    """Two toolz tasks, bugs in two files: ``find`` (a tmpfs directory's order: newest first) and ``ls -i``
    (inode order) read the same in both workspaces."""
    from posttrain.envs.repo import ENV

    by_file = {}
    for task in ENV.generate_tasks(40, seed=1):
        if task.fields["repo"]["project"].startswith("toolz"):
            by_file.setdefault(task.fields["repo"]["patch"].split("\n", 1)[0], task)
    listings = []
    for task in list(by_file.values())[:2]:
        spec = workspace_spec(task)
        with Workspace(pool, spec.initial, hide=spec.hide) as ws:
            out = ws.exec(["sh", "-c", "find toolz -name '*.py'; ls -i toolz | sort -n | awk '{print $2}'"], timeout=30)
            listings.append(out.stdout.decode())
    assert len(listings) == 2 and listings[0] == listings[1]

"""The builder of withheld checks: which checks of a one-test task fail on its bug, measured by running.

88 pack tasks fail one test, a single function of two or more checks (``_withhold.is_check``), and
withheld nothing: the echo of that test (its inputs mapped to its expected outputs, the bug left in)
passed them. Which of its checks the bug breaks is known only by running them, so for each such task
``measure`` runs, in the sandbox under the real harness, one copy of the function per check, that check
alone kept (the other checks removed, every other statement kept), on the buggy tree and on the
reference-fixed one. ``choose`` withholds about half of the checks that fail on the bug and pass on the
reference (by the task id; the first failing one, whose error the prompt shows, stays visible; none whose
statement is left elsewhere in the file). ``validate`` runs the split: the workspace's copy (the checks
removed) must fail the test on the bug, at a visible check, and pass every listed test on the reference;
the full test fails on the bug and passes on the reference. Only validated splits are stored
(``data/withheld_checks.json``, with the test file's hash); ``_withhold.withhold`` applies them::

    python -m posttrain.envs.repo._checks            # measure, choose, validate, write
"""

from __future__ import annotations

import ast
import json
import random
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from posttrain.envs.repo._diff import apply_patches, parse_diff
from posttrain.envs.repo._gen import load_packs, record_of
from posttrain.envs.repo._grade import FRAME, WORK, _sections, read_report, run_harness
from posttrain.envs.repo._task import dependency_files, initial_tree, test_file_of
from posttrain.envs.repo._withhold import (
    CHECKS,
    _def_node,
    _facts,
    checks_of,
    file_hash,
    strip_checks,
    withhold,
)
from posttrain.types import Task


def candidates(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records whose one failing test (not parametrized) is a function of two or more checks, defined
    once in its file, and that withhold nothing otherwise."""
    out = []
    for rec in records:
        f2p = list(rec["fail_to_pass"])
        if len(f2p) != 1 or "[" in f2p[0]:
            continue
        tree = initial_tree({"repo": {"project": rec["project"], "patch": rec["patch"]}})
        path = test_file_of(f2p[0])
        if path not in tree or withhold({**rec, "id": f"unstored:{rec['id']}"}, tree) is not None:
            continue
        checks = checks_of(tree[path].decode("utf-8"), f2p[0])
        if checks is not None and len(checks) >= 2:
            out.append(rec)
    return out


def variants(text: str, test_id: str, checks: Sequence[int]) -> tuple[str, dict[int, str]]:
    """``text`` with one copy of the test per check, beside it, keeping that check alone (``name__check_i``),
    and the copies' ids by check."""
    found = _def_node(_facts(text)[0], test_id.split("::")[1:])
    assert found is not None
    node = found[0]
    lines = text.splitlines(keepends=True)
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    ids, copies = {}, []
    for keep in checks:
        alone = strip_checks(text, test_id, [i for i in checks if i != keep]) if len(checks) > 1 else text
        assert alone is not None
        gone = {n for i in checks if i != keep for n in range(node.body[i].lineno, (node.body[i].end_lineno or 0) + 1)}
        src = [ln for n, ln in enumerate(lines[start - 1:end], start) if n not in gone]
        name = f"{node.name}__check_{keep}"
        at = node.lineno - start
        src[at] = re.sub(rf"\bdef {re.escape(node.name)}\b", f"def {name}", src[at], count=1)
        copies.append("\n" + "".join(src))
        ids[keep] = "::".join([*test_id.split("::")[:-1], name])
    out = "".join(lines[:end]) + "".join(copies) + "".join(lines[end:])
    return out, ids


def _trees(rec: Mapping[str, Any]) -> tuple[Task, dict[str, bytes], dict[str, bytes]]:
    """The task (nothing withheld), its buggy tree and its reference-fixed tree."""
    from posttrain.envs.repo import ENV

    record = {k: v for k, v in record_of(rec).items() if k != "test_patch"}
    record["repo"] = {"project": rec["project"], "patch": rec["patch"]}
    task = ENV.parse_task(record, "repo packs")
    bug = initial_tree(task.fields)
    patches = parse_diff(rec["reference"])
    paths = {p for fp in patches for p in fp.paths}
    fixed = apply_patches({p: bug[p].decode("utf-8") for p in paths if p in bug}, patches)
    return task, bug, {**bug, **{p: v.encode() for p, v in fixed.items()}}


def _run(pool: Any, task: Task, tree: Mapping[str, bytes], ids: Sequence[str]) -> tuple[dict[str, bool], str]:
    """``({id: passed}, pytest's stdout)`` of one harness run of ``ids`` on ``tree``."""
    ex, nonce = run_harness(pool, task, {**tree, **dependency_files(task.fields)}, set(), ids)
    final = read_report(ex.report, nonce).final or {"passed": set(), "reports": {}}
    ok = {t: t in final["passed"] and all(final["reports"].get(t, {}).get(w) == "passed"
                                          for w in ("setup", "call", "teardown")) for t in ids}
    return ok, ex.stdout.decode("utf-8", "replace")


def measure(pool: Any, rec: Mapping[str, Any]) -> dict[int, tuple[bool, bool]]:
    """``{check index: (passed on the bug, passed on the reference)}`` of the task's one failing test."""
    task, bug, fixed = _trees(rec)
    test = rec["fail_to_pass"][0]
    path = test_file_of(test)
    checks = checks_of(bug[path].decode("utf-8"), test) or []
    text, ids = variants(bug[path].decode("utf-8"), test, checks)
    on_bug, _ = _run(pool, task, {**bug, path: text.encode()}, list(ids.values()))
    on_fix, _ = _run(pool, task, {**fixed, path: text.encode()}, list(ids.values()))
    return {i: (on_bug[t], on_fix[t]) for i, t in ids.items()}


def choose(rec: Mapping[str, Any], outcomes: Mapping[int, tuple[bool, bool]], text: str) -> list[int]:
    """The checks to withhold: about half of those that fail on the bug and pass on the reference, the
    first of them kept, none whose statement stays elsewhere in the file; [] where fewer than two."""
    failing = sorted(i for i, (bug, fix) in outcomes.items() if not bug and fix)
    if len(failing) < 2:
        return []
    test = rec["fail_to_pass"][0]
    found = _def_node(_facts(text)[0], test.split("::")[1:])
    assert found is not None
    body = found[0].body
    dumps = [ast.dump(n) for n in ast.walk(_facts(text)[0]) if isinstance(n, ast.stmt)]
    held = [i for i in failing[1:] if dumps.count(ast.dump(body[i])) == 1]
    k = min(len(failing) // 2, len(held))
    return sorted(random.Random(f"withhold-checks:{rec['id']}").sample(held, k)) if k else []


def validate(pool: Any, rec: Mapping[str, Any], checks: Sequence[int]) -> str | None:
    """Why the split does not hold when run (module docstring), or None."""
    task, bug, fixed = _trees(rec)
    test = rec["fail_to_pass"][0]
    path = test_file_of(test)
    text = bug[path].decode("utf-8")
    stripped = strip_checks(text, test, checks)
    if stripped is None:
        return "the checks do not strip"
    ids = [*rec["fail_to_pass"], *rec["pass_to_pass"]]
    want_bug = {t: t != test for t in ids}
    seen, _ = _run(pool, task, {**bug, path: stripped.encode()}, ids)
    if seen != want_bug:
        return f"the workspace's copy on the bug: {sorted(t for t in ids if seen[t] != want_bug[t])[:3]}"
    seen, _ = _run(pool, task, {**fixed, path: stripped.encode()}, ids)
    if not all(seen.values()):
        return f"the workspace's copy on the reference: {sorted(t for t in ids if not seen[t])[:3]}"
    seen, stdout = _run(pool, task, bug, ids)
    if seen != want_bug:
        return f"the full test on the bug: {sorted(t for t in ids if seen[t] != want_bug[t])[:3]}"
    found = _def_node(_facts(text)[0], test.split("::")[1:])
    assert found is not None
    name = found[0].name
    hidden = {n for i in checks for n in range(found[0].body[i].lineno, (found[0].body[i].end_lineno or 0) + 1)}
    section = _sections(stdout).get(test.split("::", 1)[-1].replace("::", "."), "")
    at = [int(m["line"]) for m in map(FRAME.match, section.splitlines()) if m and m["rest"] == f" in {name}"
          and m["path"].removeprefix(f"{WORK}/") == path]
    if len(at) != 1 or at[0] in hidden:
        return f"the full test on the bug fails at {at} (withheld lines {sorted(hidden)})"
    seen, _ = _run(pool, task, fixed, ids)
    if not all(seen.values()):
        return f"the full test on the reference: {sorted(t for t in ids if not seen[t])[:3]}"
    return None


def build(pool: Any, records: Sequence[Mapping[str, Any]], log: Callable[[str], None] = print) -> dict[str, Any]:
    """The validated splits of ``records``' candidates, by task id."""
    def one(rec: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
        task, bug, _ = _trees(rec)
        test = rec["fail_to_pass"][0]
        text = bug[test_file_of(test)].decode("utf-8")
        outcomes = measure(pool, rec)
        checks = choose(rec, outcomes, text)
        failing = sum(1 for b, f in outcomes.values() if not b and f)
        if not checks:
            log(f"{rec['id']}: {failing} of {len(outcomes)} checks fail on the bug alone: none withheld")
            return rec["id"], None
        why = validate(pool, rec, checks)
        log(f"{rec['id']}: {failing} of {len(outcomes)} fail; withhold {checks}: {why or 'validated'}")
        return rec["id"], None if why else {"test": test, "file_sha256": file_hash(text.encode()),
                                            "checks": checks, "failing": failing, "of": len(outcomes)}

    with ThreadPoolExecutor(max(1, getattr(pool, "size", 1))) as ex:
        got = list(ex.map(one, candidates(records)))
    return {k: v for k, v in sorted(got) if v is not None}


def main(argv: Sequence[str]) -> None:  # pragma: no cover - the offline builder
    from posttrain.sandbox import open_pool

    only = set(argv)
    records = [r for r in load_packs() if not only or r["id"] in only]
    with open_pool(size=2) as pool:
        splits = build(pool, records, log=lambda m: print(m, flush=True))
    CHECKS.write_text(json.dumps(splits, indent=1, sort_keys=True) + "\n")
    print(f"{len(splits)} tasks withhold checks -> {CHECKS}", flush=True)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])

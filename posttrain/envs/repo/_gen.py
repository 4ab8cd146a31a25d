"""Generated repo tasks: AST-mutation bugs in vendored projects, shipped as task packs.

The projects (``data/projects``: toolz 1.2.0 (BSD-3-Clause), cachetools 8.0.2 (MIT), inflection
0.5.1 (MIT); pure Python, their own test suites from the sdist, no network, 0.7-2.2 s a suite)
are mutated one site at a time (``_mutate.py``). ``build_pack`` runs each mutant's whole suite in
the sandbox and keeps the mutants that break between 1 and ``k`` tests and leave every other test
passing: ``fail_to_pass`` is what broke, ``pass_to_pass`` the rest of the failing tests' files.
The packs (``data/packs/<project>.json.gz``) are built once and committed; ``generate_tasks``
reads them and never runs anything, so tests never build (or download) anything.

Difficulty (``HasLevels``: 1 easiest .. 4) comes from how far the failing tests' tracebacks are
from the bug and from how many files could hold it: 1 when the mutated line is in a failing
test's traceback and at least two tests fail; 2 when the line is there for one failing test, or
only its file is; 3 when the traceback never reaches the bug's file (the bug returned a wrong
value that the test noticed later) and at least two tests fail, or only the file is reached by
one; 4 when a single test fails far from the bug; one level easier in a one-module project
(inflection), where the file is never in doubt. Every task's reference is the diff that restores
the pristine line. ``record_of`` withholds about half of a task's failing test functions from the
workspace when it has two or more, else about half of its failing cases of one parametrized test,
else about half of the checks of its one failing test that fail on the bug (stored, validated splits:
``_checks.py``, ``data/withheld_checks.json``); ``_withhold.py``: a ``test_patch`` gives them to the verifier.

Rebuild the packs (2 cores: 5-20 minutes a project), or re-check the shipped ones under the
real grader (``--validate``: the reference must pass within a quarter of the task's timeout, the buggy
state must fail every fail-to-pass test and pass every pass-to-pass one)::

    python -m posttrain.envs.repo._gen toolz-1.2.0 cachetools-8.0.2 inflection-0.5.1
    python -m posttrain.envs.repo._gen --validate [--references]   # --references: the reference run only
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from posttrain.envs.repo._diff import is_test_path, render_diff
from posttrain.envs.repo._mutate import OPERATORS, mutate, mutation_sites
from posttrain.envs.repo._task import initial_tree
from posttrain.envs.repo._withhold import WITHHELD_NOTE, issue_errors, withhold
from posttrain.types import Task

PACKS = Path(__file__).resolve().parent / "data" / "packs"
RAW = Path(tempfile.gettempdir()) / "posttrain-repo-packs-raw"
"""Where the builder keeps every kept mutant before validation (not shipped)."""
LEVELS = (1, 4)
PROJECTS: dict[str, dict[str, Any]] = {
    "toolz-1.2.0": {"python_path": ["."], "tests": "toolz/tests", "source": "toolz", "timeout": 60},
    "cachetools-8.0.2": {"python_path": ["src"], "tests": "tests", "source": "src/cachetools", "timeout": 60},
    "inflection-0.5.1": {"python_path": ["."], "tests": "test_inflection.py", "source": "inflection", "timeout": 60},
}
MAX_P2P = 120
FLAKY: dict[str, tuple[str, ...]] = {"cachetools-8.0.2": ("tests/test_rr.py::",)}
"""Tests whose outcome depends on chance (RRCache evicts a random key): never listed."""
PYTEST_PRELUDE = r'''
import json, os, sys
cfg = json.loads(sys.stdin.read())
sys.path[:] = [p for p in sys.path if p.startswith("/usr/")] + ["/usr/lib/python3/dist-packages"]
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
import pytest
sys.path[:0] = ["/work/" + p if p != "." else "/work" for p in cfg["python_path"]]
os.chdir("/work")
'''
"""The start of a pytest run of our own in a sandbox job (``cfg`` from stdin: ``python_path``, ...): the
system's site-packages only, no plugins, the project's paths first, in ``/work``."""
RUNNER = PYTEST_PRELUDE + r'''
out = {"tests": {}, "tracebacks": {}, "errors": {}}
class P:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        rep = (yield).get_result()
        outcomes = out["tests"].setdefault(rep.nodeid, {})
        outcomes[rep.when] = rep.outcome
        if rep.failed and call.excinfo is not None:
            out["tracebacks"][rep.nodeid] = [[str(e.path), e.lineno + 1] for e in call.excinfo.traceback]
            lines = [ln for ln in str(rep.longreprtext).splitlines() if ln.startswith("E ")]
            out["errors"][rep.nodeid] = lines[0][1:].strip()[:200] if lines else type(call.excinfo.value).__name__
with open("/tmp/ini", "w") as fh:
    fh.write("[pytest]\n")
rc = pytest.main(["-q", "-p", "no:cacheprovider", "-c", "/tmp/ini", "--rootdir=/work", "-W", "ignore", cfg["tests"]],
                 plugins=[P()])
out["exit"] = int(rc)
os.write(3, json.dumps(out).encode())
sys.stdout.flush()
os._exit(0)
'''


def run_suite(pool: Any, tree: Mapping[str, bytes], project: Mapping[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """The suite's outcomes on ``tree`` (our own pytest run: the code is ours, not a candidate's)."""
    ex = pool.exec(["/usr/bin/python3", "-I", "-B", "-c", RUNNER], files=dict(tree), timeout=timeout,
                   stdin=json.dumps({"python_path": project["python_path"], "tests": project["tests"]}))
    if ex.report is None:
        return {"tests": {}, "tracebacks": {}, "errors": {}, "exit": None}
    return json.loads(ex.report)


def passed_tests(result: Mapping[str, Any]) -> set[str]:
    return {t for t, phases in result["tests"].items()
            if phases.get("call") == "passed" and all(v == "passed" for v in phases.values())}


def level_of(bug_file: str, bug_line: int, f2p: Sequence[str], tracebacks: Mapping[str, list]) -> int:
    """The difficulty of a mutant (module docstring)."""
    line_hit = file_hit = False
    for tid in f2p:
        for path, line in tracebacks.get(tid, []):
            if path.endswith("/" + bug_file):
                file_hit = True
                line_hit = line_hit or line == bug_line
    many = len(f2p) >= 2
    if line_hit:
        return 1 if many else 2
    if file_hit:
        return 2 if many else 3
    return 3 if many else 4


def _issue(project: str, f2p: Sequence[str], errors: Mapping[str, str]) -> str:
    name = project.rsplit("-", 1)[0]
    shown = [f"- {t}" + (f": {errors[t]}" if t in errors else "") for t in f2p[:3]]
    more = f"\n- ... and {len(f2p) - 3} more" if len(f2p) > 3 else ""
    noun = "test fails" if len(f2p) == 1 else "tests fail"
    return (f"{name}: after a recent change, {len(f2p)} {noun}:\n" + "\n".join(shown) + more +
            "\n\nFind the bug in the library and fix it. The tests are correct; do not change them.")


def build_pack(pool: Any, name: str, *, k: int = 8, attempts: int = 400, keep: int = 120, seed: int = 0,
               log: Any = None) -> list[dict[str, Any]]:
    """Up to ``keep`` task records for project ``name`` (module docstring), from at most ``attempts``
    mutants, stratified over the operators."""
    project = PROJECTS[name]
    tree = initial_tree({"repo": {"project": name}})
    t0 = time.monotonic()
    base = run_suite(pool, tree, project)
    budget = max(10.0, 4 * (time.monotonic() - t0))  # a mutant that loops forever costs this, not a minute
    base_passed = passed_tests(base)
    if not base_passed:  # (a test failing on the pristine tree, e.g. one reading installed metadata, is left out)
        raise RuntimeError(f"{name}: no test of the pristine suite passes (exit {base['exit']})")
    sources = sorted(p for p in tree if p.endswith(".py") and p.startswith(project["source"]) and not is_test_path(p))
    sites = [(p, s) for p in sources for s in mutation_sites(tree[p].decode())]
    rng = random.Random(seed)
    by_op = {op: [x for x in sites if x[1].operator == op] for op in OPERATORS}
    for group in by_op.values():
        rng.shuffle(group)
    order = [x for row in zip(*[g + [None] * (len(sites) - len(g)) for g in by_op.values()], strict=True)
             for x in row if x is not None]
    records: list[dict[str, Any]] = []
    candidates = []
    for path, site in order[:attempts]:
        pristine = tree[path].decode()
        try:
            mutant = mutate(pristine, site)
        except (ValueError, SyntaxError):
            continue
        if mutant != pristine:
            candidates.append((path, site, pristine, mutant))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, getattr(pool, "size", 1))) as ex:
        for start in range(0, len(candidates), 8):
            if len(records) >= keep:
                break
            batch = candidates[start:start + 8]
            results = list(ex.map(lambda c: run_suite(pool, {**tree, c[0]: c[3].encode()}, project, budget), batch))
            for (path, site, pristine, mutant), result in zip(batch, results, strict=True):
                record = _record(name, path, site, pristine, mutant, result, base, base_passed, k)
                if record is not None and len(records) < keep:
                    records.append(record)
                if log:
                    log(f"{name} {path}:{site.line} {site.operator}: "
                        f"{'kept, level ' + str(record['level']) if record else 'dropped'} ({len(records)})")
    return records


def _record(name: str, path: str, site: Any, pristine: str, mutant: str, result: Mapping[str, Any],
            base: Mapping[str, Any], base_passed: set[str], k: int) -> dict[str, Any] | None:
    now = passed_tests(result)
    flaky = FLAKY.get(name, ())
    broken = sorted(base_passed - now)
    if any(t.startswith(flaky) for t in broken):  # (startswith of () is False)
        return None  # a chance test broke: the mutant's effect cannot be told from luck
    if not 1 <= len(broken) <= k or set(result["tests"]) != set(base["tests"]) or (now - base_passed):
        return None
    files = {t.split("::", 1)[0] for t in broken}
    rest = sorted(t for t in base_passed - set(broken) if t.split("::", 1)[0] in files and not t.startswith(flaky))
    p2p = sorted(random.Random(f"{name}:{path}:{site.line}").sample(rest, min(MAX_P2P, len(rest))))
    stem = PurePosixPath(path).stem.strip("_") or "init"
    return {
        "id": f"{name.rsplit('-', 1)[0]}-{stem}-{site.operator}-{site.line}-{site.col}",
        "prompt": _issue(name, broken, result["errors"]),
        "project": name, "file": path, "operator": site.operator, "line": site.line, "function": site.function,
        "patch": render_diff({path: pristine}, {path: mutant}),
        "reference": render_diff({path: mutant}, {path: pristine}),
        "fail_to_pass": broken, "pass_to_pass": p2p, "level": level_of(path, site.line, broken, result["tracebacks"]),
    }


def write_pack(name: str, records: Sequence[Mapping[str, Any]]) -> Path:
    PACKS.mkdir(parents=True, exist_ok=True)
    path = PACKS / f"{name}.json.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(json.dumps({"project": name, "tasks": list(records)}, sort_keys=True).encode())
    return path


@functools.cache
def load_packs() -> tuple[dict[str, Any], ...]:
    """Every shipped pack's records, in a fixed order."""
    out: list[dict[str, Any]] = []
    for path in sorted(PACKS.glob("*.json.gz")):
        with gzip.open(path, "rb") as fh:
            out.extend(json.loads(fh.read())["tasks"])
    return tuple(_unique_ids(out))


def _unique_ids(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with unique ids: two mutants of one site by one operator (``a + b + c`` -> ``a - b + c``
    and ``a + b - c``) share ``<project>-<module>-<operator>-<line>-<col>``; a later one gets ``-2``, ``-3``."""
    seen: dict[str, int] = {}
    out = []
    for rec in records:
        n = seen[rec["id"]] = seen.get(rec["id"], 0) + 1
        out.append(rec if n == 1 else {**rec, "id": f"{rec['id']}-{n}"})
    return out


@functools.cache
def source_modules(project: str) -> int:
    """How many source modules (not tests) the project has."""
    spec = PROJECTS[project]
    tree = initial_tree({"repo": {"project": project}})
    return sum(1 for p in tree if p.endswith(".py") and p.startswith(spec["source"]) and not is_test_path(p))


def task_level(rec: Mapping[str, Any]) -> int:
    """A pack task's level: the traceback distance (``level_of``), one easier in a one-module project
    (where the bug's file is never in doubt)."""
    return max(LEVELS[0], int(rec["level"]) - (1 if source_modules(rec["project"]) == 1 else 0))


def record_of(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The task record of a pack entry, with about half of its failing test functions (else of its failing
    parametrized cases, else of its one failing test's checks) withheld from the workspace when there are
    two or more (``_withhold.py``): the prompt names the visible ones only."""
    project = PROJECTS[rec["project"]]
    out = {
        "id": rec["id"], "domain": "repo", "prompt": rec["prompt"],
        "repo": {"project": rec["project"], "patch": rec["patch"]},
        "environment": {"language": "python", "test_command": f"python -m pytest -q {project['tests']}",
                        "timeout_sec": project["timeout"], "python_path": project["python_path"]},
        "fail_to_pass": rec["fail_to_pass"], "pass_to_pass": rec["pass_to_pass"],
        "reference": "```diff\n" + rec["reference"] + "```\n", "difficulty": float(task_level(rec)),
        "tags": ["generated", rec["operator"], rec["project"].rsplit("-", 1)[0]],
        "feedback_loop": True, "max_attempts": 3,
    }
    held = withhold(rec, initial_tree({"repo": out["repo"]}))
    if held is not None:
        workspace_patch, test_patch, visible = held
        out["repo"] = {**out["repo"], "patch": rec["patch"] + workspace_patch}
        out["test_patch"] = test_patch
        out["prompt"] = _issue(rec["project"], visible, issue_errors(rec["prompt"], visible)).replace(
            "\n\nFind the bug", f"\n{WITHHELD_NOTE}\n\nFind the bug", 1)
    return out


def generate_tasks(env: Any, n: int, *, seed: int = 0, level: int | None = None) -> list[Task]:
    """``n`` distinct pack tasks (at ``level`` if given), shuffled by ``seed``."""
    pool = [r for r in load_packs() if level is None or task_level(r) == level]
    if n > len(pool):
        raise ValueError(f"the repo packs hold {len(pool)} tasks{f' at level {level}' if level else ''}, "
                         f"fewer than the {n} asked for")
    rng = random.Random(seed)
    chosen = rng.sample(pool, n)
    return [env.parse_task(record_of(r), "repo packs") for r in chosen]


MAX_TIME_SHARE = 0.25
"""A reference run may take at most this share of its task's test timeout: a loaded CI host runs several
times slower than the builder, and one whose reference took 45-60 s of 60 s ran out there."""


def validate_pack(pool: Any, env: Any, records: Sequence[Mapping[str, Any]], log: Any = None, *,
                  base: bool = True, max_share: float = MAX_TIME_SHARE) -> list[dict[str, Any]]:
    """The records whose reference passes under the real grader (the harness, its kernel and its
    comparison guard: the pack builder ran plain pytest) within ``max_share`` of the task's timeout,
    and whose buggy state fails every fail-to-pass test and passes every pass-to-pass one under it."""
    from concurrent.futures import ThreadPoolExecutor

    from posttrain.envs.repo._grade import base_outcomes

    verify = env.make_verifier(pool)
    check_base = base

    def check(rec: Mapping[str, Any]) -> str | None:
        task = env.parse_task(record_of(rec), "repo packs")
        verdict = verify(task, str(task.reference))
        if not verdict.passed:
            return f"reference {verdict.outcome} ({verdict.error_class}: {verdict.feedback[:120]!r})"
        limit = float(task.fields["environment"]["timeout_sec"])
        took = float(verdict.evidence.get("duration_s") or 0.0)
        if took > max_share * limit:
            return f"reference took {took:.1f} s of its {limit:g} s (at most {max_share:g} of it)"
        if not check_base:
            return None
        base = base_outcomes(pool, task)
        if not isinstance(base, dict):
            return f"base run {base.outcome}"
        wrong = [t for t in task.fields["fail_to_pass"] if base[t] != "failed"]
        wrong += [t for t in task.fields["pass_to_pass"] if base[t] != "passed"]
        return f"base outcomes disagree: {wrong[:3]}" if wrong else None

    with ThreadPoolExecutor(max(1, getattr(pool, "size", 1))) as ex:
        problems = list(ex.map(check, records))
    if log:
        for rec, problem in zip(records, problems, strict=True):
            if problem:
                log(f"{rec['id']}: dropped: {problem}")
    return [dict(r) for r, p in zip(records, problems, strict=True) if p is None]


def main(argv: Sequence[str]) -> None:  # pragma: no cover - the offline pack builder
    from posttrain.envs.repo import ENV
    from posttrain.sandbox import open_pool

    validate_only = "--validate" in argv
    names = [a for a in argv if not a.startswith("--")] or list(PROJECTS)
    with open_pool(size=2) as pool:
        for name in names:
            raw = RAW / f"{name}.json.gz"
            if validate_only:
                with gzip.open(raw if raw.exists() else PACKS / f"{name}.json.gz", "rb") as fh:
                    records = json.loads(fh.read())["tasks"]
            else:
                records = build_pack(pool, name, log=lambda m: print(m, flush=True))
                RAW.mkdir(parents=True, exist_ok=True)
                with gzip.open(raw, "wb") as fh:  # kept outside the repository: re-validation starts here
                    fh.write(json.dumps({"project": name, "tasks": records}).encode())
            kept = validate_pack(pool, ENV, records, log=lambda m: print(m, flush=True),
                                 base="--references" not in argv)
            print(f"{name}: {len(kept)} of {len(records)} tasks -> {write_pack(name, kept)}", flush=True)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])

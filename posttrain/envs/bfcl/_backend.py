"""Host side of the BFCL backends: code bundles, sandbox jobs, and BFCL's per-turn judgement.

``run_job`` runs ``_sandbox.py`` in the pool with the task's request; ``judge_turn`` is the decision
of BFCL's ``multi_turn_checker`` for one turn; ``check_calls`` replays whole call sequences in one
job and judges every turn (the verifier the agreement test compares with BFCL's own checker).
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.envs._base import fail, passed
from posttrain.envs.bfcl._data import BACKEND_PACKAGE, CLASS_MODULES, STATELESS_CLASSES, Call, bfcl_root
from posttrain.sandbox import Limits
from posttrain.types import Task, Verdict

JOB_TIMEOUT_S = 20.0
JOB_LIMITS = Limits(memory_mb=512, output_bytes=16 << 20, file_size_mb=64)
_PROGRAM = (Path(__file__).with_name("_sandbox.py")).read_text()
_BUNDLES: weakref.WeakKeyDictionary[Any, dict[str, bytes]] = weakref.WeakKeyDictionary()
_BUNDLE_LOCK = threading.Lock()


class BackendInfra(RuntimeError):
    """The sandbox failed (not the calls): the caller reports an infra error, never a verdict."""


class CallsFailed(RuntimeError):
    """The job did not finish (timeout, memory, a result too large): caused by the calls it ran."""


def _backend_sources(root: Path) -> dict[str, tuple[bool, Path]]:
    pkg = root / "bfcl_eval"
    sources = {"bfcl_eval": (True, pkg / "__init__.py"),
               "bfcl_eval.eval_checker": (True, pkg / "eval_checker" / "__init__.py"),
               "bfcl_eval.eval_checker.multi_turn_eval": (True, pkg / "eval_checker" / "multi_turn_eval" / "__init__.py")}
    code = pkg / "eval_checker" / "multi_turn_eval" / "func_source_code"
    sources[BACKEND_PACKAGE] = (True, code / "__init__.py")
    for module in [*CLASS_MODULES.values(), "long_context"]:
        sources[f"{BACKEND_PACKAGE}.{module}"] = (False, code / f"{module}.py")
    return sources


def _mpmath_sources() -> dict[str, tuple[bool, Path]]:
    """mpmath (pure Python; BFCL's ``math_api`` imports it) from this interpreter's installation."""
    spec = importlib.util.find_spec("mpmath")
    if spec is None or not spec.submodule_search_locations:
        raise BackendInfra("mpmath is not installed (BFCL's MathAPI backend imports it; it comes with sympy)")
    top = Path(next(iter(spec.submodule_search_locations)))
    sources = {}
    for path in sorted(top.rglob("*.py")):
        rel = path.relative_to(top.parent).with_suffix("")
        if "tests" in rel.parts:
            continue
        is_pkg = rel.name == "__init__"
        sources[".".join(rel.parts[:-1] if is_pkg else rel.parts)] = (is_pkg, path)
    return sources


def _compile(pool: Any, sources: Mapping[str, tuple[bool, Path]]) -> bytes:
    files, manifest = {}, {}
    for i, (name, (is_pkg, path)) in enumerate(sources.items()):
        files[f"src/{i}.py"] = path.read_bytes()
        manifest[name] = (is_pkg, f"src/{i}.py", str(path.name))
    ex = pool.run_python(_PROGRAM, files=files, stdin=json.dumps({"op": "compile", "manifest": manifest}),
                         timeout=120.0, limits=Limits(memory_mb=1024, output_bytes=64 << 20, file_size_mb=64))
    if ex.outcome != "ok" or ex.report is None or ex.report_truncated:
        raise BackendInfra(f"compiling BFCL's backends in the sandbox failed: {ex.outcome} "
                           f"{ex.infra_detail or ex.stderr[-400:].decode(errors='replace')}")
    return ex.report


def bundle_files(pool: Any, root: Path, *, mpmath: bool) -> dict[str, bytes]:
    """The code bundles for a job: compiled once per pool, by the sandbox's own interpreter."""
    with _BUNDLE_LOCK:
        cache = _BUNDLES.setdefault(pool, {})
        key = f"code.bin:{root}"
        if key not in cache:
            cache[key] = _compile(pool, _backend_sources(root))
        if mpmath and "mpmath.bin" not in cache:
            cache["mpmath.bin"] = _compile(pool, _mpmath_sources())
        files = {"code.bin": cache[key]}
        if mpmath:
            files["mpmath.bin"] = cache["mpmath.bin"]
        return files


@dataclass
class JobResult:
    ops: list[dict[str, Any]]
    model_state: bytes | None = None
    truth_state: bytes | None = None


def run_job(pool: Any, root: Path, task: Task, ops: Sequence[Mapping[str, Any]], *,
            model_state: bytes | None = None, truth_state: bytes | None = None, dump: bool = False) -> JobResult:
    """Run ``ops`` (``_sandbox.py``) on the task's backends in one sandbox job."""
    f = task.fields
    request = {"op": "run", "package": BACKEND_PACKAGE, "modules": dict(CLASS_MODULES),
               "stateless": sorted(STATELESS_CLASSES), "classes": f["involved_classes"],
               "initial_config": f["initial_config"], "long_context": False, "methods": f["methods"],
               "ops": list(ops), "dump": dump}
    files = bundle_files(pool, root, mpmath="MathAPI" in f["involved_classes"])
    if model_state is not None:
        files["model.pkl"] = model_state
    if truth_state is not None:
        files["truth.pkl"] = truth_state
    ex = pool.run_python(_PROGRAM, files=files, stdin=json.dumps(request), timeout=JOB_TIMEOUT_S, limits=JOB_LIMITS)
    if ex.outcome == "infra_error":
        raise BackendInfra(f"sandbox: {ex.infra_detail}")
    if ex.outcome != "ok" or ex.report is None or ex.report_truncated:
        why = ("timed out" if ex.timed_out else "ran out of memory" if ex.oom_killed else
               "wrote a state too large" if ex.report_truncated else f"exit {ex.exit_code} signal {ex.signal}")
        raise CallsFailed(f"the backend job {why}: {ex.stderr[-300:].decode(errors='replace').strip()}")
    try:
        report = json.loads(ex.report)
        states = [base64.b64decode(report[k]) if k in report else None for k in ("model_state", "truth_state")]
    except (ValueError, binascii.Error) as e:
        raise BackendInfra(f"unreadable report from the backend job: {e}") from None
    return JobResult(report["ops"], *states)


def missing_results(truth: Sequence[str], model: Sequence[str]) -> list[str]:
    """The truth's results not found in ``model`` (as a multiset, any order: BFCL's ``_is_subsequence_unordered``)."""
    pool_ = list(model)
    missing = []
    for item in truth:
        try:
            pool_.remove(item)
        except ValueError:
            missing.append(item)
    return missing


def judge_turn(turn: int, truth_calls: Sequence[Any], model_called: bool, model_results: Sequence[str],
               check: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(error class, why)`` when turn ``turn`` fails BFCL's multi-turn checker, else None.
    ``model_results``: every result of the episode so far (all turns); ``check``: the ``check`` op's
    report for this turn."""
    if not truth_calls:
        return None  # BFCL checks nothing on a turn whose ground truth is empty
    if not model_called:
        return "no_call", f"turn {turn + 1}: no tool was called, but the request needs calls"
    if check["diff"]:
        where = "; ".join(f"{cls}.{', '.join(attrs)}" for cls, attrs in check["diff"].items())
        return "wrong_state", f"turn {turn + 1}: the backend state differs from the expected one ({where})"
    missing = missing_results(check["truth_results"], model_results)
    if missing:  # which ones is not said: the feedback would show the model the ground truth's results
        return "wrong_result", f"turn {turn + 1}: {len(missing)} expected result(s) never returned"
    return None


@dataclass
class Judgement:
    """Per-turn outcomes of an episode, turned into one verdict."""

    turns: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    error_class: str | None = None

    def add(self, turn: int, failure: tuple[str, str] | None) -> None:
        """Record turn ``turn``: None (passed) or ``(error class, why)``; the first failure decides."""
        self.turns.append({"turn": turn, "passed": failure is None, "why": failure and failure[1]})
        if failure is not None and self.failure is None:
            self.error_class, self.failure = failure

    def verdict(self, evidence: Mapping[str, Any]) -> Verdict:
        ev = {"turns": self.turns, **evidence}
        if self.failure is None:
            return passed("Every turn reached the expected state and results.", ev)
        return fail(self.failure, self.error_class or "wrong_state", ev)


def check_calls(pool: Any, task: Task, turns: Sequence[Sequence[Sequence[Call]]], *,
                root: str | Path | None = None) -> Verdict:
    """Replay ``turns`` (per user turn, the steps, each a list of calls) and judge each turn against
    the ground truth, the way BFCL's ``multi_turn_checker`` judges a model's decoded calls.

    Steps without calls are skipped (BFCL drops empty steps); a number of turns other than the
    task's fails (BFCL: force-terminated). A job that does not finish fails the sequence.
    """
    root = bfcl_root(root)
    truth = task.fields["ground_truth"]
    judgement = Judgement()
    if len(turns) != len(truth):
        judgement.add(len(turns), ("turn_count", f"{len(turns)} turns answered, the task has {len(truth)}"))
        return judgement.verdict({})
    ops: list[dict[str, Any]] = []
    for k, steps in enumerate(turns):
        ops += [{"kind": "calls", "calls": [c.to_json() for c in step]} for step in steps if step]
        ops.append({"kind": "check", "calls": truth[k]})
    try:
        job = run_job(pool, root, task, ops)
    except BackendInfra as e:
        return Verdict.infra(str(e))
    except CallsFailed as e:
        judgement.add(0, ("backend", str(e)))
        return judgement.verdict({})
    results: list[str] = []
    turn, called = 0, False
    for op, report in zip(ops, job.ops, strict=True):
        if op["kind"] == "calls":
            results += report["results"]
            called = True
        else:
            judgement.add(turn, judge_turn(turn, op["calls"], called, results, report))
            turn, called = turn + 1, False
    return judgement.verdict({"results": len(results)})

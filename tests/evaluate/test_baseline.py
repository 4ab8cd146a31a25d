"""Baseline comparison: a domain is flagged only when it dropped beyond both intervals."""

from __future__ import annotations

import json

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.baseline import compare, load_baseline
from posttrain.evaluate.records import EvalRecord, write_records


def _s(p, lo, hi, **domains):
    return {"pass@1": p, "ci": {"pass@1": [lo, hi]},
            "per_domain": {d: {"pass@1": v[0], "ci": {"pass@1": [v[1], v[2]]}} for d, v in domains.items()}}


def test_flags_only_drops_beyond_the_intervals():
    base = _s(0.6, 0.5, 0.7, math=(0.8, 0.7, 0.9), code=(0.4, 0.3, 0.5), json=(0.5, 0.4, 0.6))
    cur = _s(0.55, 0.45, 0.65, math=(0.5, 0.4, 0.6), code=(0.35, 0.25, 0.45), tool=(0.9, 0.8, 1.0))
    cmp = compare(cur, base)
    assert cmp["regressions"] == ["math"]  # code dropped, but inside the noise
    assert cmp["per_domain"]["code"]["delta"] == pytest.approx(-0.05) and not cmp["per_domain"]["code"]["regressed"]
    assert cmp["only_in_current"] == ["tool"] and cmp["only_in_baseline"] == ["json"]
    assert not cmp["overall"]["regressed"]


def test_without_intervals_nothing_is_judged():
    cmp = compare({"pass@1": 0.1, "per_domain": {}}, {"pass@1": 0.9, "per_domain": {}})
    assert cmp["regressions"] == [] and "not judged" in cmp["overall"]["note"]


def test_load_baseline_from_run_results_and_records(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"eval": {"base": _s(0.1, 0, 0.2), "rl": _s(0.7, 0.6, 0.8)}}))
    assert load_baseline(run)["pass@1"] == 0.7 and load_baseline(run)["baseline_model"] == "rl"
    (tmp_path / "res.json").write_text(json.dumps(_s(0.3, 0.2, 0.4)))
    assert load_baseline(tmp_path / "res.json")["pass@1"] == 0.3
    recs = write_records(tmp_path / "r.jsonl", [EvalRecord("a", "code", "pass", 1.0), EvalRecord("b", "code", "fail", 0.0)])
    assert load_baseline(recs)["pass@1"] == 0.5
    with pytest.raises(UserError, match="not found"):
        load_baseline(tmp_path / "missing")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(UserError, match="no evaluation summary found"):
        load_baseline(tmp_path / "x.json")

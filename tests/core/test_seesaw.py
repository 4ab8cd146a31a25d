"""The seesaw gate's rule (``compare_domains``) and its recipe key (``eval.baselines``), read when
the recipe is parsed; the end-to-end runs are tests/e2e/test_seesaw_gate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.cli.run import gate_line
from posttrain.errors import ConfigError
from posttrain.evaluate.baseline import compare_domains
from posttrain.train.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]


def _summary(**domains: tuple[float, float, float]) -> dict:
    return {"per_domain": {d: {"pass@1": p, "ci": {"pass@1": [lo, hi]}} for d, (p, lo, hi) in domains.items()}}


def test_each_domain_is_held_to_every_baseline_that_evaluated_it() -> None:
    current = _summary(math=(0.50, 0.40, 0.60), code=(0.30, 0.20, 0.40), json=(0.9, 0.8, 1.0))
    gate = compare_domains(current, {"math-only": _summary(math=(0.55, 0.45, 0.65)),
                                     "code-only": _summary(code=(0.70, 0.60, 0.80))})
    assert gate["regressions"] == ["code (code-only)"]  # math dropped inside the noise: a delta, not a drop
    assert round(gate["per_domain"]["math"][0]["delta"], 2) == -0.05 and not gate["per_domain"]["math"][0]["regressed"]
    assert gate["unbaselined"] == ["json"]
    no_interval = compare_domains(_summary(math=(0.1, 0.0, 0.2)), {"old": {"per_domain": {"math": {"pass@1": 0.9}}}})
    assert no_interval["regressions"] == [] and "not judged" in no_interval["per_domain"]["math"][0]["note"]



def test_a_baseline_over_other_tasks_fails_the_gate_closed() -> None:
    """The same rate over other held-out tasks says nothing of a seesaw: the row is not judged, and
    the gate fails with a line that says so (before, such a row passed the gate unjudged)."""
    current = _summary(math=(0.50, 0.40, 0.60), code=(0.30, 0.20, 0.40))
    current["per_domain"]["math"]["task_set"] = {"n": 6, "sha256": "a"}
    base = _summary(math=(0.50, 0.40, 0.60))
    base["per_domain"]["math"]["task_set"] = {"n": 6, "sha256": "b"}
    gate = compare_domains(current, {"math-only": base})
    assert gate["not_comparable"] == ["math (math-only)"]
    assert gate["regressions"] == ["math (math-only) (different task sets)"]
    assert gate_line(gate) == ("posttrain: regression: math (math-only) was evaluated on other tasks than its "
                               "baseline (not judged) (summary.json: regression)")
    base["per_domain"]["math"]["task_set"] = {"n": 6, "sha256": "a"}
    assert gate_line(compare_domains(current, {"math-only": base})) is None


def test_the_run_s_settings_are_held_to_each_baseline_run_s(tmp_path: Path) -> None:
    """``regression_gate`` gives the run's ``eval_protocol`` with its figures, so a baseline run sampled
    otherwise (greedy against temperature 1) is not judged and the gate says why (before, the run's
    settings were left out and such a row was judged as comparable)."""
    from posttrain.cli.pipeline import regression_gate

    def run_summary(temperature: float, p: float) -> dict:
        return {"eval": {"rl": {"pass@1": p, **_summary(math=(p, p - 0.1, p + 0.1))}},
                "eval_protocol": {"temperature": temperature, "max_new_tokens": 24}}

    base = tmp_path / "math-only.json"
    base.write_text(json.dumps(run_summary(0.0, 0.5)))
    recipe = load_recipe(ROOT / "configs" / "tiny-grpo.yaml", [f"eval.baselines=[{base}]", "stages=[rl]"])
    gate = regression_gate(recipe, run_summary(1.0, 0.5))
    assert gate["not_comparable"] == [f"math ({base})"]
    assert gate_line(gate) == (f"posttrain: regression: math ({base}) was sampled with other settings than its "
                               "baseline (not judged) (summary.json: regression)")
    assert regression_gate(recipe, run_summary(0.0, 0.5))["regressions"] == []


def test_baselines_are_read_when_the_recipe_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"eval.baselines\[0\]: --baseline: .*nothing"):
        load_recipe(ROOT / "configs" / "tiny-grpo.yaml", [f"eval.baselines=[{tmp_path / 'nothing'}]"])
    ok = tmp_path / "math-only.json"
    ok.write_text(json.dumps({"pass@1": 0.5, **_summary(math=(0.5, 0.4, 0.6))}))
    assert load_recipe(ROOT / "configs" / "tiny-grpo.yaml", [f"eval.baselines=[{ok}]"]).eval.baselines == (str(ok),)

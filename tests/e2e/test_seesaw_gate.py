"""The seesaw gate (issue 24, "no seesaw"): a multi-domain run reports each domain's held-out pass@1
against single-domain runs from the same start (recipe key ``eval.baselines``), and fails (exit 1,
one line, after its summary and report) when a domain dropped beyond both 95% intervals.

Real runs of configs/tiny-grpo.yaml, RL only from the embedded default built from the same seed
(the same start): one per domain, then both domains with those runs as baselines, plus a results
file whose math pass@1 this run cannot reach (what a seesaw looks like to the gate)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "stages=[rl]", "--set", "rl.steps=2", "--set", "tasks.n_train_per_domain=20",
        "--set", "tasks.n_eval_per_domain=6", "--set", "eval.samples_per_task=2"]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / "tiny-grpo.yaml"),
                           "--out", str(out), *TINY, *extra], capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.slow
def test_each_domain_against_its_single_domain_run_and_a_drop_fails_the_run(tmp_path: Path) -> None:
    for d in ("math", "code"):
        p = _run(tmp_path / d, "--set", f"tasks.domains=[{d}]")
        assert p.returncode == 0, p.stderr[-3000:]
    better = tmp_path / "better.json"  # a math result this run cannot reach
    better.write_text(json.dumps({"pass@1": 0.9, "ci": {"pass@1": [0.85, 0.95]},
                                  "per_domain": {"math": {"pass@1": 0.9, "ci": {"pass@1": [0.85, 0.95]}}}}))
    baselines = f"eval.baselines=[{tmp_path / 'math'}, {tmp_path / 'code'}, {better}]"
    p = _run(tmp_path / "both", "--set", baselines)
    assert p.returncode == 1, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(f"posttrain: regression: math ({better}) dropped below its baseline"), last
    gate = json.loads((tmp_path / "both" / "summary.json").read_text())["regression"]
    assert gate["model"] == "rl" and set(gate["per_domain"]) == {"math", "code"}
    runs = {d: [r["baseline_run"] for r in rows] for d, rows in gate["per_domain"].items()}
    assert runs == {"math": [str(tmp_path / "math"), str(better)], "code": [str(tmp_path / "code")]}
    assert gate["regressions"] == [f"math ({better})"]  # the single-domain runs: no drop (same start, 2 steps)
    assert (tmp_path / "both" / "report.html").exists()

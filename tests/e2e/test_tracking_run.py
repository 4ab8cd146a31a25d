"""``posttrain run`` with W&B (offline mode: a local run directory, no network) and TensorBoard on: both stages'
metrics, the config and, once the run is done, its files reach the trackers (MLflow's side of the same
calls is tested in tests/evaluate/test_loggers.py, without a run: its store takes ~10 s to create)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--set", "tasks.n_train_per_domain=40", "--set", "tasks.n_eval_per_domain=4", "--set", "sft.epochs=1",
         "--set", "rl.steps=2", "--set", "rl.prompts_per_step=2", "--set", "rl.group_size=2",
         "--set", "eval.samples_per_task=1", "--set", "tracking.wandb=true", "--set", "tracking.tensorboard=true"]


@pytest.mark.slow
def test_a_run_with_trackers_on(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "evaluate"))
    from test_loggers import _wandb_records

    home = tmp_path / "home"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(home),
           "WANDB_CONFIG_DIR": str(home / "config"), "WANDB_CACHE_DIR": str(home / "cache"),
           "WANDB_DATA_DIR": str(home / "data")}
    env.pop("WANDB_API_KEY", None)
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / "tiny-grpo.yaml"),
                        "--out", str(out), *SMALL], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    records = _wandb_records(out)
    logged = {("/".join(i.nested_key) or i.key) for r in records if r.WhichOneof("record_type") == "history"
              for i in r.history.item}
    assert {f"{row['stage']}/loss" for row in rows} <= logged and {"sft/step", "rl/step"} <= logged
    (artifact,) = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert sorted(e.path for e in artifact.manifest.contents) == ["config.yaml", "report.html", "summary.json"]
    assert set(json.loads((out / "trackers.json").read_text())) == {"wandb"}
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert "stage sft" in (out / "report.html").read_text()

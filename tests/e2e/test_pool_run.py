"""End-to-end: configs/multi-domain.yaml (22 domains, 19 of them reasoning-gym, two as curricula,
the task pool with canaries) through ``posttrain run`` with tiny settings, and a real kill -9 of a
real run resumed to the same weights, the same task sequence, levels and pools (issue 24).

Both run the real pipeline in a subprocess (real embedded model, real sandbox for code, the rg
checks in their worker processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_logs import rl_rows, sha, tasks_per_step

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "multi-domain.yaml"
TINY = ["--set", "sft.epochs=0.05", "--set", "rl.steps=6", "--set", "rl.checkpoint_every=2",
        "--set", "rl.prompts_per_step=8", "--set", "eval.samples_per_task=1", "--set", "model.hidden_size=32"]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(RECIPE), "--out", str(out), *TINY, *extra],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("multi") / "ref"
    p = _run(out)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_22_domain_recipe_trains_with_the_pool_and_reports_each_domain(ref: Path) -> None:
    summary = json.loads((ref / "summary.json").read_text())
    domains = set(summary["eval"]["rl"]["per_domain"])
    assert len(domains) == 22 and sum(d.startswith("rg/") for d in domains) == 19
    rl = rl_rows(ref)
    assert [r["step"] for r in rl] == list(range(6))
    keys = set().union(*rl)
    for key in ("domain/rg/basic_arithmetic/level", "domain/rg/chain_sum/estimate", "domain/math/pool_normal",
                "domain/rg/lcm/pool_filtered", "zero_variance_drawn", "canary/passed", "pool/canaries"):
        assert key in keys, key
    drawn = {k.split("/")[1] if not k.startswith("domain/rg/") else "/".join(k.split("/")[1:3])
             for k in keys if k.startswith("domain/") and k.endswith("/groups")}
    assert len(drawn) >= 10  # the mix is drawn from, not one domain
    html = (ref / "report.html").read_text()
    assert "zero-variance share of groups per domain" in html and "Hack alarms (canaries)" in html
    stats = subprocess.run([sys.executable, "-m", "posttrain.cli", "tasks", "stats", str(ref)], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
    assert stats.returncode == 0 and "the pool's estimates" in stats.stdout, stats.stdout + stats.stderr[-2000:]
    row = next(line.split() for line in stats.stdout.splitlines() if line.startswith("rg/basic_arithmetic "))
    assert row[5].isdigit()  # the curriculum's level, from the checkpoint's sampler state


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_continues_the_same_tasks_levels_pools_and_weights(ref: Path, tmp_path) -> None:
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "posttrain.cli", "run", str(RECIPE), "--out", str(out), *TINY]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    latest = out / "checkpoints" / "rl-state" / "latest"
    deadline = time.time() + 600
    while not latest.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into the next step: killed mid-step
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "checkpoints" / "rl" / "model.safetensors").exists()
    p = _run(out, "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    assert sha(out / "checkpoints" / "rl" / "model.safetensors") == sha(ref / "checkpoints" / "rl" / "model.safetensors")
    assert tasks_per_step(out) == tasks_per_step(ref)  # the same tasks, curriculum tasks and canaries, in order
    assert rl_rows(out) == rl_rows(ref)  # levels, estimates, pool sizes, per-domain rewards: step for step

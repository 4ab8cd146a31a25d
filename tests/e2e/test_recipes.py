"""Every recipe in configs/ runs through `posttrain run` (tiny settings) and leaves what it promises."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# tiny settings: each stage runs a few real steps (one SFT epoch is 3 steps of 32), enough for what it promises
TINY = ["--set", "tasks.n_train_per_domain=40", "--set", "tasks.n_eval_per_domain=6", "--set", "sft.epochs=1",
        "--set", "eval.samples_per_task=1"]


def _run(recipe: str, out: Path, *extra: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / recipe),
                        "--out", str(out), *TINY, *extra], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    (out / "stderr.txt").write_text(p.stderr)
    return json.loads((out / "summary.json").read_text())


def _bar_done(out: Path, stage: str) -> None:
    """The stage's progress bar ended at its total, with a rate and a time left (issue 26, item 5)."""
    stderr = (out / "stderr.txt").read_text()
    lines = [line for chunk in stderr.split("\r") for line in chunk.splitlines()
             if line.startswith(f"{stage} ") and " eta " in line]
    assert lines, stderr[-3000:]
    done, total = re.search(r" (\d+)/(\d+) ", lines[-1]).groups()
    assert done == total and ("/s" in lines[-1] or "s/" in lines[-1]), lines[-1]


def _rows(out: Path, stage: str) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == stage]


def _stages(out: Path) -> set[str]:
    return {json.loads(line)["stage"] for line in (out / "metrics.jsonl").read_text().splitlines()}


@pytest.mark.slow
def test_sft_recipe(tmp_path):
    summary = _run("sft.yaml", tmp_path / "r")
    assert set(summary["eval"]) == {"demonstrator", "base", "sft"}
    assert (tmp_path / "r" / "checkpoints" / "sft" / "model.safetensors").exists()


@pytest.mark.slow
def test_dpo_recipe(tmp_path):
    summary = _run("dpo.yaml", tmp_path / "r", "--set", "pairs.max_tasks=40", "--set", "dpo.epochs=1")
    assert "dpo" in summary["eval"]
    assert {"sft", "dpo"} <= _stages(tmp_path / "r")
    assert (tmp_path / "r" / "checkpoints" / "dpo" / "model.safetensors").exists()
    _bar_done(tmp_path / "r", "dpo")


@pytest.mark.slow
def test_rm_then_rlhf_recipe(tmp_path):
    out = tmp_path / "r"
    summary = _run("rlhf.yaml", out, "--set", "pairs.max_tasks=40", "--set", "rm.epochs=1", "--set", "rl.steps=2")
    assert (out / "checkpoints" / "rm" / "model.safetensors").exists()
    rl = _rows(out, "rl")
    assert len(rl) == 2 and all("reward/rm" in m for m in rl)
    assert "rl" in summary["eval"] and "rm" not in summary["eval"]


@pytest.mark.slow
def test_rm_recipe(tmp_path):
    out = tmp_path / "r"
    _run("rm.yaml", out, "--set", "pairs.max_tasks=40", "--set", "rm.epochs=1")
    rm_rows = _rows(out, "rm")
    assert rm_rows and "loss" in rm_rows[0]
    _bar_done(out, "rm")


@pytest.mark.slow
def test_ppo_recipe_trains_a_critic(tmp_path):
    out = tmp_path / "r"
    summary = _run("ppo.yaml", out, "--set", "rl.steps=2", "--set", "rl.checkpoint_every=1")
    rl = _rows(out, "rl")
    assert len(rl) == 2 and all("value_loss" in m for m in rl)
    assert (out / "checkpoints" / "rl-state" / "critic-2.pt").exists()
    assert "rl" in summary["eval"]


@pytest.mark.slow
def test_bf16_gradient_checkpointing_and_lora(tmp_path):
    out = tmp_path / "r"
    _run("tiny-grpo.yaml", out, "--set", "model.dtype=bfloat16", "--set", "model.gradient_checkpointing=true",
         "--set", "model.lora={r: 4, alpha: 8}", "--set", "rl.steps=2")
    from safetensors import safe_open

    with safe_open(str(out / "checkpoints" / "rl" / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert str(f.get_tensor(keys[0]).dtype) == "torch.bfloat16"
    assert not any("lora" in k for k in keys)  # adapters were merged: a plain model



@pytest.mark.slow
def test_a_bf16_run_keeps_fp32_master_weights_in_its_checkpoints(tmp_path):
    """All weights trained in bf16 (no LoRA): the model files are bf16, the optimizer state in each
    checkpoint holds the fp32 master weights and moments a resume continues from (train/_optim.py)."""
    import torch

    out = tmp_path / "r"
    _run("tiny-grpo.yaml", out, "--set", "model.dtype=bfloat16", "--set", "rl.steps=2")
    state = torch.load(out / "checkpoints" / "rl-state" / "step-000002" / "state.pt", weights_only=True)
    per_param = list(state["optimizer"]["state"].values())
    assert per_param and all(s["master"].dtype == s["exp_avg"].dtype == torch.float32 for s in per_param)
    from safetensors import safe_open

    with safe_open(str(out / "checkpoints" / "rl" / "model.safetensors"), "pt") as f:
        assert all(str(f.get_tensor(k).dtype) == "torch.bfloat16" for k in f.keys())

@pytest.mark.slow
def test_kl_in_reward(tmp_path):
    out = tmp_path / "r"  # dynamic sampling: tests/train/test_pool_rl.py and the test below (a tiny SFT has no variance)
    _run("tiny-grpo.yaml", out, "--set", "rl.kl_coef=0.05", "--set", "rl.kl_placement=reward", "--set", "rl.steps=2")
    rl = _rows(out, "rl")
    assert len(rl) == 2
    for m in rl:
        assert m["kl_in_reward"] >= 0.0 and m["kl"] == 0.0  # KL went into the reward, not the loss


@pytest.mark.slow
def test_dynamic_sampling_that_cannot_fill_a_batch_stops_in_one_line(tmp_path):
    """A random model passes nothing (no group has reward variance): dynamic sampling draws
    1 + max_refills times, then stops the run in one line, never a short batch (issue 24)."""
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / "tiny-grpo.yaml"),
                        "--out", str(tmp_path / "r"), *TINY, "--set", "stages=[rl]", "--set", "rl.dynamic_sampling=true",
                        "--set", "rl.max_refills=1"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 2, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("posttrain: error: rl.dynamic_sampling: 2 draws gave 8 groups and only 0 of the 4"), last
    assert "raise rl.max_refills" in last and not (tmp_path / "r" / "checkpoints" / "rl").exists()

"""End-to-end: the quickstart recipe with tiny settings, and kill -9 + --resume bit-exactness.

Both run the real pipeline in a subprocess (real model, real sandbox, real verifiers).
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny-grpo.yaml"
SMALL = [
    "--set", "tasks.n_train_per_domain=60", "--set", "tasks.n_eval_per_domain=8",
    "--set", "sft.epochs=2", "--set", "rl.steps=4", "--set", "rl.prompts_per_step=4",
    "--set", "rl.group_size=4", "--set", "eval.samples_per_task=2", "--set", "model.hidden_size=64",
]


def _posttrain(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_quickstart_recipe_smoke(tmp_path, capsys):
    out = tmp_path / "qs"
    p = _posttrain("quickstart", "--out", str(out), *SMALL)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "held-out pass@1" in p.stdout and "report.html" in p.stdout
    # the run directory holds everything the issue lists
    assert (out / "config.yaml").read_text().startswith("seed: 0")
    for name in ("base", "sft", "rl"):
        assert (out / "checkpoints" / name / "model.safetensors").exists()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in lines if m["stage"] == "rl"]
    assert [m["step"] for m in rl] == [0, 1, 2, 3]
    for key in ("loss", "reward_mean", "reward_std", "frac_zero_std", "kl", "clip_frac", "tokens_per_s", "wall_s"):
        assert key in rl[0], key
    traj = [json.loads(x) for x in (out / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert len(traj) == 4 * 4 * 4
    assert {"task_id", "completion_ids", "completion", "outcome", "reward"} <= set(traj[0])
    summary = json.loads((out / "summary.json").read_text())
    for model in ("base", "sft", "rl", "demonstrator"):
        e = summary["eval"][model]
        assert 0.0 <= e["pass@1"] <= 1.0
        assert set(e["per_domain"]) == {"math", "code"}
    assert summary["eval"]["base"]["pass@1"] == 0.0  # a random model solves nothing
    html = (out / "report.html").read_text()
    assert "<svg" in html
    # resuming a finished run says so and does nothing
    before = _sha(out / "checkpoints" / "rl" / "model.safetensors")
    p = here(capsys, "quickstart", "--out", str(out), "--resume", *SMALL)
    assert p.returncode == 0 and "already finished" in p.stderr
    assert _sha(out / "checkpoints" / "rl" / "model.safetensors") == before
    # starting again into the same directory without --resume is refused, nothing touched
    p = here(capsys, "quickstart", "--out", str(out), *SMALL)
    assert p.returncode == 2 and "--resume" in p.stderr
    assert _sha(out / "checkpoints" / "rl" / "model.safetensors") == before


@pytest.mark.slow
def test_kill_9_then_resume_is_bit_identical(tmp_path):
    ref = tmp_path / "ref"
    p = _posttrain("run", str(TINY), "--out", str(ref))
    assert p.returncode == 0, p.stderr[-3000:]

    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "run", str(TINY), "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    latest = out / "checkpoints" / "rl-state" / "latest"
    deadline = time.time() + 300
    while not latest.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # a little into the next step: kill mid-step
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "checkpoints" / "rl" / "model.safetensors").exists()

    p = _posttrain("run", str(TINY), "--out", str(out), "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    a = ref / "checkpoints" / "rl" / "model.safetensors"
    b = out / "checkpoints" / "rl" / "model.safetensors"
    assert _sha(a) == _sha(b), "resumed weights differ from the uninterrupted run"
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()
             if json.loads(x)["stage"] == "rl"]
    assert steps == list(range(12))


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    from posttrain.train.checkpoint import CheckpointError, load_latest

    d = tmp_path / "ck"
    d.mkdir()
    (d / "latest").write_text("not json")
    with pytest.raises(CheckpointError, match="latest"):
        load_latest(d)

"""``posttrain bench generate|step|gpu|recall|adaptive`` (issue 25): registered, bad input is one line (exit 2), a
tiny generate run prints every backend's ratio, and bench/gpu.py's CPU-sized dry run goes through the
same code path the H200 run takes (it spawns bench/step.py's two sides: posttrain's GRPO step and
TRL's GRPOTrainer). The full benchmarks take minutes; their figures are in README."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("args,message", [
    (["generate", "--models", "gpt9"], "--models: unknown ['gpt9']"),
    (["generate", "--new", "0"], "must be >= 1"),
    (["step", "--group", "1"], "--group >= 2"),
    (["step", "--qwen2", "--stops"], "--stops, --start and --qwen2 each name the model: give one"),
    (["step", "--model", "/tmp/m"], "--model /tmp/m: name the model both sides start from with --start"),
    (["gpu", "--steps", "0"], "--steps 0: expected an integer >= 1"),
    (["recall", "--seeds", "x"], "--seeds/--levels"),
    (["adaptive", "--rounds", "1"], "--rounds >= 2"),
    # these raised before (ValueError out of random.sample, ZeroDivisionError in the worker, a bench run)
    (["sched", "--jobs", "0"], "--jobs, --sim-jobs and --sim-workers must be >= 1"),
    (["train", "--steps", "0"], "--steps, --batch"),
    (["verify", "--rounds", "0"], "--rounds, --workers and --size must be >= 1"),
    (["learn", "--buckets", "0"], "--buckets and --workers must be >= 1"),
    (["generate", "--temperature", "-1"], "--temperature a number >= 0"),
    (["recall", "--lr", "0"], "--lr > 0"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    p = run(*args, timeout=120)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_generate_prints_each_backend_against_local():
    p = run("generate", "--prompts", "2", "--group", "2", "--new", "6", "--repeats", "1", "--models", "embedded",
            "--no-vllm", "--long-notes", "2")
    assert p.returncode == 0, p.stderr[-2000:]
    for backend in ("local", "fast", "fast+ngram", "fast+reuse"):
        assert f"    {backend} " in p.stdout
    assert "x1.00 vs local" in p.stdout and "managed / plain: peak memory growth" in p.stdout


@pytest.mark.slow
def test_gpu_dry_run_goes_through_both_sides(tmp_path):
    out = tmp_path / "gpu.json"
    p = run("gpu", "--dry", "--steps", "1", "--out", str(out), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ours / TRL = " in p.stdout and "MFU" in p.stdout
    import json

    figures = json.loads(out.read_text())
    assert figures["grpo"]["ours"]["tokens"] > 0 and figures["grpo"]["trl"]["tokens"] > 0
    assert figures["mfu"]["tokens_per_s"] > 0


@pytest.mark.slow
def test_recall_and_adaptive_run_end_to_end(tmp_path):
    """Both benchmarks at toy sizes: the recall comparison trains and evaluates both arms; the adaptive
    one samples and verifies every arm on a run directory's checkpoint (here an untrained model)."""
    p = run("recall", "--seeds", "0", "--steps", "2", "--train-levels", "2", "--train-per-level", "2",
            "--eval-per-level", "1", "--levels", "2", "--budget", "200")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "plain" in p.stdout and "managed" in p.stdout and "largest context" in p.stdout
    from posttrain.policy import build_embedded_default

    build_embedded_default(tmp_path / "run" / "checkpoints" / "sft")
    p = run("adaptive", "--run", str(tmp_path / "run"), "--tasks", "3", "--group", "2", "--rounds", "2",
            "--budget", "4")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "T per task" in p.stdout and "budget per task" in p.stdout and "per task / fixed: tokens x" in p.stdout

"""Repair episodes end to end: `posttrain run configs/tiny-repair.yaml` (SFT on repair demonstrations,
then GRPO over repair episodes, evaluated as repair episodes), then `posttrain eval --run` on its
checkpoints through the episode runner. Real model, sandbox and code verifier; the run in a
subprocess, the eval in the test's process (``run_logs.here``: the same code).

Checks that the figures exist and are consistent (a tiny run learns little): first-attempt pass
rate, post-repair pass rate, mean attempts to success, turns and tokens per episode, truncation
rate, in metrics.jsonl, summary.json and `posttrain eval --json`; records carry every attempt.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
FIGURES = {"first_attempt_pass_rate", "post_repair_pass_rate", "mean_attempts_to_success", "turns", "attempts",
           "episode_tokens", "truncation_rate"}


def posttrain(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def check_figures(figures: dict, n_episodes: int) -> None:
    assert FIGURES <= set(figures), figures
    assert 0.0 <= figures["first_attempt_pass_rate"] <= figures["post_repair_pass_rate"] <= 1.0
    assert figures["post_repair_key"] == "repair@2"  # 3 attempts = 2 feedback rounds
    assert 1.0 <= figures["attempts"] <= 3.0 and figures["turns"] == figures["attempts"]
    assert figures["episode_tokens"] > 0 and 0.0 <= figures["truncation_rate"] <= 1.0


@pytest.mark.slow
def test_tiny_repair_run_and_eval(tmp_path, capsys):
    out = tmp_path / "run"
    res = posttrain("run", "configs/tiny-repair.yaml", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for name in ("base", "sft", "rl"):
        check_figures(summary["eval"][name]["episodes"], 8)
        records = [json.loads(line) for line in (out / "eval" / f"{name}.jsonl").read_text().splitlines()]
        by_episode: dict = {}
        for r in records:
            by_episode.setdefault((r["task_id"], r["sample_idx"]), []).append(r["attempt"])
        assert len(by_episode) == 8 and all(a == list(range(len(a))) for a in by_episode.values())
        # a later attempt was sampled after the earlier one and its feedback, as ids
        later = [r for r in records if r["attempt"] > 0]
        assert all(len(r["prompt_ids"]) > len(records[0]["prompt_ids"]) for r in later)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = {r["stage"]: r for r in rows if r["stage"].startswith("eval/")}
    assert set(evals) == {"eval/base", "eval/sft", "eval/rl"}
    assert {"first_attempt_pass_rate", "post_repair_pass_rate", "turns", "truncation_rate"} <= set(evals["eval/rl"])
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 2 and all(1.0 <= r["attempts_mean"] <= 3.0 for r in rl)
    traj = [json.loads(line) for line in (out / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert max(t["attempt"] for t in traj) >= 1  # repair rounds happened during RL

    res = here(capsys, "eval", "--run", str(out), "--max-attempts", "3", "--max-new-tokens", "20", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout)
    for name in ("sft", "rl"):
        check_figures(result["eval"][name]["episodes"], 8)
        assert result["eval"][name]["max_attempts"] == 3

"""Tool-calling episodes end to end, in subprocesses: `posttrain run configs/tiny-tool-episodes.yaml`
(SFT on references, then GRPO over tool episodes, evaluated as tool episodes), then `posttrain eval
--model RUN/checkpoints/rl --episodes agent` on its held-out tasks (in the test's process: ``here``). Real model, chat template, tool
checker; the same for BFCL multi-turn tasks (`configs/tiny-bfcl.yaml`: GRPO over BFCL episodes whose
calls run on the task's backends in the sandbox). A tiny run learns little: the test checks that the figures exist, are consistent and reach every output (summary.json,
metrics.jsonl, eval records, report.html, eval --json); the per-turn mechanics and the validity rate
are checked exactly in tests/envs/test_tool_episodes.py and tests/evaluate/test_endpoint.py.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
FIGURES = {"first_attempt_pass_rate", "post_repair_pass_rate", "mean_attempts_to_success", "tool_call_validity",
           "turns", "attempts", "episode_tokens", "truncation_rate", "tool_calls", "tool_calls_valid"}


def posttrain(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def check_figures(f: dict, max_turns: int) -> None:
    assert FIGURES <= set(f), f
    assert 1.0 <= f["turns"] <= max_turns and 0.0 <= f["truncation_rate"] <= 1.0 and f["episode_tokens"] > 0
    assert f["first_attempt_pass_rate"] == f["post_repair_pass_rate"]  # one verdict per tool episode
    assert 0.0 <= f["tool_calls_valid"] <= f["tool_calls"]
    assert f["tool_call_validity"] == (f["tool_calls_valid"] / f["tool_calls"] if f["tool_calls"] else None)


@pytest.mark.slow
def test_tiny_tool_episodes_run_and_eval(tmp_path, capsys):
    out = tmp_path / "run"
    res = posttrain("run", "configs/tiny-tool-episodes.yaml", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for name in ("base", "sft", "rl"):
        check_figures(summary["eval"][name]["episodes"], 3)
        records = [json.loads(line) for line in (out / "eval" / f"{name}.jsonl").read_text().splitlines()]
        assert sorted(r["task_id"] for r in records) == sorted({r["task_id"] for r in records})  # one per episode
        assert len(records) == 6 and all(r["domain"] == "tool" for r in records)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 2 and all({"turns_mean", "first_attempt_pass_rate", "post_repair_pass_rate"} <= set(r) for r in rl)
    assert {"eval/base", "eval/sft", "eval/rl"} <= {r["stage"] for r in rows}
    assert "<h3>Episodes</h3>" in (out / "report.html").read_text()

    # (not --run: generated tool prompts share 13-grams with the training pool, which --run refuses)
    res = here(capsys, "eval", "--model", str(out / "checkpoints" / "rl"), "--tasks", str(out / "tasks" / "eval.jsonl"),
               "--episodes", "agent", "--max-turns", "2", "--max-new-tokens", "40", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout)
    check_figures(result["episodes"], 2)
    assert result["n_tasks"] == 6


@pytest.mark.slow
def test_tiny_bfcl_run_and_eval(tmp_path, capsys):
    """BFCL multi-turn tasks through `posttrain run configs/tiny-bfcl.yaml` (GRPO over BFCL episodes,
    backends in the run's sandbox pool) and `posttrain eval --episodes agent` on its checkpoint."""
    out = tmp_path / "run"
    res = posttrain("run", "configs/tiny-bfcl.yaml", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for name in ("base", "rl"):
        check_figures(summary["eval"][name]["episodes"], 2)  # the eval tasks have 2 user turns
        records = [json.loads(line) for line in (out / "eval" / f"{name}.jsonl").read_text().splitlines()]
        assert len(records) == 2 and all(r["domain"] == "bfcl" and r["turns"] for r in records)
        # every episode reaches its verdict (max_turns caps each user turn's steps, not the episode)
        assert summary["eval"][name]["episodes"]["truncation_rate"] == 0.0
        assert all(r["error_class"] != "truncated" for r in records)
    [rl] = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if r["stage"] == "rl"]
    assert rl["turns_mean"] == 3.0 and rl["truncation_rate"] == 0.0  # the training tasks have 3 user turns
    traj = [json.loads(line) for line in (out / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert traj and all(r["domain"] == "bfcl" for r in traj)

    res = here(capsys, "eval", "--model", str(out / "checkpoints" / "rl"), "--tasks", "examples/tasks/bfcl.jsonl",
               "--limit", "1", "--episodes", "agent", "--max-turns", "2", "--max-new-tokens", "16", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    check_figures(json.loads(res.stdout)["episodes"], 2)
    assert json.loads(res.stdout)["episodes"]["truncation_rate"] == 0.0

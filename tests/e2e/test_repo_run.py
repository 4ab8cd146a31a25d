"""The repo domain end to end, in subprocesses, as a user runs it: `posttrain tasks validate` of the
examples, `posttrain verify` of a diff, `posttrain eval --episodes agent --agent oracle|noop|<cheat>`
(the scripted agents through the same runner, tools and template a model uses), its records in
`posttrain report`'s per-turn viewer, and `posttrain run configs/tiny-repo.yaml` (SFT on the
oracle's episodes, then GRPO over multi-turn repo episodes on the embedded default). The eval test's
other agents and its report run in the test's process (``run_logs.here``: the same code, no second
import of torch).

Budget (2 cores, measured at load ~15): tasks validate (two of the examples; all of them go through
the service in tests/envs/test_domains.py) ~10 s, verify ~5 s, eval ~45 s, run ~90 s:
about 3 minutes in all. The per-step mechanics are tests/envs/test_workspace_kit.py and
tests/envs/test_repo_agent.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks" / "repo.jsonl"
EPISODES = "agent"


def posttrain(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_tasks_validate_and_verify_a_diff(tmp_path):
    records = [json.loads(line) for line in EXAMPLES.read_text().splitlines()]
    assert len(records) >= 10  # each is validated through the service by tests/envs/test_domains.py
    for rec in records[:2]:
        rec["repo"]["dir"] = str(EXAMPLES.parent / rec["repo"]["dir"])
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in records[:2]))
    res = posttrain("tasks", "validate", str(tmp_path / "two.jsonl"))
    assert res.returncode == 0 and "2 tasks, 0 problem(s)" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    record = records[0]
    (tmp_path / "task.json").write_text(json.dumps(record))
    diff = record["reference"].removeprefix("```diff\n").removesuffix("```\n")
    (tmp_path / "fix.diff").write_text(diff)
    res = posttrain("verify", "--task", str(tmp_path / "task.json"), "--response", str(tmp_path / "fix.diff"),
                    "--workers", "1")
    assert res.returncode == 0 and json.loads(res.stdout)["outcome"] == "pass", res.stderr[-2000:]
    (tmp_path / "bad.diff").write_text(diff.replace("+    return name.strip().lower()", "+    return name"))
    res = posttrain("verify", "--task", str(tmp_path / "task.json"), "--response", str(tmp_path / "bad.diff"),
                    "--workers", "1")
    verdict = json.loads(res.stdout)
    assert res.returncode == 0 and verdict["outcome"] == "fail" and "test_summary_counts_case_insensitively" in \
        verdict["feedback"]


@pytest.mark.slow
def test_eval_plays_scripted_agents_and_the_report_shows_their_calls(tmp_path, capsys):
    def agent(name: str, limit: str) -> dict:
        args = ["eval", "--tasks", str(EXAMPLES), "--limit", limit, "--episodes", EPISODES, "--agent", name,
                "--max-turns", "30", "--max-new-tokens", "8192", "--workers", "2", "--json", "--out", str(tmp_path / name)]
        # the oracle through the real entry point, the others in this process (the same code, no second torch import)
        res = posttrain(*args) if name == "oracle" else here(capsys, *args)
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout)

    oracle = agent("oracle", "3")
    assert oracle["pass@1"] == 1.0 and oracle["infra_errors"] == 0
    ep = oracle["episodes"]
    assert ep["tool_call_validity"] == 1.0 and 3 <= ep["turns"] <= 6 and ep["episode_tokens"] > 0
    for name in ("noop", "patch_reporting"):
        s = agent(name, "2")
        assert s["pass@1"] == 0.0 and s["episodes"]["post_repair_pass_rate"] == 0.0 and s["infra_errors"] == 0
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    shutil.copy(tmp_path / "oracle" / "records.jsonl", run / "eval" / "oracle.jsonl")
    res = here(capsys, "report", str(run))
    assert res.returncode == 0, res.stderr[-2000:]
    html = (run / "report.html").read_text()
    assert html.count('class="call"') >= 3 * 4 and "run_tests" in html and "Accepted." in html


@pytest.mark.slow
def test_tiny_repo_recipe_runs_sft_on_oracle_episodes_then_grpo(tmp_path):
    out = tmp_path / "run"
    res = posttrain("run", "configs/tiny-repo.yaml", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for name in ("base", "sft", "rl"):
        ep = summary["eval"][name]["episodes"]
        assert 1.0 <= ep["turns"] <= 3 and ep["episode_tokens"] > 0 and ep["truncation_rate"] == 0.0
        records = [json.loads(line) for line in (out / "eval" / f"{name}.jsonl").read_text().splitlines()]
        assert len(records) == 2 and all(r["domain"] == "repo" and r["outcome"] in ("pass", "fail") for r in records)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    sft = [r for r in rows if r["stage"] == "sft"]
    assert sft and sft[0]["loss"] > 0  # trained on the oracle's episodes
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 1 and rl[0]["turns_mean"] >= 1.0
    traj = [json.loads(line) for line in (out / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert len(traj) == 2 and all(r["domain"] == "repo" for r in traj)

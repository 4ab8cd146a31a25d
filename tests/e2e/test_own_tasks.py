"""A recipe trains (SFT, then GRPO) on a user's own task files of all four domains, through `posttrain run`.

The task files are written here the way a user would make them: each domain's generated tasks
saved with ``task_to_record`` (one JSONL file per domain), plus one raw HumanEval-format
``.jsonl.gz`` (no ``domain`` field: the recipe gives ``domain: code``). Real model, sandbox and
verifiers, in a subprocess; tiny settings (about a minute on 2 cores).
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.envs import get_domain, task_to_record

ROOT = Path(__file__).resolve().parents[2]
DOMAINS = ("math", "code", "json", "tool")
N_TRAIN, N_EVAL = 6, 2


def write_own_tasks(where: Path) -> dict:
    """One task file per domain and a raw HumanEval file; returns the recipe's ``tasks`` section."""
    where.mkdir(parents=True, exist_ok=True)
    train, held = [], []
    for domain in DOMAINS:
        path = where / f"my-{domain}.jsonl"
        tasks = get_domain(domain).generate_tasks(N_TRAIN + N_EVAL, seed=3)
        path.write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in tasks))
        train.append({"file": str(path), "n": N_TRAIN})
        held.append({"file": str(path), "skip": N_TRAIN})
    humaneval = where / "HumanEval.jsonl.gz"  # HumanEval's own format: task_id, canonical_solution, no domain
    with gzip.open(humaneval, "wt") as f:
        for i, t in enumerate(get_domain("code").generate_tasks(4, seed=11)):
            f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": t.prompt, "entry_point": t.fields["entry_point"],
                                "canonical_solution": t.reference, "test": t.fields["test"]}) + "\n")
    train.append({"file": str(humaneval), "domain": "code", "n": 3})
    held.append({"file": str(humaneval), "domain": "code", "skip": 3})
    return {"train": train, "eval": held}


def tiny_recipe(tasks: dict) -> dict:
    return {
        "seed": 0,
        "stages": ["sft", "rl"],
        "model": {"name": "embedded", "hidden_size": 32, "num_layers": 1, "max_positions": 2048},
        "tasks": tasks,
        "sft": {"demonstrations": "references", "epochs": 1, "batch_size": 9},
        "rl": {"steps": 2, "prompts_per_step": 8, "group_size": 2, "max_new_tokens": 12, "checkpoint_every": 2},
        "eval": {"samples_per_task": 1, "max_new_tokens": 12},
    }


@pytest.mark.slow
def test_sft_then_rl_on_own_task_files_of_all_four_domains(tmp_path):
    recipe = tmp_path / "own.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(write_own_tasks(tmp_path / "data"))))
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(recipe), "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    # the run's task pools are the user's tasks, split as the recipe says
    train = [json.loads(x) for x in (out / "tasks" / "train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (out / "tasks" / "eval.jsonl").read_text().splitlines()]
    assert len(train) == 4 * N_TRAIN + 3 and len(held) == 4 * N_EVAL + 1
    assert {t["domain"] for t in held} == set(DOMAINS)
    assert {t["id"] for t in held if t["id"].startswith("HumanEval/")} == {"HumanEval/3"}
    assert not {t["id"] for t in train} & {t["id"] for t in held}
    # SFT ran on the references, RL sampled and verified tasks of every domain
    stages = [json.loads(x)["stage"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert "sft" in stages and stages.count("rl") == 2
    traj = [json.loads(x) for x in (out / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert len(traj) == 2 * 8 * 2
    assert {r["domain"] for r in traj} == set(DOMAINS)
    assert all(r["outcome"] in ("pass", "fail") for r in traj)  # verified, no infra error
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["eval"]) == {"base", "sft", "rl"}  # no scripted demonstrator for these tasks
    for model in ("base", "sft", "rl"):
        assert set(summary["eval"][model]["per_domain"]) == set(DOMAINS)
        assert summary["eval"][model]["infra_errors"] == 0


@pytest.mark.slow
def test_no_sandbox_when_no_task_needs_one(tmp_path, monkeypatch):
    """math and json only: the run (RL, evaluation) never opens a sandbox pool."""
    import posttrain.sandbox
    from posttrain.cli.pipeline import run_recipe
    from posttrain.train.recipe import load_recipe

    def refuse(*args, **kwargs):
        raise AssertionError("a sandbox pool was opened for tasks that need none")

    monkeypatch.setattr(posttrain.sandbox, "open_pool", refuse)
    tasks = write_own_tasks(tmp_path / "data")
    keep = {"train": tasks["train"][0:3:2], "eval": tasks["eval"][0:3:2]}  # math, json
    recipe = {**tiny_recipe(keep), "stages": ["rl"]}
    recipe["rl"] = {**recipe["rl"], "steps": 1, "prompts_per_step": 2}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    summary = run_recipe(load_recipe(tmp_path / "r.yaml"), tmp_path / "run")
    assert set(summary["eval"]["rl"]["per_domain"]) == {"math", "json"}

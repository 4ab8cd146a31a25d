"""``posttrain --version``, ``posttrain generate``, and the small pieces of run/resume bookkeeping."""

from __future__ import annotations

import argparse
import json

import pytest

import posttrain
from posttrain.cli import main
from posttrain.policy import EmbeddedModelSpec, build_embedded_default, load_policy


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_embedded_default(tmp_path_factory.mktemp("m") / "tiny", spec=EmbeddedModelSpec(max_positions=64))


@pytest.fixture(scope="module")
def reward_model(tiny, tmp_path_factory):
    from posttrain.train.rm import make_reward_model

    path = tmp_path_factory.mktemp("rm") / "rm"
    make_reward_model(tiny).save_pretrained(path)
    load_policy(tiny).tokenizer.save_pretrained(path)
    return path


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"posttrain {posttrain.__version__}"


def test_python_dash_m_posttrain_is_the_command():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "posttrain", "--version"], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout.strip()) == (0, f"posttrain {posttrain.__version__}"), p.stderr[-500:]


def test_generate_prompts_text_and_json(tiny, capsys):
    args = ["generate", str(tiny), "--prompt", "1+1=", "--prompt", "def f():", "--max-new-tokens", "5"]
    assert main([*args, "--n", "2", "--temperature", "1.0", "--seed", "3", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["prompt"], r["sample_idx"]) for r in rows] == [("1+1=", 0), ("1+1=", 1), ("def f():", 0), ("def f():", 1)]
    assert all(1 <= len(r["completion_ids"]) <= 5 and r["task_id"] is None for r in rows)
    # the same ids the policy samples with that seed: generate adds nothing of its own
    want = load_policy(tiny).generate(["1+1=", "def f():"], n=2, temperature=1.0, max_new_tokens=5, seed=3)
    assert [r["completion_ids"] for r in rows] == [list(g.completion_ids) for gs in want for g in gs]
    # text output: one header line per sample, then prompt + completion; greedy is repeatable
    assert main(args) == 0
    first = capsys.readouterr().out
    assert first.count("=== prompt") == 2 and "sample 1/1" in first
    assert main(args) == 0 and capsys.readouterr().out == first


def test_generate_from_a_task_file(tiny, tmp_path, capsys):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "m1", "domain": "math", "prompt": "2+2=", "answer": "4"}) + "\n")
    assert main(["generate", str(tiny), "--tasks", str(tasks), "--max-new-tokens", "3", "--json"]) == 0
    out = capsys.readouterr().out
    (row,) = [json.loads(x) for x in out.splitlines()]
    assert row["task_id"] == "m1" and row["prompt"] == "2+2=" and isinstance(row["completion"], str)
    # --json lines are a responses file for posttrain eval
    (tmp_path / "r.jsonl").write_text(out)
    assert main(["eval", "--tasks", str(tasks), "--responses", str(tmp_path / "r.jsonl"), "--k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_samples"] == 1


@pytest.mark.parametrize("extra, message", [
    (["--n", "0"], "--n must be >= 1"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["--temperature", "-1"], "--temperature must be 0 (greedy) or a number >= 1e-05"),
    (["--temperature", "nan"], "--temperature must be 0 (greedy) or a number >= 1e-05"),
    (["--temperature", "1e-38"], "--temperature must be 0 (greedy) or a number >= 1e-05"),
    (["--max-new-tokens", "500"], "exceeds the model's 64 positions"),
])
def test_generate_bad_numbers_are_one_line(tiny, capsys, extra, message):
    assert main(["generate", str(tiny), "--prompt", "x", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_generate_bad_sources_are_one_line(tiny, reward_model, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    (tmp_path / "dir").mkdir()
    cases = [
        (["generate", str(tmp_path / "nope"), "--prompt", "x"], "no such model directory"),
        (["generate", str(tmp_path / "dir"), "--prompt", "x"], "not a model directory"),
        (["generate", str(reward_model), "--prompt", "x"], "a reward model (LlamaForSequenceClassification)"),
        (["generate", str(tiny)], "give --prompt TEXT"),
        (["generate", str(tiny), "--tasks", str(empty)], f"no tasks in {empty}"),
        (["generate", str(tiny), "--tasks", str(tmp_path / "nope.jsonl")], "nope.jsonl: no such file"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, (argv, err)


def test_recipe_changes_name_each_key():
    from posttrain.cli.pipeline import recipe_changes

    saved = {"seed": 0, "rl": {"steps": 12, "lr": 0.001}, "model": {"lora": None}}
    new = {"seed": 0, "rl": {"steps": 50, "lr": 0.001}, "model": {"lora": {"r": 4}}, "extra": 1}
    assert recipe_changes(saved, new) == ["rl.steps (12 -> 50)", "model.lora (None -> {'r': 4})",
                                          "extra ((not set) -> 1)"]
    assert recipe_changes(saved, saved) == []


def test_resume_command_is_exact_and_quoted():
    from posttrain.cli.run import resume_command

    ns = argparse.Namespace(out="runs/a b", overrides=["rl.steps=5", "model.lora={r: 4}"])
    assert resume_command(["run", "configs/x.yaml"], ns) == (
        "posttrain run configs/x.yaml --out 'runs/a b' --resume --set rl.steps=5 --set 'model.lora={r: 4}'")


def test_quickstart_dirs_latest_unfinished_first(tmp_path):
    from posttrain.cli.run import _resume_dir, _unused_dir

    base = tmp_path / "runs" / "quickstart"
    assert _unused_dir(base) == base and _resume_dir(base) == base
    for name, finished in (("quickstart", False), ("quickstart-2", False), ("quickstart-3", True)):
        d = base.with_name(name)
        (d / "checkpoints" / "base").mkdir(parents=True)
        (d / "config.yaml").write_text("stages: []\n")
        if finished:
            (d / "summary.json").write_text("{}")
            (d / "checkpoints" / "base" / "DONE").write_text("ok\n")
    assert _unused_dir(base) == base.with_name("quickstart-4")
    assert _resume_dir(base) == base.with_name("quickstart-2")  # the latest one not finished
    (base.with_name("quickstart-10") / "checkpoints").mkdir(parents=True)
    (base.with_name("quickstart-10") / "config.yaml").write_text("stages: []\n")
    assert _resume_dir(base) == base.with_name("quickstart-10")  # numbers, not names, order them


def test_resume_accepts_a_config_that_predates_a_key(tmp_path):
    """A run whose config.yaml was written before a key existed resumes when the recipe leaves
    that key at its default; a real change is still refused, naming the key."""
    import yaml

    from posttrain.cli.pipeline import prepare_run_dir
    from posttrain.errors import UserError
    from posttrain.train.recipe import load_recipe

    recipe = load_recipe("configs/tiny-grpo.yaml")
    prepare_run_dir(tmp_path, recipe, resume=False)
    cfg = tmp_path / "config.yaml"
    saved = yaml.safe_load(cfg.read_text())
    del saved["model"]["max_positions"]  # as written before model.max_positions existed
    cfg.write_text(yaml.safe_dump(saved, sort_keys=False))
    prepare_run_dir(tmp_path, recipe, resume=True)
    saved["rl"]["steps"] = saved["rl"]["steps"] + 1
    cfg.write_text(yaml.safe_dump(saved, sort_keys=False))
    with pytest.raises(UserError, match=r"changed: rl\.steps"):
        prepare_run_dir(tmp_path, recipe, resume=True)

"""Issue 26 as the reporter met it, end to end: an engineer's own Qwen2-style model with a ChatML
template, their own code tasks (bare signatures) and a reward as a Python function of theirs, through
``posttrain run``, ``--resume`` and ``posttrain eval`` as subprocesses (real model, sandbox, verifiers).

What it checks: the run says what it does (a short header, not the resolved recipe; progress bars
with rate and time left; no transformers generation-flag line, no raw UserWarning), records the
model's real architecture, says where it resumes, and ``posttrain eval --run`` follows the recipe's
length (with a bar) while ``eval --model`` over the model's positions is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _own_model import tiny_qwen_dir  # noqa: E402

HEADER = ["recipe", "model", "tokenizer", "prompts", "sampling", "tasks", "stages", "run"]


def cli(cwd: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}", "COLUMNS": "120"}
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == code, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    for noise in ("generation flags are not valid", "UserWarning", "grpo.py:", "Loading weights"):
        assert noise not in p.stderr, (noise, p.stderr[-3000:])
    return p


def bars(stderr: str, name: str) -> list[str]:
    """The progress lines of a phase (the last redraw of each): done/total, elapsed, rate, eta."""
    lines = [line for chunk in stderr.split("\r") for line in chunk.splitlines() if line.startswith(name)]
    assert lines, stderr[-3000:]
    return lines


@pytest.mark.slow
def test_a_run_on_your_own_model_says_what_it_does(tmp_path, capsys) -> None:
    model = tiny_qwen_dir(tmp_path / "qwen")
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent('''
        def exact(prompt, completion, answer, **data):
            return 1.0 if completion.strip() == answer else 0.0
    '''))
    rows = [{"id": f"f{i}", "domain": "function", "prompt": f"{i}+{i}=", "data": {"answer": str(2 * i)},
             "reference": str(2 * i)} for i in range(8)]
    rows += [{"id": f"c{i}", "domain": "code", "prompt": f"def add_{i}(x):\n", "entry_point": f"add_{i}",
              "test": f"def check(candidate):\n    assert candidate(1) == {1 + i}\n",
              "reference": f"```python\ndef add_{i}(x):\n    return x + {i}\n```"} for i in range(4)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({
        "seed": 0, "stages": ["sft", "rl"], "model": {"name": "qwen"}, "reward": "my_rewards:exact",
        "tasks": {"train": [{"file": "tasks.jsonl", "n": 6}, {"file": "tasks.jsonl", "skip": 8, "n": 2}],
                  "eval": [{"file": "tasks.jsonl", "skip": 6, "n": 1}, {"file": "tasks.jsonl", "skip": 10, "n": 1}]},
        "sft": {"demonstrations": "references", "epochs": 1},
        "rl": {"steps": 4, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8, "checkpoint_every": 2},
        "eval": {"samples_per_task": 1, "max_new_tokens": 12}}))
    assert (tmp_path / "tasks.jsonl").is_file() and model.is_dir()

    run = cli(tmp_path, "run", "recipe.yaml", "--out", "run")
    head = run.stderr.splitlines()[: len(HEADER)]
    assert [line.split()[0] for line in head] == HEADER, run.stderr[:3000]
    assert head[1] == "model      qwen: qwen2, 2 layers, hidden 64, 2,048 positions, 80.9K parameters; float32 on cpu"
    assert head[3] == "prompts    the chat template of qwen (model.chat: auto: it ends an assistant turn with the EOS)"
    assert head[4] == "sampling   softmax(logits / temperature); qwen/generation_config.json's top_k, repetition_penalty are not used"
    assert head[5] == "tasks      train 8 (function 6, code 2); eval 2 (function 1, code 1)"
    assert head[7] == "run        run; the full resolved recipe: run/config.yaml"
    for phase in ("sft", "rl (grpo)", "eval base", "eval sft", "eval rl"):
        last = bars(run.stderr, phase)[-1]
        assert "/s" in last or "s/" in last, last  # a rate: "3.20 step/s" or "4.1 s/step"
        assert " eta " in last, last
    assert "rl:" not in run.stdout and "held-out pass@1" in run.stdout  # the table, not the resolved recipe
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]
    assert (saved["hidden_size"], saved["num_layers"], saved["max_positions"]) == (64, 2, 2048)

    # an interrupted RL stage: its checkpoint at step 2 is the latest, the stage not done, no summary
    ckpts = tmp_path / "run" / "checkpoints"
    (ckpts / "rl-state" / "latest").write_text(json.dumps({"name": "step-000002"}))
    for done in (ckpts / "rl" / "DONE", tmp_path / "run" / "summary.json"):
        done.unlink()
    resumed = cli(tmp_path, "run", "recipe.yaml", "--out", "run", "--resume")
    assert f"resumed at stage rl step 2 ({Path('run') / 'checkpoints' / 'rl-state' / 'step-000002'})" in \
        resumed.stderr.splitlines()[len(HEADER)], resumed.stderr[:3000]
    assert " 4/4 " in bars(resumed.stderr, "rl (grpo)")[-1]

    ev = cli(tmp_path, "eval", "--run", "run", "--json")
    assert "note: --max-new-tokens 12 (the recipe's eval.max_new_tokens" in ev.stderr  # was 512, no word said
    for name in ("base", "sft", "rl"):
        assert (tmp_path / "run" / "eval" / f"{name}@heldout2-n1-t0-len12-seed0.jsonl").is_file()
        assert " eta " in bars(ev.stderr, f"eval {name}")[-1]
    assert set(json.loads(ev.stdout)["eval"]) == {"base", "sft", "rl"}
    refused = here(capsys, "eval", "--model", "run/checkpoints/rl", "--tasks", "run/tasks/eval.jsonl",  # a refusal
                   "--max-new-tokens", "2100", cwd=tmp_path)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("posttrain: error: --max-new-tokens 2100: the model has 2,048 positions"), line

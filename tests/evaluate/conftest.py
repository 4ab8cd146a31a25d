"""Shared fixtures: a small but complete run directory, written the way the trainer writes it."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
from pathlib import Path

import pytest

from posttrain.cli.evaluate import register
from posttrain.errors import UserError
from posttrain.evaluate.records import EvalRecord, write_records


def _record(task: int, domain: str, outcome: str, *, sample: int = 0, attempt: int = 0, stage: str = "rl",
            step: int | None = None, flags: tuple[str, ...] = ()) -> EvalRecord:
    return EvalRecord(
        task_id=f"{domain}-{task}",
        domain=domain,
        outcome=outcome,
        reward=None if outcome == "infra_error" else float(outcome == "pass"),
        sample_idx=sample,
        attempt=attempt,
        feedback_source="none" if attempt == 0 else "error",
        prompt=f"Task {task}: compute <b>{task}</b> + 1.",
        completion=f"answer attempt {attempt}: {task + 1 if outcome == 'pass' else task}",
        feedback="" if outcome == "pass" else "AssertionError: expected other value",
        error_class=None if outcome != "fail" else "assertion",
        verifier_version=f"{domain}/1",
        hack_flags=flags,
        tags=("arith",) if task % 2 else ("logic",),
        tokens=12,
        wall_s=0.05,
        stage=stage,
        step=step,
    )


def make_run(root: Path) -> Path:
    """A run dir with metrics, summary-less evals (recomputed), trajectories with all outcome kinds."""
    rng = random.Random(0)
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: tiny\nrl:\n  steps: 20\n")
    with (run / "metrics.jsonl").open("w") as fh:
        for step in range(10):
            fh.write(json.dumps({"stage": "sft", "step": step, "loss": 2.0 - 0.1 * step, "tokens_per_s": 900.0}) + "\n")
        for step in range(20):
            fh.write(json.dumps({
                "stage": "rl", "step": step, "loss": 0.1, "reward_mean": 0.2 + 0.03 * step, "reward_std": 0.3,
                "frac_zero_std": 0.1, "kl": 0.001 * step, "clip_frac": 0.05, "entropy": 1.0 - 0.01 * step,
                "tokens_per_s": 500.0 + step, "wall_s": 1.0 * step, "pass_rate/math": 0.3 + 0.02 * step,
                "pass_rate/code": 0.1 + 0.01 * step, "grad_norm": math.exp(-step),
            }) + "\n")
    trajs = []
    for step in range(3):
        for task in range(6):
            domain = "math" if task < 3 else "code"
            if task == 0:
                trajs.append(_record(task, domain, "pass", step=step))
            elif task == 1:
                trajs += [_record(task, domain, "fail", step=step),
                          _record(task, domain, "pass", attempt=1, step=step)]
            elif task == 2:
                trajs.append(_record(task, domain, "infra_error", step=step))
            elif task == 3:
                trajs.append(_record(task, domain, "pass", step=step, flags=("diff_guard",)))
            else:
                trajs += [_record(task, domain, "fail", step=step), _record(task, domain, "fail", attempt=1, step=step)]
    write_records(run / "trajectories" / "rl.jsonl", trajs)
    for model, p in (("base", 0.3), ("rl", 0.7)):
        recs = [_record(t, "math" if t < 10 else "code", "pass" if rng.random() < p else "fail", sample=s, stage=model)
                for t in range(20) for s in range(5)]
        write_records(run / "eval" / f"{model}.jsonl", recs)
    return run


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path)



def _run_cli(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``posttrain <argv>`` restricted to eval/report/audit."""
    parser = argparse.ArgumentParser(prog="posttrain")
    register(parser.add_subparsers())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        args = parser.parse_args(list(argv))
        try:
            code = int(args.func(args))
        except UserError as e:
            print(f"posttrain: error: {e}", file=err)
            code = 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def run_cli():
    """``run_cli(*argv) -> (code, stdout, stderr)`` for the evaluate subcommands."""
    return _run_cli

"""What the end-to-end resume tests compare between a run and its killed-and-resumed twin: the RL
rows of metrics.jsonl without timings, the tasks of each step, a file's sha256; and ``here``, a
``posttrain`` command in the test's own process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TIMING = ("wall_s", "step_s", "gen_s", "gen_idle_s", "train_idle_s", "tokens_per_s")


def rl_rows(out: Path) -> list[dict]:
    """RUN/metrics.jsonl's rl rows, without the timings and the scheduler's counters."""
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING and not k.startswith("sched/")}
            for r in rows if r["stage"] == "rl"]


def tasks_per_step(out: Path, *, every_sample: bool = False) -> list[list[str]]:
    """The task ids of each RL step in RUN/trajectories/rl.jsonl: one per group (its first sample), or
    one per sample."""
    steps: dict[int, list[str]] = {}
    for line in (out / "trajectories" / "rl.jsonl").read_text().splitlines():
        r = json.loads(line)
        if every_sample or r["sample_idx"] == 0:
            steps.setdefault(r["step"], []).append(r["task_id"])
    return [steps[s] for s in sorted(steps)]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def here(capsys: pytest.CaptureFixture[str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``posttrain *args`` through ``posttrain.cli.main`` in this process, from ``cwd``, as
    ``subprocess.run`` would return it. For the commands of a test after its first subprocess (an eval
    of the run's checkpoint, a refusal): the same code, without a second process importing torch and
    transformers (~5 CPU-s each)."""
    from posttrain.cli import main

    capsys.readouterr()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse's own exit
        code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(before)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["posttrain", *args], code, out.out, out.err)

"""A run directory left by a crash: resume exactly, or one line naming the file, nothing written lost.

Run logs (``train._runlog.truncate_after``, which ``--resume`` runs on metrics.jsonl and
trajectories/rl.jsonl before any log is opened): before, a damaged line anywhere in the file was
dropped as if a kill had cut it, and lines of a stage written twice were kept. Over a tiny
``posttrain run`` killed after its step-2 checkpoint whose logs were then damaged, 5 of 5 resumed
wrong: silently 3 (a trajectory line lost, 15 of 16; rl step 0's metrics row lost, 4 of 5; step 0's
4 trajectories counted twice, 20 of 16), with a traceback 2 (a line that is no JSON object, a step
that is a string). Now each is one ``UserError`` naming ``file:line``, the file byte for byte as it
was; the last line a kill cut short (no line end) is still dropped, and lines past the checkpoint.

Kill points (SIGKILL at every write, rename and fsync of a tiny ``posttrain run``, then ``--resume``)
are swept outside the suite; tests/e2e/test_run.py pins one kill -9 mid-step.
"""

import json
import re
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.train._runlog import JsonlWriter, truncate_after


def _log(path: Path, steps: list[int]) -> None:
    """metrics.jsonl as a run writes it: an sft row, then one rl row per step."""
    w = JsonlWriter(path)
    w.write({"stage": "sft", "step": 0, "loss": 1.5})
    for s in steps:
        w.write_many([{"stage": "rl", "step": s, "reward_mean": s / 10}])
    w.close()


def test_a_line_cut_by_the_kill_is_dropped_and_a_damaged_or_doubled_one_is_refused(tmp_path):
    log = tmp_path / "metrics.jsonl"
    _log(log, [0, 1, 2])
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"stage": "rl", "st')  # killed mid-line, in step 3
    truncate_after(log, stage="rl", step=2)  # resumed from the step-2 checkpoint
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0, 0, 1]
    lines = whole.decode().splitlines(keepends=True)
    damaged = {
        "middle": ("".join([lines[0], lines[1][:9] + "\n", *lines[2:]]), ":2: not a JSON line"),
        "array": ("".join([lines[0], "[1, 2]\n", *lines[2:]]), ":2: not a JSON object"),
        "step": ("".join([lines[0], lines[1].replace('"step": 0', '"step": "0"'), *lines[2:]]), ":2: its step '0'"),
        "doubled": ("".join([*lines, lines[1]]), ":5: step 0 of stage rl after step 2 (line 4)"),
    }
    for name, (text, says) in damaged.items():
        log.write_text(text)
        with pytest.raises(UserError, match=re.escape(f"metrics.jsonl{says}")):
            truncate_after(log, stage="rl", step=2)
        assert log.read_text() == text, f"{name}: the file was changed"

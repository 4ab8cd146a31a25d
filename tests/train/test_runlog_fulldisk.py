"""A full disk while the run appends to its logs, or rewrites one on --resume, or saves the KL reference:
one line naming the file, nothing written before lost, no cut line left, and the resume after space
is freed exact (a real tmpfs that fills: root, else skipped).

Before: ``JsonlWriter`` wrote through Python's buffered file: ENOSPC was a traceback (``OSError``, and
again at ``close``), the file was left ending in a cut line, and the unwritten rest stayed in the
buffer for a later flush to append; ``truncate_after`` on a full disk was a traceback that left its
half ``.tmp`` copy holding the space; ``disk_full`` took any error holding ENOSPC in its context for
a full disk, so the pipeline's stage wrapper replaced the run log's (and the RL checkpoint's) own line
by "checkpoints/rl: ... while saving the stage's checkpoint". A tiny ``posttrain run`` whose RUN is a
2400 KiB tmpfs fills it appending step 6's trajectories: that line before, exit 2; now
"RUN/trajectories/rl.jsonl: no space left on the device while appending to the run's log ...", the
lines of that write taken back; ``--resume`` once the tmpfs is grown: 192 of 192 trajectory lines
and the RL weights equal to an uninterrupted run's, before and after.

``reference.pt`` was ``torch.save``'d in place: SIGKILL mid-save left a cut reference.pt in 5 of 5
kills, and a full disk left the cut file holding the space; now it is written beside and renamed
(``checkpoint.save_beside``): 0 of 5, the old file as it was.
"""

import json
from pathlib import Path

import pytest
import torch

from posttrain.errors import UserError
from posttrain.train._runlog import JsonlWriter, truncate_after
from posttrain.train.checkpoint import CheckpointError, disk_full, save_beside


@pytest.fixture()
def small(tmpfs_of):
    """A 64 KiB tmpfs (root only), unmounted after."""
    return tmpfs_of("64k")


def _rows(step: int) -> list[dict[str, object]]:
    """One step's trajectory lines (~1.4 KB): a batch whose end the full disk cuts mid-line."""
    return [{"stage": "rl", "step": step, "i": i, "text": "x" * 333} for i in range(4)]


def _fill(log: Path) -> int:
    """Append steps until the disk is full; the step whose write failed (its error checked)."""
    w = JsonlWriter(log)
    for step in range(1000):
        try:
            w.write_many(_rows(step))
        except UserError as e:
            msg = str(e)
            assert msg.startswith(f"{log}: no space left on the device while appending to the run's log (OSError: "
                                  "[Errno 28]") and "taken back" in msg and "then --resume" in msg, msg
            assert not disk_full(e)  # the stage wrapper (pipeline._save_stage) keeps this line, not its own
            w.close()  # as the pipeline's finally does: nothing left to flush, no second error
            return step
    raise AssertionError("the tmpfs never filled")


def test_a_full_disk_mid_append_is_one_line_takes_the_write_back_and_resumes_exactly(small):
    (small / "other").write_bytes(b"\0" * 40_000)  # what the run's checkpoints hold on the same disk
    log = small / "rl.jsonl"
    failed = _fill(log)
    want = "".join(json.dumps(r) + "\n" for s in range(failed) for r in _rows(s))
    assert log.read_text() == want  # every line before the failed write, no cut one after them
    (small / "other").unlink()  # space freed; the last checkpoint is 2 steps back
    truncate_after(log, stage="rl", step=failed - 2)
    w = JsonlWriter(log)
    for s in range(failed - 2, failed + 2):
        w.write_many(_rows(s))
    w.close()
    assert log.read_text() == "".join(json.dumps(r) + "\n" for s in range(failed + 2) for r in _rows(s))


def test_a_full_disk_while_resume_rewrites_a_log_leaves_it_as_it_was(small):
    log = small / "metrics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for s in range(20) for r in _rows(s)))  # ~28 KB
    before = log.read_bytes()
    (small / "other").write_bytes(b"\0" * (64 * 1024 - len(before) - 8192))  # less than a copy's room
    with pytest.raises(UserError) as e:
        truncate_after(log, stage="rl", step=5)
    assert str(e.value).startswith(f"{log}: no space left on the device while rewriting the run's log"), str(e.value)
    assert log.read_bytes() == before and sorted(p.name for p in small.iterdir()) == ["metrics.jsonl", "other"]


def test_a_full_disk_saving_the_reference_leaves_the_old_one_and_no_copy(small):
    path = small / "reference.pt"
    save_beside({"w": torch.zeros(4)}, path)
    old = path.read_bytes()
    (small / ".reference.pt.tmp-1").write_bytes(b"cut")  # left by a save killed mid-write
    with pytest.raises(CheckpointError) as e:
        save_beside({"w": torch.zeros(64 * 1024)}, path)  # 256 KiB on a 64 KiB disk
    assert str(e.value).startswith(f"{path}: no space left on the device while saving it"), str(e.value)
    assert path.read_bytes() == old and sorted(p.name for p in small.iterdir()) == ["reference.pt"]

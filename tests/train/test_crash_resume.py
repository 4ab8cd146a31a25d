"""A run directory left by a crash: resume exactly, or one line naming the file, nothing written lost.

Run logs (``train._runlog.truncate_after``, which ``--resume`` runs on metrics.jsonl and
trajectories/rl.jsonl before any log is opened): before, a damaged line anywhere in the file was
dropped as if a kill had cut it, and lines of a stage written twice were kept. Over a tiny
``posttrain run`` killed after its step-2 checkpoint whose logs were then damaged, 5 of 5 resumed
wrong: silently 3 (a trajectory line lost, 15 of 16; rl step 0's metrics row lost, 4 of 5; step 0's
4 trajectories counted twice, 20 of 16), with a traceback 2 (a line that is no JSON object, a step
that is a string). Now each is one ``UserError`` naming ``file:line``, the file byte for byte as it
was; the last line a kill cut short (no line end) is still dropped, and lines past the checkpoint.

Full disk (``train.checkpoint.save_checkpoint``): before, ENOSPC mid-checkpoint was a traceback
(torch's "unexpected pos" RuntimeError, the OSError hidden in its context) and left the half-written
copy holding the space that ran out. Now it is one ``CheckpointError`` naming the directory, the
copy removed, ``latest`` and the last checkpoint intact (needs a tmpfs: root, else skipped).

Kill points (SIGKILL at every write, rename and fsync of a tiny ``posttrain run``, then ``--resume``)
are swept outside the suite; tests/e2e/test_run.py pins one kill -9 mid-step.
"""

import json
import re
from pathlib import Path

import pytest
import torch

from posttrain.errors import UserError
from posttrain.train._runlog import JsonlWriter, truncate_after
from posttrain.train.checkpoint import CheckpointError, load_latest, restore, save_checkpoint


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
        "doubled": ("".join([*lines, lines[1]]), ":5: step 0 of stage rl after step 1 (line 3)"),
    }
    for name, (text, says) in damaged.items():
        log.write_text(text)
        with pytest.raises(UserError, match=re.escape(f"metrics.jsonl{says}")):
            truncate_after(log, stage="rl", step=2)
        assert log.read_text() == text, f"{name}: the file was changed"


class _Weights(torch.nn.Module):
    """128 x 128 weights saved as ``save_pretrained`` saves them (safetensors): a checkpoint of ~200 KiB
    with AdamW's two moments (no transformers or optimizer import: 3 s alone)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(128, 128)

    def save_pretrained(self, directory: Path, safe_serialization: bool = True) -> None:
        from safetensors.torch import save_file

        save_file(self.state_dict(), str(Path(directory) / "model.safetensors"))


@pytest.fixture()
def tmpfs(tmpfs_of):
    """A 352 KiB tmpfs: one checkpoint fits, the next fills it in its state.pt (root only)."""
    return tmpfs_of("352k")


def test_a_full_disk_mid_checkpoint_is_one_line_and_the_last_checkpoint_resumes(tmpfs):
    torch.manual_seed(0)
    model = _Weights()
    moments = {"exp_avg": torch.randn(128, 128), "exp_avg_sq": torch.rand(128, 128)}  # AdamW's, as a sharded
    optim = {"state": {0: {"step": torch.tensor(1.0), **moments}}, "param_groups": [{"lr": 0.01, "params": [0]}]}
    save = dict(model=model, tokenizer=None, optimizer=optim, scheduler=None, keep_last=None)  # run passes it
    save_checkpoint(tmpfs, step=1, **save)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.proj.weight.add_(1.0)  # a step later
    with pytest.raises(CheckpointError, match=r"no space left on the device while saving checkpoint step-000002 "
                                              r"\(OSError: \[Errno 28\] No space left on device\); the half"):
        # torch.save's OSError, from its RuntimeError's context ("unexpected pos ...", quoted before)
        save_checkpoint(tmpfs, step=2, **save)
    assert sorted(p.name for p in tmpfs.iterdir()) == ["latest", "step-000001"]  # the half copy removed
    ckpt = load_latest(tmpfs)
    assert ckpt is not None and ckpt.step == 1
    restore(ckpt, model)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in want.items())
    state = torch.load(ckpt.path / "state.pt", weights_only=True)["optimizer"]["state"][0]
    assert all(torch.equal(state[k], v) for k, v in moments.items())


def test_a_full_disk_mid_stage_checkpoint_is_one_line_and_leaves_no_copy(tmpfs):
    """The pipeline's stage checkpoint (sft/, rl/): a traceback before, its .tmp-<stage> copy left on
    the full disk."""
    from posttrain.cli.pipeline import _save_stage

    def write(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "weights.bin").write_bytes(b"\0" * (512 * 1024))  # more than the 352 KiB there is

    with pytest.raises(CheckpointError, match=r"/sft: no space left on the device while saving the stage's "):
        _save_stage(tmpfs / "sft", write)
    assert list(tmpfs.iterdir()) == []


def test_a_report_cut_mid_write_leaves_the_page_it_had(tmp_path, monkeypatch):
    """A kill while report.html was written kept half a page for good (the resume says the run is
    finished and only checks that the page exists): the page is written beside it, then renamed."""
    from posttrain.evaluate.report import write_report

    (tmp_path / "config.yaml").write_text("seed: 0\n")
    page = write_report(tmp_path)
    whole = page.read_text()

    def cut(self: Path, text: str, **kw: object) -> int:  # the write dies halfway, as a kill would end it
        with open(self, "w", **kw) as f:
            f.write(text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut)
    with pytest.raises(KeyboardInterrupt):
        write_report(tmp_path)
    monkeypatch.undo()
    assert page.read_text() == whole and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "report.html"]

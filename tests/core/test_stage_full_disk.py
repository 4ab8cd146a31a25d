"""A full disk while a stage's checkpoint is saved (``cli.pipeline._save_stage``): one line that names
the stage's directory and quotes the write that failed, the stages saved before it untouched.

Before, the line said only "no space left on the device while saving the stage's checkpoint", the
error's own text dropped: a safetensors shard that did not fit and a JSON file that did not fit read
alike, and nothing said which library failed how. Now the line ends on the error's type and first
line ("OSError: [Errno 28] No space left on device", safetensors' "... (os error 28)"). The disk is a
real tmpfs that fills (root only, else skipped)."""

from pathlib import Path

import pytest

from posttrain.cli.pipeline import DONE, _save_stage
from posttrain.errors import UserError
from posttrain.train.checkpoint import CheckpointError


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_full_disk_names_the_stage_and_the_failed_write_and_keeps_the_stage_before(small_tmpfs):
    def base(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "weights.bin").write_bytes(b"\1" * 4096)

    def sft(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "weights.bin").write_bytes(b"\0" * (512 * 1024))  # more than the disk holds

    _save_stage(small_tmpfs / "base", base)
    kept = _files(small_tmpfs)
    with pytest.raises(CheckpointError) as err:
        _save_stage(small_tmpfs / "sft", sft)
    line = str(err.value)
    assert isinstance(err.value, UserError) and "\n" not in line  # the CLI's one line, exit 2
    assert line.startswith(f"{small_tmpfs / 'sft'}: no space left on the device while saving the stage's checkpoint "
                           "(OSError: [Errno 28] No space left on device); the half-written copy was removed")
    assert _files(small_tmpfs) == kept and sorted(p.name for p in small_tmpfs.iterdir()) == ["base"]  # no .tmp-sft left
    assert (small_tmpfs / "base" / DONE).exists()


def test_a_safetensors_shard_that_does_not_fit_is_quoted(small_tmpfs):
    """The real writer of a stage's model (``save_pretrained``): its error is no OSError, only text."""
    from posttrain.policy import build_embedded_default

    with pytest.raises(CheckpointError, match=r"/base: no space left on the device while saving the stage's "
                                              r"checkpoint \(SafetensorError: .*No space left on device \(os error "
                                              r"28\)\); the half-written copy was removed"):
        _save_stage(small_tmpfs / "base", lambda tmp: build_embedded_default(tmp, seed=0))
    assert list(small_tmpfs.iterdir()) == []

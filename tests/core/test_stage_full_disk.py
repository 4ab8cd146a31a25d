"""A full disk while a stage's checkpoint is saved (``cli.pipeline._save_stage``): one line that names
the stage's directory and quotes the write that failed, the stages saved before it untouched.

Before, the line said only "no space left on the device while saving the stage's checkpoint", the
error's own text dropped: a safetensors shard that did not fit and a JSON file that did not fit read
alike, and nothing said which library failed how. Now the line ends on the error's type and first
line ("OSError: [Errno 28] No space left on device", safetensors' "... (os error 28)"). The disk is a
real tmpfs that fills (root only, else skipped)."""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from posttrain.cli.pipeline import DONE, _save_stage
from posttrain.errors import UserError
from posttrain.train.checkpoint import CheckpointError


@pytest.fixture()
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 128 KiB tmpfs: the base checkpoint below fits, 512 KiB more does not."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_full_disk_names_the_stage_and_the_failed_write_and_keeps_the_stage_before(disk):
    def base(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "weights.bin").write_bytes(b"\1" * 4096)

    def sft(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "weights.bin").write_bytes(b"\0" * (512 * 1024))  # more than the disk holds

    _save_stage(disk / "base", base)
    kept = _files(disk)
    with pytest.raises(CheckpointError) as err:
        _save_stage(disk / "sft", sft)
    line = str(err.value)
    assert isinstance(err.value, UserError) and "\n" not in line  # the CLI's one line, exit 2
    assert line.startswith(f"{disk / 'sft'}: no space left on the device while saving the stage's checkpoint "
                           "(OSError: [Errno 28] No space left on device); the half-written copy was removed")
    assert _files(disk) == kept and sorted(p.name for p in disk.iterdir()) == ["base"]  # no .tmp-sft left
    assert (disk / "base" / DONE).exists()


def test_a_safetensors_shard_that_does_not_fit_is_quoted(disk):
    """The real writer of a stage's model (``save_pretrained``): its error is no OSError, only text."""
    from posttrain.policy import build_embedded_default

    with pytest.raises(CheckpointError, match=r"/base: no space left on the device while saving the stage's "
                                              r"checkpoint \(SafetensorError: .*No space left on device \(os error "
                                              r"28\)\); the half-written copy was removed"):
        _save_stage(disk / "base", lambda tmp: build_embedded_default(tmp, seed=0))
    assert list(disk.iterdir()) == []

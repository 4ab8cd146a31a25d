"""A full disk under ``torch.save`` (``train.checkpoint.save_beside``: the KL reference, the PPO
critic): the one line quotes the OSError ("[Errno 28] No space left on device"), not torch's own
RuntimeError wrapped around it ("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs
598", the line before), and the file saved before stays byte for byte. The disk is a real tmpfs that
fills (root only, else skipped); test_crash_resume.py holds a checkpoint's state.pt to the same line."""


import pytest
import torch

from posttrain.errors import UserError
from posttrain.train.checkpoint import CheckpointError, save_beside


def test_save_beside_on_a_full_disk_quotes_the_oserror_and_keeps_the_file_before(small_tmpfs):
    path = small_tmpfs / "ref_model.pt"
    save_beside({"w": torch.ones(8)}, path)
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as err:
        save_beside({"w": torch.zeros(100_000)}, path)
    line = str(err.value)
    assert isinstance(err.value, UserError) and "\n" not in line  # the CLI's one line, exit 2
    assert line.startswith(f"{path}: no space left on the device while saving it (OSError: [Errno 28] No space left "
                           "on device); the half-written copy was removed and ref_model.pt is as it was"), line
    assert path.read_bytes() == before and [p.name for p in small_tmpfs.iterdir()] == ["ref_model.pt"]

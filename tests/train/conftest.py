"""Fixtures of the train tests."""

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture()
def tmpfs_of(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``mount(size)``: a fresh tmpfs of that size (``"64k"``) under ``tmp_path``, a disk that really
    fills; unmounted after the test. Mounting needs root: the test is skipped without it."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"tmpfs-{len(mounted)}"
        mnt.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                                               capture_output=True).returncode != 0:
            pytest.skip("mounting a tmpfs needs root")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=True)

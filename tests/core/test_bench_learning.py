"""``posttrain bench quickstart`` / ``bench learn``: registered, and bad input is one clear line (exit 2).

The benchmarks themselves take minutes per seed (bench/quickstart.py, bench/learn.py); they are
not run here.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_lists_and_ranges():
    qs = _load("quickstart")
    assert qs.parse_seeds("0,1,2,3,4") == [0, 1, 2, 3, 4]
    assert qs.parse_seeds("0-2,7") == [0, 1, 2, 7]
    with pytest.raises(ValueError, match="--seeds"):
        qs.parse_seeds("0,x")


@pytest.mark.parametrize("name", ["quickstart", "learn"])
def test_bad_seeds_exit_2_with_one_line(name, tmp_path):
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "bench", name, "--seeds", "1,x",
                        "--runs" if name == "learn" else "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2
    assert "--seeds '1,x': expected integers like 0,1,2 or 0-4" in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "runs").exists()  # nothing started

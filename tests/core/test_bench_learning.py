"""``posttrain bench quickstart`` / ``bench learn``: registered, and bad input is one clear line (exit 2).

The benchmarks themselves take minutes per seed (bench/quickstart.py, bench/learn.py); they are
not run here.
"""

import importlib.util
import json
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


def test_finished_seed_is_reused_only_for_the_same_recipe(tmp_path, capsys):
    """A finished seed directory is read back only when it ran the recipe asked for now; with other
    overrides the bench exits 2 naming the key, instead of printing the old run's numbers."""
    from posttrain.cli.pipeline import prepare_run_dir
    from posttrain.train.recipe import load_recipe

    qs = _load("quickstart")
    run = tmp_path / "seed-0"
    prepare_run_dir(run, load_recipe(qs.EMBEDDED, ["seed=0"]), resume=False)
    ev = {"pass@1": 0.5, "ci": {"pass@1": [0.4, 0.6]}}
    (run / "summary.json").write_text(json.dumps({"eval": {"demonstrator": ev, "sft": ev, "rl": ev}, "wall_s": 1.0}))
    assert qs.main(["--seeds", "0", "--out", str(tmp_path)]) == 1  # reused: RL is not above SFT here
    with pytest.raises(SystemExit) as e:
        qs.main(["--seeds", "0", "--out", str(tmp_path), "--set", "rl.steps=3"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "rl.steps (200 -> 3)" in err and "--resume needs the same recipe" in err

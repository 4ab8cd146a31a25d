"""``posttrain run --backend`` / ``--ray-address`` and ``rl.max_staleness``: bad values are one line
naming the flag or key, exit 2, before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("args", "named"), [
    (["--ray-address", "10.0.0.1:6379"], "--ray-address 10.0.0.1:6379: a cluster address is for --backend ray"),
    (["--set", "rl.max_staleness=65"], "rl.max_staleness"),
    (["--set", "sched.backend=spark"], "sched.backend"),
    (["--set", "sched.rollout_workers=0"], "sched.rollout_workers"),
])
def test_bad_backend_and_staleness_values_are_one_line(tmp_path, args, named):
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / "tiny-grpo.yaml"),
                        "--out", str(tmp_path / "run"), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert named in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "run").exists()

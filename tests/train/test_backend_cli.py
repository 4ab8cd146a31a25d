"""``posttrain run --backend`` / ``--ray-address`` and ``rl.max_staleness``: bad values are one line
naming the flag or key, exit 2, before any work (``posttrain.cli.main`` in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("args", "named"), [
    (["--ray-address", "10.0.0.1:6379"], "--ray-address 10.0.0.1:6379: a cluster address is for --backend ray"),
    (["--set", "rl.max_staleness=65"], "rl.max_staleness"),
    (["--set", "sched.backend=spark"], "sched.backend"),
    (["--set", "sched.rollout_workers=0"], "sched.rollout_workers"),
])
def test_bad_backend_and_staleness_values_are_one_line(tmp_path, capsys, args, named):
    code = main(["run", str(ROOT / "configs" / "tiny-grpo.yaml"), "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()

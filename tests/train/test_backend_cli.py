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
    (["--set", "sched.ray_address=10.0.0.1:6379"], "sched.ray_address: '10.0.0.1:6379' is a Ray cluster, for sched.backend: ray"),
    (["--backend", "ray", "--ray-address", "head-node"], "sched.ray_address: expected HOST:PORT"),
])
def test_bad_backend_and_staleness_values_are_one_line(tmp_path, capsys, args, named):
    code = main(["run", str(ROOT / "configs" / "tiny-grpo.yaml"), "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_a_cluster_nobody_answers_at_is_one_line_at_once(tmp_path, capsys):
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    code = main(["run", str(ROOT / "configs" / "tiny-grpo.yaml"), "--out", str(tmp_path / "run"), "--backend", "ray",
                 "--ray-address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 2 and f"sched.ray_address: nothing answers at 127.0.0.1:{port}" in err, err
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - t0 < 60  # not Ray's minutes of retries

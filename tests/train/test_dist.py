"""Data-parallel GRPO updates with FSDP2 on 2 gloo processes (posttrain/train/_dist.py) equal the
one-process ``policy_update`` of the same batch, and resume exactly from a full-state checkpoint.

Each run is a real ``torchrun --standalone --nproc_per_node=2`` of tests/train/_dist_worker.py
(about 10 s each on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import _dist_worker as W  # noqa: E402

from posttrain.train._step import policy_update  # noqa: E402

WORKER = Path(__file__).with_name("_dist_worker.py")


def torchrun(out: Path, steps: int, first: int, load: Path | None = None) -> tuple[dict, list[dict]]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           str(out), str(steps), str(first), *([str(load)] if load else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, (proc.stderr[:3000] + "\n[...]\n" + proc.stderr[-3000:]
                                  if len(proc.stderr) > 6000 else proc.stderr)  # the ranks' own lines first
    return torch.load(out / "state.pt", weights_only=False), json.loads((out / "metrics.json").read_text())


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    return torchrun(tmp_path_factory.mktemp("dp") / "a", steps=2, first=0)


def test_two_ranks_equal_one_process(two_steps):
    state, metrics = two_steps
    model = W.make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=W.LR, weight_decay=0.0)
    ref = [policy_update(model, opt, W.make_batch(step), W.SPEC, micro_batch_size=W.MICRO, max_grad_norm=W.CLIP)
           for step in range(2)]
    for ours, one in zip(metrics, ref, strict=True):
        assert ours["tokens"] == one["tokens"]
        for k in ("loss", "grad_norm", "clip_frac", "approx_kl", "entropy"):
            assert ours[k] == pytest.approx(one[k], rel=1e-5, abs=1e-6), k
    expected = model.state_dict()
    assert state["model"].keys() == expected.keys()
    moved = 0.0
    for name, value in expected.items():
        assert torch.allclose(state["model"][name], value, atol=1e-6, rtol=1e-5), name
        moved = max(moved, float((value - W.make_model().state_dict()[name]).abs().max()))
    assert moved > 1e-4  # the weights did move


def test_resume_from_a_full_state_checkpoint_is_exact(two_steps, tmp_path):
    state, metrics = two_steps
    first, m1 = torchrun(tmp_path / "b1", steps=1, first=0)
    second, m2 = torchrun(tmp_path / "b2", steps=1, first=1, load=tmp_path / "b1" / "state.pt")
    assert m1 + m2 == metrics
    assert all(torch.equal(second["model"][k], v) for k, v in state["model"].items())


def test_ranks_never_sample_from_the_sharded_trainer_itself(tmp_path):
    from posttrain.policy import build_embedded_default, load_policy
    from posttrain.sched import LocalBackend, Service
    from posttrain.train._dist import DataParallel
    from posttrain.train._overlap import SharedWeights
    from posttrain.train.grpo import train_grpo
    from posttrain.train.recipe import RLConfig
    from posttrain.verify.rewards import RewardWeights

    policy = load_policy(build_embedded_default(tmp_path / "m"))
    with Service(LocalBackend({})) as svc, pytest.raises(ValueError, match="SharedWeights is the trainer's own model"):
        train_grpo(policy, [], svc, RLConfig(), reward_weights=RewardWeights(), out=tmp_path / "run", seed=0,
                   rollout=SharedWeights(policy), dp=DataParallel(0, 2))
    assert not (tmp_path / "run").exists()
    assert DataParallel(1, 3).share(8) == [1, 4, 7]

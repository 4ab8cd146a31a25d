"""``rl.skip_zero_advantage`` through ``train_grpo``: the groups whose rewards are all equal are left
out of the update's compute, counted in metrics.jsonl, and the step's weights are those of the plain
update (the exactness on every aggregation, per-token advantages and an all-zero batch is in
tests/train/test_step.py).

The embedded default at hidden size 64 is random; the verifier passes a completion whose first
character's code point is even, so at 2 new tokens some groups of 4 all pass or all fail and others
do not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posttrain.policy import EmbeddedModelSpec, build_embedded_default, load_policy
from posttrain.sched import DomainHooks, LocalBackend, Service
from posttrain.train.grpo import train_grpo
from posttrain.train.recipe import RLConfig
from posttrain.types import Task, Verdict
from posttrain.verify.rewards import RewardWeights

TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+{i % 7}=", fields={"answer": str(i + i % 7)}) for i in range(8)]


def first_even(task: Task, response: str) -> Verdict:
    ok = bool(response) and ord(response[0]) % 2 == 0
    return Verdict("pass" if ok else "fail", float(ok))


def one_step(model_dir: Path, out: Path, skip: bool) -> tuple[dict[str, torch.Tensor], dict]:
    policy = load_policy(model_dir)
    cfg = RLConfig(steps=1, prompts_per_step=8, group_size=4, max_new_tokens=2, lr=1e-2, micro_batch_size=8,
                   skip_zero_advantage=skip)
    seen: list[dict] = []
    with Service(LocalBackend({"math": DomainHooks(first_even)})) as svc:
        train_grpo(policy, TASKS, svc, cfg, reward_weights=RewardWeights(), out=out, seed=0, log=seen.append)
    return policy.model.state_dict(), seen[-1]


def test_a_step_without_the_zero_advantage_rows_is_the_plain_step(tmp_path: Path) -> None:
    model_dir = build_embedded_default(tmp_path / "m", spec=EmbeddedModelSpec(hidden_size=64))
    plain, m_plain = one_step(model_dir, tmp_path / "plain", skip=False)
    skipped, m_skip = one_step(model_dir, tmp_path / "skip", skip=True)
    assert 0 < m_skip["frac_zero_std"] < 1  # both kinds of group were there
    assert m_skip["zero_advantage_rows"] == m_skip["frac_zero_std"] * 8 * 4
    assert "zero_advantage_rows" not in m_plain
    # every completion has 2 tokens and each group's advantages sum to 0: the loss is 0 but for float32
    # summation noise, whose size depends on the order and the CPU's kernels (1e-9 held on one machine;
    # -2.8e-9 against -0.9e-9 on another, the same code and packages)
    assert m_skip["loss"] == pytest.approx(m_plain["loss"], abs=1e-7)
    assert m_skip["grad_norm"] == pytest.approx(m_plain["grad_norm"], rel=1e-6)
    # AdamW's first step is lr * g / (|g| + eps): a gradient near eps moves by up to lr with float32
    # summation noise, so a handful of the 200k weights differ beyond 1e-6, none by more than 1e-4
    off = sum(int(((value - skipped[name]).abs() > 1e-6).sum()) for name, value in plain.items())
    assert off <= 20 and max(float((value - skipped[name]).abs().max()) for name, value in plain.items()) < 1e-4
    start = load_policy(model_dir).model.state_dict()
    assert not all(torch.equal(value, start[name]) for name, value in skipped.items())

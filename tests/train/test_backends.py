"""GRPO through each sampler backend's generator weights (posttrain/train/_backends.py): the fast
backend trains synchronously (K = 0, the trainer's own model) and with overlap (K = 1, a copy),
with speculation and rollout reuse on; bad combinations are errors naming the backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posttrain.policy import EmbeddedModelSpec, SpecConfig, build_embedded_default, load_policy
from posttrain.sched import DomainHooks, LocalBackend, Service
from posttrain.train._backends import rollout_weights
from posttrain.train.grpo import train_grpo
from posttrain.train.recipe import RLConfig
from posttrain.types import Task, Verdict
from posttrain.verify.rewards import RewardWeights

ROOT = Path(__file__).resolve().parents[2]
TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+{i % 7}=", fields={"answer": str(i + i % 7)}) for i in range(4)]


def first_even(task: Task, response: str) -> Verdict:
    ok = bool(response) and ord(response[0]) % 2 == 0
    return Verdict("pass" if ok else "fail", float(ok))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_embedded_default(tmp_path_factory.mktemp("m") / "m", spec=EmbeddedModelSpec(hidden_size=64))


@pytest.mark.parametrize("k", [0, 1])
def test_grpo_trains_on_the_fast_backend(model_dir, tmp_path, k):
    policy = load_policy(model_dir)
    start = {n: v.clone() for n, v in policy.model.state_dict().items()}
    cfg = RLConfig(steps=3, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, checkpoint_every=3,
                   max_staleness=k, dedup=True)
    weights = rollout_weights(policy, "fast", max_staleness=k, speculation=SpecConfig(tail_rows=100), reuse=True)
    seen: list[dict] = []
    with Service(LocalBackend({"math": DomainHooks(first_even)})) as svc:
        train_grpo(policy, TASKS, svc, cfg, reward_weights=RewardWeights(), out=tmp_path, seed=0, log=seen.append,
                   rollout=weights)
    assert len(seen) == 3 and [m["policy_version"] for m in seen] == [max(0, s - k) for s in range(3)]
    assert any(not torch.equal(start[n], v) for n, v in policy.model.state_dict().items())
    sampler = weights.sampler(0)
    assert sampler.stats.tokens > 0 and len(sampler.memory) > 0  # 4 tasks over 3 steps: prompts came back
    assert all({"diversity/dup_rate", "diversity/distinct_2", "diversity/edit_distance"} <= m.keys() for m in seen)


def test_bad_backends_name_themselves(model_dir):
    policy = load_policy(model_dir)
    with pytest.raises(ValueError, match="'tpu'"):
        rollout_weights(policy, "tpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="need the fast backend"):
        rollout_weights(policy, "local", reuse=True)


def test_the_recipe_chooses_the_sampler():
    from posttrain.errors import ConfigError
    from posttrain.train.recipe import check_inputs, load_recipe

    recipe = ROOT / "configs" / "tiny-grpo.yaml"
    r = load_recipe(recipe, ["rl.sampler=fast", "rl.speculative=true", "rl.rollout_reuse=true", "rl.dedup=true"])
    assert (r.rl.sampler, r.rl.speculative, r.rl.rollout_reuse, r.rl.dedup) == ("fast", True, True, True)
    with pytest.raises(ConfigError, match="need rl.sampler: fast"):
        load_recipe(recipe, ["rl.speculative=true"])
    with pytest.raises(ConfigError, match="rl.sampler: vllm samples from this process's plain weights; model.lora"):
        check_inputs(load_recipe(recipe, ["rl.sampler=vllm", "model.lora={r: 4, alpha: 8}"]))
    with pytest.raises(ConfigError, match="rl.sampler: fast .*sched.backend: ray"):
        check_inputs(load_recipe(recipe, ["rl.sampler=fast", "sched.backend=ray"]))

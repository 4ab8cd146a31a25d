"""GRPO's sampling with the task pool: every group drawn is observed, zero-variance groups are
refilled until the batch is full or the bound says so in one line, canaries ride along masked and
raise the alarm, and the per-domain metrics of the step.

The policy's sampler is a scripted test double (each math task has a skill: the share of its
samples that answer with the reference), the verifier the real math domain's through the real
execution service, the pool and the loop's pieces the real ones."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import pytest
import torch

from posttrain.cli import open_service
from posttrain.envs import get_domain, model_prompt
from posttrain.errors import TaskError
from posttrain.policy import Policy, SamplingParams, build_embedded_default, load_policy
from posttrain.tasks import FilterSpec, SamplerSpec, StratifySpec, TaskPool
from posttrain.train.grpo import sample_groups, without_canaries
from posttrain.train.recipe import RLConfig
from posttrain.types import Generation, Task
from posttrain.verify.rewards import RewardWeights


class Scripted:
    """Answers a task's prompt with its reference on ``skill[task]`` of its samples, else "\\boxed{0.5}"."""

    def __init__(self, policy: Policy, tasks: list[Task], skill: dict[str, float]) -> None:
        self.policy = policy
        self.by_prompt = {tuple(policy.encode_prompt(model_prompt(t))): t for t in tasks}
        self.skill = skill
        self.calls = 0

    def generate(self, prompt_ids, params: SamplingParams) -> list[Generation]:
        out = []
        for j, ids in enumerate(prompt_ids):
            task = self.by_prompt[tuple(ids)]
            coin = int.from_bytes(hashlib.sha256(f"{task.id}:{self.calls}:{j}".encode()).digest()[:8], "big") / 2**64
            text = str(task.reference) if coin < self.skill.get(task.id, 0.0) else "\\boxed{0.5}"
            completion = (*self.policy.encode_completion(text), self.policy.eos_token_id)
            out.append(Generation(tuple(ids), completion, (-0.5,) * len(completion), text, "eos"))
        self.calls += 1
        return out


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Policy:
    return load_policy(build_embedded_default(tmp_path_factory.mktemp("m") / "model"))


@pytest.fixture(scope="module")
def service():
    with open_service(["math"], size=1) as svc:
        yield svc


def _draw(policy, service, pool, tasks, skill, **cfg):
    rl = RLConfig(prompts_per_step=4, group_size=4, **cfg)
    return sample_groups(policy, pool, service, rl, RewardWeights(), None, step=0,
                         generator=Scripted(policy, tasks, skill))


def test_dynamic_sampling_fills_the_batch_and_the_pool_learns_from_every_group(policy, service) -> None:
    tasks = get_domain("math").generate_tasks(12, seed=0)
    skill = {t.id: [0.0, 1.0, 0.5][i % 3] for i, t in enumerate(tasks)}  # impossible, saturated, learnable
    pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", filter=FilterSpec(after=1)))
    kept, groups, m = _draw(policy, service, pool, tasks, skill, dynamic_sampling=True, max_refills=8)
    assert len(kept) == len(groups) == 4 and all(skill[t.id] == 0.5 for t in kept)
    assert m["groups_kept"] == 4 and m["groups_drawn"] > 4 and 0 < m["zero_variance_drawn"] < 1
    # every group drawn was observed: the zero-variance ones are filtered now (after: 1)
    assert {pool.filtered[t.id][0] for t in tasks if t.id in pool.filtered} == {"saturated", "impossible"}
    assert m["domain/math/groups"] == m["groups_drawn"] and m["domain/math/pool_filtered"] == len(pool.filtered)
    assert m["domain/math/tokens"] > 0 and 0 < m["domain/math/zero_variance"] < 1


def test_the_refill_bound_is_one_line_never_a_short_batch(policy, service) -> None:
    tasks = get_domain("math").generate_tasks(6, seed=1)
    pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool"))
    with pytest.raises(TaskError) as e:
        _draw(policy, service, pool, tasks, {}, dynamic_sampling=True, max_refills=2)
    assert str(e.value).startswith("rl.dynamic_sampling: 3 draws gave 12 groups and only 0 of the 4")
    assert "\n" not in str(e.value)


def test_canaries_ride_along_masked_and_a_pass_is_counted(policy, service) -> None:
    tasks = get_domain("math").generate_tasks(8, seed=2)
    canaries = [dataclasses.replace(t, id=f"canary-{t.id}", tags=("canary",)) for t in tasks[:2]]
    skill = {t.id: 0.5 for t in tasks} | {c.id: 1.0 for c in canaries}  # a policy that passes canaries: a hack
    pool = TaskPool(tasks[2:], seed=0, spec=SamplerSpec(kind="pool", canary_rate=0.5), canaries=canaries)
    kept, groups, m = _draw(policy, service, pool, tasks + canaries, skill, dynamic_sampling=True, max_refills=8)
    assert sum("canary" not in t.tags for t in kept) == 4 and any("canary" in t.tags for t in kept)
    assert m["canary/passed"] > 0 and m["canary/alarm"] == 1.0
    assert all(pool.difficulty.observed(c) == 0 for c in canaries)  # never observed: no difficulty
    rewards = without_canaries(kept, torch.ones(len(kept), 4))
    assert [math.isnan(r[0]) for r in rewards.tolist()] == ["canary" in t.tags for t in kept]


def test_stratified_pools_span_domains_so_a_hopeless_domain_stops_taking_normal_slots() -> None:
    """prime-rl's buffer across the mix: once a domain's setting is estimated hard, only the hard
    share of each batch goes to it, and the normal slots go to domains that still teach."""
    tasks = [Task(id=f"{d}-{i}", domain=d, prompt="", fields={}) for d in ("a", "b", "c", "d") for i in range(5)]
    pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", stratify=StratifySpec(hard_fraction=0.25)))
    for step in range(12):  # b, c, d never pass; a passes half
        batch = pool.next(8, step=step)
        pool.observe(batch, [[t.domain == "a" and j % 2 == 0 for j in range(4)] for t in batch])
    drawn = [t.domain for s in range(12, 16) for t in pool.next(8, step=s)]
    assert drawn.count("a") == 24 and len(drawn) - drawn.count("a") == 8  # normal: a's; hard: 1 in 4 slots

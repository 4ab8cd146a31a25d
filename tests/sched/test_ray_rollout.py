"""Rollout workers as Ray actors on a real local cluster (own temp dir and port): the weights
broadcast with their version, a request for a version an actor does not hold refused, and the
sampler conformance test (tests/policy) over the actors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
from _tiny_lm import tiny_llama  # noqa: E402
from test_sampler_conformance import (  # noqa: E402, F401  (collected here over the Ray sampler)
    test_shapes_determinism_and_logprobs,
    test_stop_strings_cut_where_the_string_completes,
)

from posttrain.policy import (  # noqa: E402
    LocalSampler,
    Policy,
    RayRollout,
    SamplingParams,
    VersionMismatch,
    build_char_tokenizer,
)
from posttrain.sched import local_cluster  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(num_cpus=2) as address:
        yield address


@pytest.fixture(scope="module")
def rollout(cluster):
    tok = build_char_tokenizer()
    model = tiny_llama(tok)
    r = RayRollout(Policy(model, tok), workers=2, seed=0)
    r.load(0, r.capture(model))
    yield r, model, tok
    r.close()


@pytest.fixture
def backend(rollout):
    """(sampler, model, tokenizer): the conformance tests' fixture, here over two rollout actors."""
    r, model, tok = rollout
    return r.sampler(step=0), model, tok


def test_a_new_version_is_broadcast_and_an_old_one_refused(rollout):
    r, model, tok = rollout
    prompts = [tok(p)["input_ids"] for p in ["12+3=", "def f(x):\n", "a", "The fox"]]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    old = r.sampler(step=0)
    assert [g.completion_ids for g in old.generate(prompts, greedy)] == [
        g.completion_ids for g in LocalSampler(model, tok).generate(prompts, greedy)]

    changed = tiny_llama(tok, seed=1)  # version 1: other weights, same architecture
    try:
        r.load(1, r.capture(changed))
        assert r.version == 1
        new = r.sampler(step=1).generate(prompts, greedy)
        assert [g.completion_ids for g in new] == [
            g.completion_ids for g in LocalSampler(changed, tok).generate(prompts, greedy)]
        with pytest.raises(VersionMismatch, match="holds policy version 1, asked to sample with 0"):
            old.generate(prompts, greedy)  # a sampler of version 0: every actor refuses it now
    finally:
        r.load(0, r.capture(model))


def test_shards_are_seeded_apart_and_reproducibly(rollout):
    r, _, tok = rollout
    prompts = [tok("a")["input_ids"]] * 4  # one prompt, four samples: two per actor
    params = SamplingParams(temperature=1.0, max_new_tokens=16)
    a, b = r.sampler(step=3), r.sampler(step=3)
    first, again = a.generate(prompts, params), b.generate(prompts, params)
    assert [g.completion_ids for g in first] == [g.completion_ids for g in again]  # same step, same samples
    assert len({g.completion_ids for g in first}) > 1  # the actors do not repeat each other
    assert [g.completion_ids for g in a.generate(prompts, params)] != [g.completion_ids for g in first]


def test_the_trainers_weights_are_copied_at_capture(rollout):
    r, model, tok = rollout
    payload = r.capture(model)
    with torch.no_grad():
        before = model.lm_head.weight.clone()
        model.lm_head.weight.add_(1.0)  # the trainer steps on after publishing
    try:
        import ray

        assert torch.equal(ray.get(payload)["lm_head.weight"], before)
    finally:
        with torch.no_grad():
            model.lm_head.weight.copy_(before)


def test_grpo_samples_through_the_actors_with_each_version_they_were_sent(cluster, tmp_path):
    from posttrain.policy import EmbeddedModelSpec, build_embedded_default, load_policy
    from posttrain.sched import DomainHooks, LocalBackend, Service
    from posttrain.train.grpo import train_grpo
    from posttrain.train.recipe import RLConfig
    from posttrain.types import Task, Verdict
    from posttrain.verify.rewards import RewardWeights

    def first_even(task, response):  # about half pass: the update moves the weights
        ok = bool(response) and ord(response[0]) % 2 == 0
        return Verdict("pass" if ok else "fail", float(ok))

    policy = load_policy(build_embedded_default(tmp_path / "m", spec=EmbeddedModelSpec(hidden_size=64)))
    tasks = [Task(id=f"m{i}", domain="math", prompt=f"{i}+1=", fields={"answer": str(i + 1)}) for i in range(8)]
    cfg = RLConfig(steps=4, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, max_staleness=1)
    rollout, seen = RayRollout(policy, workers=2, seed=0), []
    with Service(LocalBackend({"math": DomainHooks(first_even)})) as svc:
        train_grpo(policy, tasks, svc, cfg, reward_weights=RewardWeights(), out=tmp_path / "run", seed=0,
                   log=seen.append, rollout=rollout)
    assert [m["policy_version"] for m in seen] == [0, 0, 1, 2]
    assert rollout.version == 2 and not rollout.actors  # the last batch's version; the actors are gone after
    assert any(m["grad_norm"] > 0 for m in seen)

"""The GRPO loop's pieces: token-exact batches from trajectories, reward weighting, and that an
update moves the policy toward rewarded completions."""

import dataclasses

import torch

from posttrain.policy import build_embedded_default, load_policy
from posttrain.train._logprobs import token_logprobs
from posttrain.train._step import policy_update
from posttrain.train.grpo import build_batch, loss_spec, rewards_of
from posttrain.train.recipe import RLConfig
from posttrain.types import Trajectory, Turn, Verdict
from posttrain.verify.rewards import RewardWeights


def _rollout(prompt, completion, logprobs, verdict, idx=0):
    """A one-turn episode of group "g"."""
    turn = Turn(tuple(prompt), tuple(completion), tuple(logprobs), "eos", verdict)
    return Trajectory("t", "g", idx, (turn,), verdict.reward)


PASS = Verdict(outcome="pass", reward=1.0, components={"outcome": 1.0, "format": 1.0})
FAIL = Verdict(outcome="fail", reward=0.0, components={"outcome": 0.0, "format": 1.0})
INFRA = Verdict.infra("sandbox down")


def test_batch_uses_exactly_the_sampled_tokens_and_an_infra_error_drops_its_whole_group():
    groups = [[_rollout([1, 7], [8, 9, 2], [-0.1, -0.2, -0.3], PASS, 0),
               _rollout([1, 7], [5, 2], [-1.0, -2.0], FAIL, 1)],
              [_rollout([1, 7], [8, 2], [-0.1, -0.2], PASS, 0),
               _rollout([1, 7], [5, 2], [-1.0, -2.0], INFRA, 1)]]
    rewards, parts = rewards_of(groups, RewardWeights())
    assert rewards[0].tolist() == [1.0, 0.0]
    assert rewards[1].isnan().all()  # the pass beside an infra error is never scored either
    assert parts["reward/outcome"] == 0.5  # of the kept group only
    batch = build_batch(groups, rewards, pad_id=0)
    assert batch.input_ids.tolist() == [[1, 7, 8, 9, 2], [1, 7, 5, 2, 0], [1, 7, 8, 2, 0], [1, 7, 5, 2, 0]]
    assert torch.equal(batch.old_logp[0, 2:], torch.tensor([-0.1, -0.2, -0.3]))
    assert batch.loss_mask.tolist() == [[0, 0, 1, 1, 1], [0, 0, 1, 1, 0], [0] * 5, [0] * 5]  # dropped: no gradient
    assert batch.group.tolist() == [0, 0, 1, 1]


def test_reward_components_are_weighted_and_reported():
    groups = [[_rollout([1], [2], [0.0], PASS), _rollout([1], [2], [0.0], FAIL, 1)]]
    rewards, parts = rewards_of(groups, RewardWeights(outcome=1.0, format=0.5))
    assert rewards.tolist() == [[1.5, 0.5]]
    assert parts["reward/outcome"] == 0.5 and parts["reward/format"] == 0.5


def test_update_raises_the_probability_of_rewarded_completions(tmp_path):
    torch.manual_seed(0)
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    prompt = policy.encode_prompt("x=")
    good, bad = policy.encode_completion("1"), policy.encode_completion("2")
    cfg = RLConfig(lr=1e-2, group_size=2)

    def logp_of(completion):
        ids = torch.tensor([prompt + completion])
        mask = torch.zeros_like(ids, dtype=torch.float32)
        mask[0, len(prompt):] = 1
        with torch.no_grad():
            return float((token_logprobs(policy.model, ids, torch.ones_like(ids), loss_mask=mask) * mask).sum())

    before = logp_of(good) - logp_of(bad)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
    for _ in range(5):
        lp_good, lp_bad = logp_of(good), logp_of(bad)
        groups = [[_rollout(prompt, good, [lp_good / len(good)] * len(good), PASS, 0),
                   _rollout(prompt, bad, [lp_bad / len(bad)] * len(bad), FAIL, 1)]]
        rewards, _ = rewards_of(groups, RewardWeights())
        batch = build_batch(groups, rewards, policy.tokenizer.pad_token_id)
        batch = dataclasses.replace(batch, adv=torch.tensor([1.0, -1.0]))
        policy_update(policy.model, opt, batch, loss_spec(cfg), micro_batch_size=2, max_grad_norm=1.0)
    assert logp_of(good) - logp_of(bad) > before + 1.0

"""How hard the update pushes a failing episode down: the gradient of the real loss, not only its advantage.

The earlier reads (tests/train/test_failing_never_pays.py, test_credit_attacks3.py, tests/rollout/
test_signal_attacks*.py) compare advantages. Here each scripted batch goes the trainer's way --
``rewards_of``, ``group_advantages`` (``rl.dedup`` too), ``build_batch`` and ``policy_loss`` (the log-prob
engine, the policy loss, the aggregation) -- on a model whose logits are one free table per (row,
position), so ``-d loss / d logp`` of every scored token is read off exactly: the *push* on it, < 0 down.

- Every way a policy can fail (run to max_new_tokens, be cut by the token budget or the step limit, end
  with no verdict, time out, spend extra attempts, repeat a failure under dedup) pushes each of its
  action tokens down at least as hard as answering wrong with the same tokens does, in the same batch,
  under the recipe's loss (``token_mean``, ppo_clip) and every estimator; no observation token moves.
- Length: in one batch the tokens of a 50-token failure are pushed as hard as a 5-token failure's in every
  aggregation but ``seq_mean_token_mean`` (and GSPO, which needs it): there 5/50 as hard (outcome-only
  rewards), the bias Dr.GRPO removes; ``reward.length`` makes it whole again. Pinned as documented in
  ``posttrain.algo.aggregate``.
- An infinite reward is refused: left out like an infra error's NaN, a failure scored -inf got advantage
  0 (its row trained with a push of 0) where a failure scored 0 got -0.71.
"""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from posttrain.algo import ADVANTAGES
from posttrain.train._credit import rewards_of
from posttrain.train._step import LossSpec, policy_loss
from posttrain.train.grpo import build_batch, group_advantages, loss_spec
from posttrain.train.recipe import RLConfig
from posttrain.types import Trajectory, Turn, Verdict
from posttrain.verify.rewards import RewardWeights

V = 16
"""Vocabulary of the table model: token ids 0..15."""


class TableLM(nn.Module):
    """Logits are a free (B, T, V) table, all 0: ``d loss / d table[i, t-1, id_t] = d loss / d logp_t * (1 - 1/V)``.
    No backbone: the log-prob engine takes the model's own logits (``_logprobs._forward_hidden``)."""

    def __init__(self, b: int, t: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(b, t, V))

    def get_output_embeddings(self) -> None:
        return None

    def forward(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        return SimpleNamespace(logits=self.table[: input_ids.shape[0], : input_ids.shape[1]])


LOGP = float(-torch.log(torch.tensor(float(V))))  # the table's log-prob of any token: sampled on-policy
PASS = Verdict("pass", 1.0)
WEIGHTINGS = {
    "outcome": RewardWeights(),
    "all": RewardWeights(format=0.2, process=0.5, length=0.5, max_tokens=60, overlong_buffer=40),
}
ESTIMATORS = [(name, std) for name in ADVANTAGES for std in (True, False)]


def fail(fmt: float = 0.0, process: float = 0.0, error_class: str = "wrong_answer") -> Verdict:
    return Verdict("fail", 0.0, error_class=error_class, components={"outcome": 0.0, "format": fmt, "process": process})


def turn(n: int, verdict: Verdict | None, stop: str = "eos", *, first: int = 4, obs: int = 3) -> Turn:
    return Turn(tuple(range(1, obs + 1)), tuple((first + k) % 12 + 4 for k in range(n)), (LOGP,) * n, stop, verdict)


def episode(*turns: Turn, cut_by: str | None = None, idx: int = 3) -> Trajectory:
    verdicts = [t.verdict for t in turns if t.verdict is not None]
    return Trajectory("t", "g", idx, turns, verdicts[-1].reward if verdicts else 0.0,
                      truncated=cut_by is not None or turns[-1].stop_reason == "length", cut_by=cut_by)  # type: ignore[arg-type]


OTHERS = [episode(turn(5, PASS), idx=0), episode(turn(8, fail(1.0, 0.5), first=1), idx=1),
          episode(turn(12, fail(), first=2), idx=2)]

WAYS = {  # way of failing -> (the episode, answering wrong in its place with the same action tokens)
    "runs to max_new_tokens": (episode(turn(40, fail(), "length")), episode(turn(40, fail()))),
    "cut by the token budget": (episode(turn(10, None), turn(30, None, "length"), cut_by="max_tokens"),
                                episode(turn(10, None), turn(30, fail()))),
    "cut by the step limit": (episode(turn(20, fail(1.0)), turn(20, fail(1.0)), cut_by="max_turns"),
                              episode(turn(20, fail(1.0)), turn(20, fail(1.0)))),
    "ends with no verdict": (episode(turn(40, None)), episode(turn(40, fail()))),
    "times out": (episode(turn(40, fail(1.0, error_class="timeout"))), episode(turn(40, fail(1.0)))),
    "spends extra attempts": (episode(turn(10, fail()), turn(10, fail()), turn(20, fail())), episode(turn(40, fail()))),
    "repeats a failure": (dataclasses.replace(OTHERS[2]), episode(turn(12, fail(), first=7))),  # a copy of row 2
}


def push(groups: list[list[Trajectory]], w: RewardWeights, cfg: RLConfig, spec: LossSpec
         ) -> tuple[torch.Tensor, torch.Tensor]:  # (B, T) -d loss / d logp (0 off the loss mask), loss mask
    """The trainer's batch of ``groups`` and the push of its loss on every token."""
    rewards, _ = rewards_of(groups, w)
    batch = build_batch(groups, rewards, pad_id=0)
    adv = group_advantages(groups, rewards, cfg).reshape(-1)
    batch = dataclasses.replace(batch, adv=adv)
    model = TableLM(*batch.input_ids.shape)
    loss, _ = policy_loss(model, batch, spec)
    loss.backward()
    assert model.table.grad is not None
    grad = torch.zeros(batch.input_ids.shape)
    grad[:, 1:] = model.table.grad[:, :-1].gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return -grad / (1 - 1 / V), batch.loss_mask


@pytest.mark.parametrize(("label", "dedup"), [(k, d) for k in WEIGHTINGS for d in (False, True)])
def test_every_way_of_failing_is_pushed_down_as_hard_as_answering_wrong(label: str, dedup: bool) -> None:
    """Each way and its honest failure, each in [pass, wrong, wrong, .], all groups in one batch (one
    normalizer): every action token of the way pushed down at least as hard as any of the honest one's;
    observation and prompt tokens not at all."""
    w, spec = WEIGHTINGS[label], loss_spec(RLConfig())  # token_mean, ppo_clip 0.2 / 0.28
    groups = [[*OTHERS, x] for pair in WAYS.values() for x in pair]
    for name, std in ESTIMATORS:
        cfg = RLConfig(advantage=name, scale_by_std=std, dedup=dedup)
        g, mask = push(groups, w, cfg, spec)
        assert bool((g[mask == 0] == 0).all()), (name, std)  # nothing off the actions moves
        for k, way in enumerate(WAYS):
            bad, honest = 4 * (2 * k) + 3, 4 * (2 * k + 1) + 3  # the last row of the way's and the honest group
            x, ref = g[bad][mask[bad] > 0], g[honest][mask[honest] > 0]
            assert len(x) == len(ref) == sum(WAYS[way][0].loss_mask), way  # every action token trained
            assert float(x.max()) <= float(ref.min()) + 1e-7, (way, name, std, float(x.max()), float(ref.min()))
            assert float(x.max()) < 0, (way, name, std)  # pushed down, never left alone


def test_seq_mean_token_mean_pushes_a_long_failure_s_tokens_less() -> None:
    """[pass in 5 tokens, wrong in 5, wrong in 50 cut at max_new_tokens], one batch: the per-token push
    of the long failure over the short one's is 1 in every aggregation but ``seq_mean_token_mean``
    (ppo_clip, cispo, gspo), where it is 5/50 under outcome-only rewards; with the length penalty
    (50 tokens: -0.75; advantages -0.09 and -0.95) it is 1 again."""
    group = [episode(turn(5, PASS), idx=0), episode(turn(5, fail()), idx=1), episode(turn(50, fail(), "length"), idx=2)]
    losses = [("token_mean", "ppo_clip"), ("seq_mean_token_sum", "ppo_clip"), ("seq_mean_token_sum_norm", "cispo"),
              ("seq_mean_token_mean", "ppo_clip"), ("seq_mean_token_mean", "cispo"), ("seq_mean_token_mean", "gspo")]
    length = RewardWeights(length=1.0, max_tokens=60, overlong_buffer=40)
    got = {}
    for (agg, loss), (label, w) in itertools.product(losses, (("outcome", RewardWeights()), ("length", length))):
        spec = LossSpec(policy_loss=loss, agg=agg, norm_const=60.0 if agg == "seq_mean_token_sum_norm" else None)  # type: ignore[arg-type]
        g, mask = push([group], w, RLConfig(), spec)
        short, long_ = g[1][mask[1] > 0], g[2][mask[2] > 0]
        assert float(short.max()) < 0 and float(long_.max()) < 0, (agg, loss, label)
        got[agg, loss, label] = round(float(long_.mean() / short.mean()), 4)
    for (agg, loss, label), ratio in got.items():
        if agg != "seq_mean_token_mean":
            assert ratio >= 1.0, (agg, loss, label, ratio)
        else:
            assert ratio == (0.1 if label == "outcome" else 1.0), (loss, label, ratio)


def test_an_infinite_reward_is_refused_not_left_out_like_an_infra_error() -> None:
    """[pass, wrong, X]: X scored -inf got advantage 0 from every estimator and its row, trained, a push of
    0 -- where X scored 0 got -0.71 (GRPO). An infinite reward is the reward's bug: a ValueError. NaN
    (infra) is still left out, the whole group masked by the trainer."""
    for name, std in ESTIMATORS:
        with pytest.raises(ValueError, match="finite or NaN"):
            ADVANTAGES[name](torch.tensor([[1.0, 0.0, -float("inf")]]), scale_by_std=std)
        with pytest.raises(ValueError, match="finite or NaN"):
            ADVANTAGES[name](torch.tensor([[float("inf"), 0.0, 0.0]]), scale_by_std=std)
        adv = ADVANTAGES[name](torch.tensor([[1.0, 0.0, float("nan")]]), scale_by_std=std)
        assert adv[0, 2] == 0 and adv[0, 1] < 0, (name, std)

"""posttrain.algo: the math of post-training as pure functions over tensors.

Advantages, per-token policy losses, loss aggregation, KL estimators, metrics, reward shaping,
SFT / DPO / IPO / Bradley–Terry / value losses. Imports only torch: no model loading, no config
objects, no distributed code, so every function can be read and tested alone. Variants are picked
by name (``Literal`` types, checked when a recipe is parsed) from dict registries whose entries
share one ``Protocol`` signature:

>>> import torch
>>> from posttrain.algo import ADVANTAGES, POLICY_LOSSES, aggregate
>>> adv = ADVANTAGES["grpo"](torch.tensor([[1.0, 0.0]]), eps=1e-6)     # (N, G)
>>> logp = torch.zeros(2, 3, requires_grad=True); mask = torch.ones(2, 3)
>>> loss_mat = POLICY_LOSSES["ppo_clip"](logp, logp.detach(), adv.reshape(-1), mask, clip_low=0.2, clip_high=0.28)
>>> aggregate(loss_mat, mask, "token_mean").item()
0.0
"""

from .advantages import (
    ADVANTAGES,
    AdvantageFn,
    AdvantageName,
    gae,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from .aggregate import AGG_MODES, AggMode, aggregate, count_items
from .kl import KL_KINDS, KLKind, kl_in_reward, kl_penalty
from .losses import (
    POLICY_LOSSES,
    PolicyLossFn,
    PolicyLossName,
    cispo_loss,
    gspo_loss,
    ppo_clip_loss,
    truncated_is_weights,
)
from .preference import (
    PREFERENCE_LOSSES,
    PreferenceLossFn,
    PreferenceLossName,
    bradley_terry_loss,
    dpo_rewards,
    dpo_sigmoid_loss,
    ipo_loss,
)
from .sft import PackedBatch, block_causal_mask, pack_sequences, sft_loss
from .shaping import frac_zero_std, informative_groups
from .stats import entropy_from_logits, loss_stats
from .value import value_loss

__all__ = [
    "ADVANTAGES",
    "AGG_MODES",
    "KL_KINDS",
    "POLICY_LOSSES",
    "PREFERENCE_LOSSES",
    "AdvantageFn",
    "AdvantageName",
    "AggMode",
    "KLKind",
    "PackedBatch",
    "PolicyLossFn",
    "PolicyLossName",
    "PreferenceLossFn",
    "PreferenceLossName",
    "aggregate",
    "block_causal_mask",
    "bradley_terry_loss",
    "cispo_loss",
    "count_items",
    "dpo_rewards",
    "dpo_sigmoid_loss",
    "entropy_from_logits",
    "frac_zero_std",
    "gae",
    "grpo_advantages",
    "gspo_loss",
    "informative_groups",
    "ipo_loss",
    "kl_in_reward",
    "kl_penalty",
    "loss_stats",
    "pack_sequences",
    "ppo_clip_loss",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "sft_loss",
    "truncated_is_weights",
    "value_loss",
]

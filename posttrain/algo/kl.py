"""KL estimators between the policy and a reference policy, on the sampled tokens.

With ``delta = ref_logp - logp`` (Schulman 2020, "Approximating KL divergence",
http://joschu.net/blog/kl-approx.html):

- ``k1 = -delta`` (unbiased, high variance, can be negative; OpenRLHF/slime/ROLL default);
- ``k2 = delta**2 / 2`` (biased, low variance; its gradient is the true reverse-KL gradient);
- ``k3 = exp(delta) - delta - 1`` (unbiased, >= 0, low variance; "low_var_kl"; TRL, verl, SkyRL,
  NeMo-RL default for the KL loss).

Clamps (documented departures, off with ``clamp=None``): for k3, ``delta`` is clamped to +-20
before ``exp`` (verl, NeMo-RL); every estimator's output is clamped to ``+-clamp`` (default 10,
verl/OpenRLHF/NeMo-RL). TRL clamps nothing; pass ``clamp=None`` to match it exactly.

Placement: *in the loss*, ``kl_coef * aggregate(kl_penalty(...) * mask)`` is added to the policy
loss by the step (TRL, verl ``use_kl_loss``); *in the reward*, ``kl_in_reward`` subtracts
``kl_coef * sum_t kl_t`` (no gradient) from each sample's reward before advantages
(InstructGPT-style, verl ``use_kl_in_reward``).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

KLKind = Literal["k1", "k2", "k3"]
KL_KINDS: tuple[KLKind, ...] = get_args(KLKind)

K3_INPUT_CLAMP = 20.0


def kl_penalty(
    logp: Tensor,  # (B, T) log pi_theta(token)
    ref_logp: Tensor,  # (B, T) log pi_ref(token)
    kind: KLKind = "k3",
    *,
    clamp: float | None = 10.0,
) -> Tensor:  # (B, T) per-token KL estimate, not masked
    """Per-token KL(pi_theta || pi_ref) estimate on the sampled token; see the module docstring.

    >>> lp, rp = torch.log(torch.tensor([0.3])), torch.log(torch.tensor([0.5]))
    >>> [round(float(kl_penalty(lp, rp, k)), 6) for k in KL_KINDS]
    [-0.510826, 0.130471, 0.155841]
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"logp and ref_logp must share a shape, got {tuple(logp.shape)}, {tuple(ref_logp.shape)}"
        )
    delta = ref_logp - logp
    if kind == "k1":
        kl = -delta
    elif kind == "k2":
        kl = 0.5 * delta**2
    elif kind == "k3":
        if clamp is not None:
            delta = torch.clamp(delta, -K3_INPUT_CLAMP, K3_INPUT_CLAMP)
        kl = torch.exp(delta) - delta - 1.0
    else:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of {KL_KINDS}")
    if clamp is not None:
        kl = torch.clamp(kl, -clamp, clamp)
    return kl


def kl_in_reward(
    rewards: Tensor,  # (B,) one reward per sample (NaN for infra errors stays NaN)
    logp: Tensor,  # (B, T) log-probs of the sampling policy
    ref_logp: Tensor,  # (B, T)
    mask: Tensor,  # (B, T)
    *,
    kl_coef: float,
    kind: KLKind = "k1",
    clamp: float | None = 10.0,
) -> Tensor:  # (B,) rewards - kl_coef * sum_t KL_t, no gradient
    """KL-in-reward shaping for outcome rewards: subtract the sequence KL from each reward.

    >>> kl_in_reward(torch.tensor([1.0]), torch.zeros(1, 2), torch.full((1, 2), -0.5), torch.ones(1, 2),
    ...              kl_coef=0.1).tolist()
    [0.8999999761581421]
    """
    with torch.no_grad():
        kl = kl_penalty(logp, ref_logp, kind, clamp=clamp)
        seq_kl = torch.where(mask > 0, kl, torch.zeros_like(kl)).sum(-1)
        return rewards - kl_coef * seq_kl

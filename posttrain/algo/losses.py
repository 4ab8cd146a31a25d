"""Per-token policy-gradient losses (PPO clip, GSPO, CISPO) and off-policy importance weights.

Each loss maps token log-probs under the current policy (``logp``, with gradient), the behaviour or
proximal policy (``old_logp``, no gradient), advantages and a token mask to a ``(B, T)`` per-token
loss, already masked (0 where ``mask`` is 0). Turning that matrix into a scalar is ``aggregate``'s
job (aggregate.py); metrics are ``loss_stats``'s (stats.py). Variants are picked by name from
``POLICY_LOSSES``; all entries share ``PolicyLossFn``.

Ratios are ``exp(clamp(logp - old_logp, -20, 20))`` (verl, OpenRLHF); the clamp only matters for
log-ratios beyond +-20, where the clipped objective has no gradient anyway. TRL does not clamp.

Not here: KL terms (kl.py), entropy bonuses (the step adds them), value losses (value.py).
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
from torch import Tensor

PolicyLossName = Literal["ppo_clip", "gspo", "cispo"]

LOG_RATIO_CLAMP = 20.0
"""|logp - old_logp| is clamped to this before exp (verl ``compute_policy_loss_vanilla``)."""
GSPO_LOG_RATIO_MAX = 10.0
"""The sequence log-ratio of GSPO is clamped to <= this (verl ``compute_policy_loss_gspo``)."""


class PolicyLossFn(Protocol):
    def __call__(
        self,
        logp: Tensor,
        old_logp: Tensor,
        adv: Tensor,
        mask: Tensor,
        /,
        *,
        clip_low: float = ...,
        clip_high: float = ...,
        dual_clip: float | None = ...,
    ) -> Tensor: ...


def _prepare(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    if logp.dim() != 2 or logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(
            f"logp, old_logp, mask must share one (B, T) shape, got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)  # (B,) -> (B, 1), broadcast over tokens
    if adv.dim() != 2 or adv.shape[0] != logp.shape[0] or adv.shape[1] not in (1, logp.shape[1]):
        raise ValueError(
            f"adv must be (B,), (B, 1) or (B, T) for B, T = {tuple(logp.shape)}, got {tuple(adv.shape)}"
        )
    return adv, mask.to(logp.dtype)


def _masked(loss: Tensor, mask: Tensor) -> Tensor:
    # where() and not loss * mask: padding positions may hold -inf log-probs, and 0 * inf is NaN
    return torch.where(mask > 0, loss, torch.zeros_like(loss))


def _clipped_surrogate(
    ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> Tensor:
    # L = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)); dual clip for A < 0: min(L, -A c)
    loss = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high))
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (Ye et al. 2020 use 3), got {dual_clip}")
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_clip), loss)
    return loss


def ppo_clip_loss(
    logp: Tensor,  # (B, T) log pi_theta(token), with gradient
    old_logp: Tensor,  # (B, T) log pi_old(token): behaviour / proximal policy, no gradient
    adv: Tensor,  # (B,), (B, 1) or (B, T)
    mask: Tensor,  # (B, T) 1.0 where the token gets gradient
    /,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> Tensor:  # (B, T) per-token loss, 0 where mask is 0
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347) with asymmetric clip.

    ``clip_high > clip_low`` is DAPO's clip-higher (Yu et al. 2025, arXiv:2503.14476, 0.28/0.2).
    ``dual_clip=c`` bounds the loss of negative-advantage tokens by ``-A c`` (Ye et al. 2020,
    arXiv:1912.09729; on by default in verl with c=3, never in TRL).

    >>> lp = torch.log(torch.tensor([[1.5, 0.5]])); z = torch.zeros(1, 2); m = torch.ones(1, 2)
    >>> ppo_clip_loss(lp, z, torch.tensor([1.0]), m).tolist()
    [[-1.2000000476837158, -0.5]]
    """
    adv, mask = _prepare(logp, old_logp, adv, mask)
    ratio = torch.exp(torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return _masked(_clipped_surrogate(ratio, adv, clip_low, clip_high, dual_clip), mask)


def gspo_loss(
    logp: Tensor,  # (B, T)
    old_logp: Tensor,  # (B, T)
    adv: Tensor,  # (B,) or (B, 1): one advantage per sequence
    mask: Tensor,  # (B, T)
    /,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    dual_clip: float | None = None,
) -> Tensor:  # (B, T)
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): PPO clip on the sequence-level ratio.

    ``log s_t = sg(mean_t(logp - old_logp)) + logp_t - sg(logp_t)``: every token carries the value of
    the length-normalized sequence ratio ``s`` and the gradient of its own log-prob (the paper's
    GSPO-token form, verl ``compute_policy_loss_gspo``). Aggregate with ``seq_mean_token_mean``
    to get the paper's objective (= TRL ``importance_sampling_level="sequence"`` with loss_type grpo).
    Default clip range 3e-4 / 4e-4 is the paper's.
    """
    adv, mask = _prepare(logp, old_logp, adv, mask)
    n_tok = mask.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    seq_log_ratio = (torch.where(mask > 0, logp - old_logp, torch.zeros_like(logp))).sum(
        -1, keepdim=True
    ) / n_tok
    log_s = seq_log_ratio.detach() + logp - logp.detach()  # (B, T)
    ratio = torch.exp(torch.clamp(log_s, max=GSPO_LOG_RATIO_MAX))
    return _masked(_clipped_surrogate(ratio, adv, clip_low, clip_high, dual_clip), mask)


def cispo_loss(
    logp: Tensor,  # (B, T)
    old_logp: Tensor,  # (B, T)
    adv: Tensor,  # (B,), (B, 1) or (B, T)
    mask: Tensor,  # (B, T)
    /,
    *,
    clip_low: float = 1.0,
    clip_high: float = 4.0,
    dual_clip: float | None = None,
) -> Tensor:  # (B, T)
    """CISPO (MiniMax-M1, arXiv:2506.13585): ``-sg(clip(rho, 1 - clip_low, 1 + clip_high)) * A * logp``.

    Clips the importance weight, not the update, so every token keeps a gradient. Defaults
    [0, 5] are ScaleRL's (SkyRL). TRL's ``epsilon_high`` for cispo is an absolute cap: TRL
    ``epsilon_high=5`` equals ``clip_low=1, clip_high=4`` here. ``dual_clip`` does not apply.
    """
    if dual_clip is not None:
        raise ValueError("cispo has no dual clip (its loss is linear in logp); set dual_clip to None")
    adv, mask = _prepare(logp, old_logp, adv, mask)
    ratio = torch.exp(torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high).detach()
    return _masked(-weight * adv * logp, mask)


POLICY_LOSSES: dict[PolicyLossName, PolicyLossFn] = {
    "ppo_clip": ppo_clip_loss,
    "gspo": gspo_loss,
    "cispo": cispo_loss,
}


def truncated_is_weights(
    old_logp: Tensor,  # (B, T) log-probs the loss uses as pi_old (recomputed by the trainer)
    sampling_logp: Tensor,  # (B, T) log-probs reported by the generation engine when sampling
    mask: Tensor,  # (B, T)
    *,
    cap: float = 2.0,
    level: Literal["token", "sequence"] = "token",
    mode: Literal["truncate", "mask"] = "truncate",
) -> Tensor:  # (B, T) detached weights, 0 where mask is 0
    """Off-policy correction for generation that is stale or numerically different from training.

    ``w = pi_old / pi_sampling`` per token (``level="token"``) or ``exp(sum_t log w_t)`` per sequence
    (``level="sequence"``); ``mode="truncate"`` caps it at ``cap`` (TIS, Yao et al. 2025, "Your
    efficient RL framework secretly brings you off-policy RL training"); ``mode="mask"`` drops tokens
    (sequences) whose weight exceeds ``cap`` (IcePop / MIS). Multiply the per-token policy loss by it.

    >>> w = truncated_is_weights(torch.log(torch.tensor([[0.9, 0.3]])), torch.log(torch.tensor([[0.3, 0.3]])),
    ...                          torch.ones(1, 2))
    >>> w.tolist()
    [[2.0, 1.0]]
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    with torch.no_grad():
        m = mask > 0
        log_w = torch.where(m, torch.clamp(old_logp - sampling_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), 0.0)
        if level == "sequence":
            log_w = torch.clamp(log_w.sum(-1, keepdim=True), max=LOG_RATIO_CLAMP).expand_as(log_w)
        elif level != "token":
            raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
        w = torch.exp(log_w)
        if mode == "truncate":
            w = torch.clamp(w, max=cap)
        elif mode == "mask":
            w = torch.where(w > cap, torch.zeros_like(w), w)
        else:
            raise ValueError(f"mode must be 'truncate' or 'mask', got {mode!r}")
        return torch.where(m, w, torch.zeros_like(w))

"""Preference losses: DPO (sigmoid), IPO, and the Bradley–Terry reward-model loss.

Inputs are *sequence* log-probs (sum over completion tokens of ``token_logprobs``) of the chosen
and rejected completions under the policy and the frozen reference. Losses are per pair, ``(B,)``;
take ``.mean()`` (TRL) or a global-count sum for accumulation.

- ``sigmoid`` (DPO, Rafailov et al. 2023, arXiv:2305.18290): ``-logsigmoid(beta * h)`` with
  ``h = (pc - rc) - (pr - rr)``; ``label_smoothing`` is cDPO (Mitchell 2023).
- ``ipo`` (Azar et al. 2023, arXiv:2310.12036): ``(h - 1 / (2 beta))**2``. IPO is defined on
  *length-averaged* log-probs (TRL divides by the completion length first); pass those.

Not here: the training loop (``posttrain.train.dpo``), batching of pairs.
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

PreferenceLossName = Literal["sigmoid", "ipo"]


class PreferenceLossFn(Protocol):
    def __call__(
        self,
        chosen_logp: Tensor,
        rejected_logp: Tensor,
        ref_chosen_logp: Tensor,
        ref_rejected_logp: Tensor,
        /,
        *,
        beta: float = ...,
        label_smoothing: float = ...,
    ) -> Tensor: ...


def _margin(pc: Tensor, pr: Tensor, rc: Tensor, rr: Tensor) -> Tensor:
    if not (pc.shape == pr.shape == rc.shape == rr.shape) or pc.dim() != 1:
        raise ValueError(
            f"sequence log-probs must be four (B,) tensors, got {[tuple(t.shape) for t in (pc, pr, rc, rr)]}"
        )
    return (pc - rc) - (pr - rr)


def dpo_sigmoid_loss(
    chosen_logp: Tensor,  # (B,) log pi_theta(y_w | x), summed over completion tokens
    rejected_logp: Tensor,  # (B,) log pi_theta(y_l | x)
    ref_chosen_logp: Tensor,  # (B,) log pi_ref(y_w | x)
    ref_rejected_logp: Tensor,  # (B,) log pi_ref(y_l | x)
    /,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> Tensor:  # (B,)
    """DPO loss per pair. ``label_smoothing`` eps mixes in the flipped-preference loss (cDPO).

    >>> z = torch.zeros(1)
    >>> round(float(dpo_sigmoid_loss(z, z, z, z)), 6)  # log 2 at initialization
    0.693147
    """
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp)
    return -F.logsigmoid(beta * h) * (1 - label_smoothing) - F.logsigmoid(-beta * h) * label_smoothing


def ipo_loss(
    chosen_logp: Tensor,  # (B,) length-averaged log-probs
    rejected_logp: Tensor,  # (B,)
    ref_chosen_logp: Tensor,  # (B,)
    ref_rejected_logp: Tensor,  # (B,)
    /,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> Tensor:  # (B,)
    """IPO loss per pair: ``(h - 1/(2 beta))**2``. ``label_smoothing`` must be 0 (not defined for IPO).

    >>> z = torch.zeros(1)
    >>> float(ipo_loss(z, z, z, z, beta=0.5))
    1.0
    """
    if label_smoothing:
        raise ValueError("label_smoothing is not defined for IPO; set it to 0")
    h = _margin(chosen_logp, rejected_logp, ref_chosen_logp, ref_rejected_logp)
    return (h - 1.0 / (2.0 * beta)) ** 2


PREFERENCE_LOSSES: dict[PreferenceLossName, PreferenceLossFn] = {
    "sigmoid": dpo_sigmoid_loss,
    "ipo": ipo_loss,
}


def dpo_rewards(
    chosen_logp: Tensor,
    rejected_logp: Tensor,
    ref_chosen_logp: Tensor,
    ref_rejected_logp: Tensor,
    *,
    beta: float,
) -> tuple[Tensor, Tensor]:  # implicit rewards (B,), (B,), detached
    """Implicit DPO rewards ``beta (logp - ref_logp)`` of chosen and rejected, for logging margins/accuracy."""
    with torch.no_grad():
        return beta * (chosen_logp - ref_chosen_logp), beta * (rejected_logp - ref_rejected_logp)


def bradley_terry_loss(
    chosen_score: Tensor,  # (B,) reward-model score of the chosen completion
    rejected_score: Tensor,  # (B,) score of the rejected one
    *,
    margin: Tensor | None = None,  # (B,) optional required margin (Llama 2 RM)
) -> Tensor:  # (B,)
    """Bradley–Terry pairwise loss ``-logsigmoid(s_w - s_l - margin)`` (InstructGPT RM, arXiv:2203.02155).

    >>> round(float(bradley_terry_loss(torch.tensor([1.0]), torch.tensor([0.0]))), 6)
    0.313262
    """
    if chosen_score.shape != rejected_score.shape or chosen_score.dim() != 1:
        raise ValueError(
            f"scores must be two (B,) tensors, got {tuple(chosen_score.shape)}, {tuple(rejected_score.shape)}"
        )
    d = chosen_score - rejected_score
    if margin is not None:
        d = d - margin
    return -F.logsigmoid(d)

"""What an episode earns: its reward from its last verdict (a cut episode, or one with no verdict,
scores the least a failure can), a step's rewards (N, G) with dropped groups NaN, canaries out of
every baseline, and per-turn process advantages. The GRPO loop's credit (posttrain/train/grpo.py);
the rules are docs/contracts.md, "Reward accounting"."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from posttrain.rollout import as_rollout
from posttrain.tasks import is_canary
from posttrain.types import Rollout, Task, Trajectory
from posttrain.verify.rewards import COMPONENTS, RewardBreakdown, RewardWeights, combine, failure_floor

Groups = Sequence[Sequence[Trajectory]]
"""N groups of G episodes of one task each, as carried by ``Trajectory.group_id``."""


def episode_reward(traj: Trajectory, weights: RewardWeights) -> RewardBreakdown:
    """The weighted reward of the episode's last verdict (NaN for an infra error); the least a
    failure can score (``failure_floor``) for an episode cut by the runner's limits
    (``Trajectory.cut_by``) or ended with no verdict: being cut, or ending without an answer, never
    pays more than answering wrong. An episode cut by a failed attempt's feedback
    (``"feedback_overflow"``: the next attempt had no room) scores that attempt's verdict, exactly
    what the attempt gets as the last one allowed: a failing verdict (the runner sets it only on a
    judged failure), never the cut's floor for an attempt that was made and judged.

    The length component counts every action token of the episode."""
    verdicts = traj.verdicts
    if verdicts and verdicts[-1].is_infra_error:
        return combine(verdicts[-1], weights)
    if traj.cut_by == "feedback_overflow" and verdicts and not verdicts[-1].passed:
        return _last_verdict_reward(traj, weights)
    if traj.cut_by is not None or not verdicts:
        return failure_floor(weights)
    return _last_verdict_reward(traj, weights)


def _last_verdict_reward(traj: Trajectory, weights: RewardWeights) -> RewardBreakdown:
    return combine(traj.verdicts[-1], weights, completion_tokens=sum(len(t.action_ids) for t in traj.turns))


def rewards_of(
    groups: Groups,
    weights: RewardWeights,
    *,
    reward_model: Callable[[Sequence[Rollout]], torch.Tensor] | None = None,
    reward_model_weight: float = 0.0,
    attempt_discount: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted episode rewards (N, G), NaN = no gradient, and the mean of each weighted component.

    Each episode's ``episode_reward`` (a cut one, or one with no verdict: ``failure_floor``). NaN:
    every episode of a group in which one is an infra error (the group is dropped). With a reward
    model (RLHF, one-turn episodes), ``reward_model_weight * rm(rollout)`` is added as component
    "rm" (a score that is not finite counts as the least: 0, or the batch's least score below it); an infra-error sample stays NaN whatever
    the reward model says. ``attempt_discount ** (attempts - 1)`` scales the success of each episode
    -- every component but the length penalty, which stays whole, so that extra failed attempts never
    shrink a failure's penalty (``EpisodeSpec``); there a ``"feedback_overflow"`` episode scores the
    floor (its later attempts, which the discount would have shrunk, never came). Component means are
    of the scored episodes, before the discount.
    """
    parts = [[episode_reward(t, weights) for t in g] for g in groups]
    parts = [g if all(p.total == p.total for p in g) else [_DROPPED] * len(g) for g in parts]  # NaN: infra
    rewards = torch.tensor([[p.total for p in g] for g in parts], dtype=torch.float32)
    scored = [p for g in parts for p in g if p.total == p.total]  # not NaN
    means = {f"reward/{k}": sum(p.components[k] for p in scored) / max(len(scored), 1) for k in COMPONENTS}
    if reward_model is not None:
        views = [as_rollout(t) for g in groups for t in g]
        scores = reward_model(views).reshape(rewards.shape)  # (N, G)
        # a score it could not give (NaN on a policy's input) is its least: sigmoid's 0, or the least it
        # gave in the batch where that is below (a scorer of raw logits). A NaN here would mask this
        # sample alone, an escape from its group's baseline (never infra, never a masked 0); a 0 beside
        # negative scores paid (outscored every wrong answer the scorer did read)
        finite = torch.isfinite(scores)
        least = min(0.0, float(scores[finite].min())) if bool(finite.any()) else 0.0
        scores = torch.where(finite, scores, torch.full_like(scores, least))
        rm = reward_model_weight * scores
        rewards = rewards + rm  # NaN stays NaN
        means["reward/rm"] = float(rm[~torch.isnan(rewards)].mean()) if scored else float("nan")
    if attempt_discount != 1.0:  # the success, not the penalty: (r - length) * d^(k-1) + length
        length = torch.tensor([[p.components["length"] for p in g] for g in parts], dtype=torch.float32)
        factor = torch.tensor([[attempt_discount ** max(t.attempts - 1, 0) for t in g] for g in groups])
        rewards = (rewards - length) * factor + length
        # an overflow ended before the later attempts that would have discounted its failure: the floor
        floor = failure_floor(weights).total
        overflow = torch.tensor([[t.cut_by == "feedback_overflow" for t in g] for g in groups], dtype=torch.bool)
        rewards = torch.where(overflow & ~torch.isnan(rewards), torch.full_like(rewards, floor), rewards)
    return rewards, means


def without_canaries(tasks: Sequence[Task], rewards: torch.Tensor) -> torch.Tensor:  # (N, G) -> (N, G)
    """``rewards`` with every canary task's row NaN: no gradient and out of every baseline (a canary
    passes only by a hack; the metrics' ``canary/*`` report it, ``posttrain.tasks.canary_alarms``)."""
    rows = torch.tensor([is_canary(t) for t in tasks], dtype=torch.bool)
    return rewards.masked_fill(rows[:, None], float("nan")) if bool(rows.any()) else rewards


_DROPPED = RewardBreakdown(float("nan"), dict.fromkeys(COMPONENTS, float("nan")))
"""Every episode of a dropped group (one of its samples stayed an infra error)."""


def process_advantages(groups: Groups, adv: torch.Tensor, width: int, weights: RewardWeights, *,
                       process_coef: float) -> torch.Tensor:  # (B, width)
    """Per-token advantages with per-turn process rewards: the episode's advantage ``adv`` (N, G) on
    every model token, plus ``process_coef * (r_k - r_last)`` on the action tokens of each attempt k
    before the last, r being the weighted reward of that attempt's own verdict (an intermediate
    verdict) without the length penalty: that is the episode's, over all its action tokens, once (an
    attempt's own shorter count would credit earlier attempts for the length the later ones added, so
    that failing in more attempts paid). The last attempt keeps the episode's advantage; turns
    without a verdict (tool calls) get no process term; NaN rewards give none either. Positions
    outside actions are never trained.

    >>> from posttrain.types import Turn, Verdict
    >>> t = Trajectory("m", "g", 0, (Turn((1,), (7,), (-0.5,), "stop", Verdict("fail", 0.0)),
    ...                              Turn((9,), (8,), (-0.1,), "eos", Verdict("pass", 1.0))), 1.0)
    >>> process_advantages([[t]], torch.tensor([[0.5]]), 4, RewardWeights(), process_coef=0.1).tolist()
    [[0.5, 0.4000000059604645, 0.5, 0.5]]
    """
    flat = [t for g in groups for t in g]
    out = adv.reshape(-1, 1).to(torch.float32).repeat(1, width)  # (B, width)
    for i, traj in enumerate(flat):
        if not traj.verdicts:
            continue
        final = combine(traj.verdicts[-1], weights).total  # a cut episode's too: attempts judged alike
        last = max((k for k, turn in enumerate(traj.turns) if turn.verdict is not None), default=-1)
        at = 0
        for k, turn in enumerate(traj.turns):
            at += len(turn.observation_ids)
            n = len(turn.action_ids)
            if turn.verdict is not None and k != last:
                r_k = combine(turn.verdict, weights).total  # no length: both sides without it
                if not (math.isnan(r_k) or math.isnan(final)):
                    out[i, at : at + n] += process_coef * (r_k - final)
            at += n
    return out

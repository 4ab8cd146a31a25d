"""Episodes: a ``Sampler`` and an ``Env`` per episode, run to one token-exact ``Trajectory`` each.

``run_episode(sampler, Episode(task, env, group_id, sample_idx), params)`` is the episode runner
(``run_batch`` runs many in lockstep, one ``generate`` call per round); ``SingleTurnEnv`` is
today's verifiers as one-step episodes through the execution service (``posttrain.sched``): the one
single-turn path (RL, evaluations, ``posttrain eval``, preference pairs); ``posttrain.rollout.episodes``
turns an episode kind into environments, limits and checks.

The episode protocol (``Env``: ``reset -> Observation``, ``step -> StepResult``) is
``posttrain.envs.Env``; its data types are in ``posttrain.types``.

>>> from posttrain.rollout import Episode, SingleTurnEnv, run_episode, run_batch
"""

from posttrain.rollout._adaptive import (
    AdaptiveSampling,
    BudgetController,
    TemperatureController,
    dedup_advantages,
    dedup_rewards,
    diversity,
    diversity_metrics,
)
from posttrain.rollout._context import ContextPolicy, ManagedContext, ManagedEpisode, run_managed
from posttrain.rollout._env import CountsAttempts, SingleTurnEnv, SubmitsSteps, verify_by_domain
from posttrain.rollout._runner import INFRA_EXCEPTIONS, Episode, as_rollout, run_batch, run_episode

__all__ = [
    "INFRA_EXCEPTIONS",
    "AdaptiveSampling",
    "BudgetController",
    "ContextPolicy",
    "CountsAttempts",
    "Episode",
    "ManagedContext",
    "ManagedEpisode",
    "SingleTurnEnv",
    "SubmitsSteps",
    "TemperatureController",
    "as_rollout",
    "dedup_advantages",
    "dedup_rewards",
    "diversity",
    "diversity_metrics",
    "run_batch",
    "run_episode",
    "run_managed",
    "verify_by_domain",
]

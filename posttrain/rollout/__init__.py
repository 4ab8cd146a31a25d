"""Episodes: a ``Sampler`` and an ``Env`` per episode, run to one token-exact ``Trajectory`` each.

``run_episode(sampler, Episode(task, env, group_id, sample_idx), params)`` is the episode runner
(``run_batch`` runs many in lockstep, one ``generate`` call per round); ``SingleTurnEnv`` is
today's verifiers as one-step episodes through the execution service (``posttrain.sched``);
``run_episodes`` is the older
text-level single-turn path (policy + tasks -> ``Rollout``s) that the pipeline and preference
stages still call. ``VerdictCache`` and ``verify_with_retries`` serve stateful episodes
(``RepairEnv``) that verify inside their own steps.

>>> from posttrain.rollout import Episode, SingleTurnEnv, run_episode, run_batch, Trajectory
"""

from posttrain.rollout._env import (
    Env,
    Observation,
    SingleTurnEnv,
    SubmitsSteps,
    VerdictCache,
    Verifier,
    verify_with_retries,
)
from posttrain.rollout._episodes import run_episodes
from posttrain.rollout._repair import RepairEnv, repair_envs, split_tests
from posttrain.rollout._runner import INFRA_EXCEPTIONS, Episode, as_rollout, run_batch, run_episode
from posttrain.types import Trajectory, Turn

__all__ = [
    "INFRA_EXCEPTIONS",
    "Env",
    "Episode",
    "Observation",
    "RepairEnv",
    "SingleTurnEnv",
    "SubmitsSteps",
    "Trajectory",
    "Turn",
    "VerdictCache",
    "Verifier",
    "as_rollout",
    "repair_envs",
    "run_batch",
    "run_episode",
    "run_episodes",
    "split_tests",
    "verify_with_retries",
]

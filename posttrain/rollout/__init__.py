"""Episode runner: sample completions for tasks, verify them, keep them token-exact.

>>> from posttrain.rollout import run_episodes, verify_all, VerdictCache
"""

from posttrain.rollout._episodes import VerdictCache, Verifier, run_episodes, verify_all

__all__ = ["VerdictCache", "Verifier", "run_episodes", "verify_all"]

"""Verification machinery shared by the domains: feedback text, reward combination, the CLI.

- ``feedback``: raw execution output -> normalized, classified, capped text for the model.
- ``rewards``: ``RewardWeights`` + ``combine(verdict, weights)`` -> ``RewardBreakdown``.
- ``batch``: ``pool_for(domains)`` opens a sandbox pool only if a domain needs one. Verifying
  many pairs is the execution service's (``posttrain.sched.open_service``, ``Service.verify_pairs``).
- ``strict_json``: ``loads_strict`` (no NaN/Infinity/duplicate keys), ``json_equal``.
- The domain verifiers themselves are built by ``posttrain.envs.get_env(d).make_verifier(pool)``.

Not here: domain parsing (``posttrain.envs``), sandboxing (``posttrain.sandbox``).
"""

from __future__ import annotations

from posttrain.verify.batch import pool_for
from posttrain.verify.feedback import classify_exception, classify_output, normalize, render
from posttrain.verify.rewards import RewardBreakdown, RewardWeights, combine, length_penalty

__all__ = [
    "RewardBreakdown",
    "RewardWeights",
    "classify_exception",
    "classify_output",
    "combine",
    "length_penalty",
    "normalize",
    "pool_for",
    "render",
]

"""Verification machinery shared by the domains: feedback text, reward combination, JSON Schema, the CPU-budget pool.

- ``feedback``: raw execution output -> normalized, classified, capped text for the model.
- ``rewards``: ``RewardWeights`` + ``combine(verdict, weights)`` -> ``RewardBreakdown``.
- ``json_schema``: JSON Schema validation on exact numbers; ``_deadline``: worker processes with a
  CPU budget (json, tool and math checks).
- Opening a sandbox pool and a service for some domains is the wiring's (``posttrain.cli.pool_for``,
  ``posttrain.cli.open_service``).
- The domain verifiers themselves are built by ``posttrain.envs.get_domain(d).make_verifier(pool)``.

Not here: domain parsing (``posttrain.envs``), sandboxing (``posttrain.sandbox``).
"""

from __future__ import annotations

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
    "render",
]

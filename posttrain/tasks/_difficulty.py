"""Difficulty estimated online from observed pass rates, per task and per generator setting.

Each observation is one group: the fraction of a task's G episodes that passed (infra errors left
out; a group with none valid is not an observation). Two estimates, both forgetting the past at
rate ``ema`` per step:

- **per setting** (a domain at one difficulty: ``rg/countdown@2``; ``@-`` for tasks without one):
  the level's prior counted as ``PRIOR_EPISODES`` episodes, plus the setting's passed and sampled
  episodes, each count discounted by ``1 - ema`` per step with groups of that setting (folded in
  when the next such step comes: so the order of groups within a step does not move it):
  ``(PRIOR_EPISODES * prior + passed) / (PRIOR_EPISODES + sampled)``. The prior is an order, not
  evidence: one group of 8 that all fail takes a level-0 setting (prior 0.83) to 0.09, where an EMA
  from the prior needed six steps with groups of it to fall below 0.1 -- and until then a setting
  the policy cannot do yet took the pool's normal slots from the settings it learns from;
- **per task**: starts at its setting's estimate when first seen (the generator's level as the
  prior, through the setting) and follows the task's own groups. It also keeps the task's last
  ``RECENT`` group pass rates, which the pool's filter reads (a task passed or failed entirely
  that many times in a row is saturated or impossible).

The level prior: a domain with levels lo..hi puts level L at ``1 - (L - lo + 1) / (hi - lo + 2)``
(levels 0..4: 0.83, 0.67, 0.5, 0.33, 0.17): only an order, until groups say more. A task with no
difficulty starts at 0.5.

Everything is plain JSON in ``state_dict()`` (the checkpoint), and ``observe`` is a pure function
of the state and the observation, so a resumed run estimates what the uninterrupted one did.

>>> d = Difficulty(ema=0.5)
>>> t = Task(id="t", domain="math", prompt="", fields={})
>>> d.observe(t, [True, True, False, True])
0.75
>>> round(d.task(t), 3), d.recent(t)
(0.625, [0.75])
>>> d.advance(1); round(d.prior(t), 3)  # the setting: (1 * 0.5 + 3) / (1 + 4)
0.7
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posttrain.errors import UserError
from posttrain.types import Task

RECENT = 4
"""Group pass rates kept per task (the filter reads the last few)."""
PRIOR_EPISODES = 1.0
"""How many episodes a setting's level prior counts as (module docstring)."""
NO_LEVEL = "-"


def level_prior(level: float | None, levels: tuple[int, int] | None) -> float:
    """The prior pass rate of a task at ``level`` of a domain whose levels are ``levels``.

    >>> [round(level_prior(L, (0, 4)), 2) for L in range(5)], level_prior(None, None)
    ([0.83, 0.67, 0.5, 0.33, 0.17], 0.5)
    """
    if level is None or levels is None:
        return 0.5
    lo, hi = levels
    return 1.0 - (min(max(level, lo), hi) - lo + 1) / (hi - lo + 2)


def setting(task: Task) -> str:
    """A task's generator setting: its domain and difficulty (``rg/countdown@2``)."""
    d = task.difficulty
    return f"{task.domain}@{NO_LEVEL if d is None else (int(d) if float(d).is_integer() else d)}"


class Difficulty:
    """Pass-rate estimates per task and per setting (module docstring)."""

    def __init__(self, *, ema: float = 0.3, levels: Callable[[str], tuple[int, int] | None] = lambda d: None) -> None:
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"Difficulty.ema must be in (0, 1], got {ema}")
        self.ema = ema
        self._levels = levels
        """domain -> its (lo, hi) levels, or None: the priors' scale."""
        self._tasks: dict[str, list[Any]] = {}
        """task id -> [estimate, groups observed, recent pass rates]."""
        self._settings: dict[str, list[float]] = {}
        """setting -> [passed, sampled (both discounted), groups observed, the step pending, its passed,
        its sampled]."""

    def prior(self, task: Task) -> float:
        """What is expected of ``task`` before its own groups: its setting's estimate."""
        return self.setting_estimate(task.domain, task.difficulty)

    def setting_estimate(self, domain: str, difficulty: float | None) -> float:
        """The estimate of the setting ``domain`` at ``difficulty`` (its level's prior until observed;
        folded groups only: the step in progress moves it when the next step comes)."""
        key = setting(Task(id="", domain=domain, prompt="", fields={}, difficulty=difficulty))
        prior = level_prior(difficulty, self._levels(domain))
        s = self._settings.get(key)
        return prior if s is None else _estimate(prior, s[0], s[1])

    def _fold(self, s: list[float]) -> None:
        if s[5]:
            s[0] = (1 - self.ema) * s[0] + s[4]
            s[1] = (1 - self.ema) * s[1] + s[5]
            s[4], s[5] = 0.0, 0.0

    def advance(self, step: int) -> None:
        """Fold every setting's groups of steps before ``step`` into its estimate (the pool calls it
        as a step begins, so tasks first seen in ``step`` start from every earlier step's groups)."""
        for s in self._settings.values():
            if s[3] < step:
                self._fold(s)

    def setting_step(self, domain: str, difficulty: float | None) -> int | None:
        """The step of the last group of the setting ``domain`` at ``difficulty`` (None: never observed)."""
        s = self._settings.get(setting(Task(id="", domain=domain, prompt="", fields={}, difficulty=difficulty)))
        return None if s is None else int(s[3])

    def task(self, task: Task) -> float:
        """The estimated pass rate of ``task`` (its prior until it is observed)."""
        entry = self._tasks.get(task.id)
        return entry[0] if entry is not None else self.prior(task)

    def observed(self, task: Task) -> int:
        """How many groups of ``task`` have been observed."""
        entry = self._tasks.get(task.id)
        return int(entry[1]) if entry is not None else 0

    def recent(self, task: Task) -> list[float]:
        """The task's last group pass rates, oldest first."""
        entry = self._tasks.get(task.id)
        return list(entry[2]) if entry is not None else []

    def observe(self, task: Task, passed: Sequence[bool | None], *, step: int = 0) -> float | None:
        """Record one group of ``task`` at ``step`` (per episode: passed, failed, or None for an infra
        error); returns its pass rate, or None when no episode counted."""
        valid = [p for p in passed if p is not None]
        if not valid:
            return None
        rate = sum(valid) / len(valid)
        key = setting(task)
        if key in self._settings and step != self._settings[key][3]:
            self._fold(self._settings[key])
            self._settings[key][3] = step
        prior = self.prior(task)
        s = self._settings.setdefault(key, [0.0, 0.0, 0, step, 0.0, 0.0])
        s[2], s[4], s[5] = s[2] + 1, s[4] + sum(valid), s[5] + len(valid)
        t = self._tasks.setdefault(task.id, [prior, 0, []])
        t[0], t[1] = (1 - self.ema) * t[0] + self.ema * rate, t[1] + 1
        t[2] = (t[2] + [rate])[-RECENT:]
        return rate

    def settings(self) -> dict[str, tuple[float, int]]:
        """Every observed setting: ``{setting: (estimate with its pending step folded in, groups)}``."""
        out = {}
        for k, v in sorted(self._settings.items()):
            domain, _, level = k.rpartition("@")
            prior = level_prior(None if level == NO_LEVEL else float(level), self._levels(domain))
            passed, sampled = (1 - self.ema) * v[0] + v[4], (1 - self.ema) * v[1] + v[5]
            out[k] = (_estimate(prior, passed, sampled) if v[5] else _estimate(prior, v[0], v[1]), int(v[2]))
        return out

    def tasks(self) -> dict[str, tuple[float, int]]:
        """Every observed task: ``{task id: (estimate, groups)}``."""
        return {k: (v[0], int(v[1])) for k, v in self._tasks.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"ema": self.ema, "tasks": {k: [v[0], v[1], list(v[2])] for k, v in self._tasks.items()},
                "settings": {k: list(v) for k, v in self._settings.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not math.isclose(float(state["ema"]), self.ema):
            raise ValueError(f"difficulty state has ema {state['ema']}, this run uses {self.ema}")
        if any(len(v) != 6 for v in state["settings"].values()):  # an EMA per setting: posttrain before 2026-12
            raise UserError("the checkpoint's task-pool state keeps its setting estimates as an older posttrain did "
                            "(one EMA each, not episode counts); resume it with the posttrain that started it, or "
                            "start over with another --out")
        self._tasks = {k: [float(v[0]), int(v[1]), [float(x) for x in v[2]]] for k, v in state["tasks"].items()}
        self._settings = {k: [float(v[0]), float(v[1]), int(v[2]), int(v[3]), float(v[4]), float(v[5])]
                          for k, v in state["settings"].items()}


def _estimate(prior: float, passed: float, sampled: float) -> float:
    """A setting's pass rate: its level prior as ``PRIOR_EPISODES`` episodes, then its (discounted) counts."""
    return (PRIOR_EPISODES * prior + passed) / (PRIOR_EPISODES + sampled)

"""Difficulty estimated online from observed pass rates, per task and per generator setting.

Each observation is one group: the fraction of a task's G episodes that passed (infra errors left
out; a group with none valid is not an observation). Two estimates, both exponential moving
averages with weight ``ema`` on the newest group:

- **per setting** (a domain at one difficulty: ``rg/countdown@2``; ``@-`` for tasks without one):
  starts at the level's prior and follows the setting's mean pass rate per step (one EMA update
  per step with groups of that setting, when the next such step comes: so the order of groups
  within a step, and how many a step has, do not move it);
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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posttrain.types import Task

RECENT = 4
"""Group pass rates kept per task (the filter reads the last few)."""
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
        """setting -> [estimate, groups observed, the step pending, its rate sum, its groups]."""

    def prior(self, task: Task) -> float:
        """What is expected of ``task`` before its own groups: its setting's estimate."""
        return self.setting_estimate(task.domain, task.difficulty)

    def setting_estimate(self, domain: str, difficulty: float | None) -> float:
        """The estimate of the setting ``domain`` at ``difficulty`` (its level's prior until observed;
        folded groups only: the step in progress moves it when the next step comes)."""
        key = setting(Task(id="", domain=domain, prompt="", fields={}, difficulty=difficulty))
        if key in self._settings:
            return self._settings[key][0]
        return level_prior(difficulty, self._levels(domain))

    def _fold(self, s: list[float]) -> None:
        if s[4]:
            s[0] = (1 - self.ema) * s[0] + self.ema * s[3] / s[4]
            s[3], s[4] = 0.0, 0

    def advance(self, step: int) -> None:
        """Fold every setting's groups of steps before ``step`` into its estimate (the pool calls it
        as a step begins, so tasks first seen in ``step`` start from every earlier step's groups)."""
        for s in self._settings.values():
            if s[2] < step:
                self._fold(s)

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
        if key in self._settings and step != self._settings[key][2]:
            self._fold(self._settings[key])
            self._settings[key][2] = step
        prior = self.prior(task)
        s = self._settings.setdefault(key, [prior, 0, step, 0.0, 0])
        s[1], s[3], s[4] = s[1] + 1, s[3] + rate, s[4] + 1
        t = self._tasks.setdefault(task.id, [prior, 0, []])
        t[0], t[1] = (1 - self.ema) * t[0] + self.ema * rate, t[1] + 1
        t[2] = (t[2] + [rate])[-RECENT:]
        return rate

    def settings(self) -> dict[str, tuple[float, int]]:
        """Every observed setting: ``{setting: (estimate with its pending step folded in, groups)}``."""
        out = {}
        for k, v in sorted(self._settings.items()):
            pending = v[3] / v[4] if v[4] else None
            est = v[0] if pending is None else (1 - self.ema) * v[0] + self.ema * pending
            out[k] = (est, int(v[1]))
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
        self._tasks = {k: [float(v[0]), int(v[1]), [float(x) for x in v[2]]] for k, v in state["tasks"].items()}
        self._settings = {k: [float(v[0]), int(v[1]), int(v[2]), float(v[3]), int(v[4])]
                          for k, v in state["settings"].items()}

"""Task sampling for RL: epochs of shuffled tasks, drawn without replacement, resumable exactly.

The sampler's whole state is three integers (seed, epoch, cursor); the order of an epoch is a
pure function of (seed, epoch), so a resumed run draws exactly the tasks the uninterrupted run
would have drawn.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from posttrain.types import Task


class TaskSampler:
    """Draws batches of tasks: shuffled epochs without replacement.

    >>> s = TaskSampler([Task(id=str(i), domain="math", prompt="", fields={}) for i in range(3)], seed=0)
    >>> len({t.id for t in s.next(3)})
    3
    """

    def __init__(self, tasks: Sequence[Task], *, seed: int) -> None:
        if not tasks:
            raise ValueError("TaskSampler needs at least one task")
        self.tasks = list(tasks)
        self.seed = seed
        self.epoch = 0
        self.cursor = 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next(self, k: int) -> list[Task]:
        out = []
        for _ in range(k):
            if self.cursor == len(self._order):
                self.epoch += 1
                self.cursor = 0
                self._order = self._shuffled(self.epoch)
            out.append(self.tasks[self._order[self.cursor]])
            self.cursor += 1
        return out

    def state(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}

    def load_state(self, state: Mapping[str, Any]) -> None:
        if int(state["seed"]) != self.seed:
            raise ValueError(f"sampler state has seed {state['seed']}, this run uses {self.seed}")
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self._order = self._shuffled(self.epoch)

"""Task sampling for RL: epochs of shuffled tasks, drawn without replacement, resumable exactly.

The sampler's whole state is three integers (seed, epoch, cursor); the order of an epoch is a
pure function of (seed, epoch), so a resumed run draws exactly the tasks the uninterrupted run
would have drawn.

``next(k, skip=domains)`` passes over the tasks of ``domains`` (GRPO's: those whose circuit breaker
is open, ``Service.open_domains``): each one passed over is consumed from the epoch and counted in
``skipped``. The choice is a function of the sampler's state and ``skip`` alone. The breakers'
states are in the checkpoint, but when a breaker opens or closes follows wall-clock cool-downs and
infra errors, so a run that met open breakers is not bit-reproducible on resume. When ``skip`` would leave
no task at all, it is ignored (a run never stalls on its sampler).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from posttrain.types import Task


class TaskSampler:
    """Draws batches of tasks: shuffled epochs without replacement.

    >>> s = TaskSampler([Task(id=str(i), domain="math", prompt="", fields={}) for i in range(3)], seed=0)
    >>> len({t.id for t in s.next(3)})
    3
    >>> mixed = TaskSampler([Task(id=f"{d}{i}", domain=d, prompt="", fields={}) for d in ("math", "code")
    ...                      for i in range(2)], seed=0)
    >>> [t.domain for t in mixed.next(3, skip={"code"})], mixed.skipped
    (['math', 'math', 'math'], 4)
    """

    def __init__(self, tasks: Sequence[Task], *, seed: int) -> None:
        if not tasks:
            raise ValueError("TaskSampler needs at least one task")
        self.tasks = list(tasks)
        self.seed = seed
        self.epoch = 0
        self.cursor = 0
        self._order = self._shuffled(0)
        self.skipped = 0
        """Draws passed over because their task's domain was in ``skip`` (a metric; not state)."""
        self._domains = {t.domain for t in self.tasks}

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next(self, k: int, *, skip: Collection[str] = (), step: int | None = None) -> list[Task]:
        """The next ``k`` tasks, passing over those of the domains in ``skip`` (module docstring);
        ``step`` is the pool's (uniform draws do not depend on it)."""
        skip = set(skip) if not self._domains <= set(skip) else set()
        out: list[Task] = []
        while len(out) < k:
            if self.cursor == len(self._order):
                self.epoch += 1
                self.cursor = 0
                self._order = self._shuffled(self.epoch)
            task = self.tasks[self._order[self.cursor]]
            self.cursor += 1
            if task.domain in skip:
                self.skipped += 1
            else:
                out.append(task)
        return out

    def observe(self, tasks: Sequence[Task], passed: Sequence[Sequence[bool | None]]) -> None:
        """Nothing: uniform draws learn nothing from groups (``TaskPool.observe`` does)."""

    def known_tasks(self) -> list[Task]:
        """Every task this sampler can hand out."""
        return list(self.tasks)

    def metrics(self) -> dict[str, float]:
        """Nothing to report (``TaskPool.metrics`` has pool sizes and levels)."""
        return {}

    def state(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}

    def load_state(self, state: Mapping[str, Any]) -> None:
        if int(state["seed"]) != self.seed:
            raise ValueError(f"sampler state has seed {state['seed']}, this run uses {self.seed}")
        if state.get("kind", "uniform") != "uniform":
            raise ValueError(f"sampler state is of a {state['kind']} sampler; this run uses the uniform sampler")
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self._order = self._shuffled(self.epoch)

    # the names the task pool's state goes by (one interface for checkpoints)
    state_dict = state
    load_state_dict = load_state

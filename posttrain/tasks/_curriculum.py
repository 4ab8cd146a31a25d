"""A curriculum source: tasks of a generator with levels, made on demand at a level that follows the policy.

``Stream(domain, env, seed=, level=, spec=)`` hands out tasks of ``env.generate_level`` at its
current level, ``spec.chunk`` at a time; chunk c of level L is generated with a seed derived from
(run seed, domain, L, c), so the stream is a pure function of its state (level, the chunk counter
of each level, the position in the current chunk): a resumed run regenerates the chunk it was in
and continues from the same task.

The level controller (reasoning-gym's curricula give the knobs; this is the controller): each
observed group of a task made at the current level adds its pass rate to a window; when the window
holds ``spec.window`` groups, the level goes up if their mean is at least ``raise_above`` and
down if at most ``lower_below`` (the signal collapsed), within the domain's ``level_range()``,
and the window starts over. Groups of tasks made at another level (drawn before a change, observed
after it) count for the tasks' difficulty, not for the controller. A chunk's tasks that overlap an
evaluation task (``exclude``) are left out; a chunk left empty so is regenerated with the next
seed, at most ``MAX_EMPTY`` times.

Not here: how often a stream is drawn from (the pool's weights), the per-task estimates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posttrain.envs import HasLevels
from posttrain.errors import TaskError
from posttrain.tasks._spec import CurriculumSpec
from posttrain.types import Task

MAX_EMPTY = 8


def chunk_seed(seed: int, domain: str, level: int, chunk: int) -> int:
    """The generator seed of chunk ``chunk`` of ``domain`` at ``level`` in a run seeded ``seed``."""
    text = json.dumps([seed, domain, level, chunk])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") >> 1


class Stream:
    """Tasks of one generator at a controlled level (module docstring)."""

    def __init__(self, domain: str, env: HasLevels, *, seed: int, level: int | None, spec: CurriculumSpec,
                 exclude: Callable[[Sequence[Task]], set[str]] = lambda tasks: set()) -> None:
        self.domain = domain
        self.env = env
        self.seed = seed
        self.spec = spec
        self.exclude = exclude
        self.lo, self.hi = env.level_range()
        start = self.lo if level is None else level
        if not self.lo <= start <= self.hi:
            raise TaskError(f"{domain}: level {start} is outside its levels {self.lo}..{self.hi}")
        self.level = start
        self.chunks: dict[int, int] = {}
        """level -> chunks generated at it so far (the next chunk's index)."""
        self.pos = 0
        self.window: list[float] = []
        self.changes: list[tuple[int, int, int]] = []
        """(step, from level, to level) of every level change (a metric; not state)."""
        self._chunk: list[Task] = []
        self._chunk_index = -1

    def next(self) -> Task:
        """The next task at the current level."""
        while self.pos >= len(self._chunk):
            self._new_chunk()
        task = self._chunk[self.pos]
        self.pos += 1
        return task

    def _new_chunk(self) -> None:
        for _ in range(MAX_EMPTY):
            index = self.chunks.get(self.level, 0)
            self.chunks[self.level] = index + 1
            made = self._generate(index)
            if made:
                self._chunk, self._chunk_index, self.pos = made, index, 0
                return
        raise TaskError(f"{self.domain}: {MAX_EMPTY} chunks at level {self.level} overlapped the evaluation tasks "
                        f"entirely; evaluate on other tasks or train at another level")

    def _generate(self, index: int) -> list[Task]:
        tasks = self.env.generate_level(self.spec.chunk, level=self.level,
                                        seed=chunk_seed(self.seed, self.domain, self.level, index))
        dropped = self.exclude(tasks)
        return [t for t in tasks if t.id not in dropped]

    def observe(self, task: Task, rate: float, *, step: int) -> None:
        """One group of ``task`` passed at ``rate``; may move the level (module docstring)."""
        if task.difficulty is None or int(task.difficulty) != self.level:
            return
        self.window.append(rate)
        if len(self.window) < self.spec.window:
            return
        mean = sum(self.window) / len(self.window)
        new = self.level
        if mean >= self.spec.raise_above and self.level < self.hi:
            new = self.level + 1
        elif mean <= self.spec.lower_below and self.level > self.lo:
            new = self.level - 1
        self.window = []
        if new != self.level:
            self.changes.append((step, self.level, new))
            self.level, self._chunk, self.pos = new, [], 0

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.level, "chunks": {str(k): v for k, v in self.chunks.items()},
                "chunk": self._chunk_index if self._chunk else None, "pos": self.pos, "window": list(self.window)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.level = int(state["level"])
        self.chunks = {int(k): int(v) for k, v in state["chunks"].items()}
        self.window = [float(x) for x in state["window"]]
        self._chunk, self._chunk_index, self.pos = [], -1, 0
        if state["chunk"] is not None:  # the chunk it was in: regenerated, same tasks
            self._chunk, self._chunk_index = self._generate(int(state["chunk"])), int(state["chunk"])
            self.pos = int(state["pos"])

"""Zero-variance groups dropped from the gradient, with bounded re-sampling and a clear error at the bound.

A group whose rewards are all equal has advantage 0 everywhere (GRPO): it costs generation and
verification and teaches nothing. ``fill_batch(draw, want=, max_draws=)`` keeps drawing (``draw(k)``
returns k tasks' groups, scored, and whether each is informative) until ``want`` informative groups
are kept, at most ``max_draws`` times (DAPO's dynamic sampling, SkyRL's ``filter`` with
``max_sample_batches``, verl's ``max_num_gen_batches``). When the bound is hit it raises
``TaskError``: one line with how many groups were drawn and kept, and what to change. Never a
silent short batch (the trainer's earlier rule kept a smaller batch, or the last draw whole).

Extra informative groups of the last draw are dropped, so the batch is exactly ``want`` groups and
which ones is a function of the draw order alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from posttrain.errors import TaskError

T = TypeVar("T")
G = TypeVar("G")


@dataclass(frozen=True)
class Filled(Generic[T, G]):
    """The kept tasks and groups (exactly ``want``), and what it took."""

    tasks: list[T]
    groups: list[G]
    drawn: int
    """Groups drawn in all."""
    draws: int
    """Calls to ``draw``."""

    @property
    def zero_variance_fraction(self) -> float:
        """The share of drawn groups dropped for having no reward variance."""
        return 1.0 - len(self.groups) / self.drawn if self.drawn else 0.0


def fill_batch(draw: Callable[[int], tuple[Sequence[T], Sequence[G], Sequence[bool]]], *, want: int,
               max_draws: int, what: str = "rl.dynamic_sampling") -> Filled[T, G]:
    """Draw until ``want`` informative groups are kept (module docstring).

    >>> import itertools
    >>> counter = itertools.count()
    >>> def draw(k):
    ...     ids = [next(counter) for _ in range(k)]
    ...     return ids, ids, [i % 3 == 0 for i in ids]
    >>> filled = fill_batch(draw, want=4, max_draws=5)
    >>> filled.tasks, filled.drawn, round(filled.zero_variance_fraction, 2)
    ([0, 3, 6, 9], 10, 0.6)
    """
    if want < 1 or max_draws < 1:
        raise ValueError("fill_batch needs want >= 1 and max_draws >= 1")
    tasks: list[T] = []
    groups: list[G] = []
    drawn = 0
    for n in range(1, max_draws + 1):
        new_tasks, new_groups, keep = draw(want - len(tasks))
        drawn += len(new_tasks)
        for t, g, k in zip(new_tasks, new_groups, keep, strict=True):
            if k and len(tasks) < want:
                tasks.append(t)
                groups.append(g)
        if len(tasks) == want:
            return Filled(tasks, groups, drawn, n)
    raise TaskError(f"{what}: {max_draws} draws gave {drawn} groups and only {len(tasks)} of the {want} a batch "
                    f"needs had any reward variance (the rest passed or failed entirely); the tasks are too easy or "
                    f"too hard for the policy: raise rl.max_refills, or use tasks.sampler.kind: pool with a filter "
                    f"or curriculum sources")

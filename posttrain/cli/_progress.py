"""Progress bars for the long phases of the commands (SFT, RL, each evaluation, ``posttrain eval``):
done / total, elapsed time, the rate and the time left, on stderr (stdout keeps the results).

    with progress_bar("rl (grpo)", steps, unit="step") as advance:
        for step in range(steps):
            ...
            advance(step + 1)

The rate is rich's estimate over the last 30 s (``Task.speed``), or the whole phase's once it ended
(or before rich has two samples); the time left is what remains at rich's rate. Until the first
advance neither is known (``-``). On a terminal the bar
redraws in place; elsewhere (a log file, CI) rich prints it once when the phase ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from posttrain.shown import visible

console = Console(stderr=True, soft_wrap=True)
WIDTH = 16
"""Descriptions are padded to this width, so that the bars of a run's phases line up."""

__all__ = ["WIDTH", "RateColumn", "console", "plain", "progress_bar"]



def plain(text: str) -> str:
    """``text`` (a phase named after a task file, an eval set or a model) as it shows on a terminal:
    each control character (ESC, BEL, ``\\r``: colours, OSC 8 links, a line overwritten), bidi
    override, zero-width character or lone surrogate written as its escape.

    >>> print(plain("eval \\x1b]8;;http://x\\x07ok\\r"))
    eval \\x1b]8;;http://x\\x07ok\\x0d
    """
    return visible(text)


class RateColumn(ProgressColumn):
    """``3.20 step/s`` when a unit takes under a second, else ``4.1 s/step``; ``-`` before any is done.

    >>> from rich.progress import Task
    >>> t = Task(0, "rl", total=10, completed=0, _get_time=lambda: 0.0)
    >>> RateColumn("step").render(t).plain
    '- step/s'
    """

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.speed if not task.finished else None
        if not speed and task.completed and task.elapsed:  # over the whole phase: it ended, or moved once
            speed = task.completed / task.elapsed
        if not speed:
            return Text(f"- {self.unit}/s", style="progress.data.speed")
        text = f"{speed:.2f} {self.unit}/s" if speed >= 1 else f"{1 / speed:.1f} s/{self.unit}"
        return Text(text, style="progress.data.speed")


@contextmanager
def progress_bar(description: str, total: int, *, unit: str = "step") -> Iterator[Callable[[int], None]]:
    """A bar on stderr with done/total, elapsed, rate and time left; yields ``advance_to(done)``. The
    description shows as text (``plain``; rich markup in it is not read)."""
    cols = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            RateColumn(unit), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*cols, console=console, transient=False) as bar:
        tid = bar.add_task(plain(description).ljust(WIDTH), total=total)  # shown as given: no [link=...] markup
        yield lambda done: bar.update(tid, completed=done)

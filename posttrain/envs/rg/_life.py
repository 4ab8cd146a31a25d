"""game_of_life_halting's boards as posttrain draws them, each answered by simulating it.

reasoning-gym's generator flips a coin, then places either oscillators (blinker, toad, clock, ...) or
"non-oscillators", which are all diagonal lines of cells, and answers ``not should_oscillate``. Every
oscillator it places has two live cells side by side and no diagonal line has any, so "False if two
live cells touch side by side, else True", read off the board, passed 200 of 200 default tasks (seeds
1, 2) and 40 of 40 at levels 0 and 1; at level 1 the live-cell count alone split its answers 39 to 1.
Its configuration offers no other patterns, so posttrain draws the board itself (``drawn``, the
generator's entry ``shape``d): the same grid, step limit and number of pieces as the generator's
configuration says, each piece a pattern of ``CELLS`` live cells spanning a ``BOX`` x ``BOX`` box, at
the generator's own spacing. What a piece shows is drawn first, apart from the answer: its cell count,
and whether two of its cells touch side by side (``side_by_side``); then its fate alone (dies within
the step limit, or lives: a still life, an oscillator, a pattern that settles into one) as the planned
answer asks (every piece dies, or one lives), among the ``_catalog`` patterns that show the same.
The answer is the whole board simulated on its torus for the step limit (``halts``), never the plan:
pieces that grow into each other are what the simulation says they are.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Mapping
from itertools import combinations
from typing import Any

import numpy as np

BOX = 4
"""A piece's box: the smallest where a piece of the same cell count both dies and lives, with and
without two cells side by side (in 3 x 3, the only diagonal-only patterns that die have 3 cells,
those that live 4 or 5: the count told the answer)."""
CELLS = (5, 6)
"""A piece's live cells. Spanning a 4 x 4 box, within 20 steps: of 5 cells, 20 die and 88 live with no
two side by side, 132 die and 168 live with two; of 6, 26 and 56, 688 and 942."""
PAD = 4
"""Dead cells around a piece in ``_catalog``'s simulation: a piece whose cells reach that far (a glider,
a growing pattern) is in no catalog, so the pieces stay near their box."""


def life_step(board: np.ndarray) -> np.ndarray:
    """One step of Conway's rule (B3/S23, Moore neighbourhood) on a torus: the last two axes of
    ``board`` (0/1, uint8); any leading axes are boards side by side."""
    neighbours = sum(np.roll(board, (dx, dy), axis=(-2, -1))
                     for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy)
    return ((neighbours == 3) | ((board == 1) & (neighbours == 2))).astype(np.uint8)


def halts(board: np.ndarray, steps: int) -> bool:
    """Whether no cell of ``board`` (a torus) is alive at some step from 0 to ``steps``: the question
    "will this game halt at or before ``steps`` steps". A board equal to itself one or two steps back
    and alive never dies, so the simulation stops there."""
    before: list[np.ndarray] = []
    for _ in range(steps):
        if not board.any():
            return True
        if any(np.array_equal(board, b) for b in before):
            return False
        before = [board, *before[:1]]
        board = life_step(board)
    return not board.any()


def side_by_side(board: np.ndarray) -> bool:
    """Whether two live cells of ``board`` touch along a row or a column (not across the wrap)."""
    return bool((board[:, :-1] & board[:, 1:]).any() or (board[:-1, :] & board[1:, :]).any())


@functools.lru_cache(maxsize=8)
def _catalog(steps: int) -> dict[tuple[int, bool, bool], list[tuple[tuple[int, int], ...]]]:
    """(cell count, two cells side by side, dies within ``steps``) -> the patterns of ``CELLS`` cells
    spanning a ``BOX`` x ``BOX`` box that show it, each simulated alone with ``PAD`` dead cells around
    (all at once, as a stack of boards); one whose cells reach the pad's edge is in none. ~1 s a call."""
    spots = [(x, y) for x in range(BOX) for y in range(BOX)]
    patterns = [cells for c in CELLS for cells in combinations(spots, c)
                if len({x for x, _ in cells}) == BOX and len({y for _, y in cells}) == BOX]
    side = 2 * PAD + BOX
    boards = np.zeros((len(patterns), side, side), dtype=np.uint8)
    for i, cells in enumerate(patterns):
        for x, y in cells:
            boards[i, PAD + x, PAD + y] = 1
    fate = np.full(len(patterns), -1)  # -1 running, 0 lives (settled), 1 dies, 2 reached the edge
    older = boards.copy()
    for _ in range(steps):
        running = np.flatnonzero(fate == -1)
        if not len(running):
            break
        now = life_step(boards[running])
        edge = now[:, [0, -1], :].any((1, 2)) | now[:, :, [0, -1]].any((1, 2))
        dead = ~now.any((1, 2))
        settled = (now == boards[running]).all((1, 2)) | (now == older[running]).all((1, 2))
        fate[running[edge]] = 2
        fate[running[~edge & dead]] = 1
        fate[running[~edge & ~dead & settled]] = 0
        older[running], boards[running] = boards[running], now
    out: dict[tuple[int, bool, bool], list[tuple[tuple[int, int], ...]]] = {}
    for cells, f in zip(patterns, fate, strict=True):
        if f in (-1, 0, 1):  # alive at the last step counts as living through it
            s = set(cells)
            pair = any((x + 1, y) in s or (x, y + 1) in s for x, y in s)
            out.setdefault((len(cells), pair, bool(f == 1)), []).append(cells)
    return out


def _patterns(catalog: Mapping[tuple[int, bool, bool], list[tuple[tuple[int, int], ...]]], cells: int,
              pair: bool, dies: bool) -> list[tuple[tuple[int, int], ...]]:
    """The catalog's patterns that show ``cells`` and ``pair`` and die (or live) as asked; where a step
    limit of a recipe's leaves none (no 5-cell piece dies in 1 step), those of that fate, else all."""
    for keys in ([(cells, pair, dies)], [k for k in catalog if k[2] == dies], list(catalog)):
        found = [p for k in keys for p in catalog.get(k, [])]
        if found:
            return found
    raise ValueError("rg/game_of_life_halting: no piece in the catalog")


def _free(taken: np.ndarray) -> list[tuple[int, int]]:
    """The corners (i, j) where a piece's box and its dead border fit inside the grid clear of ``taken``:
    the generator's placement, ``1 <= i <= rows - BOX - 1`` and likewise j (it draws up to 1,000 of
    them at random; here the free ones are listed, one drawn)."""
    from numpy.lib.stride_tricks import sliding_window_view

    if min(taken.shape) < BOX + 2:
        return []
    busy = sliding_window_view(taken, (BOX + 2, BOX + 2)).any(axis=(2, 3))
    return [(int(r) + 1, int(c) + 1) for r, c in np.argwhere(~busy)]


def _board_of(question: str) -> np.ndarray:
    """The board the question prints after "Initial board:" (numpy's writing of a 0/1 array)."""
    body = question.split("Initial board:", 1)[1]
    return np.array([[int(d) for d in re.findall(r"[01]", line)] for line in body.strip().split("\n")],
                    dtype=np.uint8)


def board_tells(entry: Mapping[str, Any]) -> str:
    """``Rule.tells`` of game_of_life_halting: whether two live cells of the shown board touch side by
    side (reasoning-gym's own boards: every oscillator, never a dying one)."""
    return str(side_by_side(_board_of(str(entry["question"]))))


def drawn(entry: Mapping[str, Any]) -> dict[str, Any]:
    """game_of_life_halting's entry with posttrain's board (module docstring) in place of the
    generator's, its answer the board simulated; deterministic in the entry. The metadata says what
    was placed where (``placed_patterns``: each piece's cells) and ``should_oscillate`` as simulated."""
    meta = entry["metadata"]
    rows, cols = int(meta["grid_size_x"]), int(meta["grid_size_y"])
    steps, count = int(meta["simulation_steps"]), int(meta["difficulty"]["num_oscillators"])
    digest = hashlib.sha256(json.dumps([entry["question"], meta.get("source_index")]).encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    catalog = _catalog(steps)
    living = rng.randrange(count) if count and rng.random() < 0.5 else None  # the piece planned to live, if any
    board = np.zeros((rows, cols), dtype=int)
    taken = np.zeros((rows, cols), dtype=bool)
    placed: list[dict[str, Any]] = []
    for k in sorted(range(count), key=lambda k: k != living):  # the living piece first: it must fit
        cells = rng.choice(_patterns(catalog, rng.choice(CELLS), rng.random() < 0.5, k != living))
        free = _free(taken)
        if not free:  # the generator's own rule: a piece that finds no room is left out (none after it fits)
            break
        i, j = rng.choice(free)
        taken[i - 1:i + BOX + 1, j - 1:j + BOX + 1] = True
        for x, y in cells:
            board[i + x, j + y] = 1
        placed.append({"name": "posttrain piece", "position": [i, j], "cells": [list(c) for c in cells]})
    halted = halts(board.astype(np.uint8), steps)
    head, mark, _ = str(entry["question"]).partition("Initial board:\n")
    if not mark:
        raise ValueError("rg/game_of_life_halting: the question shows no 'Initial board:' to replace")
    return {**entry, "question": f"{head}{mark}{board}", "answer": str(halted),
            "metadata": {**meta, "placed_patterns": placed, "should_oscillate": not halted}}

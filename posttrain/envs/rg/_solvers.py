"""Reference answers for the two generators that keep neither an answer nor an example: boxnet, rush_hour.

They are written from the puzzles' rules as their questions state them, not from the scorers, and
the verifier checks what they find like any other answer (a solver bug is a reference that fails
the conformance test, never a pass that should not be).

- ``rush_hour_solution(board)``: breadth-first search over the 6x6 board (a 36-character string:
  ``o`` empty, ``x`` a wall, a letter per car; car ``A`` leaves by reaching the right edge of row
  2), one cell per move; consecutive moves of one car are merged (``"A+2 B-1"``).
- ``rush_hour_solves(board, moves)``: the strict check the rush_hour domain scores with
  (``_hardened.py``);
- ``boxnet_plan(state)``: each box walked to a target of its colour one adjacent square per step,
  then matched; one action per step (``[{"Agent[x, y]": "move(box_c, square[x', y'])"}, ...]``);
- ``boxnet_illegal(state, plan)``: the first action of a plan that breaks the rules (the boxnet
  domain refuses such a plan, ``_hardened.py``).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Mapping, Sequence

SIZE = 6
EXIT_ROW = 2


def _parse(board: str) -> tuple[list[bool], list[int], tuple[int, ...], frozenset[int], int]:
    """(horizontal per car, size per car, start offsets, walls, the offset car A leaves from)."""
    if len(board) != SIZE * SIZE:
        raise ValueError(f"a rush hour board has {SIZE * SIZE} cells, got {len(board)}")
    cars: dict[str, list[int]] = {}
    for i, label in enumerate(board):
        if label not in "ox":
            cars.setdefault(label, []).append(i)
    labels = sorted(cars)
    horizontal = [cars[c][1] - cars[c][0] == 1 for c in labels]
    sizes = [len(cars[c]) for c in labels]
    walls = frozenset(i for i, label in enumerate(board) if label == "x")
    return horizontal, sizes, tuple(cars[c][0] for c in labels), walls, EXIT_ROW * SIZE + SIZE - sizes[0]


def rush_hour_solves(board: str, moves: str) -> bool:
    """Whether ``moves`` ("A+2 B-1 ...", nothing else) are each legal (the car exists, every cell it
    passes is free) and leave car A at the exit. The generator's scorer skips an illegal move and
    any text between moves, so a pile of move lists ending solved passed.

    >>> rush_hour_solves("ooooooooooooAAoooooooooooooooooooooo", "A+4"), rush_hour_solves("ooooooooooooAAoooooooooooooooooooooo", "A+5")
    (True, False)
    """
    if not re.fullmatch(r"\s*[A-Z][+-]\d+(\s+[A-Z][+-]\d+)*\s*", moves):
        return False
    horizontal, sizes, state, walls, goal = _parse(board)
    pos = list(state)
    for label, sign, count in re.findall(r"([A-Z])([+-])(\d+)", moves):
        k = ord(label) - ord("A")
        if k >= len(pos):
            return False
        step = (1 if horizontal[k] else SIZE) * (1 if sign == "+" else -1)
        for _ in range(int(count)):
            new = pos[k] + step
            occupied = set(walls).union(*(_cells(j, p, horizontal, sizes) for j, p in enumerate(pos) if j != k))
            if not _inside(k, new, horizontal, sizes) or occupied & set(_cells(k, new, horizontal, sizes)):
                return False
            pos[k] = new
    return pos[0] == goal


def _cells(k: int, pos: int, horizontal: Sequence[bool], sizes: Sequence[int]) -> list[int]:
    step = 1 if horizontal[k] else SIZE
    return [pos + j * step for j in range(sizes[k])]


def rush_hour_solution(board: str) -> str:
    """The moves of a shortest solution of a rush hour board, in the generator's notation.

    >>> rush_hour_solution("ooooooooooooAAooooooooooooooooooooooo"[:36])
    'A+4'
    """
    horizontal, sizes, start, walls, goal = _parse(board)

    def cells(k: int, pos: int) -> list[int]:
        return _cells(k, pos, horizontal, sizes)

    parent: dict[tuple[int, ...], tuple[tuple[int, ...], int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[0] == goal:
            return _merge(_path(parent, state))
        occupied = set(walls).union(*(cells(k, p) for k, p in enumerate(state)))
        for k, pos in enumerate(state):
            for d in (-1, 1):
                new = pos + d * (1 if horizontal[k] else SIZE)
                if not _inside(k, new, horizontal, sizes) or any(
                        c in occupied and c not in cells(k, pos) for c in cells(k, new)):
                    continue
                nxt = (*state[:k], new, *state[k + 1:])
                if nxt not in parent:
                    parent[nxt] = (state, k, d)
                    queue.append(nxt)
    raise ValueError("the rush hour board has no solution")


def _inside(k: int, pos: int, horizontal: Sequence[bool], sizes: Sequence[int]) -> bool:
    if pos < 0:
        return False
    row, col = divmod(pos, SIZE)
    if horizontal[k]:
        return col + sizes[k] <= SIZE
    return row + sizes[k] <= SIZE


def _path(parent: Mapping, state: tuple[int, ...]) -> list[tuple[int, int]]:
    moves = []
    while parent[state] is not None:
        state, k, d = parent[state]
        moves.append((k, d))
    return moves[::-1]


def _merge(moves: list[tuple[int, int]]) -> str:
    """Car k is named by its place in label order (``A`` + k), as the question shows it."""
    merged: list[list[int]] = []
    for k, d in moves:
        if merged and merged[-1][0] == k and (merged[-1][1] > 0) == (d > 0):
            merged[-1][1] += d
        else:
            merged.append([k, d])
    return " ".join(f"{chr(ord('A') + k)}{'+' if d > 0 else '-'}{abs(d)}" for k, d in merged)


def boxnet_plan(state: Mapping[str, Sequence[str]]) -> str:
    """A plan (JSON) that brings every box of ``state`` (square "r_c" -> items) onto a target of its colour."""
    items = {key: list(value) for key, value in state.items()}
    boxes = [(key, item[4:]) for key, value in items.items() for item in value if item.startswith("box_")]
    targets: dict[str, list[str]] = {}
    for key, value in items.items():
        for item in value:
            if item.startswith("target_"):
                targets.setdefault(item[7:], []).append(key)
    steps: list[dict[str, str]] = []
    for key, colour in boxes:
        goal = targets[colour].pop(0)
        (r, c), (gr, gc) = _square(key), _square(goal)
        while (r, c) != (gr, gc):
            nr, nc = (r + (1 if gr > r else -1), c) if r != gr else (r, c + (1 if gc > c else -1))
            steps.append({f"Agent[{r}, {c}]": f"move(box_{colour}, square[{nr}, {nc}])"})
            r, c = nr, nc
        steps.append({f"Agent[{r}, {c}]": f"move(box_{colour}, target_{colour})"})
    return json.dumps(steps)


def _square(key: str) -> tuple[float, float]:
    row, col = key.split("_")
    return float(row), float(col)


_AGENT = re.compile(r"Agent\[(\d+(?:\.\d+)?),\s*(\d+(?:\.\d+)?)\]")
_ACTION = re.compile(r"move\((box_\w+),\s(target_\w+|square\[(\d+(?:\.\d+)?),\s*(\d+(?:\.\d+)?)\])\)")


def boxnet_illegal(state: Mapping[str, Sequence[str]], plan: str) -> str | None:
    """Why ``plan`` breaks the rules its question states, or None: every action in the scorer's
    form, by an agent on a square of the grid, once a step, on a box in its square, to an adjacent
    square or onto a target of the box's colour in that square. The generator's scorer skips an
    action that breaks them, so a sweep of every box through every square, a match tried at every
    square after each move, matched every box with no planning (the grid and colours suffice).

    >>> state = {"0.5_0.5": ["box_red"], "0.5_1.5": ["target_red"]}
    >>> boxnet_illegal(state, '[{"Agent[0.5, 0.5]": "move(box_red, square[0.5, 1.5])"}, '
    ...                       '{"Agent[0.5, 1.5]": "move(box_red, target_red)"}]') is None
    True
    >>> boxnet_illegal(state, '[{"Agent[0.5, 1.5]": "move(box_red, target_red)"}]')
    'step 1: Agent[0.5, 1.5] has no box_red in its square'
    """
    try:
        steps = json.loads(plan)
    except ValueError:
        return "not JSON"
    if not isinstance(steps, list) or not all(isinstance(step, dict) for step in steps):
        return "not a list of steps, each an object of agent actions"
    squares = {key: list(items) for key, items in state.items()}
    for n, step in enumerate(steps, 1):
        acted: set[str] = set()
        for agent, action in step.items():
            problem = _boxnet_act(squares, acted, agent, action)
            if problem is not None:
                return f"step {n}: {problem}"
    return None


def _boxnet_act(squares: dict[str, list[str]], acted: set[str], agent: str, action: object) -> str | None:
    """Apply one action to ``squares`` as the scorer does (in place), or say why it is illegal."""
    who, what = _AGENT.fullmatch(agent), _ACTION.fullmatch(action) if isinstance(action, str) else None
    if who is None or what is None:
        return f"{agent[:40]!r}: {str(action)[:60]!r} is not Agent[x, y]: move(box_colour, destination)"
    here = f"{float(who[1])}_{float(who[2])}"  # the scorer's own key for the square
    if here not in squares or here in acted:
        return f"{agent} is not an agent of the grid, or acts twice in one step"
    acted.add(here)
    box, goal = what[1], what[2]
    if box not in squares[here]:
        return f"{agent} has no {box} in its square"
    if what[3] is None:
        if goal not in squares[here] or goal[len("target_"):] != box[len("box_"):]:
            return f"{agent} has no {goal} for {box} in its square"
        squares[here].remove(box)
        squares[here].remove(goal)
        return None
    (r, c), (gr, gc) = _square(here), (float(what[3]), float(what[4]))
    there = f"{gr}_{gc}"
    if there not in squares or abs(r - gr) + abs(c - gc) != 1:
        return f"{agent} cannot move {box} to {goal}: not an adjacent square of the grid"
    squares[here].remove(box)
    squares[there].append(box)
    return None

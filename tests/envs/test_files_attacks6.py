"""A helper's sixth adversarial read of the files domain, a standing case (real generated tasks, the real
workspace episode and sandbox, the real verifier in its worker; no mocks).

- process.inspected by guessed passages: an input counted as read when a result showed four consecutive
  words of it, and four words could be made of what every task of the kind holds: a note's ``Status:
  open`` then ``Owner: Ada``, an item file's ``location`` of ``W1`` in ``Lyon``, a customer row ``1|Ada
  Okafor|France``. A policy that printed the generator's words in turn (48 note lines, 28 item lines,
  256 customer rows, in bash calls of under 2,000 characters), reading no input, earned inspected > 0 in
  503 of 1,000 generated tasks (every inventory, notes and sqlite task; mean 0.93, 0.90, 1.00); a
  passage is now eight words, which reach into what each file draws (a follow-up's week, a quantity, the
  next row), and the same policy earns it in 0 of 1,000 (3 of 300 with 20 calls of guesses made for
  eight words). A SQL dump still shows a database's rows: the ``INSERT INTO ... VALUES`` between two
  rows is left out of a result before it is read.
"""

from __future__ import annotations

import itertools
import random
import shlex

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle, work
from posttrain.envs.files._env import build_task
from posttrain.envs.files._gen import _CITIES, _FIRST, _PLAIN
from posttrain.envs.workspace import SUBMIT

FILES = get_domain("files")
COUNTRIES = ("France", "Ghana", "Japan", "Peru", "Norway", "Chile", "Kenya", "Spain")


@pytest.fixture(scope="module")
def verify():
    return FILES.make_verifier(None)


def _guesses() -> list[str]:
    """What a policy prints knowing only the prompt and the generator's word lists, never an input."""
    notes = [f"Status: {s}\nOwner: {o}" for s, o in itertools.product(("open", "done", "archived"), _FIRST)]
    items = [f'"location": {{"warehouse": "W{w}", "city": "{c}"}}' for w, c in itertools.product(range(1, 5), _CITIES)]
    rows = [f"{i}|{n}|{c}" for i, n, c in itertools.product((1, 2), _PLAIN, COUNTRIES)]
    return notes + items + rows


def _printing(lines: list[str], chars: int = 1900) -> list[dict]:
    """``lines`` printed by bash calls whose results each fit a record (2,000 characters)."""
    calls, chunk = [], ""
    for line in lines:
        if len(chunk) + len(line) + 1 > chars:
            calls.append(chunk)
            chunk = ""
        chunk += line + "\n"
    return [call("bash", command="printf %s " + shlex.quote(c)) for c in [*calls, chunk]]


@pytest.mark.parametrize("kind, level", [("inventory", 2), ("notes", 2), ("sqlite", 4)])
def test_guessed_passages_are_not_reading(pool, verify, kind, level) -> None:
    """Before: inspected 1.0 for each (the guesses, then the right work); now 0. The oracle (read_file, or
    cat and a SQL dump) and a query printing the rows keep 1.0."""
    task = build_task(random.Random(f"attacks6-{kind}"), level, f"files-attacks6-{kind}", [kind])
    got = play(pool, task, [*_printing(_guesses()), *work(task), SUBMIT], verify).first
    assert got.outcome == "pass" and got.components["process.inspected"] == 0.0, (kind, got.components)
    right = play(pool, task, oracle(task), verify).first
    assert right.outcome == "pass" and right.components["process.inspected"] == 1.0, (kind, right.components)
    if kind == "sqlite":
        query = ("python3 -c 'import sqlite3; db = sqlite3.connect(\"db/shop.sqlite\"); "
                 "print(db.execute(\"SELECT * FROM customers\").fetchall())'")
        got = play(pool, task, [call("bash", command=query), *work(task), SUBMIT], verify).first
        assert got.components["process.inspected"] == 1.0, got.components

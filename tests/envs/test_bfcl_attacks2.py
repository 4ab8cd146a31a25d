"""A policy attacking the ``bfcl`` one-response verifier (standing cases: each fails, and is pinned).

Measured over the 200 tasks of multi_turn_base (``generate_tasks(200, seed=0)``, the real sandbox),
each cheat built from the task's ground truth (reported, not run here):

- an unknown extra argument on every call: 0 of 200 pass (the backend raises, the state stays);
- every string argument upper-cased: 0 of 191; lower-cased: 3 of 187 (already lower case where it
  matters); a trailing space: 1 of 200 (multi_turn_base_139, below);
- a call's name in upper case, or with a ``functions.`` prefix: 0 of 200 (never run: no loose match);
- the ground truth in the reasoning with nothing after it: 0 of 200 (``no_call``); in one of two
  fenced blocks, the other empty: 0 of 200 (``format``);
- every no-argument getter (``ls``, ``pwd``, ``get_watchlist``, ...; not the logouts or
  ``releaseBrakePedal``) in every turn: 1 of 200. multi_turn_base_139 asks to add ZETA to a watch
  list that already holds it, then to show the list: ``get_watchlist`` alone reaches the state and
  returns the string ``add_to_watchlist`` returns. That is the task's data (BFCL's checker passes it
  too), not the verifier's: it is left as it is.

What passes by BFCL's design, and is kept for agreement with BFCL's checker: extra calls that leave
the state as it is (the ground truth plus every getter: 200 of 200; and a blind spray of every
getter in every turn stands in for the ground truth's getter calls: of the 97 tasks whose truth
calls one, dropping those calls passes 1 and replacing them with the spray passes 87), a string argument where the
backend compares with ``==`` or only tests truth (``"false"`` for ``False``: 14 of 54; ``"3"`` for
``3``: 7 of 102), calls of later turns made early when those turns change nothing (22 of 197)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from posttrain.envs.bfcl import ENV, BfclDataMissing
from posttrain.types import Task

STATE_CHANGING_GETTERS = {"logout", "trading_logout", "releaseBrakePedal"}


def _strings(value: Any, f: Callable[[str], str]) -> Any:
    if isinstance(value, dict):
        return {k: _strings(v, f) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, f) for v in value]
    return f(value) if isinstance(value, str) else value


def _calls(t: Task, f: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    return json.dumps([[f(c) for c in turn] for turn in t.fields["ground_truth"]])


def _getters(t: Task) -> list[dict[str, Any]]:
    return [{"name": x["function"]["name"], "arguments": {}} for x in t.fields["tools"]
            if not x["function"]["parameters"].get("required") and x["function"]["name"] not in STATE_CHANGING_GETTERS]


CHEATS: dict[str, Callable[[Task], str]] = {
    "an unknown extra argument": lambda t: _calls(t, lambda c: {**c, "arguments": {**c["arguments"], "force": True}}),
    "string arguments upper-cased": lambda t: _calls(t, lambda c: {**c, "arguments": _strings(c["arguments"], str.upper)}),
    "string arguments with a trailing space": lambda t: _calls(t, lambda c: {**c, "arguments": _strings(
        c["arguments"], lambda s: s + " ")}),
    "names in upper case": lambda t: _calls(t, lambda c: {**c, "name": c["name"].upper()}),
    "names with a namespace": lambda t: _calls(t, lambda c: {**c, "name": f"functions.{c['name']}"}),
    "the calls in the reasoning only": lambda t: f"<think>{t.reference}</think>{ENV.noop_response(t)}",
    "two fenced answers": lambda t: f"```json\n{ENV.noop_response(t)}\n```\nor\n```json\n{t.reference}\n```",
    "every getter in every turn": lambda t: json.dumps([_getters(t) for _ in t.fields["ground_truth"]]),
}


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    try:
        return ENV.generate_tasks(3, seed=0)
    except BfclDataMissing as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def test_the_references_pass(tasks, verify) -> None:
    assert [verify(t, str(t.reference)).outcome for t in tasks] == ["pass"] * len(tasks)


@pytest.mark.parametrize("name", list(CHEATS))
def test_a_cheat_fails_with_a_verdict(tasks, verify, name: str) -> None:
    for t in tasks:
        response = CHEATS[name](t)
        assert response != t.reference
        v = verify(t, response)
        assert v.outcome == "fail" and v.reward == 0.0, (name, t.id, v.error_class, v.feedback)

"""A fifth read of the cad verifier as a reward-hacking policy would read it, each attack through the real
verifier (OpenSCAD in the sandbox, the mesh checks in their worker).

One passed: round outer features (a hub on a disc, a boss on a plate) were held only by the shape check,
which lets through any difference under 1 mm thick, so a hub or boss drawn as a low-poly prism passed:
``$fn = 8`` on 15 of 16 hubs and bosses (8 examples, 8 generated), ``$fn = 6`` on 3 of 16 (the small
ones). The generator now states each as a ``round`` (``_parts.Part.rounds``), and the check
(``_holes._round_problem``) holds it round to its diameter from outside: no material past
max(0.1 mm, 2 %) of the diameter outside it, and material all round just inside r cos(pi / 12) less that
tolerance (10 segments or more pass; OpenSCAD's default gives 12 or more to every radius over 3.8 mm).
The golds pass at their own ``$fn``, at 16 and at OpenSCAD's default.
"""

from __future__ import annotations

import re
import shutil

import pytest
from cad_examples import example

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced
from posttrain.errors import TaskError

ENV = get_domain("cad")
pytestmark = pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed "
                                "(make domain-deps)")
_ROUND = re.compile(r"translate\(\[0, 0, [\d.]+99\]\) cylinder\(d = [\d.]+, h = [\d.]+\)")


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


def _faceted(gold: str, fn: int) -> str:
    """The gold with its hub or boss (the one cylinder standing at Z = ...99) drawn with ``$fn = fn``."""
    m = _ROUND.search(gold)
    assert m, gold
    return gold.replace(m.group(0), m.group(0)[:-1] + f", $fn = {fn})")


LOW_POLY = [("cad-l1-2024-0", 8, "a 14 mm hub drawn as an octagon"),
            ("cad-l5-2024-0", 6, "a 10 mm boss drawn as a hexagon"),
            ("cad-l2-2024-1", 8, "a 22 mm hub with a bore, drawn as an octagon")]


@pytest.mark.parametrize(("task_id", "fn", "name"), LOW_POLY, ids=[c[2] for c in LOW_POLY])
def test_a_hub_or_boss_drawn_as_a_low_poly_prism_fails(verify, task_id: str, fn: int, name: str) -> None:
    task = example(task_id)
    v = verify(task, fenced(_faceted(task.fields["gold"], fn)))
    assert (v.outcome, v.error_class) == ("fail", "holes"), (name, v.outcome, v.error_class, v.feedback)
    assert "the round feature" in v.feedback, v.feedback


def test_a_generated_boss_as_an_octagon_fails(verify) -> None:
    task = next(t for t in ENV.generate_level(40, level=1, seed=11) if t.fields["rounds"])
    v = verify(task, fenced(_faceted(task.fields["gold"], 8)))
    assert (v.outcome, v.error_class) == ("fail", "holes"), (task.id, v.outcome, v.feedback)


@pytest.mark.parametrize("fn", ["16", None, "hub 12", "hub 10"])
def test_round_features_pass_at_16_and_openscads_default_and_a_hub_at_10_segments(verify, fn: str | None) -> None:
    for task_id in ("cad-l1-2024-0", "cad-l5-2024-0", "cad-l6-2024-0"):
        gold = example(task_id).fields["gold"]
        if fn and fn.startswith("hub"):
            script = _faceted(gold, int(fn.split()[1]))
        else:
            script = gold.replace("$fn = 48;", f"$fn = {fn};" if fn else "// OpenSCAD's default faceting")
        v = verify(example(task_id), fenced(script))
        assert v.passed, (task_id, fn, v.feedback)


def test_a_round_feature_record_with_a_slot_end_is_refused() -> None:
    record = {"id": "r", "prompt": "p", "gold": "cube(1);", "rounds": [
        {"axis": "z", "at": [0, 0, 1], "d": 3, "span": [0, 2], "to": [1, 0, 1]}]}
    with pytest.raises(TaskError, match="round features"):
        ENV.parse_task(record, "t.jsonl")


@pytest.mark.parametrize(("item", "said"), [
    ({"axis": "q", "at": [0, 0, 1], "d": 3, "span": [0, 2]}, "round feature 0: axis x, y or z"),
    ({"axis": "z", "at": [0, 0, 1], "d": 3}, "round feature 0: span [w0, w1]"),
    ({"axis": "z", "at": [0, 0, 5], "d": 3, "span": [0, 2]}, "where the round feature is its plain self"),
])
def test_a_bad_round_feature_is_named_as_one(item: dict, said: str) -> None:
    """The error names a round feature, not a hole (the two share a reader)."""
    record = {"id": "r", "prompt": "p", "gold": "cube(1);", "rounds": [item]}
    with pytest.raises(TaskError, match=re.escape(said)):
        ENV.parse_task(record, "t.jsonl")

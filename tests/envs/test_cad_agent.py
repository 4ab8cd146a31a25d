"""cad episodes on the workspace kit: the scripted agents (the oracle passes, the no-op and every cheat fail,
never as infra errors), OpenSCAD in the workspace, what ``submit`` takes (``part.scad`` alone: a link,
a directory, a fence, a giant file fail with the reason), and repair feedback with the numbers."""

from __future__ import annotations

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.cad._agents import CHEATS, WHY_IT_FAILS, oracle
from posttrain.envs.workspace import SUBMIT, noop_script
from posttrain.tasks import load_tasks

ENV = get_domain("cad")
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
EXAMPLES = {t.id: t for t in load_tasks(ROOT / "examples" / "tasks" / "cad.jsonl")}


@pytest.fixture(scope="module")
def verify(pool):
    return ENV.make_verifier(pool)


@pytest.mark.slow
def test_the_oracle_passes_and_the_no_op_and_every_cheat_fail(pool, verify) -> None:
    for task in (EXAMPLES["cad-block-hole"],):  # every agent on every example and 200 tasks: the README's sweep
        got = play(pool, task, oracle(task), verify)
        assert got.done and [v.outcome for v in got.verdicts] == ["pass"], (task.id, got.first.feedback)
        assert "Top level object is a 3D object" in got.calls[2].result  # the render tool ran OpenSCAD
        for name, script in [("noop", noop_script), *CHEATS.items()]:
            got = play(pool, task, script(task), verify, resubmit=3)
            assert got.done and {v.outcome for v in got.verdicts} == {"fail"}, (task.id, name, got.first.feedback)
            if name in WHY_IT_FAILS:
                assert got.first.error_class == WHY_IT_FAILS[name].split(":")[0], (task.id, name, got.first.feedback)


@pytest.mark.parametrize(("what", "calls", "error_class", "said"), [
    ("nothing written", [], "format", "part.scad was not written"),
    ("part.scad a link to a host file", [call("bash", command="ln -s /etc/passwd part.scad")], "not_regular",
     "not a regular file"),
    ("part.scad a directory", [call("bash", command="mkdir part.scad")], "not_regular", "not a regular file"),
    ("the gold in a Markdown fence", [call("write_file", path="part.scad", content="```openscad\ncube(10);\n```\n")],
     "format", "```"),
    ("a 2 MB script", [call("bash", command="head -c 2000000 /dev/zero | tr '\\0' ' ' > part.scad")], "format",
     "bytes"),
    ("a script that is not UTF-8", [call("bash", command="printf 'cube(1);\\xff' > part.scad")], "format", "UTF-8"),
])
def test_submit_takes_part_scad_alone(pool, verify, what, calls, error_class, said) -> None:
    task = EXAMPLES["cad-block-hole"]
    got = play(pool, task, [*calls, SUBMIT], verify)
    assert got.first.outcome == "fail" and got.first.error_class == error_class, (what, got.first.feedback)
    assert said in got.first.feedback, (what, got.first.feedback)


def test_repair_feedback_says_what_differs_and_by_how_much(pool, verify) -> None:
    task = EXAMPLES["cad-block-hole"]
    block = "translate([-10, -10, 0]) cube([20, 20, 10]);\n"
    got = play(pool, task, [call("write_file", path="part.scad", content=block), SUBMIT, *oracle(task)], verify)
    assert [v.outcome for v in got.verdicts] == ["fail", "pass"]
    shown = next(c.result for c in got.calls if c.name == "submit")
    assert "attempt 1 of 3" in shown and "holes" in shown and "IoU" in shown, shown


def test_submit_refuses_a_giant_part_scad_by_its_size_without_reading_it(pool, verify) -> None:
    """A workspace job may write a 64 MiB part.scad (its RLIMIT_FSIZE): submit fails it as ``format`` from its
    size, never reading it into the trainer's memory (it was read whole, then measured: 60 MB a submit, and
    episodes submit at once)."""
    import tracemalloc

    task = EXAMPLES["cad-block-hole"]
    write = call("bash", command="head -c 60000000 /dev/zero | tr '\\0' ' ' > part.scad")
    tracemalloc.start()
    try:
        got = play(pool, task, [write, SUBMIT], verify)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (got.first.outcome, got.first.error_class) == ("fail", "format"), got.first.feedback
    assert "60000000 bytes" in got.first.feedback, got.first.feedback
    assert peak < 16 << 20, f"submit held {peak >> 20} MiB"

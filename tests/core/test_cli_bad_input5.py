"""Bad input a sweep of every subcommand found still getting through (a helper's read, after
test_cli_bad_input3.py and 4): each is one line naming the culprit, exit 2, before any work, and
nothing in the workspace changes.

Before: ``report RUN --out ''`` raised IsADirectoryError (a traceback); ``eval --out ''`` and
``eval --run ''`` were dropped silently (exit 0, nothing written, no overlap check), and
``tasks decontaminate --out ''`` wrote its three files into the current directory, over any of the
same name (``run --out ''`` has been refused since test_cli_bad_input3.py); ``eval --domain cdoe``
passed unnoticed when every record names its own (``verify`` and ``tasks validate`` refuse it);
``tasks.sampler.weights`` whose sum overflows a float (1e308 twice) drew 39 of 40 tasks from one
domain instead of half from each, silently; a recipe whose anchors repeat each other (a "billion
laughs", 9**9 strings from 9 lines) in a generator's params hung in the task source's json.dumps,
and a recursive anchor there (``params: &p {a: [*p]}``) raised ValueError: Circular reference
detected. Later: ``tasks stats`` called a ``trajectories/rl.jsonl`` that is a directory "missing", and
``eval --k 1,,5`` dropped the empty part (read as 1,5).
"""

from __future__ import annotations

import json

import pytest
from test_bad_inputs import assert_refused_in_one_line

from posttrain.train.recipe import EMBEDDED_RECIPE

RECIPE = str(EMBEDDED_RECIPE)
MATH = {"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2", "reference": "\\boxed{2}"}

BOMB = ("tasks:\n  eval: [{generator: rg/basic_arithmetic, n: 5}]\n  train:\n    - {generator: rg/basic_arithmetic, "
        "n: 5, params: {l0: &l0 [x, x, x, x, x, x, x, x, x], " + ", ".join(
            f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)) + "}}\n")
"""A "billion laughs": 9**9 strings from one line, where the source's cache key (json.dumps) never finished."""
CYCLE = ("tasks:\n  eval: [{generator: rg/basic_arithmetic, n: 5}]\n  train:\n"
         "    - {generator: rg/basic_arithmetic, n: 5, params: &p {a: [*p]}}\n")
"""Before: ValueError: Circular reference detected, from the same json.dumps (a traceback, exit 1)."""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    w = tmp_path / "ws"
    w.mkdir()
    (w / "good.jsonl").write_text(json.dumps(MATH) + "\n")
    (w / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    (w / "good.clean.jsonl").write_text("the user's own file\n")  # what decontaminate --out '' wrote over
    (w / "bomb.yaml").write_text(BOMB)
    (w / "cycle.yaml").write_text(CYCLE)
    (w / "run").mkdir()
    (w / "run" / "summary.json").write_text("{}\n")
    (w / "dirrun" / "trajectories" / "rl.jsonl").mkdir(parents=True)
    monkeypatch.chdir(w)

    def started(*args, **kwargs):  # a recipe let through: fail here, not after minutes of training
        raise AssertionError("the run started")

    monkeypatch.setattr("posttrain.cli.pipeline.run_recipe", started)
    return w


EVAL = ["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl"]
POOL = "tasks.sampler={kind: pool, weights: {math: 1e308, code: 1e308}}"
CASES = [
    pytest.param(["report", "run", "--out", ""], "--out '': expected a file name", id="report-out-empty"),
    pytest.param([*EVAL, "--out", ""], "--out '': expected a directory name", id="eval-out-empty"),
    pytest.param([*EVAL, "--run", ""], "--run '': expected a run directory", id="eval-run-empty"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", ""], "--tasks '': expected a task file",
                 id="eval-tasks-empty"),
    pytest.param(["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--out", ""], "--out '': expected a directory name",
                 id="decontaminate-out-empty"),
    pytest.param([*EVAL, "--domain", "cdoe"], "--domain cdoe: unknown domain 'cdoe' (did you mean code?)",
                 id="eval-domain"),
    pytest.param(["run", "bomb.yaml", "--out", "out"], "bomb.yaml: not valid YAML: aliases expand to more than "
                 "100,000 nodes", id="recipe-alias-bomb"),
    pytest.param(["run", "cycle.yaml", "--out", "out"], "cycle.yaml: not valid YAML: the anchor at line 4 holds an "
                 "alias to itself (a recursive anchor)", id="recipe-recursive-anchor"),
    pytest.param(["run", RECIPE, "--out", "out", "--set", POOL],
                 "tasks.sampler.weights.math: expected a number >= 0 of magnitude at most 1e+12, got 1e+308",
                 id="pool-weights-overflow"),
    pytest.param(["tasks", "stats", "dirrun"], "dirrun: trajectories/rl.jsonl is a directory, expected the RL "
                 "trajectories file", id="stats-trajectories-a-directory"),  # (before: "is missing")
    pytest.param([*EVAL, "--k", "1,,5"], "argument --k: expected comma-separated integers like 1,5,10, got '1,,5'",
                 id="eval-k-empty-part"),  # (before: read as 1,5)
]


@pytest.mark.parametrize(("argv", "needle"), CASES)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(ws, capsys, argv, needle):
    assert_refused_in_one_line(capsys, ws, argv, needle)


def test_large_weights_that_add_up_still_draw_in_their_ratio():
    """The refusal is of a sum that overflows, not of large weights: 3e307 : 1e307 draws 3 : 1."""
    from posttrain.tasks._pool import TaskPool
    from posttrain.tasks._spec import SamplerSpec
    from posttrain.types import Task

    tasks = [Task(id=f"{d}{i}", domain=d, prompt="", fields={}) for d in ("a", "b") for i in range(20)]
    pool = TaskPool(tasks, seed=0, spec=SamplerSpec(kind="pool", weights={"a": 3e307, "b": 1e307}))
    assert [t.domain for t in pool.next(40, step=0)].count("a") == 30


def test_a_key_of_an_empty_section_may_be_set():
    """``rl:`` with nothing under it (every key commented out) is the section at its defaults, as the
    recipe reads it; ``--set rl.steps=3`` was refused with "'rl' is not a section" (exit 2)."""
    from posttrain.config import apply_overrides

    assert apply_overrides({"rl": None, "model": {"lora": None}}, ["rl.steps=3", "model.lora.r=8"]) == \
        {"rl": {"steps": 3}, "model": {"lora": {"r": 8}}}



def test_resume_of_a_run_whose_config_is_an_alias_bomb(tmp_path):
    """Before: ``--resume`` read RUN/config.yaml with yaml.safe_load and listed its seed as changed,
    formatting the 9**9-string value into the message (hung; killed at 60 s)."""
    from posttrain.cli.pipeline import is_finished, prepare_run_dir
    from posttrain.errors import UserError
    from posttrain.train.recipe import Recipe

    (tmp_path / "config.yaml").write_text(BOMB.replace("tasks:", "stages: [sft]\nseed:", 1))
    with pytest.raises(UserError, match=r"config.yaml: not valid YAML \(aliases expand to more than 100,000 nodes"):
        prepare_run_dir(tmp_path, Recipe(), resume=True)
    assert not is_finished(tmp_path)


@pytest.mark.parametrize("content", [b"\xff\xfe", b"stages: [[sft]]\n"], ids=["not-utf8", "stage-not-a-name"])
def test_a_config_that_is_not_a_runs_is_not_a_finished_run(tmp_path, content):
    """Before: ``quickstart --resume`` picked its run with is_finished, whose read of a config.yaml that
    is not UTF-8 raised UnicodeDecodeError, and of a stage that is a list (once the base stage is done)
    TypeError (tracebacks, exit 1), before prepare_run_dir could refuse it in one line (test_cli_bad_input3)."""
    from posttrain.cli.pipeline import DONE, is_finished

    (tmp_path / "config.yaml").write_bytes(content)
    (tmp_path / "summary.json").write_text("{}\n")
    (tmp_path / "checkpoints" / "base").mkdir(parents=True)
    (tmp_path / "checkpoints" / "base" / DONE).write_text("")  # the base stage finished: the stages are read
    assert not is_finished(tmp_path)

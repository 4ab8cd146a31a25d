"""Values no file should hold, in a task file or a recipe, found by mutating every field of a generated
task of each domain (and every recipe key): each is one line naming the field, exit 2, before any
work -- never a traceback. Before, each raised out of the command: ``math.isfinite`` on a 400-digit
integer (``OverflowError``), an object where a name is looked up (``TypeError: unhashable``), a tag
list that is a number, a tool whose ``type`` is not "function", a path the filesystem refuses (a NUL,
300 characters: ``ValueError``, ``OSError``)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from posttrain.cli import main
from posttrain.envs import get_domain
from posttrain.envs._base import task_to_record
from posttrain.strict_json import finite_number
from posttrain.train.recipe import EMBEDDED_RECIPE

HUGE = 10**400
LONG = "y" * 300


def _record(domain: str) -> dict[str, Any]:
    env = get_domain(domain)
    made = env.generate_level(1, level=1) if hasattr(env, "generate_level") else env.generate_tasks(1)
    return task_to_record(made[0])


def _set(record: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(record)
    here = out
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    return out


TASK_CASES = [
    ("recall", ["difficulty"], HUGE, "field 'difficulty': expected a finite number"),
    ("cad", ["iou"], HUGE, "field 'iou'"),
    ("cad", ["holes", 0, "at", 0], HUGE, "field 'holes'"),
    ("cad", ["holes", 0, "axis"], ["z"], "field 'holes'"),
    ("cad", ["tags"], 3, "field 'tags': expected a list of strings"),
    ("rg/countdown", ["tags"], 3.5, "field 'tags': expected a list of strings"),
    ("function", ["reward", 0, "weight"], HUGE, "weight: expected a number > 0"),
    ("function", ["reward", 0, "range", 0], HUGE, "range: expected [low, high]"),
    ("tool", ["tools", 0, "type"], None, "field 'tools[0].type'"),
    ("bfcl", ["involved_classes", 0], {"a": 1}, "field 'involved_classes'"),
    ("bfcl", ["turns", 0, 0], 3, "field 'turns[0]'"),
    ("bfcl", ["ground_truth", 0], "cd", "field 'ground_truth[0]'"),
    ("repo", ["repo"], {"dir": "a\x00b"}, "field 'repo.dir': expected an existing directory"),
    ("repo", ["repo"], {"tarball": LONG}, "field 'repo.tarball': expected an existing file"),
    ("repo", ["repo"], {"project": LONG}, "field 'repo.project': expected one of the vendored projects"),
]


@pytest.mark.parametrize(("domain", "path", "value", "needle"), TASK_CASES,
                         ids=[f"{d}-{'.'.join(map(str, p))}" for d, p, _, _ in TASK_CASES])
def test_a_bad_task_value_is_one_line_exit_2(tmp_path, capsys, domain, path, value, needle):
    f = tmp_path / "tasks.jsonl"
    f.write_text(json.dumps(_set(_record(domain), path, value)) + "\n")
    code = main(["tasks", "validate", "--no-run", str(f)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err, err


RUN_CASES = [
    (["run", str(EMBEDDED_RECIPE), "--out", "out", "--set", f"rl.lr={HUGE}"], "rl.lr: expected a finite number"),
    (["run", str(EMBEDDED_RECIPE), "--out", "out", "--set", f"model.name=./{LONG}"], "a file name too long"),
    (["run", str(EMBEDDED_RECIPE), "--out", LONG], "a file name too long for the filesystem (300 characters)"),
    (["eval", "--model", f"/{LONG}", "--tasks", "t.jsonl"], "a file name too long"),
    (["report", LONG], "a file name too long"),
    # before: config.yaml was written, then the model build ran out of memory (or peft's did)
    (["run", str(EMBEDDED_RECIPE), "--out", "out", "--set", "model.hidden_size=100000000"],
     "the embedded default would have 2.4e+17 parameters"),
    (["run", str(EMBEDDED_RECIPE), "--out", "out", "--set", "model.num_layers=100000000"],
     "GiB to train on the CPU, more than the"),
    (["run", str(EMBEDDED_RECIPE), "--out", "out", "--set", "model.lora={r: 100000000}"],
     "model.lora.r: expected at most the model's width, model.hidden_size 128"),
]


@pytest.mark.parametrize(("argv", "needle"), RUN_CASES,
                         ids=["lr", "model", "out", "eval-model", "report", "width", "depth", "lora-rank"])
def test_a_bad_recipe_value_or_path_is_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err, err
    assert list(tmp_path.iterdir()) == []


def test_finite_number_takes_what_a_float_holds():
    assert [finite_number(v) for v in (0, -7, 1.5, 10**300, 1e308)] == [True] * 5
    assert [finite_number(v) for v in (True, None, "1", float("inf"), float("nan"), HUGE, -HUGE)] == [False] * 7


MORE_TASK_CASES = [
    ("bfcl", ["methods", "get_current_time"], ["TradingBot"], "field 'methods'"),
    ("bfcl", ["ground_truth", 0, 0], {"name": "get_current_time"}, "field 'ground_truth[0]'"),
    ("files", ["targets"], {"out/x.json": {"format": ["json"], "value": 1}}, "field 'targets'"),
]


@pytest.mark.parametrize(("domain", "path", "value", "needle"), MORE_TASK_CASES,
                         ids=["bfcl-methods", "bfcl-call-without-arguments", "files-format"])
def test_a_value_only_the_reference_run_met_is_refused_at_parse(tmp_path, capsys, domain, path, value, needle):
    """Before, these parsed and failed later: bfcl's backend raised on the reference (its traceback in the
    validation report, and in every verdict of the task), files' target parse raised TypeError."""
    test_a_bad_task_value_is_one_line_exit_2(tmp_path, capsys, domain, path, value, needle)

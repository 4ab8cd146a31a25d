"""Bad input a fuzz of the CLI found still getting through (a helper's read, after test_bad_inputs.py):
each is one line naming the culprit, exit 2, before any work, and nothing in the workspace changes.

Before: a recipe key given twice ran with the later value, silently; a recipe nested deeply raised
RecursionError; ``--out ''`` ran into the current directory; ``--out`` a folder of the user's files
(no run in it) was filled with the run's config.yaml, checkpoints/, summary.json and report.html,
over any of the same name; a recipe that is a directory was "not found"; ``verify --response`` a
directory was "no such response file"; a misspelt ``--domain`` passed unnoticed when every record
names its own; ``recipe_doc --check`` a file that is not UTF-8 raised UnicodeDecodeError.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bad_inputs import assert_refused_in_one_line, snapshot

from posttrain.cli import main, recipe_doc
from posttrain.config import parse_yaml
from posttrain.train.recipe import EMBEDDED_RECIPE

RECIPE = str(EMBEDDED_RECIPE)
MATH = {"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2", "reference": "\\boxed{2}"}
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture
def ws(tmp_path, monkeypatch):
    w = tmp_path / "ws"
    w.mkdir()
    (w / "good.jsonl").write_text(json.dumps(MATH) + "\n")
    (w / "one.json").write_text(json.dumps(MATH))
    (w / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    (w / "dup.yaml").write_text("rl:\n  steps: 5\n  steps: 7\n")
    (w / "dup_section.yaml").write_text("rl:\n  steps: 5\nrl:\n  lr: 0.1\n")
    (w / "deep.yaml").write_text(f"rl: {DEEP}\n")
    (w / "recipe.yaml").mkdir()
    (w / "project").mkdir()
    (w / "project" / "notes.txt").write_text("mine\n")
    (w / "project" / "summary.json").write_text('{"mine": 1}\n')
    monkeypatch.chdir(w)

    def started(*args, **kwargs):  # a recipe let through: fail here, not after minutes of training
        raise AssertionError("the run started")

    monkeypatch.setattr("posttrain.cli.pipeline.run_recipe", started)
    return w


CASES = [
    pytest.param(["run", "dup.yaml", "--out", "out"], "dup.yaml: not valid YAML: duplicate key 'steps' at line 3 "
                 "(first at line 2)", id="recipe-duplicate-key"),
    pytest.param(["run", "dup_section.yaml", "--out", "out"], "duplicate key 'rl' at line 3 (first at line 1)",
                 id="recipe-duplicate-section"),
    pytest.param(["run", RECIPE, "--out", "out", "--set", "rl={steps: 1, steps: 2}"],
                 "override 'rl={steps: 1, steps: 2}': the value is not valid YAML: duplicate key 'steps'", id="set-duplicate-key"),
    pytest.param(["run", "deep.yaml", "--out", "out"], "deep.yaml: not valid YAML: nested too deeply", id="recipe-deep"),
    pytest.param(["run", RECIPE, "--out", "out", "--set", f"rl.lr={DEEP}"], "the value is not valid YAML: nested too deeply",
                 id="set-deep"),
    pytest.param(["run", RECIPE, "--out", "out", "--set", "sft.batch_size=1000000000000"],
                 "sft.batch_size: expected at most 1,048,576 sequences a step, got 1,000,000,000,000", id="sft-batch-huge"),
    pytest.param(["run", RECIPE, "--out", "out", "--set", "torch_threads=100000"],
                 "torch_threads: expected an integer in [1, 1024], got 100000", id="torch-threads-huge"),
    pytest.param(["run", "recipe.yaml", "--out", "out"], "recipe.yaml: is a directory, expected a recipe YAML file",
                 id="recipe-directory"),
    pytest.param(["run", "", "--out", "out"], "the recipe path is empty", id="recipe-empty-path"),
    pytest.param(["run", RECIPE, "--out", ""], "--out '': expected a directory name", id="run-out-empty"),
    pytest.param(["quickstart", "--out", ""], "--out '': expected a directory name", id="quickstart-out-empty"),
    pytest.param(["run", RECIPE, "--out", "project"], "--out project: holds 2 file(s) but no run (notes.txt, summary.json)",
                 id="run-out-foreign-files"),
    pytest.param(["quickstart", "--out", "project", "--resume"], "--out project: holds 2 file(s) but no run",
                 id="quickstart-resume-foreign-files"),
    pytest.param(["verify", "--task", "one.json", "--response", "project"], "project: is a directory, expected a text file",
                 id="verify-response-directory"),
    pytest.param(["verify", "--tasks", "good.jsonl", "--responses", "resp.jsonl", "--domain", "cdoe"],
                 "--domain cdoe: unknown domain 'cdoe' (did you mean code?)", id="verify-domain"),
    pytest.param(["tasks", "validate", "--no-run", "good.jsonl", "--domain", "cdoe"], "--domain cdoe: unknown domain",
                 id="validate-domain"),
]


@pytest.mark.parametrize(("argv", "needle"), CASES)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(ws, capsys, argv, needle):
    assert_refused_in_one_line(capsys, ws, argv, needle)


def test_a_merge_key_may_still_be_overridden():
    """``<<: *base`` then a key of base again is YAML's override, not a duplicate."""
    assert parse_yaml("b: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n")["c"] == {"x": 3, "y": 2}


def test_an_empty_directory_or_a_run_of_its_own_is_a_run_directory(tmp_path):
    from posttrain.cli.run import check_holds_no_other_files

    check_holds_no_other_files(tmp_path / "new")
    check_holds_no_other_files(tmp_path)
    (tmp_path / ".config.yaml.tmp-123").write_text("seed: 0\n")  # a run interrupted while saving its config
    check_holds_no_other_files(tmp_path)
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "summary.json").write_text("{}")
    check_holds_no_other_files(tmp_path)  # the pipeline refuses it without --resume


def test_recipe_doc_check_of_a_file_that_is_not_utf8_or_missing(tmp_path, capsys):
    binary = tmp_path / "recipe.md"
    binary.write_bytes(b"\xff\xfe\x00old")
    assert recipe_doc.main(["--check", str(binary)]) == 1
    err = capsys.readouterr().err
    assert "is out of date" in err and len(err.strip().splitlines()) == 1
    assert recipe_doc.main(["--check", str(tmp_path / "nope.md")]) == 2
    err = capsys.readouterr().err
    assert "nope.md: no such file" in err and len(err.strip().splitlines()) == 1
    assert recipe_doc.main(["--check", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not Path(tmp_path / "nope.md").exists()


@pytest.mark.parametrize(("flags", "needle"), [
    (["--n", "100000000"], "generate: --n must be <= 1024 (samples per prompt), got 100000000"),
    (["--seed", str(10**20)], "generate: --seed must be an integer in [0, 4294967296)"),
    (["--seed", "-1"], "generate: --seed must be an integer in [0, 4294967296), got -1"),
], ids=["n-huge", "seed-overflow", "seed-negative"])
def test_generate_flags_are_checked_before_the_model_loads(ws, capsys, flags, needle):
    """Before: --n 10**8 sampled for hours; --seed past 2**64 raised torch's OverflowError after the model loaded."""
    (ws / "ckpt").mkdir()
    (ws / "ckpt" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')  # no weights: never loaded
    code = main(["generate", "ckpt", "--prompt", "x", *flags])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert needle in err, err


@pytest.mark.parametrize(("content", "needle"), [
    (b"\xff\xfe", "out/config.yaml: cannot read it as UTF-8 text (UnicodeDecodeError); the run cannot be resumed"),
    (b"- 1\n", "out/config.yaml: not a saved recipe (a YAML list, expected a mapping of sections)"),
    (b"", "out/config.yaml: not a saved recipe (empty, expected a mapping of sections)"),
], ids=["not-utf8", "a-list", "empty"])
def test_resume_of_a_run_whose_config_is_not_a_saved_recipe(ws, capsys, content, needle):
    """Before: a config.yaml that is not UTF-8 raised UnicodeDecodeError (a traceback); one that is not a
    mapping was compared key by key, every key of the recipe listed as changed."""
    from posttrain.cli.pipeline import prepare_run_dir
    from posttrain.errors import UserError
    from posttrain.train.recipe import load_recipe

    (ws / "out").mkdir()
    (ws / "out" / "config.yaml").write_bytes(content)
    before = snapshot(ws)
    with pytest.raises(UserError) as e:
        prepare_run_dir(Path("out"), load_recipe(RECIPE), resume=True)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert snapshot(ws) == before


@pytest.mark.parametrize(("content", "needle"), [
    (b"\xff\xfe\n", "r/trajectories/rl.jsonl: cannot read it as UTF-8 text (UnicodeDecodeError)"),
    (b"[1]\n", "r/trajectories/rl.jsonl:1: not a trajectory record (expected a JSON object, got list)"),
    (b'{"task_id": "a", "outcome": "pass", "tags": 5}\n',
     "r/trajectories/rl.jsonl:1: not a trajectory record (field 'tags' must be a list of strings, got 5)"),
], ids=["not-utf8", "a-list", "tags-a-number"])
def test_tasks_stats_of_a_trajectories_file_that_is_not_one(ws, capsys, content, needle):
    """Before: UnicodeDecodeError, AttributeError ('list' object has no attribute 'get') and TypeError
    out of ``posttrain tasks stats`` (tracebacks, exit 1)."""
    (ws / "r" / "trajectories").mkdir(parents=True)
    (ws / "r" / "trajectories" / "rl.jsonl").write_bytes(content)
    code = main(["tasks", "stats", "r"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert needle in err, err


def test_a_generator_source_of_a_billion_tasks_is_refused_before_it_generates():
    """Before: ``{generator: math, n: 1000000000}`` parsed, and the recipe's load generated on (100,000 math
    tasks take ~1 s) for hours on its way to filling memory; nothing was said."""
    from posttrain.config import parse_config
    from posttrain.errors import ConfigError
    from posttrain.train.recipe import Recipe

    data = {"tasks": {"train": [{"generator": "math", "n": 10**9}], "eval": [{"generator": "math", "n": 3}]}}
    with pytest.raises(ConfigError, match=r"^tasks.train\[0\]: n: expected at most 1,000,000 tasks from a generator "
                                          r"\(n \+ skip\), got 1,000,000,000$"):
        parse_config(Recipe, data)
    data["tasks"]["train"] = [{"generator": "math", "n": 999_990, "skip": 20}]
    with pytest.raises(ConfigError, match="got 1,000,010"):
        parse_config(Recipe, data)


@pytest.mark.parametrize(("argv", "needle"), [
    (["generate", "ckpt", "--tasks", "project"], "project: is a directory, expected a task file (--tasks)"),
    (["run", RECIPE, "--out", "out", "--set", "sft.demonstrations=project"],
     "project: is a directory, expected a .jsonl demonstrations file"),
    (["tasks", "decontaminate", "project", "good.jsonl"], "project: is a directory, expected a task file"),
    (["tasks", "decontaminate", "good.jsonl", "project"], "project: is a directory, expected a task file"),
], ids=["generate-tasks", "sft-demonstrations", "decontaminate-train", "decontaminate-eval"])
def test_a_directory_given_for_a_file_is_called_one(ws, capsys, argv, needle):
    """Before, each said the directory was not there ("no such file", "task file not found")."""
    (ws / "ckpt").mkdir()
    (ws / "ckpt" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')  # no weights: never loaded
    before = snapshot(ws)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert snapshot(ws) == before

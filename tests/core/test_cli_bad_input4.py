"""Bad input a fourth fuzz of the CLI found getting through (after test_bad_inputs.py,
test_bad_input_values.py and test_cli_bad_input3.py): each is one line naming the file or flag, exit
2, before any work, and nothing already written changes.

Before: ``--resume`` of a run whose finished stage checkpoint was truncated (weights or a JSON file)
re-evaluated the demonstrator (rewriting RUN/eval/demonstrator.jsonl) and the stages before, then
raised safetensors' or json's traceback (exit 1) when it loaded that stage. ``eval --out`` a folder
inside a run (RUN/eval, a checkpoint) wrote its records among the run's. ``--set`` of one key twice
(or ``--backend`` against ``--set sched.backend``) ran with the later value, silently. ``eval --seed``
past 2**64 raised torch's OverflowError after the model loaded. ``report --out`` any name wrote the
HTML page over it (a run's summary.json, a task file).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file
from test_bad_inputs import snapshot

from posttrain.cli import main
from posttrain.cli._stage_check import stage_checkpoint_problem
from posttrain.cli.pipeline import prepare_run_dir
from posttrain.config import apply_overrides, to_dict
from posttrain.errors import UserError
from posttrain.train.recipe import EMBEDDED_RECIPE, load_recipe

RECIPE = load_recipe(EMBEDDED_RECIPE)


def _checkpoint(path: Path) -> Path:
    """A finished stage checkpoint as ``save_pretrained`` leaves one: JSON files and safetensors weights."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 8}\n')
    (path / "tokenizer.json").write_text('{"version": "1.0", "model": {"vocab": {"a": 0}}}\n')
    (path / "posttrain.json").write_text('{"chat": false}\n')
    save_file({"w": torch.arange(64, dtype=torch.float32), "b": torch.ones(3)}, str(path / "model.safetensors"))
    (path / "DONE").write_text("ok\n")
    return path


@pytest.fixture
def run(tmp_path, monkeypatch) -> Path:
    """An unfinished run of the embedded recipe: base and sft done, rl not."""
    monkeypatch.chdir(tmp_path)
    out = Path("r")
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(RECIPE), sort_keys=False))
    (out / "eval").mkdir()
    (out / "eval" / "base.jsonl").write_text('{"task_id": "m1"}\n')
    for stage in ("base", "sft"):
        _checkpoint(out / "checkpoints" / stage)
    return out


def _truncate(path: Path, size: int) -> None:
    with path.open("r+b") as fh:
        fh.truncate(size)


@pytest.mark.parametrize(("stage", "name", "size", "needle"), [
    ("sft", "model.safetensors", 300, "r/checkpoints/sft/model.safetensors: truncated: its header lists 268 bytes "
                                      "of tensors, the file holds"),
    ("sft", "model.safetensors", 40, "r/checkpoints/sft/model.safetensors: truncated or not safetensors (a header of"),
    ("sft", "model.safetensors", 3, "r/checkpoints/sft/model.safetensors: truncated (3 bytes, not even a header)"),
    ("sft", "tokenizer.json", 20, "r/checkpoints/sft/tokenizer.json: not readable JSON (JSONDecodeError"),
    ("base", "config.json", 10, "r/checkpoints/base/config.json: not readable JSON"),
], ids=["weights-tensors-cut", "weights-header-cut", "weights-empty", "tokenizer-json", "base-config"])
def test_resume_of_a_truncated_stage_checkpoint_is_one_line_before_any_work(run, stage, name, size, needle):
    _truncate(run / "checkpoints" / stage / name, size)
    before = snapshot(run)
    with pytest.raises(UserError) as e:
        prepare_run_dir(run, RECIPE, resume=True)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg
    redo = "r/checkpoints/base r/checkpoints/sft to train them" if stage == "base" else "r/checkpoints/sft to train it"
    assert f"--resume cannot load the {stage} checkpoint: start over with another --out, or remove {redo}" in msg, msg
    assert snapshot(run) == before


def test_a_whole_checkpoint_and_one_without_weights(tmp_path):
    whole = _checkpoint(tmp_path / "whole")
    assert stage_checkpoint_problem(whole) is None
    (whole / "model.safetensors").unlink()
    assert stage_checkpoint_problem(whole) == f"{whole}: holds no weights (no .safetensors file)"


@pytest.mark.parametrize("where", ["r/eval", "r/checkpoints/sft", "r/eval/new"], ids=["eval", "checkpoint", "below"])
def test_eval_out_inside_a_run_is_refused(run, capsys, where):
    """Before: ``eval --out RUN/eval`` wrote records.jsonl and noop.jsonl there, which the run's report and
    audit then read as two more models ("records", "noop"); ``--out`` a checkpoint put them beside its weights."""
    Path("t.jsonl").write_text('{"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2"}\n')
    Path("resp.jsonl").write_text('{"task_id": "m1", "response": "\\\\boxed{2}"}\n')
    before = snapshot(run)
    code = main(["eval", "--responses", "resp.jsonl", "--tasks", "t.jsonl", "--out", where])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--out {where}: is inside the posttrain run r, whose report and audit read the files in it; evaluate the " \
           "run with --run r" in err, err
    assert snapshot(run) == before


@pytest.mark.parametrize(("sets", "needle"), [
    (["rl.steps=5", "rl.steps=6"], "override 'rl.steps=6': rl.steps is given twice ('rl.steps=5' before it); give each "
                                   "key once"),
    (["rl.steps=5", "rl={lr: 0.1}"], "override 'rl={lr: 0.1}': replaces all of rl, dropping 'rl.steps=5' given before "
                                     "it; give rl.steps inside it, or after it"),
    (["sched.backend=ray", "--backend", "local"], "override 'sched.backend=local': sched.backend is given twice "
                                                   "('sched.backend=ray' before it)"),
], ids=["same-key", "section-after-key", "backend-flag"])
def test_overrides_that_undo_each_other_are_refused(tmp_path, monkeypatch, capsys, sets, needle):
    """Before: the later one won silently (rl.steps 6; rl.steps back at the recipe's value; --backend local)."""
    monkeypatch.chdir(tmp_path)

    def started(*args, **kwargs):  # a recipe let through: fail here, not after minutes of training
        raise AssertionError("the run started")

    monkeypatch.setattr("posttrain.cli.pipeline.run_recipe", started)
    argv = ["run", str(EMBEDDED_RECIPE), "--out", "out"]
    for s in sets:
        argv += [s] if s.startswith("--") or argv[-1] == "--backend" else ["--set", s]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert needle in err, err
    assert list(tmp_path.iterdir()) == []


def test_overrides_that_agree_or_refine_still_apply():
    data = apply_overrides({}, ["rl.steps=5", "rl.steps=5", "sft={lr: 0.1, epochs: 2}", "sft.epochs=3"])
    assert data == {"rl": {"steps": 5}, "sft": {"lr": 0.1, "epochs": 3}}


@pytest.mark.parametrize("seed", [str(10**20), "-1"], ids=["overflow", "negative"])
def test_eval_seed_outside_what_torch_takes_is_refused(tmp_path, monkeypatch, capsys, seed):
    """Before: ``eval --model CKPT --seed 10**20`` loaded the model, then raised torch's "Overflow when unpacking
    long long" (a traceback, exit 1); a negative seed was taken. ``generate`` refused both already."""
    err = _eval_flag_error(tmp_path, monkeypatch, capsys, "--seed", seed)
    assert f"posttrain eval: --seed must be an integer in [0, 4294967296), got {seed}" in err, err


def _eval_flag_error(tmp_path, monkeypatch, capsys, *flags: str) -> str:
    """The one stderr line (exit 2) of an eval of one scored response with ``flags``."""
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text('{"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2"}\n')
    Path("resp.jsonl").write_text('{"task_id": "m1", "response": "2"}\n')
    code = main(["eval", "--responses", "resp.jsonl", "--tasks", "t.jsonl", *flags])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("temperature", ["1e-38", "-1", "inf"])
def test_eval_temperature_a_sampler_refuses_is_refused_first(tmp_path, monkeypatch, capsys, temperature):
    """1e-38 passed the flag check and the sampler refused it once the model had loaded."""
    err = _eval_flag_error(tmp_path, monkeypatch, capsys, "--temperature", temperature)
    assert "posttrain eval: --temperature must be 0 (greedy) or a number >= 1e-05" in err, err


@pytest.mark.parametrize("out", ["r/summary.json", "r/config.yaml", "tasks.jsonl"], ids=["summary", "config", "tasks"])
def test_report_out_that_is_not_an_html_name_is_refused(run, capsys, out):
    """Before: ``report RUN --out RUN/summary.json`` wrote the HTML page over the run's summary (the run then
    unreadable: report and --resume failed on it); ``--out tasks.jsonl`` over a task file."""
    (run / "summary.json").write_text('{"eval": {}}\n')
    Path("tasks.jsonl").write_text('{"id": "m1"}\n')
    before = snapshot(run.parent)
    code = main(["report", "r", "--out", out])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--out {out}: expected a file name ending in .html" in err, err
    assert snapshot(run.parent) == before


def test_a_home_directory_this_machine_has_not_is_one_line(tmp_path, monkeypatch, capsys):
    """``~nosuchuser/...`` made Path.expanduser raise RuntimeError: a traceback from a task source's
    ``file`` and from ``eval --model``."""
    monkeypatch.chdir(tmp_path)
    Path("r.yaml").write_text("tasks:\n  train: [{file: ~nosuchuser/t.jsonl}]\n  eval: [{file: ~nosuchuser/t.jsonl}]\n")
    assert main(["run", "r.yaml", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("tasks.train[0]: file: '~nosuchuser/t.jsonl': no home directory for '~nosuchuser'"), err
    assert not Path("out").exists()
    assert main(["eval", "--model", "~nosuchuser/m", "--suite", "humaneval"]) == 2
    assert capsys.readouterr().err.strip() == "posttrain: error: --model: '~nosuchuser/m': no home directory for " \
                                              "'~nosuchuser'"

"""Corrupted artifacts a later command reads (a helper's fuzz of model directories and run
directories, after test_cli_bad_input3/4/5.py): each is one line naming the file, exit 2, before any
work, and nothing already written changes.

Before: a model directory (``generate CKPT``, ``eval --model``, ``run`` with ``model.name``) whose
config.json named no or another ``model_type``, gave a field of the wrong type, zero heads or a
hidden size its weights do not have, whose ``model.safetensors`` was cut or empty, or whose
tokenizer.json / tokenizer_config.json did not parse, raised transformers', safetensors' or json's
traceback (exit 1); a ``model_type`` naming another architecture (bert over Llama weights) loaded
with every weight initialised afresh and sampled (exit 0, a silently different model); 10**6 layers
in config.json hung building the model. ``eval --run`` skipped a checkpoint whose config.json was cut
(a note, exit 0, the checkpoint not evaluated) and, with RUN/config.yaml not YAML, sampled 512 new
tokens instead of the recipe's length, silently; RUN/tasks/eval.jsonl a directory fell back to humaneval,
and RUN/tasks/train.jsonl a directory skipped the overlap check as "not found". ``report`` raised UnicodeDecodeError's traceback on
a stray byte in metrics.jsonl, config.yaml or summary.json, refused a metrics.jsonl whose last line a
run in progress (or a kill) left without its line end, which ``--resume`` drops, and drew no curves,
silently, when metrics.jsonl was a directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_bad_inputs import assert_refused_in_one_line

from posttrain.cli import main
from posttrain.policy import EmbeddedModelSpec, build_embedded_default


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_embedded_default(tmp_path_factory.mktemp("m") / "tiny",
                                  spec=EmbeddedModelSpec(hidden_size=16, num_layers=1, max_positions=64))


def _config(**changes) -> callable:
    def edit(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        for key, value in changes.items():
            cfg.pop(key, None) if value is None else cfg.__setitem__(key, value)
        (d / "config.json").write_text(json.dumps(cfg))
    return edit


def _write(name: str, data: bytes) -> callable:
    return lambda d: (d / name).write_bytes(data)


def _cut(name: str, keep: int) -> callable:
    return lambda d: (d / name).write_bytes((d / name).read_bytes()[:keep])


MODEL_CASES = [
    pytest.param(_config(model_type=None), "config.json: not a model config transformers can read (ValueError: "
                 "Unrecognized model", id="no-model-type"),
    pytest.param(_config(model_type="bert"), "none of the 11 tensors of its weights belongs to the BertLMHeadModel",
                 id="model-type-of-another-architecture"),
    pytest.param(_config(hidden_size="16"), "config.json: not a model config transformers can read "
                 "(StrictDataclassFieldValidationError: Validation error for field 'hidden_size': TypeError",
                 id="hidden-size-a-string"),
    pytest.param(_config(num_attention_heads=0), "config.json: not a model config transformers can read "
                 "(ZeroDivisionError", id="zero-heads"),
    pytest.param(_config(hidden_size=32), "model.safetensors: tensor model.embed_tokens.weight has shape [101, 16], "
                 "the LlamaForCausalLM that", id="hidden-size-not-the-weights'"),
    pytest.param(_config(num_hidden_layers=10**6), "config.json: 1,000,000 layers of hidden size 16 describe at least "
                 "256,000,000 parameters, the weights hold", id="a-million-layers"),
    pytest.param(_cut("model.safetensors", 200), "model.safetensors: not readable safetensors weights (SafetensorError",
                 id="weights-cut"),
    pytest.param(_write("model.safetensors", b""), "model.safetensors: not readable safetensors weights", id="weights-empty"),
    pytest.param(_write("tokenizer.json", b"{"), ": cannot load the tokenizer (JSONDecodeError", id="tokenizer-not-json"),
    pytest.param(_write("tokenizer_config.json", b"[]"), ": cannot load the tokenizer (AttributeError",
                 id="tokenizer-config-a-list"),
]


@pytest.mark.parametrize("command", ["generate", "eval"])
@pytest.mark.parametrize("corrupt, needle", MODEL_CASES)
def test_a_corrupt_model_directory_is_one_line_naming_the_file(tiny, tmp_path, monkeypatch, capsys, command, corrupt,
                                                              needle):
    monkeypatch.chdir(tmp_path)
    model = shutil.copytree(tiny, tmp_path / "model")
    corrupt(model)
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2"}) + "\n")
    argv = ["generate", "model", "--prompt", "1+1=", "--max-new-tokens", "3"] if command == "generate" else \
        ["eval", "--model", "model", "--tasks", "t.jsonl", "--max-new-tokens", "3", "--out", "out"]
    assert_refused_in_one_line(capsys, tmp_path, argv, needle)


def test_generate_names_a_config_that_does_not_parse(tiny, tmp_path, monkeypatch, capsys):
    """Before: "generate: model is model/config.json is unreadable (JSONDecodeError)"."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny, tmp_path / "model")
    (tmp_path / "model" / "config.json").write_text("{")
    assert_refused_in_one_line(capsys, tmp_path, ["generate", "model", "--prompt", "1+1="],
                               "model/config.json: not readable JSON (JSONDecodeError: Expecting property name")


@pytest.fixture
def run(tiny, tmp_path, monkeypatch) -> Path:
    """A finished run as far as ``eval --run`` and ``report`` read one: its recipe, two policy
    checkpoints, held-out tasks, a log of two steps and a summary."""
    monkeypatch.chdir(tmp_path)
    out = Path("r")
    (out / "tasks").mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "eval": {"max_new_tokens": 4}}))
    (out / "tasks" / "eval.jsonl").write_text(json.dumps({"id": "m1", "domain": "math", "prompt": "1+1?",
                                                          "answer": "2"}) + "\n")
    for stage in ("base", "rl"):
        shutil.copytree(tiny, out / "checkpoints" / stage)
    (out / "metrics.jsonl").write_text("".join(json.dumps({"stage": "rl", "step": i, "loss": 0.5}) + "\n"
                                               for i in range(2)))
    (out / "summary.json").write_text("{}\n")
    return out


def test_eval_run_refuses_a_checkpoint_whose_config_is_cut(run, capsys):
    """Before: "note: skipping r/checkpoints/rl: ... is unreadable", base evaluated, exit 0."""
    _cut("config.json", 10)(run / "checkpoints" / "rl")
    assert_refused_in_one_line(capsys, run.parent, ["eval", "--run", str(run)],
                               "r/checkpoints/rl/config.json: not readable JSON (JSONDecodeError")


@pytest.mark.parametrize("text, needle", [
    ("eval: [", "r/config.yaml: cannot read the run's recipe (ParserError); it gives eval.max_new_tokens"),
    ("eval: {max_new_tokens: -3}\n", "r/config.yaml: eval.max_new_tokens is -3, expected an integer >= 1"),
    ("[1]\n", "r/config.yaml: expected a mapping (the resolved recipe)"),
], ids=["not-yaml", "length-negative", "a-list"])
def test_eval_run_refuses_a_recipe_it_cannot_read(run, capsys, text, needle):
    """Before: the recipe's eval.max_new_tokens was dropped for 512, silently."""
    (run / "config.yaml").write_text(text)
    assert_refused_in_one_line(capsys, run.parent, ["eval", "--run", str(run)], needle)


@pytest.mark.parametrize("name, data, needle", [
    ("metrics.jsonl", b'{"step": 0}\n\x00\xff junk\n', "r/metrics.jsonl:2: not UTF-8 (byte 0xff at column 2)"),
    ("config.yaml", b"seed: \xff\n", "r/config.yaml: not UTF-8 text (byte 0xff at offset 6)"),
    ("summary.json", b'{"a": "\xff"}', "r/summary.json: not UTF-8 text (byte 0xff at offset 7)"),
], ids=["metrics", "config", "summary"])
def test_report_refuses_bytes_that_are_not_utf8(run, capsys, name, data, needle):
    (run / name).write_bytes(data)
    assert_refused_in_one_line(capsys, run.parent, ["report", str(run)], needle)


def test_report_refuses_a_metrics_directory(run, capsys):
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()
    assert_refused_in_one_line(capsys, run.parent, ["report", str(run)], "r/metrics.jsonl: is a directory")


def test_report_of_a_run_writing_its_log_leaves_the_cut_line_out(run, capsys):
    """The line a run in progress is writing (no line end yet) is left out, as ``--resume`` drops it;
    a cut line anywhere else is still refused."""
    whole = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(whole + '{"stage": "rl", "step": 2, "lo')
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    assert (run / "report.html").is_file()
    (run / "metrics.jsonl").write_text('{"stage": "rl", "step": 2, "lo\n' + whole)
    assert_refused_in_one_line(capsys, run.parent, ["report", str(run)], "r/metrics.jsonl:1: not valid JSON")


@pytest.mark.parametrize("name, needle", [
    ("eval.jsonl", "r/tasks/eval.jsonl: is a directory, expected the run's held-out task file"),
    ("train.jsonl", "r/tasks/train.jsonl: is a directory, expected the run's training task file"),
], ids=["held-out", "train"])
def test_eval_run_refuses_a_task_file_that_is_a_directory(run, capsys, name, needle):
    """Before: a held-out directory fell back to the humaneval suite, and a train directory was "not
    found; train/eval overlap not checked" (a note, then the evaluation), silently or nearly."""
    (run / "tasks" / name).unlink(missing_ok=True)
    (run / "tasks" / name).mkdir()
    assert_refused_in_one_line(capsys, run.parent, ["eval", "--run", str(run)], needle)


def test_quantized_weights_are_not_judged_by_an_empty_builds_shapes(tiny, tmp_path):
    """A quantized checkpoint stores its weights packed (bitsandbytes: a 4-bit q_proj as uint8 of
    another shape): with ``quantization_config`` in config.json the shapes are not compared; without
    it, the same packed tensor is another model's (the stop hook's read of check_model_files)."""
    import torch
    from safetensors.torch import load_file, save_file

    from posttrain.errors import UserError
    from posttrain.policy._policy import check_model_files

    model = tmp_path / "q"
    shutil.copytree(tiny, model)
    state = load_file(str(model / "model.safetensors"))
    name = next(k for k in state if k.endswith("q_proj.weight"))
    state[name] = torch.zeros(state[name].numel() // 2, 1, dtype=torch.uint8)
    save_file(state, str(model / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UserError, match=f"tensor {name} has shape"):
        check_model_files(model)
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (model / "config.json").write_text(json.dumps(config))
    check_model_files(model)

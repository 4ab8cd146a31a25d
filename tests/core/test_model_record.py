"""Issue 26, items 4, 5 and 6, before any run: what a recipe records about a model it did not build,
the embedded default's keys refused for another model, ``posttrain eval``'s length checks, the run's
header, where a resumed run resumes, and third-party noise kept out.

The model is what the reporter brought: a tiny Qwen2 (hidden 64, 2 layers, 2,048 positions) with a
ChatML template and a generation_config.json that sets ``top_k``, built here (no hub).
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _own_model import tiny_qwen_dir  # noqa: E402


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Path:
    return tiny_qwen_dir(tmp_path_factory.mktemp("models") / "qwen")


@pytest.fixture()
def recipe_file(tmp_path, qwen) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"c{i}", "domain": "code", "prompt": f"def add_{i}(x):\n",
                                         "entry_point": f"add_{i}", "reference": f"def add_{i}(x):\n    return x + {i}\n",
                                         "test": f"def check(candidate):\n    assert candidate(1) == {1 + i}\n"}) + "\n"
                             for i in range(6)))
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({
        "stages": ["sft", "rl"], "model": {"name": str(qwen)},
        "tasks": {"train": [{"file": str(tasks), "skip": 2}], "eval": [{"file": str(tasks), "n": 2}]},
        "sft": {"demonstrations": "references", "epochs": 2},
        "rl": {"steps": 4, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 16},
        "eval": {"samples_per_task": 1, "max_new_tokens": 48}}))
    return path


def one_line_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# --- item 6: the saved config records the model's own architecture; embedded keys are refused


def test_the_saved_config_records_the_models_own_architecture(recipe_file, qwen, tmp_path) -> None:
    from posttrain.cli.pipeline import prepare_run_dir
    from posttrain.train.recipe import load_recipe

    recipe = load_recipe(recipe_file)
    assert recipe.model.architecture == {"hidden_size": 64, "num_layers": 2, "max_positions": 2048}
    prepare_run_dir(tmp_path / "run", recipe, resume=False)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]
    assert (saved["hidden_size"], saved["num_layers"], saved["max_positions"]) == (64, 2, 2048)  # was 128, 2, 256
    assert load_recipe(tmp_path / "run" / "config.yaml").model == recipe.model  # the record is itself a recipe
    embedded = load_recipe(ROOT / "configs" / "tiny-grpo.yaml")  # the embedded default: its sizes, as before
    assert embedded.model.architecture == {"hidden_size": 64, "num_layers": 2, "max_positions": 256}


def test_embedded_keys_given_for_another_model_are_refused_in_one_line(recipe_file, qwen, tmp_path, capsys) -> None:
    err = one_line_error(capsys, ["run", str(recipe_file), "--out", str(tmp_path / "out"), "--set", "model.hidden_size=128"])
    assert f"model.hidden_size: 128 sizes the embedded default, but model.name {qwen} is a model of its own: its " \
           f"hidden_size is 64 ({qwen / 'config.json'} hidden_size); remove model.hidden_size (or --set model.hidden_size=null)" in err, err
    err = one_line_error(capsys, ["run", str(recipe_file), "--out", str(tmp_path / "out"),
                                  "--set", "model.max_positions=256"])
    assert "model.max_positions: 256" in err and "2048" in err and "max_position_embeddings" in err, err
    assert not (tmp_path / "out").exists()
    from posttrain.train.recipe import ModelConfig

    with pytest.raises(ConfigError, match="model.num_layers: sizes the embedded default; model.name 'org/model'"):
        ModelConfig(name="org/model", num_layers=4)  # a hub name: its own config decides
    assert ModelConfig(name="org/model").architecture == {"hidden_size": None, "num_layers": None, "max_positions": None}


# --- item 4: posttrain eval checks lengths before any work and follows the recipe's


def test_eval_over_the_models_positions_is_refused_before_any_work(recipe_file, qwen, tmp_path, capsys) -> None:
    tasks = str(recipe_file.parent / "tasks.jsonl")
    out = tmp_path / "eval"
    err = one_line_error(capsys, ["eval", "--model", str(qwen), "--tasks", tasks, "--max-new-tokens", "2100",
                                  "--out", str(out)])
    assert err.startswith("posttrain: error: --max-new-tokens 2100: the model has 2,048 positions "
                          f"({qwen / 'config.json'} max_position_embeddings), the evaluation needs "), err
    assert "the longest prompt ('def add_" in err and "lower --max-new-tokens (at most 20" in err, err
    err = one_line_error(capsys, ["eval", "--model", str(qwen), "--tasks", tasks, "--max-new-tokens", "700",
                                  "--max-attempts", "3"])  # 3 attempts and the feedback between them
    assert "for a repair episode (--max-new-tokens 700 per attempt, observations between)" in err, err
    assert not out.exists()


def test_eval_of_a_run_takes_the_recipes_length_and_checks_it(tmp_path, capsys) -> None:
    from posttrain.cli import build_parser
    from posttrain.cli._eval import _check_lengths, _resolve_length, _tasks
    from posttrain.policy import EmbeddedModelSpec, build_embedded_default

    run = tmp_path / "run"
    build_embedded_default(run / "checkpoints" / "base", spec=EmbeddedModelSpec(hidden_size=16, num_layers=1,
                                                                                intermediate_size=32))
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "m", "domain": "math", "prompt": "1+1?", "answer": "2"}) + "\n")
    capsys.readouterr()  # what building the model said

    def length(*flags: str) -> int:
        """What eval --run RUN --tasks t.jsonl FLAGS samples with, as run_eval settles it (no model loaded)."""
        args = build_parser().parse_args(["eval", "--run", str(run), "--tasks", str(tasks), *flags])
        given = args.max_new_tokens is not None
        _check_lengths(args, _tasks(args), _resolve_length(args), given=given)
        return args.max_new_tokens

    (run / "config.yaml").write_text(yaml.safe_dump({"eval": {"max_new_tokens": 48}}))
    assert length() == 48 and length("--max-new-tokens", "100") == 100  # the recipe's, unless told
    (run / "config.yaml").write_text(yaml.safe_dump({"eval": {"max_new_tokens": 300}}))
    assert length() == 251  # 256 positions - "<bos>1+1?": what fits, said in one line
    assert capsys.readouterr().err == (
        "note: --max-new-tokens 251: the most the model's 256 positions leave after the longest prompt (5 tokens); "
        f"--max-new-tokens 300 (the recipe's eval.max_new_tokens, {run / 'config.yaml'}) does not fit\n")
    (run / "config.yaml").write_text("stages: [sft]\n")  # a recipe that does not say: the default, lowered alike
    assert length() == 251 and "--max-new-tokens 512 (the default) does not fit" in capsys.readouterr().err
    err = one_line_error(capsys, ["eval", "--run", str(run), "--tasks", str(tasks), "--max-new-tokens", "252"])
    assert "--max-new-tokens 252: the model has 256 positions" in err and "(at most 251 fits)" in err, err  # given


# --- item 5: the header, the resume point, the noise


def test_the_header_says_what_the_run_does(recipe_file, qwen, tmp_path) -> None:
    from posttrain.cli._header import run_header
    from posttrain.cli.pipeline import make_pools
    from posttrain.train.recipe import load_recipe

    recipe = load_recipe(recipe_file)
    pools = make_pools(recipe)
    out = tmp_path / "run"
    lines = run_header(recipe, True, out, pools.train, pools.eval, resume=False)
    assert [line.split()[0] for line in lines] == ["model", "tokenizer", "prompts", "sampling", "tasks", "stages", "run"]
    assert lines[0] == f"model      {qwen}: qwen2, 2 layers, hidden 64, 2,048 positions, 80.9K parameters; float32 on cpu"
    assert lines[1] == "tokenizer  Qwen2Tokenizer, 103 tokens, EOS '<|im_end|>', no BOS"
    assert lines[2] == f"prompts    the chat template of {qwen} (model.chat: auto: it ends an assistant turn with the EOS)"
    assert lines[3] == (f"sampling   softmax(logits / temperature); {qwen / 'generation_config.json'}'s top_k, "
                        "repetition_penalty are not used")
    assert lines[4] == "tasks      train 4 (code 4); eval 2 (code 2)"
    assert lines[5].startswith("stages     sft (references, 2 epochs) -> rl (grpo, 4 steps x 2 prompts x 2 samples); "
                               "evaluated: base, sft, rl (1 sample(s) per task at temperature 1, 48 new tokens")
    assert lines[6] == f"run        {out}; the full resolved recipe: {out / 'config.yaml'}"
    plain = run_header(load_recipe(recipe_file, ["model.chat=false"]), False, out, pools.train, pools.eval, resume=False)
    assert plain[2] == "prompts    plain text (model.chat: false)"
    embedded = load_recipe(ROOT / "configs" / "tiny-grpo.yaml")
    lines = run_header(embedded, False, out, pools.train, pools.eval, resume=False)
    assert lines[0] == ("model      the embedded default, built from the recipe: llama, 2 layers, hidden 64, "
                        "256 positions, 105K parameters; float32 on cpu")
    assert lines[2] == ("prompts    plain text: the embedded default is trained from scratch on plain prompts "
                        "(model.chat: auto)")
    assert not any(line.startswith("sampling") for line in lines)
    lora = load_recipe(ROOT / "configs" / "tiny-grpo.yaml", ["model.lora={r: 4, alpha: 8}"])  # targets: the default
    assert run_header(lora, False, out, pools.train, pools.eval, resume=False)[0].endswith(
        "; LoRA rank 4 on the architecture's default modules")
    named = load_recipe(ROOT / "configs" / "tiny-grpo.yaml", ["model.lora={r: 4, alpha: 8, target_modules: [q_proj]}"])
    assert run_header(named, False, out, pools.train, pools.eval, resume=False)[0].endswith("; LoRA rank 4 on q_proj")


def test_a_resumed_run_says_where_it_resumes(recipe_file, tmp_path) -> None:
    from transformers import LlamaForCausalLM

    from posttrain.cli._header import resume_point
    from posttrain.policy import EmbeddedModelSpec, embedded_config
    from posttrain.train.checkpoint import save_checkpoint
    from posttrain.train.recipe import load_recipe

    recipe, out = load_recipe(recipe_file), tmp_path / "run"
    ckpts = out / "checkpoints"
    assert resume_point(recipe, out) == "resumed at stage base step 0 (nothing was finished yet)"
    for stage in ("base", "sft"):
        (ckpts / stage).mkdir(parents=True)
        (ckpts / stage / "DONE").write_text("ok\n")
    assert resume_point(recipe, out) == "resumed at stage rl step 0 (rl is checkpointed at its end only)"
    tiny = EmbeddedModelSpec(hidden_size=8, num_layers=1, intermediate_size=8, num_heads=2, num_kv_heads=1)
    save_checkpoint(ckpts / "rl-state", model=LlamaForCausalLM(embedded_config(tiny)), tokenizer=None, optimizer=None,
                    scheduler=None, step=12)
    assert resume_point(recipe, out) == f"resumed at stage rl step 12 ({ckpts / 'rl-state' / 'step-000012'})"
    (ckpts / "rl").mkdir()
    (ckpts / "rl" / "DONE").write_text("ok\n")
    assert resume_point(recipe, out) == "resumed at stage eval (every training stage was finished)"


def test_third_party_noise_is_kept_out_and_our_warnings_are_one_line(monkeypatch, capfd) -> None:
    import io

    import posttrain.cli
    from posttrain.cli import quiet_third_parties

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    flags = logging.getLogger("transformers.generation.configuration_utils")
    monkeypatch.setattr(flags, "filters", list(flags.filters))
    quiet_third_parties()
    from transformers import GenerationConfig

    GenerationConfig(top_k=20).validate()  # transformers: "generation flags are not valid ... ['top_k']"
    assert "generation flags" not in capfd.readouterr().err
    assert warnings.showwarning is posttrain.cli._show_warning
    grpo = str(ROOT / "posttrain" / "train" / "grpo.py")
    said = io.StringIO()
    warnings.showwarning("95%+ of groups have zero reward variance", UserWarning, grpo, 440, said, "warn(...)")
    assert said.getvalue() == "posttrain: warning: 95%+ of groups have zero reward variance\n"  # was file:line + source
    said = io.StringIO()
    warnings.showwarning("someone else's", DeprecationWarning, "/x/site-packages/lib.py", 3, said, "warn(...)")
    assert said.getvalue() == "/x/site-packages/lib.py:3: DeprecationWarning: someone else's\n  warn(...)\n"


@pytest.mark.parametrize("module", ["posttrain.cli._header", "posttrain.cli._progress", "posttrain.cli.tasks",
                                    "posttrain.policy._policy", "posttrain.envs.code._env"])
def test_docstring_examples(module) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0

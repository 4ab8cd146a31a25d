"""Recipe parsing: unknown keys, wrong types and invalid combinations fail before any work."""

import subprocess
import sys

import pytest

from posttrain.errors import ConfigError
from posttrain.train.recipe import EMBEDDED_RECIPE, Recipe, load_recipe


def test_embedded_recipe_parses():
    r = load_recipe(EMBEDDED_RECIPE)
    assert isinstance(r, Recipe)
    assert r.rl.group_size >= 2 and r.stages == ("sft", "rl")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("rl.stepz=3", "unknown key 'rl.stepz' (did you mean 'steps'?)"),
        ("rl.steps=abc", "rl.steps: expected an integer, got 'abc'"),
        ("rl.lr=true", "rl.lr: expected a number"),
        ("rl.group_size=1", "rl.group_size"),
        ("rl.policy_loss=gspo", "seq_mean_token_mean"),
        ("rl.advantage=reinforce_plue_plus", "rl.advantage: expected one of"),
        ("tasks.domains=[math,math]", "duplicate domain"),
        ("demonstrator.error_rate=1.5", "demonstrator.error_rate"),
        ("rl=3", "rl: expected a mapping"),
        ("bogus=1", "unknown key 'bogus'"),
        ("rl.reward_model_weight=0.5", "needs the rm stage before the rl stage"),
        ("stages=[sft,rl,sft]", "each stage may run once"),
        ("model.dtype=float16", "model.dtype: expected one of"),
        ("rl.scale_by_std=maybe", "rl.scale_by_std"),
    ],
)
def test_bad_recipe_values_are_named(override, needle):
    with pytest.raises(ConfigError) as e:
        load_recipe(EMBEDDED_RECIPE, [override])
    assert needle in str(e.value)
    assert str(EMBEDDED_RECIPE) in str(e.value)


def test_missing_recipe_file(tmp_path):
    with pytest.raises(ConfigError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")


def test_cli_bad_recipe_exits_2_before_any_work(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("rl:\n  steps: 10\n  clip_hihg: 0.3\n")
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(bad), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 2
    assert "unknown key 'rl.clip_hihg' (did you mean 'clip_high'?)" in p.stderr
    assert not out.exists()  # nothing was started


def test_help_lists_commands():
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    for cmd in ("quickstart", "run", "sandbox", "verify", "tasks", "eval", "report", "audit", "bench"):
        assert cmd in p.stdout


def test_second_quickstart_gets_a_new_default_directory(tmp_path):
    from posttrain.cli.run import _unused_dir

    base = tmp_path / "quickstart"
    assert _unused_dir(base) == base
    base.mkdir()
    assert _unused_dir(base) == base  # an empty directory holds no run
    (base / "config.yaml").write_text("seed: 0\n")
    assert _unused_dir(base) == tmp_path / "quickstart-2"
    (tmp_path / "quickstart-2").mkdir()
    (tmp_path / "quickstart-2" / "config.yaml").write_text("seed: 0\n")
    assert _unused_dir(base) == tmp_path / "quickstart-3"


# --- issue 12, section 3: every recipe value is checked at parse time, naming the key and the range

ISSUE_12_VALUES = [
    ("rl.lr=-0.001", "rl.lr: expected a number in (0, 1], got -0.001"),
    ("rl.critic_lr=-1", "rl.critic_lr: expected a number in (0, 1]"),
    ("eval.max_new_tokens=0", "eval.max_new_tokens: expected an integer >= 1, got 0"),
    ("model.hidden_size=-64", "model.hidden_size: expected an integer >= 8, got -64"),
    ("sft.pack_len=0", "sft.pack_len: expected an integer >= 1, got 0"),
    ("eval.samples_per_task=0", "eval.samples_per_task: expected an integer in [1, 1024]"),
    ("eval.samples_per_task=100000", "eval.samples_per_task: expected an integer in [1, 1024]"),
    ("rl.group_size=2000000", "rl.group_size: 16 prompts x 2000000 samples is 32,000,000 completions a step"),
    ("rl.prompts_per_step=2000000", "rl.prompts_per_step: 2000000 prompts x 8 samples"),
    ("rl.clip_low=-1", "rl.clip_low: expected a number in [0, 1)"),
    ("sandbox.workers=-1", "sandbox.workers: expected an integer in [1, 512]"),
    ("sandbox.workers=100000", "sandbox.workers: expected an integer in [1, 512]"),
    ("rl.gae_lambda=5", "rl.gae_lambda: expected a number in [0, 1], got 5.0"),
    ("rl.max_grad_norm=-1", "rl.max_grad_norm: expected a number > 0"),
    ("sft.warmup_frac=2", "sft.warmup_frac: expected a number in [0, 1], got 2.0"),
    ("reward.outcome=-1", "reward.outcome: expected a number >= 0"),
    ("model.num_layers=0", "model.num_layers: expected an integer >= 1, got 0"),
    ("model.hidden_size=100", "model.hidden_size: expected a multiple of 8"),
    ("rl.lr=.nan", "rl.lr: expected a finite number"),
    ("seed=-1", "seed: expected an integer in [0, 4294967296)"),
    ("dpo.label_smoothing=0.5", "dpo.label_smoothing: expected a number in [0, 0.5)"),
    ("rm.lora.r=0", "rm.lora.r: expected an integer >= 1"),
    ("pairs.max_new_tokens=0", "pairs.max_new_tokens: expected an integer >= 1"),
    ("model.device=gpu", "model.device: expected a torch device"),
    ("model.name=/nonexistent/model", "model.name: no such model directory '/nonexistent/model'"),
    ("model.name=/", "model.name: '/' is not a model directory (no config.json)"),
    ("model.lora.target_modules=[]", "model.lora: target_modules: expected at least one module name"),
]


@pytest.mark.parametrize(("override", "needle"), ISSUE_12_VALUES)
def test_every_recipe_value_is_checked_at_parse_time(override, needle):
    with pytest.raises(ConfigError) as e:
        load_recipe(EMBEDDED_RECIPE, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cuda_device_without_cuda_is_refused_at_parse_time():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="model.device: 'cuda', but CUDA is not available on this machine"):
        load_recipe(EMBEDDED_RECIPE, ["model.device=cuda"])


def _numeric_fields(cls, where=""):
    """(dotted key, annotation) of every int/float field of a recipe dataclass tree."""
    import dataclasses
    import types
    import typing

    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], f"{where}{f.name}"
        args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        for arg in (a for a in args if a is not type(None)):
            base = typing.get_args(arg)[0] if typing.get_origin(arg) is typing.Annotated else arg
            if dataclasses.is_dataclass(base):
                yield from _numeric_fields(base, f"{key}.")
            elif base in (int, float):
                yield key, arg


def test_every_numeric_field_declares_its_range():
    from posttrain.config import Range

    fields = dict(_numeric_fields(Recipe))
    assert len(fields) > 60  # the walk reaches every section, LoRA specs included
    undeclared = [k for k, tp in fields.items() if not any(isinstance(m, Range) for m in getattr(tp, "__metadata__", ()))]
    assert undeclared == []


def test_scientific_notation_in_yaml_and_overrides(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("sft:\n  lr: 3e-3\nrl:\n  lr: 5E-4\n  critic_lr: 1.5e-5\n")
    r = load_recipe(recipe, ["sft.warmup_frac=1e-1", "dpo.lr=2e-6"])
    assert (r.sft.lr, r.rl.lr, r.rl.critic_lr, r.sft.warmup_frac, r.dpo.lr) == (3e-3, 5e-4, 1.5e-5, 0.1, 2e-6)
    assert load_recipe(EMBEDDED_RECIPE, ["sft.lr=1e-3"]).sft.lr == 1e-3
    with pytest.raises(ConfigError, match="rl.steps: expected an integer, got 'abc'"):
        load_recipe(recipe, ["rl.steps=abc"])


def _tiny_gpt2(path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from posttrain.policy import build_char_tokenizer

    # a usable model directory (a tokenizer, enough positions): recipes check both at parse time
    GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=128, n_positions=256)).save_pretrained(path)
    build_char_tokenizer().save_pretrained(path)
    return path


def test_lora_targets_follow_the_architecture(tmp_path):
    from transformers import GPT2LMHeadModel

    from posttrain.train._lora import LoraSpec, apply_lora, lora_target_modules

    gpt2 = _tiny_gpt2(tmp_path / "gpt2")
    # the default: GPT-2 has no q_proj; its attention is c_attn
    r = load_recipe(EMBEDDED_RECIPE, [f"model.name={gpt2}", "model.lora={r: 4}"])
    model = GPT2LMHeadModel.from_pretrained(gpt2)
    assert lora_target_modules(model, r.model.lora) == ["c_attn"]
    wrapped = apply_lora(model, r.model.lora)
    assert any("c_attn.lora_A" in n for n, _ in wrapped.named_parameters())
    # Llama (the embedded default) keeps the four attention projections
    assert load_recipe(EMBEDDED_RECIPE, ["model.lora={r: 4}"]).model.lora.target_modules is None
    # a module the model lacks: refused at parse time, naming the key and the modules it has
    with pytest.raises(ConfigError) as e:
        load_recipe(EMBEDDED_RECIPE, [f"model.name={gpt2}", "model.lora={target_modules: [q_proj, v_proj]}"])
    msg = str(e.value)
    assert "model.lora.target_modules: GPT2LMHeadModel (gpt2) has no module 'q_proj'" in msg
    assert "c_attn" in msg and "c_proj" in msg
    with pytest.raises(ConfigError, match="dpo.lora.target_modules: LlamaForCausalLM .* no module 'c_attn'"):
        load_recipe(EMBEDDED_RECIPE, ["dpo.lora={target_modules: [c_attn]}"])
    # and at load time, for a model the recipe could not see
    with pytest.raises(ConfigError, match="has no module 'q_proj'"):
        apply_lora(GPT2LMHeadModel.from_pretrained(gpt2), LoraSpec(target_modules=("q_proj",)))


def test_config_docstring_examples():
    import doctest

    import posttrain.config

    result = doctest.testmod(posttrain.config)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize(("rl", "says"), [
    ({"episodes": "repair", "reward_model_weight": 0.5}, "reward_model_weight"),
    ({"algorithm": "ppo", "dedup": True}, "rl.dedup counts a repeated completion once in its group's baseline"),
])
def test_episode_options_that_contradict_each_other_are_refused(rl, says) -> None:
    from posttrain.config import parse_config
    from posttrain.train.recipe import RLConfig

    with pytest.raises(ConfigError, match=says) as e:
        parse_config(RLConfig, rl, where="rl")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("rl", "says"), [
    ({"skip_zero_advantage": True, "kl_coef": 0.1}, "rl.skip_zero_advantage: a row with advantage 0 still has the loss's KL"),
    ({"skip_zero_advantage": True, "data_parallel": 2}, "rl.data_parallel: 2 .*rl.skip_zero_advantage"),
])
def test_skipping_zero_advantage_rows_where_it_would_change_the_update_is_refused(rl, says) -> None:
    from posttrain.config import parse_config
    from posttrain.train.recipe import RLConfig

    with pytest.raises(ConfigError, match=says) as e:
        parse_config(RLConfig, rl, where="rl")
    assert "\n" not in str(e.value)
    parse_config(RLConfig, {**rl, "kl_placement": "reward", "data_parallel": 1}, where="rl")  # no KL in the loss, one process

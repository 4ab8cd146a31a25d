"""``model.chat`` (auto | true | false), checked when the recipe is parsed: exit 2 in one line naming
the key and the tokenizer, before any work; the position check counts the chat-rendered prompts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.errors import ConfigError
from posttrain.train.recipe import EMBEDDED_RECIPE, load_recipe

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _chat_models import QWEN3_THINK_TEMPLATE, qwen_char_tokenizer  # noqa: E402
from test_chat_prompts import tiny_llama_dir  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model directories: a Qwen-style chat tokenizer (EOS <|im_end|>), the same with a base model's
    EOS, with no template, and with Qwen3's history-rewriting template."""
    root = tmp_path_factory.mktemp("models")
    base, bare = qwen_char_tokenizer(), qwen_char_tokenizer()
    base.eos_token = "<|endoftext|>"
    bare.chat_template = None
    for name, tok in (("chat", qwen_char_tokenizer()), ("base", base), ("bare", bare),
                      ("think", qwen_char_tokenizer(QWEN3_THINK_TEMPLATE))):
        tiny_llama_dir(root / name, tok)
    return root


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, ids in (("train", ["m1", "m2"]), ("eval", ["e1"])):
        Path(f"{name}.jsonl").write_text("".join(json.dumps(
            {"id": i, "domain": "math", "prompt": f"{i}: 1+1?", "answer": "2", "reference": "\\boxed{2}"}) + "\n"
            for i in ids))
    Path("r.yaml").write_text(yaml.safe_dump({
        "stages": ["sft", "rl"], "model": {"name": "embedded", "hidden_size": 32},
        "tasks": {"train": [{"file": "train.jsonl"}], "eval": [{"file": "eval.jsonl"}]},
        "sft": {"demonstrations": "references"}, "rl": {"max_new_tokens": 8}, "eval": {"max_new_tokens": 8}}))
    return tmp_path


def test_the_default_is_auto_and_a_bad_value_exits_2_in_one_line(ws, capsys):
    assert load_recipe(EMBEDDED_RECIPE).model.chat == "auto"
    # auto leaves the embedded default (trained from scratch) on plain prompts: every recipe on it keeps its
    # ids, repair episodes included (its template would end a length-cut attempt with <eos>); true asks for it
    assert load_recipe(EMBEDDED_RECIPE).model.chat_setting is False
    assert load_recipe(EMBEDDED_RECIPE, ["model.chat=true"]).model.chat_setting is True
    assert load_recipe("r.yaml", ["model.chat=false"]).model.chat is False
    code = main(["run", "r.yaml", "--out", "out", "--set", "model.chat=sometimes"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "model.chat: expected bool | 'auto', got 'sometimes'" in err
    assert not Path("out").exists()


@pytest.mark.parametrize(("model", "setting", "needle"), [
    ("bare", "true", "model.chat: true, the tokenizer of {m}: {m}: no chat template"),
    ("base", "auto", "model.chat: auto (auto: the tokenizer has a chat template), the tokenizer of {m}: {m}: sampling "
                     "stops at EOS '<|endoftext|>' but the chat template ends an assistant turn with '<|im_end|>\\n'"),
    ("base", "true", "set model.chat: false for plain-text prompts"),
])
def test_a_chat_template_that_cannot_render_the_run_exits_2_before_any_work(ws, models, capsys, model, setting, needle):
    m = models / model
    code = main(["run", "r.yaml", "--out", "out", "--set", f"model.name={m}", "--set", f"model.chat={setting}"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle.replace("{m}", str(m)) in err, err
    assert not Path("out").exists()
    load_recipe("r.yaml", [f"model.name={m}", "model.chat=false"])  # plain prompts do not read the template


def test_auto_without_a_template_is_plain_and_true_with_one_parses(ws, models):
    load_recipe("r.yaml", [f"model.name={models / 'bare'}"])
    load_recipe("r.yaml", [f"model.name={models / 'chat'}", "model.chat=true"])


def test_repair_feedback_needs_a_template_that_appends_a_user_turn(ws, models):
    think = models / "think"
    load_recipe("r.yaml", [f"model.name={think}"])  # one-turn prompts render fine
    with pytest.raises(ConfigError, match=r"model.chat: auto .*rewrites earlier turns.*set model.chat: false"):
        load_recipe("r.yaml", [f"model.name={think}", "eval.episodes=repair"])
    with pytest.raises(ConfigError, match=r"model.chat: auto .*rewrites earlier turns"):
        load_recipe("r.yaml", [f"model.name={think}", "rl.episodes=repair"])
    load_recipe("r.yaml", [f"model.name={think}", "eval.episodes=repair", "model.chat=false"])


def test_the_position_check_counts_the_chat_rendered_prompt(ws, models):
    chat = models / "chat"
    tok = qwen_char_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "m1: 1+1?"}], add_generation_prompt=True, tokenize=False)
    rendered = len(tok(text, add_special_tokens=False)["input_ids"])
    assert rendered > 40  # the system turn and the markers
    config = json.loads((chat / "config.json").read_text())
    (chat / "config.json").write_text(json.dumps({**config, "max_position_embeddings": rendered + 7}))
    try:
        with pytest.raises(ConfigError, match=rf"the model has {rendered + 7} positions, the recipe needs "
                                              rf"{rendered + 8}: the longest prompt \('m1: 1\+1\?'\) is {rendered} tokens"):
            load_recipe("r.yaml", [f"model.name={chat}", "stages=[rl]"])
        load_recipe("r.yaml", [f"model.name={chat}", "stages=[rl]", "model.chat=false"])  # 9 plain tokens + 8 fit
        # an SFT demonstration: the rendered prompt, the response's own ids and EOS (65 + 9 + 1)
        with pytest.raises(ConfigError, match=rf"the recipe needs {rendered + 10}: the longest SFT demonstration"):
            load_recipe("r.yaml", [f"model.name={chat}"])
    finally:
        (chat / "config.json").write_text(json.dumps(config))


def test_preference_stages_parse_on_chat_prompts(ws, models):
    """rm and dpo encode a pair's prompt with the policy's own encoder (train.preference), chat-rendered
    on a chat run: no longer refused (tests/train/test_preference_chat.py runs one)."""
    load_recipe("r.yaml", [f"model.name={models / 'chat'}", "stages=[sft, dpo]"])
    load_recipe("r.yaml", [f"model.name={models / 'chat'}", "stages=[sft, rm, dpo]", "model.chat=true"])

"""``model.chat`` (auto | true | false), checked when the recipe is parsed: true on a template that
cannot render the run is exit 2 in one line naming the key and the tokenizer, before any work; auto
there is plain prompts with one note line; the position check counts the chat-rendered prompts."""

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
        "stages": ["sft", "rl"], "model": {"name": "embedded"},  # tests switch model.name: no embedded sizes
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


@pytest.mark.parametrize(("model", "needle"), [
    ("bare", "model.chat: true, the tokenizer of {m}: {m}: no chat template"),
    ("base", "model.chat: true, the tokenizer of {m}: {m}: sampling stops at EOS '<|endoftext|>' but the chat "
             "template ends an assistant turn with '<|im_end|>\\n'"),
    ("base", "set model.chat: false for plain-text prompts"),
])
def test_a_chat_template_that_cannot_render_the_run_exits_2_under_true(ws, models, capsys, model, needle):
    m = models / model
    code = main(["run", "r.yaml", "--out", "out", "--set", f"model.name={m}", "--set", "model.chat=true"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle.replace("{m}", str(m)) in err, err
    assert not Path("out").exists()
    load_recipe("r.yaml", [f"model.name={m}", "model.chat=false"])  # plain prompts do not read the template


def test_auto_on_a_template_whose_end_of_turn_is_not_the_eos_is_plain_with_a_note(ws, models, capsys):
    """A base model that ships its family's chat template (Qwen2.5 base: turns end with <|im_end|>, EOS
    <|endoftext|>): auto parses and runs on plain prompts, decided once (``decide_chat``) and said in
    one line naming the tokenizer and the check; the policy the run loads and the base checkpoint's
    record agree with it."""
    from posttrain.cli.pipeline import build_base, decide_chat, load_model
    from posttrain.policy import CHAT_RECORD, recorded_chat

    m = models / "base"
    recipe = load_recipe("r.yaml", [f"model.name={m}"])  # was exit 2 under auto
    assert recipe.model.chat == "auto" and "model.chat" not in capsys.readouterr().err
    decided = decide_chat(recipe)
    err = capsys.readouterr().err
    assert decided.model.chat is False and len(err.strip().splitlines()) == 1, err
    assert f"model.chat: auto renders plain prompts: the chat template of {m} is not usable" in err, err
    assert "sampling stops at EOS '<|endoftext|>'" in err and "model.chat: true requires it" in err, err
    build_base(decided, Path("base"))
    assert recorded_chat("base") is False and (Path("base") / CHAT_RECORD).is_file()
    assert load_model(decided, Path("base")).chat is None
    capsys.readouterr()
    chat = decide_chat(load_recipe("r.yaml", [f"model.name={models / 'chat'}"]))  # a usable template: chat, silently
    assert chat.model.chat is True and "model.chat" not in capsys.readouterr().err


def test_auto_without_a_template_is_plain_and_true_with_one_parses(ws, models):
    load_recipe("r.yaml", [f"model.name={models / 'bare'}"])
    load_recipe("r.yaml", [f"model.name={models / 'chat'}", "model.chat=true"])


def test_repair_feedback_needs_a_template_that_appends_a_user_turn(ws, models, capsys):
    """True refuses a history-rewriting template (Qwen3) on a run with repair feedback; auto runs such a
    recipe on plain prompts, with one line saying why, and on the template where no feedback is given."""
    from posttrain.cli.pipeline import decide_chat

    think = models / "think"
    assert decide_chat(load_recipe("r.yaml", [f"model.name={think}"])).model.chat is True  # one-turn prompts
    with pytest.raises(ConfigError, match=r"model.chat: true, .*rewrites earlier turns.*set model.chat: false"):
        load_recipe("r.yaml", [f"model.name={think}", "eval.episodes=repair", "model.chat=true"])
    with pytest.raises(ConfigError, match=r"model.chat: true, .*rewrites earlier turns"):
        load_recipe("r.yaml", [f"model.name={think}", "rl.episodes=repair", "model.chat=true"])
    capsys.readouterr()
    for key in ("eval.episodes=repair", "rl.episodes=repair"):
        assert decide_chat(load_recipe("r.yaml", [f"model.name={think}", key])).model.chat is False
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "rewrites earlier turns" in err and str(think) in err, err
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


def test_auto_on_a_posttrain_checkpoint_follows_its_record(tmp_path):
    """A run that starts from a posttrain checkpoint (bench repair's single-turn run starts from the
    repair run's SFT checkpoint) keeps the prompts the checkpoint was trained on: its record, not
    whether its template happens to be usable (the embedded default's is, and it was trained plain)."""
    from posttrain.cli.pipeline import decide_chat
    from posttrain.policy import build_embedded_default, record_chat
    from posttrain.train.recipe import ModelConfig

    path = build_embedded_default(tmp_path / "ckpt")
    recipe = load_recipe(EMBEDDED_RECIPE, [f"model.name={path}", "stages=[rl]"])
    assert ModelConfig(name=str(path)).chat_setting == "auto"  # no record: the template decides
    assert decide_chat(recipe).model.chat is True
    for chat in (False, True):
        record_chat(path, chat)
        assert ModelConfig(name=str(path)).chat_setting is chat
        assert decide_chat(recipe).model.chat is chat

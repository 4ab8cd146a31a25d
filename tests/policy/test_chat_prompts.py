"""Chat-rendered prompts (``model.chat``, ``Policy(chat=True)``): a prompt is the template's rendering
of one user message with the generation prompt, as ids; the checkpoint remembers the choice.

The embedded default's template renders one user message to exactly the plain prompt, so every
recipe on it keeps its ids: checked here on every task of the quickstart and repair families.
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _chat_models import QWEN2_TEMPLATE, qwen_char_tokenizer  # noqa: E402

from posttrain.envs import model_prompt  # noqa: E402
from posttrain.errors import UserError  # noqa: E402
from posttrain.policy import (  # noqa: E402
    CHAT_RECORD,
    ChatTemplate,
    ChatTemplateError,
    Policy,
    build_char_tokenizer,
    load_policy,
    prompt_template,
    resolve_chat,
)
from posttrain.tasks import generators  # noqa: E402
from posttrain.tasks._sources import task_family  # noqa: E402


def tiny_llama_dir(path: Path, tokenizer) -> Path:
    """A 1-layer Llama over ``tokenizer`` saved to ``path`` (Llama, not Qwen2: transformers 5 would
    load a qwen2 checkpoint's tokenizer as Qwen2's BPE instead of the one saved)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_embedded_chat_prompts_are_the_plain_prompts_for_every_quickstart_and_repair_task():
    tok = build_char_tokenizer()
    plain, chat = Policy(None, tok, chat=False), Policy(None, tok, chat=True)
    tasks = [*task_family("quickstart-math")(seed=0), *task_family("quickstart-code")(seed=0),
             *generators.repair_tasks(seed=0)]
    assert len(tasks) > 1000
    for t in tasks:
        prompt = model_prompt(t)
        assert chat.encode_prompt(prompt) == plain.encode_prompt(prompt), t.id
    assert chat.encode_completion("x = 1\n") == plain.encode_completion("x = 1\n")
    assert resolve_chat("auto", tok) is True  # the recipe's default turns it on there: nothing moves


def test_a_chat_prompt_is_the_templates_rendering_of_one_user_message():
    tok = qwen_char_tokenizer()
    policy = Policy(None, tok, chat=True)
    expected = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                       tokenize=False)
    assert expected.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    assert policy.encode_prompt("What is 2+3?") == list(tok(expected, add_special_tokens=False)["input_ids"])
    assert Policy(None, tok).encode_prompt("What is 2+3?") == list(tok("What is 2+3?")["input_ids"])  # plain


def test_chat_needs_a_template_that_ends_a_turn_with_the_eos():
    tok = qwen_char_tokenizer()
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        Policy(None, tok, chat=True)
    assert resolve_chat("auto", tok) is False
    with pytest.raises(ChatTemplateError, match="no chat template"):
        resolve_chat(True, tok)
    base = qwen_char_tokenizer()
    base.eos_token = "<|endoftext|>"  # a base model's EOS under Qwen's template: turns end with <|im_end|>
    with pytest.raises(ChatTemplateError, match=r"sampling stops at EOS '<\|endoftext\|>' but the chat template ends "
                                                r"an assistant turn with '<\|im_end\|>\\n'"):
        Policy(None, base, chat=True)
    Policy(None, base, chat=False)  # plain prompts do not read the template


def test_a_template_teaching_an_unparsed_call_format_still_renders_prompts():
    tok = qwen_char_tokenizer(QWEN2_TEMPLATE + "{#- <function=name> calls, as Qwen3-Coder writes them -#}")
    with pytest.raises(ChatTemplateError, match="Qwen3-Coder XML"):
        ChatTemplate(tok)  # tool episodes refuse it by name ...
    ids = Policy(None, tok, chat=True).encode_prompt("hi")  # ... chat-rendered prompts do not read calls
    assert tok.decode(ids).endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert prompt_template(tok).family == "openai"


def test_checkpoints_remember_the_choice(tmp_path):
    ckpt = tiny_llama_dir(tmp_path / "m", qwen_char_tokenizer())
    plain_ids = list(qwen_char_tokenizer()("hi")["input_ids"])
    assert not (ckpt / CHAT_RECORD).exists()
    assert load_policy(ckpt).chat is None  # no record (not saved by posttrain): plain, as before
    chat = load_policy(ckpt, chat="auto")
    assert chat.chat is not None and chat.encode_prompt("hi") != plain_ids
    chat.save(tmp_path / "trained")
    assert json.loads((tmp_path / "trained" / CHAT_RECORD).read_text()) == {"chat": True}
    again = load_policy(tmp_path / "trained")
    assert again.encode_prompt("hi") == chat.encode_prompt("hi")  # what it was trained with ...
    assert load_policy(tmp_path / "trained", chat=False).encode_prompt("hi") == plain_ids  # ... unless told otherwise
    load_policy(ckpt, chat=False).save(tmp_path / "plain")
    assert load_policy(tmp_path / "plain").chat is None
    (tmp_path / "plain" / CHAT_RECORD).write_text('{"chat": "yes"}')
    with pytest.raises(UserError, match=r"posttrain.json: expected \{\"chat\": true\} or \{\"chat\": false\}"):
        load_policy(tmp_path / "plain")


def test_loading_with_chat_on_a_tokenizer_that_cannot_is_one_line(tmp_path):
    tok = qwen_char_tokenizer()
    tok.eos_token = "<|endoftext|>"
    ckpt = tiny_llama_dir(tmp_path / "base", tok)
    with pytest.raises(UserError, match=rf"{ckpt}: chat-rendered prompts: .*sampling stops at EOS") as e:
        load_policy(ckpt, chat=True)
    assert "\n" not in str(e.value)


def test_generate_and_eval_follow_the_checkpoint_unless_told(tmp_path, capsys):
    from posttrain.cli import main

    tok = qwen_char_tokenizer()
    load_policy(tiny_llama_dir(tmp_path / "m", tok), chat=True).save(tmp_path / "ckpt")
    chat_len = len(Policy(None, tok, chat=True).encode_prompt("hi"))
    for flags, n in (([], chat_len), (["--no-chat"], len(tok("hi")["input_ids"])), (["--chat"], chat_len)):
        code = main(["generate", str(tmp_path / "ckpt"), "--prompt", "hi", "--max-new-tokens", "999", *flags])
        err = capsys.readouterr().err
        assert code == 2 and f"the longest prompt ({n} tokens) plus --max-new-tokens 999" in err, (flags, err)
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"task_id": "HumanEval/0", "response": "x"}\n')
    code = main(["eval", "--suite", "humaneval", "--limit", "1", "--responses", str(responses), "--no-chat"])
    err = capsys.readouterr().err
    assert code == 2 and "--no-chat renders prompts for a model to sample from; --responses are already sampled" in err


def test_a_given_chat_flag_is_part_of_the_eval_protocol():
    from posttrain.cli._eval import _protocol_tag

    p = {"tasks": "RUN/tasks/eval.jsonl", "n_tasks": 20, "samples_per_task": 1, "temperature": 0.0,
         "max_new_tokens": 512, "seed": 0, "max_attempts": 1}
    assert _protocol_tag(p) == "heldout20-n1-t0-len512-seed0"  # as each checkpoint was trained: the tag as before
    assert _protocol_tag({**p, "chat": True}).endswith("-chat")
    assert _protocol_tag({**p, "chat": False}).endswith("-plain")


def test_eval_repair_on_a_template_that_cannot_append_feedback_is_refused_before_any_episode(tmp_path, capsys):
    from _chat_models import QWEN3_THINK_TEMPLATE

    from posttrain.cli import main

    ckpt = tiny_llama_dir(tmp_path / "think", qwen_char_tokenizer(QWEN3_THINK_TEMPLATE))
    # a short task and length: the episodes fit the model's 512 positions (checked first, issue 26 item 4)
    task = {"id": "t", "domain": "code", "prompt": 'def f(x):\n    """Return x."""\n', "entry_point": "f",
            "test": "def check(candidate):\n    assert candidate(1) == 1\n"}
    (tmp_path / "t.jsonl").write_text(json.dumps(task) + "\n")
    code = main(["eval", "--tasks", str(tmp_path / "t.jsonl"), "--model", str(ckpt), "--chat", "--max-attempts", "2",
                 "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if "error" in x]  # (stderr also has transformers' progress bars)
    assert code == 2 and "--max-attempts 2: repair feedback as a user turn on chat-rendered prompts" in line and "rewrites earlier turns" in line, err

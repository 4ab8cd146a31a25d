"""A tiny char-level tokenizer and a random Qwen2 causal LM (~22k params), built locally.

Used by the golden tests against TRL and by the step tests: no hub, no network.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch

CHARS = list(string.ascii_lowercase + string.digits + " +=?.")
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}"
)


def make_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + CHARS + [":", "\n"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_model(tok, *, seed: int = 0, dtype: torch.dtype = torch.float32):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).to(dtype)


def save_model(tmp: Path, *, seed: int = 0) -> Path:
    tok = make_tokenizer()
    model = make_model(tok, seed=seed)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return tmp

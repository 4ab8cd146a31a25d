"""The model the issue-26 reporter brought, built here (no hub): a tiny Qwen2 (hidden 64, 2 layers,
2,048 positions, 80.9K parameters) with Qwen2.5's ChatML template over a character tokenizer, and
a generation_config.json that sets ``top_k`` without ``do_sample``, as some hub models ship it."""

from __future__ import annotations

import json
from pathlib import Path

from _chat_models import qwen_char_tokenizer


def tiny_qwen_dir(path: Path) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = qwen_char_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    # transformers refuses to save top_k without do_sample, and warns about it on every load and save
    (path / "generation_config.json").write_text(json.dumps({"top_k": 20, "repetition_penalty": 1.05,
                                                             "eos_token_id": tok.eos_token_id}))
    return path

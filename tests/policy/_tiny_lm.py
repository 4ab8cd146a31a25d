"""Tiny causal LMs and tokenizers built in-process (no files, no hub), for sampler and runner tests."""

from __future__ import annotations

import os

import torch

TEST_DEVICE = os.environ.get("POSTTRAIN_TEST_DEVICE", "cpu")
"""Where the sampler conformance and distribution tests put their model: ``POSTTRAIN_TEST_DEVICE=cuda``
runs them on a GPU (bench/gpu.py's device run does)."""


def tiny_llama(tokenizer, *, seed: int = 0, eos_like: str | None = " ", hidden_size: int = 32,
               heads: int = 2) -> torch.nn.Module:
    """A 1-layer Llama over ``tokenizer``. ``eos_like``: EOS gets the output row of that token, so
    EOS is sampled about as often as it (random weights alone almost never stop). vLLM's CPU
    attention needs a head dim >= 32: ``hidden_size=128, heads=4``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=1,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), max_position_embeddings=128, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peakier than init, so top-k/top-p cut real mass
        if eos_like is not None:
            [like] = tokenizer(eos_like, add_special_tokens=False)["input_ids"]
            # 1.02: no exact tie with that token, which would blur where top-k cuts
            model.lm_head.weight[tokenizer.eos_token_id] = 1.02 * model.lm_head.weight[like]
    return model


def bpe_tokenizer():
    """A 9-token BPE tokenizer with one merge, ``a`` + ``b`` -> ``ab``: sampled ids ``[a, b]`` decode to
    "ab", which encodes to ``[ab]``, so decoding and re-encoding changes the ids."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "ab", " ", "?"])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", add_bos_token=True)


def chain_model(tok, chains, *, hidden: int | None = None, positions: int = 256) -> torch.nn.Module:
    """A 1-layer Llama whose greedy next token after ``chain[i]`` is ``chain[i + 1]``, for each chain
    (one-hot embeddings, the layer's outputs zeroed, ``lm_head`` maps each token to the next; a token
    starts one step of one chain at most). ``hidden``: default the vocabulary rounded up to a multiple of
    4; vLLM's CPU attention needs a head dim >= 32 (``hidden=64``: two heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    v = len(tok)
    hidden = hidden or v + (-v) % 4
    assert v <= hidden and len({t for c in chains for t in c[:-1]}) == sum(len(c) - 1 for c in chains)
    config = LlamaConfig(vocab_size=v, hidden_size=hidden, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=positions,
                         tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(v, hidden))
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        for chain in chains:
            for a, b in zip(chain, chain[1:], strict=False):
                model.lm_head.weight[b, a] = 1.0
    return model


def need_vllm() -> None:
    """Skip (outside CI) when the vLLM environment is not built; in CI its absence fails."""
    import pytest

    from posttrain.errors import UserError
    from posttrain.policy._vllm import vllm_python

    try:
        vllm_python()
    except UserError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))

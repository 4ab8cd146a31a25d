"""Edges of sampling exactness (posttrain/policy/_sampler.py, _fast.py, _sampling.py): whatever the
checkpoint's own generation config says, however odd the drafts or the temperature, a sampler returns
tokens drawn from ``softmax(top_p(top_k(logits / T)))`` and their log-probs under it, or a
``UserError`` -- never a silently different distribution, never a NaN logprob.

Each case failed before its fix (commit messages give the figures).
"""


import pytest
import torch
from _tiny_lm import TEST_DEVICE, tiny_llama
from test_sampler_conformance import recompute

from posttrain.policy import LocalSampler, SamplingParams, build_char_tokenizer

PROMPTS = ["12+3=", "def f(x):\n", "a", "The fox"]


@pytest.fixture(scope="module")
def lm():
    tok = build_char_tokenizer()
    return tiny_llama(tok, seed=3).to(TEST_DEVICE), tok


def test_the_checkpoint_s_generation_config_does_not_reach_the_local_sampler(lm):
    """transformers >= 5 fills every field ``generate``'s config leaves None from the model's own
    ``generation_config``: a checkpoint's repetition_penalty (Qwen2.5-Instruct ships 1.05) changed the
    logprobs, and its min_p changed the tokens sampled but not the logprobs recorded for them."""
    from transformers import GenerationConfig

    model, tok = lm
    prompts = [tok(p)["input_ids"] for p in PROMPTS] * 2
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=0)
    clean = LocalSampler(model, tok).generate(prompts, params)
    own = model.generation_config
    shipped = GenerationConfig(repetition_penalty=3.0, min_p=0.5, suppress_tokens=[tok.eos_token_id])
    model.generation_config = shipped
    try:
        gens = LocalSampler(model, tok).generate(prompts, params)
        assert model.generation_config is shipped  # put back
    finally:
        model.generation_config = own
    assert [(g.completion_ids, g.logprobs) for g in gens] == [(g.completion_ids, g.logprobs) for g in clean]
    for g in gens:
        ref = recompute(model, g.prompt_ids, g.completion_ids, params)
        assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-4)

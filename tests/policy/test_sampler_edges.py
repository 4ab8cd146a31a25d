"""Edges of sampling exactness (posttrain/policy/_sampler.py, _fast.py, _sampling.py): whatever the
checkpoint's own generation config says, however odd the drafts or the temperature, a sampler returns
tokens drawn from ``softmax(top_p(top_k(logits / T)))`` and their log-probs under it, or a
``UserError`` -- never a silently different distribution, never a NaN logprob.

Each case failed before its fix (commit messages give the figures).
"""


import dataclasses
import math

import pytest
import torch
from _tiny_lm import TEST_DEVICE, tiny_llama
from test_sampler_conformance import recompute

from posttrain.errors import UserError
from posttrain.policy import FastSampler, LocalSampler, SamplingParams, SpecConfig, build_char_tokenizer
from posttrain.policy._sampling import MIN_TEMPERATURE

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


def test_a_temperature_that_overflows_the_logits_is_refused(lm):
    """At 1e-38, ``logits / T`` overflowed fp32: FastSampler returned NaN logprobs (into the loss),
    LocalSampler raised a RuntimeError. Now a ``UserError`` naming the field; the smallest
    temperature allowed samples with finite logprobs (the greedy completion, here)."""
    model, tok = lm
    for t in (1e-38, 1e-6):
        with pytest.raises(UserError, match="temperature"):
            SamplingParams(temperature=t)
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    cold = FastSampler(model, tok).generate(prompts, SamplingParams(temperature=MIN_TEMPERATURE, max_new_tokens=6, seed=0))
    greedy = FastSampler(model, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert all(math.isfinite(x) for g in cold for x in g.logprobs)
    assert [g.completion_ids for g in cold] == [g.completion_ids for g in greedy]


def test_a_previous_rollout_with_ids_the_model_cannot_emit_is_reused_up_to_them(lm):
    """Rollout reuse with a previous completion holding an id outside the model's vocabulary (another
    tokenizer's rollout, a negative id) raised IndexError from the gather of its draft probability.
    Such a token has probability 0, so it is never accepted: the draft ends before it, and the
    samples are exactly those of no draft at all where it comes first."""
    model, tok = lm
    vocab = model.get_output_embeddings().weight.shape[0]
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=0)
    greedy = FastSampler(model, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=8))
    plain = FastSampler(model, tok).generate(prompts, params)
    first = FastSampler(model, tok).generate(prompts, params, previous=[(vocab,), (-1,), (vocab + 7, 5), None])
    assert [(g.completion_ids, g.logprobs) for g in first] == [(g.completion_ids, g.logprobs) for g in plain]
    later = [(*g.completion_ids[:3], vocab, *g.completion_ids[3:]) for g in greedy]
    for g in FastSampler(model, tok).generate(prompts, params, previous=later):
        ref = recompute(model, g.prompt_ids, g.completion_ids, params)
        assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-4)


@pytest.mark.parametrize("spec", [SpecConfig(ngram=False, reuse_len=3), SpecConfig(draft_len=2, reuse_len=2)],
                         ids=["reuse3", "reuse2-draft2"])
def test_rollout_reuse_never_verifies_more_than_reuse_len(lm, spec):
    """Reuse verified REUSE_START = 8 tokens first whatever ``reuse_len`` said, while each step draws
    1 + max(draft_len, reuse_len) + 1 uniforms a row: below 8 the 8th draft's acceptance uniform was
    also the one that sampled the next token (reuse_len 4, T 0.1: chi-square p = 1e-20 against plain
    sampling, 4,000 rows; 0.06-0.97 after), or there were too few (reuse_len 2, draft_len 2: a
    RuntimeError). Now at most reuse_len a step; logprobs stay the target's."""
    model, tok = lm
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    greedy = FastSampler(model, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=16))
    sampler = FastSampler(model, tok, speculation=spec)
    params = SamplingParams(temperature=0.05, max_new_tokens=16, seed=0)  # drafts all but always accepted
    for prompt, g in zip(prompts, greedy, strict=True):  # one row a call: its steps are its own
        before = dataclasses.replace(sampler.stats)
        [out] = sampler.generate([prompt], params, previous=[g.completion_ids])
        steps, drafted = sampler.stats.steps - before.steps, sampler.stats.reuse_drafted - before.reuse_drafted
        assert drafted <= 1 + spec.reuse_len * steps  # 1: the first token, verified on the prefill
        ref = recompute(model, out.prompt_ids, out.completion_ids, params)
        assert torch.allclose(torch.tensor(out.logprobs, dtype=torch.float64), ref, atol=1e-4)
    assert sampler.stats.reuse_accepted > 0


@pytest.mark.parametrize("window", [4, 40])
def test_drafts_on_a_sliding_window_model_keep_its_logprobs(window):
    """transformers masks a sliding window by cache slot, and a rejected draft leaves a hole in the
    cache: holes inside the window pushed earlier tokens out of it (window 4: logprobs 2.2 away from a
    teacher-forced forward pass; 50: 0.37). Drafts are now fed only while the whole cache stays shorter
    than the window (40: some steps still draft)."""
    from transformers import MistralConfig, MistralForCausalLM

    tok = build_char_tokenizer()
    config = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                           sliding_window=window, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval().to(TEST_DEVICE)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    prompts = [tok(p)["input_ids"] for p in ["abcabcabcabc", "1+1=", "0123456789 0123456789"]] * 2
    params = SamplingParams(temperature=0.7, max_new_tokens=16, seed=0)
    sampler = FastSampler(model, tok, speculation=SpecConfig(tail_rows=100))
    for g in sampler.generate(prompts, params):
        ref = recompute(model, g.prompt_ids, g.completion_ids, params)
        assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-4), window
    assert (sampler.stats.drafted > 0) == (window == 40)

"""Speculation and rollout reuse read as an attacker would: the drafts come from a stale policy (an
older model, or this model before an update), so whatever the sampler returns must still be the
*current* model's -- its logprobs (one full forward pass, within 1e-5) and, greedy, its completion,
length and stop reason -- never the stale rollout's (posttrain/policy/_spec.py, _fast.py).

Standing cases: each passes with the code as it is; each fails if the sampler handed back a draft's
own logprob, kept a stale rollout's end (its EOS, its length cap), or let a draft run past the cap.
"""

import pytest
import torch
from _tiny_lm import TEST_DEVICE, tiny_llama

from posttrain.policy import FastSampler, SamplingParams, SpecConfig, build_char_tokenizer
from posttrain.policy._fast import ReuseSampler

PROMPTS = ["0123456789abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ+-=*/()", "1+1=", "abcabcabc"]


@pytest.fixture(scope="module")
def lms():
    """(current model, a stale model of other weights, tokenizer); the current one peaky enough that
    n-gram and reuse drafts are both accepted and rejected."""
    tok = build_char_tokenizer()
    new, old = tiny_llama(tok, seed=3).to(TEST_DEVICE), tiny_llama(tok, seed=5).to(TEST_DEVICE)
    with torch.no_grad():
        new.lm_head.weight.mul_(3.0)
    return new, old, tok


def full_forward_logprobs(model, prompt, completion, temperature):
    ids = torch.tensor([[*prompt, *completion]], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].double() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1).cpu()


def assert_targets(model, gens, temperature, cap, eos):
    for g in gens:
        ref = full_forward_logprobs(model, g.prompt_ids, g.completion_ids, temperature)
        assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-5)
        assert len(g.completion_ids) <= cap and eos not in g.completion_ids[:-1]  # nothing past an EOS
        if g.completion_ids[-1] == eos:
            assert g.stop_reason == "eos"
        elif len(g.completion_ids) == cap:
            assert g.stop_reason == "length"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_drafts_of_a_stale_policy_return_the_current_model_s_logprobs(lms, temperature):
    new, old, tok = lms
    prompts = [tok(p)["input_ids"] for p in PROMPTS] * 4
    stale = [g.completion_ids for g in FastSampler(old, tok).generate(
        prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=1))]
    spec = FastSampler(new, tok, speculation=SpecConfig(tail_rows=10_000, draft_len=4))
    gens = spec.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=20, seed=2), previous=stale)
    assert spec.stats.drafted > 100 and 0 < spec.stats.accepted < spec.stats.drafted  # accepted and rejected
    assert_targets(new, gens, temperature, 20, tok.eos_token_id)


def test_a_reused_rollout_from_before_an_update_is_not_replayed(lms):
    """ReuseSampler remembers the completions of the weights before an in-place update: afterwards the
    greedy completions (ids, length, stop reason) and the logprobs are the updated model's."""
    new, _, tok = lms
    model = tiny_llama(tok, seed=3).to(TEST_DEVICE)
    model.load_state_dict(new.state_dict())
    prompts = [tok(p)["input_ids"] for p in PROMPTS] * 2
    reuse = ReuseSampler(FastSampler(model, tok))
    before = reuse.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=30))
    with torch.no_grad():
        torch.manual_seed(0)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    after = reuse.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=30))
    plain = FastSampler(model, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=30))
    assert reuse.stats.reuse_drafted > 0
    assert [g.completion_ids for g in after] != [g.completion_ids for g in before]  # the update moved them
    assert [(g.completion_ids, g.stop_reason) for g in after] == [(g.completion_ids, g.stop_reason) for g in plain]
    assert_targets(model, after, 1.0, 30, tok.eos_token_id)


def test_a_stale_rollout_s_cap_is_not_its_end(lms):
    """A previous rollout cut at a smaller cap is accepted whole and then continued to the new cap; one
    longer than the new cap is cut there ("length"): a reused rollout never brings its own end along."""
    new, _, tok = lms
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    short = FastSampler(new, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert all(g.stop_reason == "length" for g in short)
    for cap in (12, 3):
        plain = FastSampler(new, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=cap))
        spec = FastSampler(new, tok, speculation=SpecConfig(tail_rows=10_000))
        got = spec.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=cap),
                            previous=[g.completion_ids for g in short])
        assert [(g.completion_ids, g.stop_reason) for g in got] == [(g.completion_ids, g.stop_reason) for g in plain]

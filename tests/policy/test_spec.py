"""Speculative sampling and rollout reuse leave the sampling distribution unchanged.

Distribution tests: 3,000 completions of 3 tokens per arm (fixed seeds), with and without the
speculative path; the category is the whole 3-token completion (its joint distribution), categories
with fewer than 10 expected draws pooled; a chi-square test of homogeneity must not reject at
alpha = 1e-3. Power, stated by measurement: at the same sample size the same test rejects (p <
1e-6) a rule that is wrong in a known small way -- on rejection, resample from p instead of the
residual, which raises the draft token's probability from p(d) to p(d)(2 - p(d)) -- so a bias of
that size would not pass. Logprobs are checked against one full forward pass within 1e-5.
"""

import math
from collections import Counter

import pytest
import torch
from _tiny_lm import TEST_DEVICE, tiny_llama

import posttrain.policy._fast as fast
from posttrain.errors import UserError
from posttrain.policy import FastSampler, SamplingParams, SpecConfig, build_char_tokenizer
from posttrain.policy._fast import ReuseSampler
from posttrain.policy._spec import ngram_draft, reuse_draft, sample_from, verify

N = 3000
PROMPTS = ["0123456789abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ+-=*/()", "1+1="]
"""The first holds most characters once: prompt lookup finds a 1-gram for most sampled tokens."""


@pytest.fixture(scope="module")
def lm():
    tok = build_char_tokenizer()
    model = tiny_llama(tok, seed=3).to(TEST_DEVICE)
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)  # top-1 ~0.4, top-3 ~0.64 a step: drafts are accepted and rejected
    return model, tok


def chi2_pvalue(a: Counter, b: Counter, *, min_expected: float = 10.0) -> float:
    """Chi-square test of homogeneity of two samples of categories (2 x K table), rare ones pooled."""
    na, nb = sum(a.values()), sum(b.values())
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    table, rest = [], [0, 0]
    for k in keys:
        total = a[k] + b[k]
        if total * min(na, nb) / (na + nb) >= min_expected:
            table.append([a[k], b[k]])
        else:
            rest[0] += a[k]
            rest[1] += b[k]
    if sum(rest) * min(na, nb) / (na + nb) >= min_expected:
        table.append(rest)
    stat = 0.0
    for ca, cb in table:
        row = ca + cb
        for obs, n in ((ca, na), (cb, nb)):
            exp = row * n / (na + nb)
            stat += (obs - exp) ** 2 / exp
    dof = len(table) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def completions(sampler, prompt_ids, params, seeds, **kw) -> Counter:
    out: Counter = Counter()
    for seed in seeds:
        for g in sampler.generate(prompt_ids, SamplingParams(**{**params, "seed": seed}), **kw):
            out[g.completion_ids] += 1
    return out


def previous_rollouts(sampler, prompt, params) -> list[tuple[int, ...]]:
    """One earlier completion per row, as a later epoch would hold them: half of them earlier samples,
    half the greedy completion (the most likely one: where a wrong rule would bias the most)."""
    old = [g.completion_ids for g in sampler.generate([prompt] * (N // 20), SamplingParams(**params, seed=7))]
    [mode] = sampler.generate([prompt], SamplingParams(**{**params, "temperature": 0.0}))
    return [x for pair in zip(old, [mode.completion_ids] * len(old), strict=True) for x in pair]


def full_forward_logprobs(model, prompt, completion, temperature):
    ids = torch.tensor([[*prompt, *completion]], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].double() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1).cpu()


def test_chi2_helper_on_known_samples():
    same = chi2_pvalue(Counter({"a": 500, "b": 500}), Counter({"a": 510, "b": 490}))
    shifted = chi2_pvalue(Counter({"a": 500, "b": 500}), Counter({"a": 600, "b": 400}))
    assert same > 0.5 and shifted < 1e-5


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_ngram_speculation_keeps_the_distribution(lm, temperature):
    model, tok = lm
    # a prompt that holds the model's most likely continuations of its own tail, so that prompt
    # lookup's drafts are often right (a random model rarely repeats its prompt otherwise)
    head = tok("1+1=")["input_ids"]
    greedy = FastSampler(model, tok).generate([head], SamplingParams(temperature=0.0, max_new_tokens=8))[0]
    prompt = [*head, *greedy.completion_ids, *head[1:]]
    prompts = [prompt] * (N // 10)
    params = {"temperature": temperature, "max_new_tokens": 3}
    plain = completions(FastSampler(model, tok), prompts, params, range(10))
    spec = FastSampler(model, tok, speculation=SpecConfig(tail_rows=10_000, draft_len=3, max_ngram=2))
    drafted = completions(spec, prompts, params, range(100, 110))
    assert spec.stats.drafted > 1000 and 0.1 < spec.stats.acceptance < 0.95, spec.stats
    assert chi2_pvalue(plain, drafted) > 1e-3


def test_rollout_reuse_keeps_the_distribution_and_accepts(lm):
    model, tok = lm
    [prompt] = [tok(p)["input_ids"] for p in PROMPTS[1:]]
    params = {"temperature": 1.0, "max_new_tokens": 3}
    base = FastSampler(model, tok)
    previous = previous_rollouts(base, prompt, params)
    plain = completions(base, [prompt] * (N // 10), params, range(10))
    reuse = FastSampler(model, tok)
    again = completions(reuse, [prompt] * (N // 10), params, range(200, 210), previous=previous)
    assert reuse.stats.reuse_drafted > 1000 and reuse.stats.reuse_accepted > 0.1 * reuse.stats.reuse_drafted
    assert chi2_pvalue(plain, again) > 1e-3


def test_the_test_has_power_against_a_biased_rule(lm, monkeypatch):
    """Resampling from p (not the residual) after a rejection is biased towards the draft; the same
    test on the same sample size rejects it."""
    model, tok = lm
    [prompt] = [tok(p)["input_ids"] for p in PROMPTS[1:]]
    params = {"temperature": 1.0, "max_new_tokens": 3}
    base = FastSampler(model, tok)
    previous = previous_rollouts(base, prompt, params)
    plain = completions(base, [prompt] * (N // 10), params, range(10))

    def biased(logp, drafts, n_draft, u, *, greedy):
        accepted, _ = verify(logp, drafts, n_draft, u, greedy=greedy)
        at = logp[torch.arange(logp.shape[0]), accepted].exp()
        return accepted, sample_from(at, u[:, -1])  # no residual

    monkeypatch.setattr(fast, "verify", biased)
    wrong = completions(FastSampler(model, tok), [prompt] * (N // 10), params, range(200, 210), previous=previous)
    assert chi2_pvalue(plain, wrong) < 1e-6


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_speculative_logprobs_are_the_targets(lm, temperature):
    model, tok = lm
    prompts = [tok(p)["input_ids"] for p in PROMPTS] * 4
    base = FastSampler(model, tok)
    previous = [g.completion_ids for g in base.generate(prompts, SamplingParams(max_new_tokens=24, seed=1))]
    spec = FastSampler(model, tok, speculation=SpecConfig(tail_rows=10_000))
    gens = spec.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=2), previous=previous)
    assert spec.stats.accepted > 0
    for g in gens:
        ref = full_forward_logprobs(model, g.prompt_ids, g.completion_ids, temperature or 1.0)
        assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-5)
    if temperature == 0:  # greedy with drafts is greedy
        plain = base.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=24))
        assert [g.completion_ids for g in gens] == [g.completion_ids for g in plain]


def test_a_fully_accepted_previous_rollout_stops_where_it_stopped(lm):
    """Greedy: the previous greedy completion is accepted whole, in a few verification steps (8, 16,
    32 tokens: the verified length doubles while everything is accepted)."""
    model, tok = lm
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    params = SamplingParams(temperature=0.0, max_new_tokens=40)
    old = FastSampler(model, tok).generate(prompts, params)
    reuse = FastSampler(model, tok)
    new = reuse.generate(prompts, params, previous=[g.completion_ids for g in old])
    assert [(g.completion_ids, g.stop_reason) for g in new] == [(g.completion_ids, g.stop_reason) for g in old]
    assert reuse.stats.steps <= 4 and reuse.stats.reuse_accepted == reuse.stats.reuse_drafted


def test_draft_helpers_and_config():
    assert ngram_draft([1, 2, 3, 1, 2], 2) == [3, 1]
    assert ngram_draft([9, 1, 2, 7, 7, 1, 2], 3, max_ngram=2) == [7, 7, 1]
    assert reuse_draft([], [4, 5], 5) == [4, 5] and reuse_draft([4, 5], [4, 5], 1) == []
    with pytest.raises(UserError, match="draft_len"):
        SpecConfig(draft_len=0)
    with pytest.raises(UserError, match="previous completions"):
        FastSampler(*_lm_pair()).generate([[1, 2]], SamplingParams(max_new_tokens=2), previous=[])
    counts = Counter(sample_from(torch.tensor([[1.0, 0.0, 3.0]] * 4000), torch.rand(4000)).tolist())
    assert counts[1] == 0 and math.isclose(counts[2] / 4000, 0.75, abs_tol=0.03)


def _lm_pair():
    tok = build_char_tokenizer()
    return tiny_llama(tok), tok


def test_reuse_sampler_drafts_a_prompt_with_its_last_completions(lm):
    model, tok = lm
    prompts = [tok(p)["input_ids"] for p in PROMPTS] * 3
    sampler = ReuseSampler(FastSampler(model, tok), capacity=1)
    first = sampler.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=16))
    assert sampler.stats.reuse_drafted == 0 and len(sampler.memory) == 1  # capacity 1: the last prompt kept
    sampler.capacity = 10
    sampler.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=16))
    again = sampler.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=16))
    assert [g.completion_ids for g in again] == [g.completion_ids for g in first]  # greedy: the same
    assert sampler.stats.reuse_accepted == sampler.stats.reuse_drafted > 0  # and all of it from the drafts

"""FastSampler's prefix sharing (posttrain/policy/_fast.py): a GRPO group's prompt is computed once,
on the lean forward and on transformers' own, and rows that share a prompt still sample apart."""

import pytest

from posttrain.policy import FastSampler, SamplingParams


@pytest.mark.parametrize("lean", [True, False])
def test_each_distinct_prompt_is_prefilled_once(char_lm, lean):
    model, tok = char_lm
    prompts = [tok(p)["input_ids"] for p in ("12+3=", "def f(x):\n", "The fox")]
    fed: list[tuple[int, ...]] = []  # the (rows, tokens) of each forward pass, from the embedding's input
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(tuple(args[0].shape)))
    try:
        gens = FastSampler(model, tok, lean=lean).generate([p for p in prompts for _ in range(8)],
                                                           SamplingParams(max_new_tokens=6, seed=0))
    finally:
        hook.remove()
    assert fed[0] == (3, max(map(len, prompts)))  # the prefill: 3 prompts, not 24 rows
    assert all(rows <= 24 and tokens == 1 for rows, tokens in fed[1:])  # then one token per running row
    assert len({g.completion_ids for g in gens[:8]}) > 1  # the 8 rows of a group sample apart
    assert [g.prompt_ids for g in gens] == [tuple(p) for p in prompts for _ in range(8)]


@pytest.mark.parametrize(("family", "heads", "kv_heads"),
                         [("llama", 4, 2), ("llama", 4, 4), ("llama", 4, 1), ("qwen2", 4, 2)])
def test_the_lean_forward_is_transformers_forward(family, heads, kv_heads):
    """The lean forward (its own attention over a transposed key cache) gives transformers' logits on
    the same calls: a left-padded prefill, rows selected, one-token steps and a 3-token step whose
    rejected positions become holes; every query-head to kv-head layout, and Qwen2's biases."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from posttrain.policy._lean import HFForward, LeanForward, make_forward

    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if family == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    torch.manual_seed(0)
    model = model_cls(config_cls(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=heads, num_key_value_heads=kv_heads,
                                 max_position_embeddings=128)).eval()
    lean, ref = make_forward(model), HFForward(model)
    assert isinstance(lean, LeanForward)
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])  # the first prompt left-padded
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        got, want = lean.prefill(ids, mask, positions), ref.prefill(ids, mask, positions)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        rows = torch.tensor([0, 0, 1])
        for f in (lean, ref):
            f.select(rows)
        mask, pos = mask[rows], torch.tensor([3, 3, 5])
        for fed in ([[1], [2], [3]], [[4, 5, 6], [7, 8, 9], [10, 11, 12]], [[13], [14], [15]]):
            fed = torch.tensor(fed)
            k = fed.shape[1]
            mask = torch.cat([mask, torch.ones_like(fed)], 1)
            step_pos = pos[:, None] + torch.arange(k)[None, :]
            torch.testing.assert_close(lean.step(fed, mask, step_pos), ref.step(fed, mask, step_pos),
                                       atol=1e-5, rtol=1e-5)
            accepted = torch.tensor([0, 1, 2])[:k] if k > 1 else torch.zeros(3, dtype=torch.long)
            mask[:, -k:] = (torch.arange(k)[None, :] <= accepted[:, None]).long()  # the rest: holes
            pos = pos + 1 + accepted


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_the_static_decode_samples_what_the_dynamic_one_does(char_lm, temperature, monkeypatch):
    """The fixed-shape decode (a CUDA graph on a GPU, run eagerly here) draws each row's tokens from the
    same uniforms over the same logits as the loop whose rows leave the batch: in float64 the same
    completions and logprobs, though here rows finish at different steps and stay in the batch, and
    the static cache, reserved for 2 completion tokens, grows (64 -> 128 positions) on the way."""
    import copy

    import torch

    import posttrain.policy._fast as fast

    monkeypatch.setattr(fast, "STATIC_RESERVE", 2)
    model, tok = char_lm
    model = copy.deepcopy(model).double()
    prompts = [tok(p)["input_ids"] for p in ("12+3=", "def f(x):\n", "a")]
    params = SamplingParams(temperature=temperature, max_new_tokens=100, seed=5)
    batch = [p for p in prompts for _ in range(6)]
    dynamic = FastSampler(model, tok, static=False).generate(batch, params)
    static = FastSampler(model, tok, static=True).generate(batch, params)
    assert {g.stop_reason for g in dynamic} == ({"eos", "length"} if temperature else {g.stop_reason for g in dynamic})
    assert [(g.completion_ids, g.stop_reason) for g in static] == [(g.completion_ids, g.stop_reason) for g in dynamic]
    assert max(len(g.prompt_ids) + len(g.completion_ids) for g in static) > 64  # the cache grew
    for a, b in zip(static, dynamic, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-9)


def test_a_decode_step_that_cannot_be_captured_runs_eagerly(char_lm, capsys):
    """Where capturing the CUDA graph fails (here: no CUDA), the static step says so once and computes
    the same logits eagerly: a failed capture costs speed, never the batch."""
    import torch

    from posttrain.policy._lean import LeanForward

    model, tok = char_lm
    if model.device.type == "cuda":
        pytest.skip("the capture succeeds on a GPU")
    ids = torch.tensor([tok("12+3=")["input_ids"]] * 2)
    mask, positions = torch.ones_like(ids), torch.arange(ids.shape[1])[None].repeat(2, 1)
    logits = []
    for graph in (True, False):
        fwd = LeanForward(model)
        with torch.no_grad():
            fwd.prefill(ids, mask, positions)
            step = fwd.static_step(ids.shape[1] + 4, mask, graph=graph)
            logits.append([step(torch.tensor([5, 6]), torch.tensor([ids.shape[1] + k] * 2)) for k in range(3)])
    assert all(torch.equal(a, b) for a, b in zip(*logits, strict=True))
    assert capsys.readouterr().err.count("CUDA graph capture of the decode step failed") == 1

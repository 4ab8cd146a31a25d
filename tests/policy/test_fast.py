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

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

"""The shared-prefix path's choice (``_shared_groups`` with ``ForwardCost``): attention counted, each
path forced gives the plain path's values and gradients.

The measured grid behind the constants (prompt 8-512 x completion 16-256 x G 4-16, 1 CPU thread) is
not rerun here: these cases pin points of it where the two paths differ by 1.5x or more."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer  # noqa: E402

from posttrain.train._logprobs import (  # noqa: E402
    ATTENTION_PAIR_OPS,
    ForwardCost,
    _shared_groups,
    _shared_plan,
    _shared_prefix_logprobs,
    token_logprobs,
)


def _grouped(prompt: int, completion: int, g: int, *, n_groups: int = 2, vocab: int = 90, seed: int = 0):
    """n_groups prompts of ``prompt`` tokens x g completions of completion/2..completion tokens, right-padded."""
    gen = torch.Generator().manual_seed(seed)
    rows, masks = [], []
    for _ in range(n_groups):
        p = torch.randint(4, vocab, (prompt,), generator=gen).tolist()
        for _ in range(g):
            n = int(torch.randint(max(1, completion // 2), completion + 1, (1,), generator=gen))
            rows.append(p + torch.randint(4, vocab, (n,), generator=gen).tolist())
            masks.append([0.0] * prompt + [1.0] * n)
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([m + [0.0] * (width - len(m)) for m in masks], dtype=torch.float64)
    return ids, attn, mask, torch.arange(n_groups).repeat_interleave(g)


def test_the_cost_of_a_config():
    from transformers import Qwen2Config

    config = Qwen2Config(vocab_size=8192, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4)
    cost = ForwardCost.of(config)
    # per token: 2 FLOPs x 4 layers x (q, k, v, o: 4 x 256^2; gate, up, down: 3 x 256 x 1024)
    assert cost.per_token == 2 * 4 * (4 * 256**2 + 3 * 256 * 1024)
    # per query-key pair: 4 layers x 4 heads x (q.k and p.v: 4 x head_dim 64, + mask and softmax)
    assert cost.per_pair == 4 * 4 * (4 * 64 + ATTENTION_PAIR_OPS)
    assert ForwardCost.of(None) == ForwardCost(per_token=1.0, per_pair=0.0)  # the token count alone


@pytest.mark.parametrize(
    ("shape", "packed_rows"),
    [
        ((512, 16, 8), 2),  # long prompt, short completions: one row a group (measured 0.09 s vs plain 0.63 s)
        ((64, 256, 16), 16),  # 8 rows of 2 completions a group (0.51 s; 2048-token rows 1.08 s; plain 0.61 s)
        ((8, 256, 16), None),  # short prompt, long completions: plain (0.50 s; 2048-token rows 1.12 s)
    ],
)
def test_the_choice_counts_attention(shape, packed_rows):
    """Measured on the embedded default (1 thread, forward + backward): the choice is the faster
    path; the token count alone (``cost=None``) packs every case."""
    from posttrain.policy._embedded import EmbeddedModelSpec, embedded_config

    ids, attn, mask, groups = _grouped(*shape)
    cost = ForwardCost.of(embedded_config(EmbeddedModelSpec()))
    plan = _shared_groups(ids, attn, mask, groups, cost)
    assert (None if plan is None else len(plan)) == packed_rows
    assert _shared_groups(ids, attn, mask, groups) is not None
    assert plan == _shared_groups(ids.clone(), attn.clone(), mask.clone(), groups.clone(), cost)  # deterministic


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_each_path_forced_gives_the_plain_values_and_gradients(attn_impl):
    """Plain, one packed row a group and up to two completions a packed row: the same log-probs and
    gradients, whichever the cost model would choose."""
    tok = make_tokenizer()
    model = make_model(tok, dtype=torch.float64)
    model.config._attn_implementation = attn_impl
    ids, attn, mask, groups = _grouped(5, 6, 4, vocab=len(tok), seed=1)
    plans = [_shared_plan(ids, attn, mask, groups, cap) for cap in (2048, 14)]
    assert len(plans[0]) == 2 < len(plans[1]) < 8  # each group in one row; in rows of 1-2 completions

    def run(score):
        model.zero_grad(set_to_none=True)
        lp = score()
        (lp * torch.linspace(-1, 1, lp.numel(), dtype=lp.dtype).reshape(lp.shape)).sum().backward()
        return lp.detach(), [p.grad.clone() for p in model.parameters()]

    lp_p, g_p = run(lambda: token_logprobs(model, ids, attn, loss_mask=mask))
    for plan in plans:
        lp_s, g_s = run(lambda plan=plan: _shared_prefix_logprobs(model, ids, mask, plan, 1.0)[0])
        assert torch.allclose(lp_s, lp_p, atol=1e-7) and (lp_s[mask == 0] == 0).all()
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(g_s, g_p, strict=True))
    lp_c, _ = run(lambda: token_logprobs(model, ids, attn, loss_mask=mask, groups=groups))  # the chosen path
    assert torch.allclose(lp_c, lp_p, atol=1e-7)

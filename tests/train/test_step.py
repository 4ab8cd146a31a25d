"""token_logprobs and policy_update on a tiny real Qwen2 model: exactness and micro-batch invariance."""

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer  # noqa: E402

from posttrain.algo import AGG_MODES  # noqa: E402
from posttrain.errors import ConfigError  # noqa: E402
from posttrain.train._logprobs import token_logprobs  # noqa: E402
from posttrain.train._step import LossSpec, PolicyBatch, policy_update  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _batch(tok, model, *, b=8, seed=0, with_ref=True) -> PolicyBatch:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(6, 14, (b,), generator=g)
    prompt_len = torch.randint(2, 5, (b,), generator=g)
    width = int(lengths.max())
    ids = torch.randint(4, len(tok), (b, width), generator=g)
    pos = torch.arange(width)[None]
    attn = (pos < lengths[:, None]).long()
    ids = torch.where(attn > 0, ids, torch.full_like(ids, tok.pad_token_id))
    loss_mask = ((pos >= prompt_len[:, None]) & (attn > 0)).float()
    with torch.no_grad():
        base = token_logprobs(model, ids, attn)
    old = (base + 0.3 * torch.randn(base.shape, generator=g)) * loss_mask  # behaviour policy != current
    ref = (base + 0.2 * torch.randn(base.shape, generator=g)) * loss_mask if with_ref else None
    adv = torch.randn(b, generator=g)
    return PolicyBatch(ids, attn, loss_mask, old, adv, ref_logp=ref)


def test_token_logprobs_match_full_log_softmax(tok):
    model = make_model(tok, dtype=torch.float64)
    batch = _batch(tok, model)
    lp = token_logprobs(model, batch.input_ids, batch.attention_mask)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    full = torch.log_softmax(logits, -1)[:, :-1].gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    expected = torch.cat([torch.zeros_like(full[:, :1]), full * batch.attention_mask[:, 1:]], dim=1)
    assert lp.shape == batch.input_ids.shape and (lp[:, 0] == 0).all()
    assert torch.allclose(lp, expected, atol=1e-6)
    # only the requested positions are scored, with the same values
    part = token_logprobs(model, batch.input_ids, batch.attention_mask, loss_mask=batch.loss_mask)
    assert torch.allclose(part, expected * batch.loss_mask, atol=1e-6)
    hot = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature=0.7)
    full_t = torch.log_softmax(logits / 0.7, -1)[:, :-1].gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    assert torch.allclose(hot[:, 1:], full_t * batch.attention_mask[:, 1:], atol=1e-6)


def _step(tok, spec, mbs, *, seed=0):
    model = make_model(tok, dtype=torch.float64)
    batch = _batch(tok, model, seed=seed)
    batch = PolicyBatch(
        **{k: (v.double() if v.is_floating_point() else v) for k, v in vars(batch).items() if v is not None}
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    metrics = policy_update(model, opt, batch, spec, micro_batch_size=mbs, max_grad_norm=1e9)
    return model, metrics


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batching_does_not_change_the_update(tok, agg):
    spec = LossSpec(
        agg=agg,
        norm_const=16.0 if agg == "seq_mean_token_sum_norm" else None,
        clip_high=0.28,
        kl_coef=0.05,
    )
    full, m_full = _step(tok, spec, mbs=8)
    micro, m_micro = _step(tok, spec, mbs=2)
    for (name, a), b in zip(full.named_parameters(), micro.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-12, rtol=0), name
    assert abs(m_full["loss"] - m_micro["loss"]) < 1e-12
    assert abs(m_full["grad_norm"] - m_micro["grad_norm"]) < 1e-9
    assert m_full["tokens"] == m_micro["tokens"] > 0
    for k in ("clip_frac", "approx_kl", "entropy", "kl"):
        assert abs(m_full[k] - m_micro[k]) < 1e-6, k  # metrics are fp32


def test_update_moves_weights_and_reports_metrics(tok):
    model = make_model(tok)
    before = copy.deepcopy(model.state_dict())
    batch = _batch(tok, model, with_ref=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    m = policy_update(model, opt, batch, LossSpec(), micro_batch_size=3, max_grad_norm=1.0)
    assert m["skipped"] == 0.0 and m["tokens"] == float(batch.loss_mask.sum())
    assert 0.0 <= m["clip_frac"] <= 1.0 and m["entropy"] > 0 and m["grad_norm"] > 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_empty_batch_skips_the_step(tok):
    model = make_model(tok)
    batch = _batch(tok, model, with_ref=False)
    empty = PolicyBatch(
        batch.input_ids, batch.attention_mask, torch.zeros_like(batch.loss_mask), batch.old_logp, batch.adv
    )
    before = copy.deepcopy(model.state_dict())
    m = policy_update(
        model,
        torch.optim.SGD(model.parameters(), lr=1.0),
        empty,
        LossSpec(),
        micro_batch_size=4,
        max_grad_norm=1.0,
    )
    assert m["skipped"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bad_specs_and_batches_are_rejected(tok):
    with pytest.raises(ConfigError, match="loss.agg"):
        LossSpec(agg="token-mean")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="norm_const"):
        LossSpec(agg="seq_mean_token_sum_norm")
    with pytest.raises(ConfigError, match="gspo"):
        LossSpec(policy_loss="gspo")
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="adv holds NaN"):
        PolicyBatch(z.long(), z.long(), z, z, torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="old_logp has shape"):
        PolicyBatch(z.long(), z.long(), z, torch.zeros(2, 4), torch.zeros(2))


def test_left_and_right_padding_give_the_same_logprobs(tok):
    model = make_model(tok, dtype=torch.float64)
    row = torch.tensor(tok("hello 12")["input_ids"])
    n, pad = row.shape[0], 3
    right = torch.cat([row, torch.zeros(pad, dtype=torch.long)])[None]
    left = torch.cat([torch.zeros(pad, dtype=torch.long), row])[None]
    ones, zeros = torch.ones(n, dtype=torch.long), torch.zeros(pad, dtype=torch.long)
    lp_right = token_logprobs(model, right, torch.cat([ones, zeros])[None])
    lp_left = token_logprobs(model, left, torch.cat([zeros, ones])[None])
    assert torch.allclose(lp_right[0, 1:n], lp_left[0, pad + 1 :], atol=1e-10)


def test_packed_logprobs_equal_each_example_alone(tok):
    from posttrain.algo import pack_sequences
    from posttrain.train._logprobs import packed_token_logprobs

    model = make_model(tok, dtype=torch.float64)
    seqs = [tok(t)["input_ids"] for t in ("hello", "ab 12", "xyz", "q?")]
    masks = [[0] * 2 + [1] * (len(s) - 2) for s in seqs]
    packed = pack_sequences(seqs, masks, max_len=10)
    assert packed.input_ids.shape[0] < len(seqs)  # really packed
    lp = packed_token_logprobs(model, packed)
    for r, members in enumerate(packed.example_index):
        for k, i in enumerate(members):
            ids = torch.tensor([seqs[i]])
            alone = token_logprobs(model, ids, torch.ones_like(ids), loss_mask=torch.tensor([masks[i]]))
            assert torch.allclose(lp[r][packed.seq_ids[r] == k], alone[0], atol=1e-10)


def test_truncated_importance_weights_in_the_loss(tok):
    from posttrain.train._step import policy_loss

    model = make_model(tok, dtype=torch.float64)
    b = _batch(tok, model, with_ref=False)
    b = PolicyBatch(
        **{k: (v.double() if v.is_floating_point() else v) for k, v in vars(b).items() if v is not None}
    )
    spec = LossSpec(tis_cap=2.0)
    plain, _ = policy_loss(model, b, LossSpec())
    same = PolicyBatch(**{**vars(b), "sampling_logp": b.old_logp})  # no staleness: every weight is 1
    assert torch.allclose(policy_loss(model, same, spec)[0], plain, atol=1e-12)
    stale = PolicyBatch(
        **{**vars(b), "sampling_logp": b.old_logp - 5.0 * b.loss_mask}
    )  # weights e^5 -> capped at 2
    assert torch.allclose(policy_loss(model, stale, spec)[0], 2.0 * plain, atol=1e-12)


def _grouped_batch(tok, model, *, groups=3, g=4, seed=0):
    """GRPO-shaped rows: `groups` prompts x `g` completions each, right-padded, with the carried
    group index of each row."""
    gen = torch.Generator().manual_seed(seed)
    rows, masks = [], []
    for _ in range(groups):
        prompt = torch.randint(
            4, len(tok), (int(torch.randint(5, 12, (1,), generator=gen)),), generator=gen
        ).tolist()
        for _ in range(g):
            comp = torch.randint(
                4, len(tok), (int(torch.randint(1, 7, (1,), generator=gen)),), generator=gen
            ).tolist()
            rows.append(prompt + comp)
            masks.append([0.0] * len(prompt) + [1.0] * len(comp))
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([m + [0.0] * (width - len(m)) for m in masks], dtype=torch.float64)
    return ids, attn, mask, torch.arange(groups).repeat_interleave(g)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prefix_path_equals_the_plain_path(tok, attn):
    from posttrain.train._logprobs import _shared_groups

    model = make_model(tok, dtype=torch.float64)
    model.config._attn_implementation = attn
    ids, attn_mask, mask, groups = _grouped_batch(tok, model)
    assert _shared_groups(ids, attn_mask, mask, groups) is not None  # the shared path really runs
    outs = []
    for carried in (groups, None):
        model.zero_grad(set_to_none=True)
        lp = token_logprobs(model, ids, attn_mask, loss_mask=mask, groups=carried)
        (lp * torch.linspace(-1, 1, lp.numel(), dtype=lp.dtype).reshape(lp.shape)).sum().backward()
        outs.append((lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (lp_s, g_s), (lp_p, g_p) = outs
    # fp64 model, but rotary / SDPA internals run partly in fp32: agreement is ~1e-9, not 1e-15
    assert torch.allclose(lp_s, lp_p, atol=1e-7) and (lp_s[mask == 0] == 0).all()
    for n in g_p:
        assert torch.allclose(g_s[n], g_p[n], rtol=1e-5, atol=1e-6), n


def test_shared_prefix_is_not_used_when_it_does_not_pay(tok):
    from posttrain.train._logprobs import _shared_groups

    model = make_model(tok)
    ids, attn, mask, groups = _grouped_batch(tok, model, groups=4, g=1)  # every prompt distinct
    assert _shared_groups(ids, attn, mask, groups) is None


def test_groups_are_carried_never_guessed_from_tokens(tok):
    """Rows with equal prompts but different carried groups are not merged, rows of one carried
    group with different prompts are scored alone, and without groups nothing is shared."""
    from posttrain.train._logprobs import _shared_groups
    from posttrain.train._step import _row_order

    model = make_model(tok)
    ids, attn, mask, groups = _grouped_batch(tok, model, groups=1, g=4)  # one prompt, 4 completions
    two = torch.tensor([0, 1, 0, 1])  # two carried groups over the same prompt
    assert [rows for _, rows in _shared_groups(ids, attn, mask, two)] == [[0, 2], [1, 3]]
    batch = PolicyBatch(ids, attn, mask.float(), mask.float(), torch.zeros(4), group=two)
    order = _row_order(batch).tolist()
    assert {frozenset(order[:2]), frozenset(order[2:])} == {frozenset({0, 2}), frozenset({1, 3})}
    other, attn2, mask2, _ = _grouped_batch(tok, model, groups=3, g=2, seed=5)  # prompts A A B B C C
    mixed = torch.tensor([0, 0, 1, 1, 1, 1])  # carried group 1 holds two prompts: its rows go alone
    shared = _shared_groups(other, attn2, mask2, mixed)
    assert shared is None or [rows for _, rows in shared] == [[0, 1], [2], [3], [4], [5]]
    with torch.no_grad():
        a = token_logprobs(model, other, attn2, loss_mask=mask2, groups=mixed)
        b = token_logprobs(model, other, attn2, loss_mask=mask2)
    assert torch.allclose(a, b, atol=1e-6)
    with pytest.raises(ValueError, match="PolicyBatch.group has shape"):
        PolicyBatch(ids, attn, mask.float(), mask.float(), torch.zeros(4), group=torch.zeros(3, dtype=torch.long))


def test_micro_batching_invariance_with_shared_prompts(tok):
    outs = []
    for mbs in (12, 3):
        model = make_model(tok, dtype=torch.float64)
        ids, attn, mask, groups = _grouped_batch(tok, model, seed=3)
        with torch.no_grad():
            old = token_logprobs(model, ids, attn, loss_mask=mask) + 0.1 * mask
        batch = PolicyBatch(ids, attn, mask, old, torch.linspace(-1, 1, ids.shape[0], dtype=torch.float64),
                            group=groups)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        outs.append(
            (policy_update(model, opt, batch, LossSpec(), micro_batch_size=mbs, max_grad_norm=1e9), model)
        )
    (m_full, full), (m_micro, micro) = outs
    assert abs(m_full["loss"] - m_micro["loss"]) < 1e-9
    for a, b in zip(full.parameters(), micro.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-8)


def test_shared_prefix_with_an_unscored_row(tok):
    model = make_model(tok, dtype=torch.float64)
    ids, attn, mask, groups = _grouped_batch(tok, model)
    mask[1] = 0  # an infra-error sample inside a group
    shared = token_logprobs(model, ids, attn, loss_mask=mask, groups=groups)
    plain = token_logprobs(model, ids, attn, loss_mask=mask)
    assert torch.allclose(shared, plain, atol=1e-7) and (shared[1] == 0).all()


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("per_token", [False, True])
def test_zero_advantage_rows_skipped_give_the_same_update(tok, agg, per_token):
    """Rows whose advantage is 0 (a group whose rewards are all equal) are not computed with
    ``skip_zero_advantage``: the same weights and loss (float64, AdamW), their tokens still counted;
    a batch of such rows alone still steps AdamW (its moments move the weights) exactly as without."""
    spec = LossSpec(agg=agg, norm_const=16.0 if agg == "seq_mean_token_sum_norm" else None, clip_high=0.28)
    model = make_model(tok, dtype=torch.float64)
    base = _batch(tok, model, with_ref=False)
    fields = {k: (v.double() if v.is_floating_point() else v) for k, v in vars(base).items() if v is not None}
    zero = torch.tensor([0, 1, 0, 0, 1, 1, 0, 1], dtype=torch.bool)
    adv = torch.where(zero, 0.0, fields["adv"])
    fields["adv"] = adv[:, None] * fields["loss_mask"] if per_token else adv

    def after(batch: PolicyBatch, skip: bool, steps: int = 2) -> tuple[nn.Module, dict[str, float]]:
        m = copy.deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
        for _ in range(steps):
            out = policy_update(m, opt, batch, spec, micro_batch_size=3, max_grad_norm=1.0, skip_zero_advantage=skip)
        return m, out

    batch = PolicyBatch(**fields)
    for b in (batch, PolicyBatch(**{**fields, "adv": torch.zeros_like(fields["adv"])})):
        (plain, m_plain), (skipped, m_skip) = after(b, False), after(b, True)
        for (name, x), y in zip(plain.named_parameters(), skipped.parameters(), strict=True):
            assert torch.allclose(x, y, atol=1e-12, rtol=0), name
        assert abs(m_plain["loss"] - m_skip["loss"]) < 1e-12 and abs(m_plain["grad_norm"] - m_skip["grad_norm"]) < 1e-9
        assert m_plain["tokens"] == m_skip["tokens"] and m_skip["skipped"] == 0.0 and "zero_advantage_rows" not in m_plain
        assert any(not torch.equal(x, y) for x, y in zip(plain.parameters(), model.parameters(), strict=True))
    assert m_skip["zero_advantage_rows"] == 8.0
    assert after(batch, True)[1]["zero_advantage_rows"] == 4.0

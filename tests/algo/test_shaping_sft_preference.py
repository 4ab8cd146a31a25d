"""Reward shaping, SFT packing, preference and value losses."""

import math

import pytest
import torch
import torch.nn.functional as F

from posttrain.algo import (
    PREFERENCE_LOSSES,
    block_causal_mask,
    bradley_terry_loss,
    frac_zero_std,
    informative_groups,
    pack_sequences,
    sft_loss,
    value_loss,
)


def test_informative_groups_and_frac_zero_std():
    nan = float("nan")
    r = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, nan], [nan, nan]])
    assert informative_groups(r).tolist() == [False, True, False, False]
    assert frac_zero_std(r) == 0.75


def test_sft_loss_is_masked_token_mean_nll():
    logp = torch.log(torch.tensor([[0.9, 0.5, 0.25], [0.1, 0.2, 0.4]]))
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    assert math.isclose(
        float(sft_loss(logp, mask)), -(math.log(0.5) + math.log(0.25) + math.log(0.4)) / 3, rel_tol=1e-6
    )


def test_packing_keeps_every_token_and_mask():
    seqs = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    masks = [[0, 1, 1], [0, 1], [0, 0, 1, 1], [0]]
    p = pack_sequences(seqs, masks, max_len=5)
    assert sorted(p.input_ids[p.seq_ids >= 0].tolist()) == list(range(1, 11))
    assert p.loss_mask.sum() == 5
    for r, members in enumerate(p.example_index):
        got = [p.input_ids[r][p.seq_ids[r] == k].tolist() for k in range(len(members))]
        assert got == [seqs[i] for i in members]
    with pytest.raises(ValueError, match="position 0"):
        pack_sequences([[1, 2]], [[1, 1]], max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        pack_sequences([[1, 2, 3]], [[0, 1, 1]], max_len=2)


def test_block_causal_mask_isolates_examples():
    m = block_causal_mask(torch.tensor([[0, 0, 1, 1, -1]]))[0, 0]
    assert m[3].tolist() == [False, False, True, True, False]
    assert m[4].tolist() == [False, False, False, False, True]


def test_dpo_sigmoid_and_ipo():
    pc, pr, rc, rr = (torch.tensor([v], dtype=torch.float64) for v in (-5.0, -7.0, -6.0, -6.5))
    h = (-5.0 + 6.0) - (-7.0 + 6.5)
    assert math.isclose(
        float(PREFERENCE_LOSSES["sigmoid"](pc, pr, rc, rr, beta=0.1)), -math.log(1 / (1 + math.exp(-0.1 * h)))
    )
    assert math.isclose(float(PREFERENCE_LOSSES["ipo"](pc, pr, rc, rr, beta=0.1)), (h - 5.0) ** 2)
    smooth = float(PREFERENCE_LOSSES["sigmoid"](pc, pr, rc, rr, beta=0.1, label_smoothing=0.1))
    assert math.isclose(
        smooth,
        float(-0.9 * F.logsigmoid(torch.tensor(0.1 * h)) - 0.1 * F.logsigmoid(torch.tensor(-0.1 * h))),
        rel_tol=1e-6,
    )


def test_bradley_terry():
    got = bradley_terry_loss(
        torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0]), margin=torch.tensor([0.0, 1.0])
    )
    assert torch.allclose(got, torch.tensor([math.log(1 + math.exp(-1)), math.log(1 + math.exp(1))]))


def test_value_loss_clipping():
    v = torch.tensor([[1.0, 0.1]])
    got = value_loss(v, torch.zeros(1, 2), torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 0.0]]), clip=0.2)
    assert torch.allclose(got, torch.tensor([[0.5 * (2.0 - 0.2) ** 2, 0.0]]))

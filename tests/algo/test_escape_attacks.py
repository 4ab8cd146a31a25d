"""How a failing episode escapes its negative advantage, read as the policy would.

- An infinite reward is refused: left out like an infra error's NaN, a failure scored -inf got advantage
  0 (its row trained with a push of 0) where a failure scored 0 got -0.71.
"""

from __future__ import annotations

import pytest
import torch

from posttrain.algo import ADVANTAGES

ESTIMATORS = [(name, std) for name in ADVANTAGES for std in (True, False)]


def test_an_infinite_reward_is_refused_not_left_out_like_an_infra_error() -> None:
    """[pass, wrong, X]: X scored -inf got advantage 0 from every estimator and its row, trained, a push of
    0 -- where X scored 0 got -0.71 (GRPO). An infinite reward is the reward's bug: a ValueError. NaN
    (infra) is still left out, the whole group masked by the trainer."""
    for name, std in ESTIMATORS:
        with pytest.raises(ValueError, match="finite or NaN"):
            ADVANTAGES[name](torch.tensor([[1.0, 0.0, -float("inf")]]), scale_by_std=std)
        with pytest.raises(ValueError, match="finite or NaN"):
            ADVANTAGES[name](torch.tensor([[float("inf"), 0.0, 0.0]]), scale_by_std=std)
        adv = ADVANTAGES[name](torch.tensor([[1.0, 0.0, float("nan")]]), scale_by_std=std)
        assert adv[0, 2] == 0 and adv[0, 1] < 0, (name, std)

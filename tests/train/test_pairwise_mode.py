"""The pass over preference pairs (``_pairwise.train_pairs``: DPO's and the reward model's) hands the
model back in the mode each of its modules came in.

It used to end in train mode. The reward model's documented use (posttrain/train/rm.py:
``train_rm`` then ``score_rows``) then scored with dropout on: a model loaded with
``from_pretrained`` is in eval mode, and the same rows scored twice got two different rewards.
The pipeline itself was not hit (its samplers switch to eval and back; ``RewardModelScorer``
reloads the saved model in eval mode). Covered: the reward model, plain and with LoRA merged
back (the peft wrapper is a new module in train mode: its flag is not the caller's), and a model
that came in train mode staying so (restored, not forced to eval). A tiny real Qwen2 model
(tests/algo/_tiny.py) with attention dropout 0.5.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_tokenizer, save_model  # noqa: E402

from posttrain.train._lora import LoraSpec  # noqa: E402
from posttrain.train.dpo import PreferencePair, encode_pairs  # noqa: E402
from posttrain.train.rm import RMConfig, make_reward_model, score_rows, train_rm  # noqa: E402

PAIRS = [PreferencePair(f"{a}+{b}=", str(a + b), str(a + b + 1)) for a in range(3) for b in range(3)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model(tmp_path_factory.mktemp("base"))


def _with_dropout(model: nn.Module, p: float = 0.5) -> nn.Module:
    for m in model.modules():
        if hasattr(m, "attention_dropout"):
            m.attention_dropout = p  # Qwen2 attention applies it only in train mode
    return model


@pytest.mark.parametrize("lora", [None, LoraSpec(r=4)], ids=["full", "lora"])
def test_a_reward_model_scores_the_same_rows_alike_after_training(base: Path, lora: LoraSpec | None) -> None:
    tok = make_tokenizer()
    rm = _with_dropout(make_reward_model(base))
    assert not rm.training  # from_pretrained: eval mode
    train_rm(rm, tok, PAIRS, RMConfig(batch_size=9, lora=lora))
    assert [n for n, m in rm.named_modules() if m.training] == []
    enc = encode_pairs(tok, PAIRS, max_len=64)
    rows = ([e.prompt_ids for e in enc], [e.chosen_ids for e in enc])
    first = score_rows(rm, *rows, pad_id=tok.pad_token_id)
    assert torch.equal(first, score_rows(rm, *rows, pad_id=tok.pad_token_id))


def test_a_model_that_came_in_train_mode_stays_in_train_mode(base: Path) -> None:
    tok = make_tokenizer()
    rm = make_reward_model(base).train()
    train_rm(rm, tok, PAIRS, RMConfig(batch_size=9))
    assert all(m.training for m in rm.modules())

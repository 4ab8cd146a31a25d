"""DPO and reward-model loops: smoke runs on a tiny real Qwen2 model (full weights and LoRA)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer, save_model  # noqa: E402

from posttrain.errors import ConfigError, UserError  # noqa: E402
from posttrain.train._lora import LoraSpec  # noqa: E402
from posttrain.train.dpo import DPOConfig, PreferencePair, encode_pairs, sequence_logps, train_dpo  # noqa: E402
from posttrain.train.rm import RMConfig, make_reward_model, score_rows, token_values, train_rm  # noqa: E402

PAIRS = [PreferencePair(f"{a}+{b}=", str(a + b), str(a + b + 1)) for a in range(4) for b in range(3)]
# a preference a tiny reward model learns in a few steps: polite answers beat rude ones
RM_PAIRS = [PreferencePair(f"q{i}?", "yes please", "no") for i in range(6)] + [
    PreferencePair(f"w{i}?", "ok thanks", "go away") for i in range(6)
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _margin(model, ref, tok):
    enc = encode_pairs(tok, PAIRS, max_len=64)
    with torch.no_grad():
        pc, pr = sequence_logps(model, enc, tok.pad_token_id)
        rc, rr = sequence_logps(ref, enc, tok.pad_token_id)
    return float(((pc - rc) - (pr - rr)).mean())


def test_dpo_increases_the_preference_margin(tok):
    model, ref = make_model(tok, seed=0), make_model(tok, seed=0)
    cfg = DPOConfig(beta=0.1, lr=5e-3, epochs=3, batch_size=6, micro_batch_size=3)
    metrics = train_dpo(model, ref, tok, PAIRS, cfg)
    assert metrics["steps"] == 2 and metrics["loss"] < 0.69  # log 2 at the start
    assert _margin(model, ref, tok) > 0.1  # 0 before training (model == ref)


def test_dpo_ipo_and_lora_merge_back(tok):
    model = make_model(tok, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = DPOConfig(loss="ipo", beta=0.5, lr=1e-2, epochs=2, batch_size=12, lora=LoraSpec(r=4))
    metrics = train_dpo(model, None, tok, PAIRS, cfg)
    assert metrics["loss"] == metrics["loss"]  # finite
    after = model.state_dict()
    assert set(after) == set(before)  # a plain model again: adapters merged and removed
    assert not torch.equal(
        after["model.layers.0.self_attn.q_proj.weight"], before["model.layers.0.self_attn.q_proj.weight"]
    )
    assert torch.equal(
        after["model.layers.0.mlp.up_proj.weight"], before["model.layers.0.mlp.up_proj.weight"]
    )


def test_dpo_bad_input(tok):
    with pytest.raises(ConfigError, match="dpo.loss"):
        DPOConfig(loss="hinge")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="max_len"):
        train_dpo(make_model(tok), None, tok, [PreferencePair("a" * 50, "b", "c")], DPOConfig(max_len=16))


def test_reward_model_learns_the_preference(tmp_path, tok):
    rm = make_reward_model(save_model(tmp_path))
    rm.config.pad_token_id = tok.pad_token_id
    metrics = train_rm(rm, tok, RM_PAIRS, RMConfig(lr=3e-3, epochs=6, batch_size=6))
    assert metrics["accuracy"] >= 0.9 and metrics["loss"] < 0.5
    enc = encode_pairs(tok, RM_PAIRS, max_len=64)
    chosen = score_rows(rm, [e.prompt_ids for e in enc], [e.chosen_ids for e in enc], pad_id=tok.pad_token_id)
    rejected = score_rows(
        rm, [e.prompt_ids for e in enc], [e.rejected_ids for e in enc], pad_id=tok.pad_token_id
    )
    assert float((chosen > rejected).float().mean()) >= 0.9
    ids = torch.tensor([enc[0].prompt_ids + enc[0].chosen_ids])
    v = token_values(rm, ids, torch.ones_like(ids))
    assert v.shape == ids.shape and torch.isclose(v[0, -1], chosen[0], atol=1e-5)


def test_reward_model_with_lora(tmp_path, tok):
    rm = make_reward_model(save_model(tmp_path))
    head_before = rm.score.weight.clone()
    train_rm(rm, tok, RM_PAIRS[:6], RMConfig(lr=1e-2, epochs=1, batch_size=6, lora=LoraSpec(r=4)))
    assert not hasattr(rm, "peft_config") and not torch.equal(rm.score.weight, head_before)


def test_make_reward_model_missing_path(tmp_path):
    with pytest.raises(UserError, match="cannot load reward model"):
        make_reward_model(tmp_path / "nope")

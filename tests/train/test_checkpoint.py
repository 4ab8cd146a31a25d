"""Checkpoints: bit-exact resume (weights, optimizer, schedule, RNG), corruption handling, keep-last-k."""

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer  # noqa: E402

from posttrain.errors import UserError  # noqa: E402
from posttrain.train.checkpoint import CheckpointError, load_latest, restore, save_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _setup(tok, seed):
    model = make_model(tok, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def _train_step(model, opt, sched):
    # data drawn from every RNG the trainer might use, so a wrong RNG restore changes the weights
    n = random.randint(3, 6) + int(np.random.randint(0, 3))
    ids = torch.randint(4, 40, (2, n))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


def _seed(s):
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def test_resume_is_bit_exact(tmp_path, tok):
    _seed(0)
    model, opt, sched = _setup(tok, seed=0)
    for _ in range(2):
        _train_step(model, opt, sched)
    ckpt_path = save_checkpoint(
        tmp_path,
        model=model,
        tokenizer=tok,
        optimizer=opt,
        scheduler=sched,
        step=2,
        sampler_state={"cursor": 7},
    )
    for _ in range(2):
        _train_step(model, opt, sched)
    uninterrupted = {k: v.clone() for k, v in model.state_dict().items()}
    next_draw = (random.random(), float(np.random.rand()), float(torch.rand(1)))

    _seed(123)  # a fresh process with other RNG states and other weights
    model2, opt2, sched2 = _setup(tok, seed=5)
    ckpt = load_latest(tmp_path)
    assert (
        ckpt is not None and ckpt.path == ckpt_path and ckpt.step == 2 and ckpt.sampler_state == {"cursor": 7}
    )
    restore(ckpt, model2, opt2, sched2)
    assert sched2.last_epoch == 2
    for _ in range(2):
        _train_step(model2, opt2, sched2)
    for k, v in model2.state_dict().items():
        assert torch.equal(v, uninterrupted[k]), k
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == next_draw
    assert (ckpt.model_dir / "model.safetensors").is_file() and (ckpt.model_dir / "tokenizer.json").is_file()


def _save(tmp_path, tok, step, **kw):
    model, opt, sched = _setup(tok, seed=step)
    return save_checkpoint(
        tmp_path, model=model, tokenizer=None, optimizer=opt, scheduler=sched, step=step, **kw
    )


def test_no_checkpoint_is_none(tmp_path):
    assert load_latest(tmp_path) is None


def test_corrupt_latest_is_a_clear_error_and_older_one_is_kept(tmp_path, tok):
    good = _save(tmp_path, tok, 1)
    bad = _save(tmp_path, tok, 2)
    weights = bad / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model/model.safetensors does not match its sha256") as e:
        load_latest(tmp_path)
    assert isinstance(e.value, UserError) and str(good) in str(e.value)
    assert good.is_dir()
    (tmp_path / "latest").write_text(json.dumps({"name": good.name, "step": 1}))
    assert load_latest(tmp_path).step == 1


def test_partial_checkpoint_and_leftover_temp_dirs(tmp_path, tok):
    _save(tmp_path, tok, 1)
    # a save killed before the rename leaves only a temp dir: invisible to load_latest, removed by the next save
    (tmp_path / ".tmp-step-000002-999").mkdir()
    (tmp_path / ".tmp-step-000002-999" / "junk").write_text("x")
    assert load_latest(tmp_path).step == 1
    # a checkpoint whose manifest is gone is partial
    (tmp_path / "step-000001" / "MANIFEST.json").unlink()
    with pytest.raises(CheckpointError, match="partial: MANIFEST.json is missing"):
        load_latest(tmp_path)
    _save(tmp_path, tok, 3)
    assert not (tmp_path / ".tmp-step-000002-999").exists()
    (tmp_path / "latest").write_text("{not json")
    with pytest.raises(CheckpointError, match="latest is corrupt"):
        load_latest(tmp_path)


def test_keep_last_k_and_resave_same_step(tmp_path, tok):
    for step in range(1, 6):
        _save(tmp_path, tok, step, keep_last=2)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000004", "step-000005"]
    _save(tmp_path, tok, 5, keep_last=2, extra={"finished": True})
    ckpt = load_latest(tmp_path)
    assert ckpt.step == 5 and ckpt.extra == {"finished": True}


def test_restore_into_a_different_model_fails_clearly(tmp_path, tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _save(tmp_path, tok, 1)
    other = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    with pytest.raises(CheckpointError, match="does not match the model"):
        restore(load_latest(tmp_path), other)


def test_non_json_sampler_state_is_rejected(tmp_path, tok):
    with pytest.raises(ValueError, match="JSON-serializable"):
        _save(tmp_path, tok, 1, sampler_state={"gen": object()})
    assert load_latest(tmp_path) is None


def test_lora_adapters_round_trip(tmp_path, tok):
    from posttrain.train._lora import LoraSpec, apply_lora

    model = apply_lora(make_model(tok, seed=0), LoraSpec(r=2))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_()
    saved = {k: v.clone() for k, v in model.state_dict().items() if "lora" in k}
    save_checkpoint(tmp_path, model=model, tokenizer=None, optimizer=None, scheduler=None, step=1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora" in n:
                p.zero_()
    restore(load_latest(tmp_path), model)
    for k, v in model.state_dict().items():
        if "lora" in k:
            assert torch.equal(v, saved[k]), k

"""Golden tests: our GRPO / DPO / SFT losses equal TRL 1.16's on the same tiny model and batch.

TRL is a test dependency; its trainers run offline on a locally built Qwen2 model (tests/algo/_tiny.py).
GRPO: ``GRPOTrainer._compute_loss`` on a hand-made batch for loss types grpo, bnpo, dr_grpo, dapo,
with a KL term (beta=0.04, k3, as a recipe's ``rl.kl_coef`` runs it: ``use_bias_correction_kl=False``,
TRL 1.16's default being the ratio-weighted KL, which posttrain does not offer; our clamp at +-10
does not bind here) and clip-higher; the loss values and the parameter gradients must agree within
1e-6. DPO: ``DPOTrainer.compute_loss``
(sigmoid). SFT: ``SFTTrainer.compute_loss`` on prompt/completion data (completion-only loss).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from _tiny import make_model, make_tokenizer, save_model

from posttrain.algo import dpo_sigmoid_loss, sft_loss
from posttrain.train._logprobs import token_logprobs
from posttrain.train._step import LossSpec, PolicyBatch, policy_loss

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

MAX_COMPLETION = 8
TOL = 1e-6

# TRL loss_type -> our (aggregation mode, norm_const); dapo's normalizer is num_items_in_batch
TRL_TO_OURS = {
    "grpo": ("seq_mean_token_mean", None),
    "bnpo": ("token_mean", None),
    "dr_grpo": ("seq_mean_token_sum_norm", float(MAX_COMPLETION)),
    "dapo": ("token_mean", None),
}


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def grpo_trainer(tmp_path_factory, tok):
    path = save_model(tmp_path_factory.mktemp("tiny"))
    args = trl.GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("grpo_out")),
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=MAX_COMPLETION,
        beta=0.04,
        epsilon=0.2,
        epsilon_high=0.28,
        use_bias_correction_kl=False,
        use_cpu=True,
        bf16=False,
        report_to=[],
    )
    ds = datasets.Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trl.GRPOTrainer(
            model=str(path),
            reward_funcs=[lambda completions, **kw: [float(len(c) % 2) for c in completions]],
            args=args,
            train_dataset=ds,
            processing_class=tok,
        )
    return trainer


def _grpo_batch(tok):
    g = torch.Generator().manual_seed(0)
    b, p = 4, 3
    prompt_ids = torch.randint(4, len(tok), (b, p), generator=g)
    completion_ids = torch.randint(4, len(tok), (b, MAX_COMPLETION), generator=g)
    lengths = torch.tensor([8, 5, 2, 6])
    completion_mask = (torch.arange(MAX_COMPLETION)[None] < lengths[:, None]).long()
    completion_ids = torch.where(
        completion_mask > 0, completion_ids, torch.full_like(completion_ids, tok.pad_token_id)
    )
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.2, -0.7, 0.4, -0.9]),
        "num_items_in_batch": completion_mask.sum(),
    }


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_type", list(TRL_TO_OURS))
def test_grpo_loss_and_gradient_equal_trl(grpo_trainer, tok, loss_type):
    trainer = grpo_trainer
    model = trainer.model
    model.eval()  # eval mode: TRL does not rescale by gradient-accumulation steps (dropout is 0 anyway)
    inputs = _grpo_batch(tok)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    loss_mask = torch.cat([torch.zeros_like(inputs["prompt_mask"]), inputs["completion_mask"]], dim=1).float()
    with torch.no_grad():  # behaviour and reference log-probs: the current ones, perturbed
        cur = token_logprobs(model, ids, attn, loss_mask=loss_mask)
    g = torch.Generator().manual_seed(1)
    old = (cur + 0.3 * torch.randn(cur.shape, generator=g)) * loss_mask
    ref = (cur + 0.2 * torch.randn(cur.shape, generator=g)) * loss_mask
    p = inputs["prompt_ids"].shape[1]
    trl_inputs = {**inputs, "old_per_token_logps": old[:, p:], "ref_per_token_logps": ref[:, p:]}

    trainer.loss_type = loss_type
    model.zero_grad(set_to_none=True)
    trl_loss = trainer._compute_loss(model, trl_inputs)
    trl_loss.backward()
    trl_grads = _grads(model)

    agg, norm_const = TRL_TO_OURS[loss_type]
    spec = LossSpec(
        clip_low=0.2,
        clip_high=0.28,
        agg=agg,
        norm_const=norm_const,
        kl_coef=0.04,
        kl_kind="k3",
    )
    batch = PolicyBatch(ids, attn, loss_mask, old, inputs["advantages"], ref_logp=ref)
    num_items = float(inputs["num_items_in_batch"]) if loss_type == "dapo" else None
    model.zero_grad(set_to_none=True)
    ours, _ = policy_loss(model, batch, spec, num_items=num_items)
    ours.backward()
    our_grads = _grads(model)
    model.zero_grad(set_to_none=True)

    assert abs(ours.item() - trl_loss.item()) < TOL, (ours.item(), trl_loss.item())
    assert trl_grads.keys() == our_grads.keys()
    worst = max(float((trl_grads[k] - our_grads[k]).abs().max()) for k in trl_grads)
    assert worst < TOL, worst


def test_dpo_sigmoid_loss_equals_trl(tmp_path, tok):
    ds = datasets.Dataset.from_dict(
        {"prompt": ["ab", "1+2=", "cd"], "chosen": ["cd", "3", "e"], "rejected": ["xyz", "45", "ff"]}
    )
    policy, ref = make_model(tok, seed=1), make_model(tok, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trl.DPOTrainer(
            model=policy,
            ref_model=ref,
            args=trl.DPOConfig(output_dir=str(tmp_path), beta=0.1, use_cpu=True, bf16=False, report_to=[]),
            train_dataset=ds,
            processing_class=tok,
        )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(3)])
    trl_loss = trainer.compute_loss(trainer.model, batch)

    def seq_logp(model):
        m = batch["completion_mask"].float()
        return (token_logprobs(model, batch["input_ids"], batch["attention_mask"], loss_mask=m) * m).sum(-1)

    pol = seq_logp(trainer.model)
    with torch.no_grad():
        rf = seq_logp(ref)
    n = pol.shape[0] // 2  # rows are [all chosen ; all rejected]
    ours = dpo_sigmoid_loss(pol[:n], pol[n:], rf[:n], rf[n:], beta=0.1).mean()
    assert abs(ours.item() - trl_loss.item()) < TOL


def test_sft_loss_equals_trl(tmp_path, tok):
    ds = datasets.Dataset.from_dict({"prompt": ["ab", "1+2=", "what?"], "completion": ["cd", "3", "no 42"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trl.SFTTrainer(
            model=make_model(tok, seed=3),
            args=trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[]),
            train_dataset=ds,
            processing_class=tok,
        )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(3)])
    trl_loss = trainer.compute_loss(trainer.model, batch)
    mask = (batch["labels"] != -100).float()
    assert mask[:, 0].sum() == 0
    logp = token_logprobs(trainer.model, batch["input_ids"], batch["attention_mask"], loss_mask=mask)
    ours = sft_loss(logp, mask)
    assert abs(ours.item() - trl_loss.item()) < TOL

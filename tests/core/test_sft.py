"""SFT: packed and padded batches give the same loss and gradient; training lowers the loss."""

import torch

from posttrain.algo.sft import sft_loss
from posttrain.policy import build_embedded_default, load_policy
from posttrain.train.sft import SFTParams, batch_logprobs, train_sft


def test_packing_gives_the_padded_loss_and_gradient(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    model = policy.model
    prompts = [policy.encode_prompt(p) for p in ("x-12=0. x=", "def add_3(x):\n", "0=x-7. x=")]
    completions = [policy.encode_completion(c) for c in ("\\boxed{12}", "    return x + 3\n", "\\boxed{7}")]
    results = []
    for pack_len in (None, 64):
        model.zero_grad()
        logp, mask = batch_logprobs(model, prompts, completions, pad_id=policy.tokenizer.pad_token_id,
                                    pack_len=pack_len)
        loss = sft_loss(logp, mask)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (padded, g1), (packed, g2) = results
    assert torch.allclose(padded, packed, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g1, g2, strict=True))


def test_training_lowers_the_loss(tmp_path):
    torch.manual_seed(0)
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    demos = [(f"x-{b}=0. x=", f"\\boxed{{{b}}}") for b in range(10, 40)]
    seen = []
    train_sft(policy, demos, SFTParams(steps=30, batch_size=8, lr=3e-3, pack_len=128), log=seen.append)
    assert seen[-1]["loss"] < seen[0]["loss"] * 0.6

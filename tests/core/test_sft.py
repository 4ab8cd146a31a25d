"""SFT: packed and padded batches give the same loss and gradient; training lowers the loss;
multi-turn demonstration episodes are trained on the model's turns only."""

import torch

from posttrain.algo.sft import sft_loss
from posttrain.policy import build_embedded_default, load_policy
from posttrain.train.sft import (
    SFTParams,
    demonstration_episode,
    encode_demonstrations,
    example_logprobs,
    train_sft,
)


def test_packing_gives_the_padded_loss_and_gradient(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    model = policy.model
    prompts = [policy.encode_prompt(p) for p in ("x-12=0. x=", "def add_3(x):\n", "0=x-7. x=")]
    completions = [policy.encode_completion(c) for c in ("\\boxed{12}", "    return x + 3\n", "\\boxed{7}")]
    results = []
    for pack_len in (None, 64):
        model.zero_grad()
        rows = [[*p, *c] for p, c in zip(prompts, completions, strict=True)]
        masks = [[0.0] * len(p) + [1.0] * len(c) for p, c in zip(prompts, completions, strict=True)]
        logp, mask = example_logprobs(model, rows, masks, pad_id=policy.tokenizer.pad_token_id, pack_len=pack_len,
                                      prompt_lens=[len(p) for p in prompts])
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


def test_episode_loss_is_on_the_model_turns_only(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    model, tok = policy.model, policy.tokenizer
    prompt, wrong = policy.encode_prompt("x-12=0. x="), policy.encode_completion("\\boxed{11}")
    feedback, right = tok(" wrong, try again:", add_special_tokens=False)["input_ids"], policy.encode_completion("\\boxed{12}")
    episode = demonstration_episode("t", [(prompt, wrong), (feedback, right)])
    rows, masks, _ = encode_demonstrations(policy, [episode])
    assert rows == [[*prompt, *wrong, *feedback, *right]]
    assert masks == [[0.0] * len(prompt) + [1.0] * len(wrong) + [0.0] * len(feedback) + [1.0] * len(right)]
    losses = []
    for pack_len in (None, 64):
        logp, mask = example_logprobs(model, rows, masks, pad_id=tok.pad_token_id, pack_len=pack_len)
        losses.append(sft_loss(logp, mask))
    ids = torch.tensor(rows)
    with torch.no_grad():  # by hand: NLL of the action tokens only, from one plain forward
        full = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
    action = torch.tensor(masks[0][1:]) > 0
    expected = -full[action].mean()
    assert torch.allclose(losses[0], expected, atol=1e-5) and torch.allclose(losses[1], expected, atol=1e-5)
    assert not torch.allclose(-full.mean(), expected, atol=1e-3)  # the observation tokens would change it


def test_one_turn_episode_trains_exactly_like_its_pair(tmp_path):
    path = build_embedded_default(tmp_path / "m")
    demos = [(f"x-{b}=0. x=", f"\\boxed{{{b}}}") for b in range(10, 16)]
    params = SFTParams(steps=3, batch_size=4, lr=3e-3)
    weights = []
    for as_episodes in (False, True):
        policy = load_policy(path)
        data = demos
        if as_episodes:
            data = [demonstration_episode(str(i), [(policy.encode_prompt(p), policy.encode_completion(r))])
                    for i, (p, r) in enumerate(demos)]
        last = train_sft(policy, data, params)
        weights.append((last["loss"], [p.detach().clone() for p in policy.model.parameters()]))
    (loss_a, wa), (loss_b, wb) = weights
    assert loss_a == loss_b and all(torch.equal(a, b) for a, b in zip(wa, wb, strict=True))



def test_a_bf16_model_trains_at_a_small_learning_rate(tmp_path, monkeypatch):
    """``model.dtype: bfloat16``: the optimizer steps fp32 master weights (train/_optim.py), so steps
    finer than bf16's precision add up; the old optimizer (torch's AdamW on the bf16 weights, put back
    here for the comparison) rounded each of them away."""
    import posttrain.train.sft as sft

    demos = [(f"x-{b}=0. x=", f"\\boxed{{{b}}}") for b in range(10, 40)]
    moved = {}
    for name in ("master", "plain"):
        if name == "plain":
            monkeypatch.setattr(sft, "adamw", lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.0))
        torch.manual_seed(0)
        policy = load_policy(build_embedded_default(tmp_path / name), dtype=torch.bfloat16)
        start = [p.detach().clone() for p in policy.model.parameters()]
        train_sft(policy, demos, SFTParams(steps=20, batch_size=8, lr=1e-5, pack_len=128))
        after = list(policy.model.parameters())
        assert all(p.dtype == torch.bfloat16 for p in after)
        moved[name] = sum(int((a != s).sum()) for a, s in zip(after, start, strict=True)) / sum(s.numel() for s in start)
    assert moved["master"] > 0.5 and moved["master"] > 3 * moved["plain"]  # measured: 82% and 15%

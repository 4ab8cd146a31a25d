"""SFT, DPO and reward-model training read as a user with bad data would hit them: each hole a
tiny real Qwen2 model (tests/algo/_tiny.py) showed, pinned with its own failing verdict."""

import copy
import dataclasses
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer, save_model  # noqa: E402

from posttrain.errors import ConfigError, UserError  # noqa: E402
from posttrain.policy import Policy  # noqa: E402
from posttrain.train._lora import LoraSpec, apply_lora  # noqa: E402
from posttrain.train.dpo import (  # noqa: E402
    DPOConfig,
    PreferencePair,
    encode_pairs,
    reference_logps,
    sequence_logps,
    train_dpo,
)
from posttrain.train.preference import RewardModelScorer, pair_from_group  # noqa: E402
from posttrain.train.rm import make_reward_model, score_rows  # noqa: E402
from posttrain.train.sft import SFTParams, demonstration_episode, train_sft  # noqa: E402
from posttrain.types import Rollout, Task, Verdict  # noqa: E402

PAIRS = [PreferencePair(f"{a}+{b}=", str(a + b), str(a + b + 1)) for a in range(4) for b in range(3)]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def test_a_demonstration_longer_than_pack_len_is_refused_before_the_first_step(tok):
    """Each step draws its batch at random, so one demonstration longer than ``sft.pack_len`` stopped
    the run with a ValueError traceback at whichever step first drew it (9 of 10 seeds, after 3 to
    34 steps; the tenth never drew it). Now: a one-line UserError naming it, before any step."""
    demos = [(f"{a}+{a}=", str(2 * a)) for a in range(6)] + [("1+1=", "2" * 40)]
    policy = Policy(make_model(tok), tok)
    before = [p.detach().clone() for p in policy.model.parameters()]
    steps: list[int] = []
    with pytest.raises(UserError, match=r"sft.pack_len: demonstration 6 \(prompt '1\+1='\) is 46 tokens"):
        train_sft(policy, demos, SFTParams(steps=5, batch_size=2, lr=1e-2, pack_len=16),
                  log=lambda m: steps.append(m["step"]))
    assert steps == [] and all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True))
    train_sft(policy, demos[:6], SFTParams(steps=1, batch_size=2, lr=1e-2, pack_len=16))  # the ones that fit train


def _dropout_model(tok, p: float = 0.5):
    model = make_model(tok)
    for m in model.modules():
        if hasattr(m, "attention_dropout"):
            m.attention_dropout = p  # Qwen2 attention reads it (functional dropout) only in train mode
    return model.train()


def test_the_dpo_reference_is_scored_without_dropout_whatever_mode_the_model_is_in(tok):
    """With LoRA the reference is the model itself, adapters off, in whatever mode it came in: a model
    in train mode (``from_config`` leaves it so) had its reference scored with dropout, up to 0.08 nats
    a pair off its eval-mode value at dropout 0.5, noise the loss then chases. Now eval mode, restored."""
    enc = encode_pairs(tok, PAIRS, max_len=64)
    model = _dropout_model(tok)
    with torch.no_grad():
        want_c, want_r = sequence_logps(copy.deepcopy(model).eval(), enc, tok.pad_token_id)
    lora = apply_lora(model, LoraSpec(r=4))
    got_c, got_r = reference_logps(lora, None, enc, tok.pad_token_id, micro_batch_size=4)
    assert lora.training  # restored
    assert torch.allclose(got_c, want_c, atol=1e-5) and torch.allclose(got_r, want_r, atol=1e-5)
    ref = _dropout_model(tok)  # a separate reference in train mode: the same, and left as it came
    got_c, _ = reference_logps(model, ref, enc, tok.pad_token_id, micro_batch_size=12)
    assert ref.training and torch.allclose(got_c, want_c, atol=1e-5)


def test_a_pair_that_prefers_a_completion_over_itself_is_refused(tok):
    """chosen == rejected gave DPO a flat log 2 loss (gradient norm 4e-9 over 2 epochs), a 0.0
    reward accuracy, and the same for the reward model (``encode_pairs`` is shared); pairs of the
    pipeline got one whenever one text both passed and failed (a verifier timing out under load)."""
    same = PreferencePair("1+1=", "2", "2")
    with pytest.raises(UserError, match=r"pair 1 \(prompt '1\+1='\): chosen and rejected are the same 2 tokens"):
        encode_pairs(tok, [PAIRS[0], same], max_len=64)
    task = Task(id="t", domain="math", prompt="1+1=", fields={}, reference="2")

    def rollout(text: str, outcome: str) -> Rollout:
        return Rollout("t", 0, (), (), (), text, "stop", Verdict(outcome=outcome, reward=float(outcome == "pass")))

    assert pair_from_group(task, [rollout("3", "pass"), rollout("3", "fail")]) is None
    assert pair_from_group(task, [rollout("2", "fail")]) is None  # the reference itself failed: nothing to prefer
    pair = pair_from_group(task, [rollout("3", "pass"), rollout("3", "fail"), rollout("4", "fail")])
    assert pair == PreferencePair("1+1=", "3", "4")


def test_the_reward_model_scores_an_unfinished_completion_as_it_was_trained(tok, tmp_path):
    """The reward model learns on completions that end with EOS (``encode_pairs``, a truncated pair
    sample too); RL scored a completion cut at the token cap at its last token, a position it never
    learned: on tiny reward models trained on 36 sums each, the wrong answer left unfinished outscored
    the right one on 89 of 216 tasks, finished on 42. Now it is scored with EOS appended (42 of 216)."""
    rm = make_reward_model(save_model(tmp_path / "base"))
    rm.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    scorer = RewardModelScorer(tmp_path / "rm", pad_id=tok.pad_token_id)
    [e] = encode_pairs(tok, [PreferencePair("1+1=", "2", "3")], max_len=64)

    def rollout(ids: tuple[int, ...]) -> Rollout:
        return Rollout("t", 0, e.prompt_ids, ids, (0.0,) * len(ids), "", "length")

    unfinished, finished, right = scorer([rollout(e.rejected_ids[:-1]), rollout(e.rejected_ids), rollout(e.chosen_ids)])
    assert e.rejected_ids[-1] == tok.eos_token_id and float(unfinished) == float(finished) != float(right)


def test_label_smoothing_with_ipo_is_refused_when_the_recipe_is_read():
    """dpo.loss ipo with dpo.label_smoothing > 0 was accepted, then ``posttrain run`` evaluated the base
    model, sampled pairs and ran the reference pass before the loss raised a ValueError (traceback,
    exit 1). Now a ConfigError when the config is built (exit 2, no run directory)."""
    with pytest.raises(ConfigError, match="dpo.label_smoothing: cDPO is defined for loss sigmoid only, not 'ipo'"):
        DPOConfig(loss="ipo", label_smoothing=0.1)
    assert DPOConfig(loss="sigmoid", label_smoothing=0.1).label_smoothing == 0.1 and DPOConfig(loss="ipo").beta > 0


def test_a_pair_over_max_len_names_the_recipe_key_and_its_prompt(tok):
    """The pipeline's dpo stage stopped with 'pair 0: 11 prompt + 11 tokens > max_len=16': no recipe
    key, no prompt to find it by. Now both. (It still fails only after sampling its pairs: the recipe
    is not checked against dpo.max_len when it is read.)"""
    with pytest.raises(UserError, match=r"pair 1 \(prompt '0\+1='\): 5 prompt \+ 40 completion tokens > dpo.max_len=32"):
        train_dpo(make_model(tok), None, tok, [PAIRS[0], PreferencePair("0+1=", "1" * 39, "2")], DPOConfig(max_len=32))


def test_an_empty_prompt_without_bos_is_refused_where_its_first_token_would_go_unscored():
    """A tokenizer without BOS (Qwen2's) and an empty prompt: the row starts with the completion, and
    position 0 is never scored. DPO's pair ('', '7', '8') then compared only log p(EOS | 7) with
    log p(EOS | 8), never 7 with 8; SFT counted the unscored token in its mean (packed: a ValueError
    mid-run). Now a UserError naming the pair or demonstration."""
    tok = make_tokenizer()
    tok.bos_token = None
    with pytest.raises(UserError, match=r"pair 0: the prompt '' encodes to no tokens"):
        encode_pairs(tok, [PreferencePair("", "7", "8")], max_len=64)
    policy = Policy(make_model(tok), tok)
    with pytest.raises(UserError, match=r"demonstration 1 \(prompt ''\): no prompt token before its first trained"):
        train_sft(policy, [("1+1=", "2"), ("", "7")], SFTParams(steps=1, batch_size=2, lr=1e-2))
    [e] = encode_pairs(tok, [PreferencePair("1", "7", "8")], max_len=64)  # one prompt token is enough
    assert len(e.prompt_ids) == 1


def test_a_demonstration_with_nothing_to_learn_is_refused(tok):
    """An episode without actions trains no token: SFT on it alone reported loss 0.0 (a perfect fit of
    nothing) and grad norm 0 at every step. Now a UserError naming it."""
    policy = Policy(make_model(tok), tok)
    with pytest.raises(UserError, match=r"demonstration 1 \(episode 'b'\): no token to learn"):
        train_sft(policy, [demonstration_episode("a", [([1, 5], [7, 2])]), demonstration_episode("b", [([1, 5, 6], [])])],
                  SFTParams(steps=1, batch_size=2, lr=1e-2))


def test_a_completion_scores_the_same_in_either_half_of_the_batch(tok, tmp_path):
    """Standing case (held before): chosen rows go first and rejected second, and DPO packs both after
    one shared prompt; a row's log-prob and reward-model score do not depend on that slot (swapped
    pairs give exactly the swapped values), so neither loss can learn the position for the label."""
    pairs = [PreferencePair(f"what is {a} plus {b}? ", str(a + b), str(a + b + 1) * 3) for a in range(3) for b in range(3)]
    enc = encode_pairs(tok, pairs, max_len=128)
    swapped = [dataclasses.replace(e, chosen_ids=e.rejected_ids, rejected_ids=e.chosen_ids) for e in enc]
    model = make_model(tok).eval()
    with torch.no_grad():
        (c, r), (c2, r2) = sequence_logps(model, enc, tok.pad_token_id), sequence_logps(model, swapped, tok.pad_token_id)
    assert torch.equal(c, r2) and torch.equal(r, c2) and not torch.equal(c, r)
    rm = make_reward_model(save_model(tmp_path)).eval()
    prompts = [e.prompt_ids for e in enc] * 2
    s = score_rows(rm, prompts, [e.chosen_ids for e in enc] + [e.rejected_ids for e in enc], pad_id=tok.pad_token_id)
    s2 = score_rows(rm, prompts, [e.rejected_ids for e in enc] + [e.chosen_ids for e in enc], pad_id=tok.pad_token_id)
    assert torch.allclose(s, s2.roll(len(enc)), atol=1e-6)

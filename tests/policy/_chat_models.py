"""Chat templates written here after Qwen2.5's and Qwen3's (no hub), and a character tokenizer with
Qwen's special tokens, for the chat-template tests."""

from __future__ import annotations

import string

# Qwen2.5-Instruct's template, its structure kept whole (tools in the system turn, <tool_call>
# blocks, consecutive tool results in one user turn as <tool_response>s); the default system text shortened.
QWEN2_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nCall with <tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Qwen3's rule for reasoning, reduced to it: an assistant turn keeps its <think> block only after the
# last user message, so a new user turn rewrites the earlier ones (episodes.md §3).
QWEN3_THINK_TEMPLATE = """\
{%- set ns = namespace(last_query=-1) %}
{%- for message in messages %}
    {%- if message.role == "user" %}{%- set ns.last_query = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query and reasoning %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
{#- calls are <tool_call> blocks, as in Qwen3 -#}
"""

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>"]  # added, not special: Qwen2.5 decodes them with skip_special_tokens


def qwen_char_tokenizer(template: str = QWEN2_TEMPLATE):
    """One token per character, Qwen's special tokens (EOS = ``<|im_end|>``, as in Qwen2.5-Instruct;
    no BOS) and ``<tool_call>``/``</tool_call>`` as single added tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    vocab = {t: i for i, t in enumerate(["<unk>", *chars])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")  # Oniguruma: (?m) lets . match \n
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<|endoftext|>",
                                  eos_token="<|im_end|>")
    tok.chat_template = template
    return tok


def tiny_qwen2(tokenizer, *, seed: int = 0):
    """A 2-layer Qwen2 causal LM over ``tokenizer``, random weights."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def qwen_bpe_tokenizer(corpus: list[str], template: str = QWEN2_TEMPLATE, *, vocab_size: int = 400):
    """A byte-level BPE (Qwen's kind: merges such as "\\n\\n" and " Oslo"), trained here on ``corpus``,
    with the same special and added tokens as ``qwen_char_tokenizer``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=SPECIAL, show_progress=False)
    core.train_from_iterator(corpus, trainer)
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>")
    tok.chat_template = template
    return tok

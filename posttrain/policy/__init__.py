"""Model and tokenizer loading (transformers) and token-exact generation.

``Sampler`` is the token-level seam (ids in, sampled ids + logprobs + stop reason out) with two
backends, ``LocalSampler`` (a transformers model) and ``EndpointSampler`` (an OpenAI-compatible
server); ``Policy.generate`` is the local one behind a text interface. ``ChatTemplate`` renders
messages and tools with the tokenizer's chat template, builds the ids of observations to append
after sampled actions, and parses tool calls in the template's family.

>>> from posttrain.policy import build_embedded_default, load_policy
>>> # policy = load_policy(build_embedded_default("/tmp/m"))
"""

from posttrain.policy._chat import (
    TOOL_FAMILIES,
    ChatTemplate,
    ChatTemplateError,
    ToolCallParse,
    ToolFamily,
    detect_family,
    has_chat_template,
    parse_tool_calls,
    prompt_template,
    tool_result_message,
)
from posttrain.policy._embedded import EmbeddedModelSpec, build_char_tokenizer, build_embedded_default
from posttrain.policy._endpoint import EndpointSampler
from posttrain.policy._policy import (
    CHAT_RECORD,
    ChatSetting,
    ModelFacts,
    Policy,
    chat_unusable,
    inspect_model,
    load_policy,
    record_chat,
    recorded_chat,
    resolve_chat,
)
from posttrain.policy._sampler import Generation, LocalSampler, Sampler, SamplingParams, process_logits

__all__ = [
    "CHAT_RECORD",
    "TOOL_FAMILIES",
    "ChatSetting",
    "ChatTemplate",
    "ChatTemplateError",
    "EmbeddedModelSpec",
    "EndpointSampler",
    "Generation",
    "LocalSampler",
    "ModelFacts",
    "Policy",
    "Sampler",
    "SamplingParams",
    "ToolCallParse",
    "ToolFamily",
    "build_char_tokenizer",
    "build_embedded_default",
    "detect_family",
    "has_chat_template",
    "inspect_model",
    "load_policy",
    "parse_tool_calls",
    "process_logits",
    "prompt_template",
    "record_chat",
    "recorded_chat",
    "resolve_chat",
    "chat_unusable",
    "tool_result_message",
]

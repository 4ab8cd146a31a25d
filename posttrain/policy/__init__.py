"""Model and tokenizer loading (transformers), token-exact generation, chat templates and tool calls.

``Sampler`` is the token-level seam (ids in, sampled ids + logprobs + stop reason out) with these
backends: ``LocalSampler`` (a transformers model), ``FastSampler`` (the same model in a lean loop:
prefix sharing, finished rows leave the batch, exact speculative sampling; ``ReuseSampler``: rollout
reuse), ``EndpointSampler`` (an OpenAI-compatible server), ``VllmSampler`` (``_vllm.py``: vLLM in a
process of its own) and ``RaySampler`` (rollout actors on a Ray cluster, ``RayRollout``); ``Policy.generate``
is the local one behind a text interface. ``ChatTemplate`` renders messages and tools with the
tokenizer's chat template and builds the ids of observations to append after sampled actions; the
tool-call codec (``decode_tool_calls``, ``parse_tool_calls``) reads calls in the template's family.

>>> from posttrain.policy import build_embedded_default, load_policy
>>> # policy = load_policy(build_embedded_default("/tmp/m"))

The chat template, the tool-call codec and the sampling seam (``Sampler``, ``SamplingParams``) import
no torch (a domain's CPU-budgeted check workers decode tool calls; a scripted agent's evaluation runs
episodes without a model); the model and sampler modules load on first use of one of their names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from posttrain.policy._chat import (
    ChatTemplate,
    ChatTemplateError,
    detect_family,
    has_chat_template,
    prompt_template,
)
from posttrain.policy._sampling import MIN_TEMPERATURE, Sampler, SamplingParams, context_length
from posttrain.policy._toolcalls import (
    MAX_CALLS,
    TOOL_FAMILIES,
    ToolCall,
    ToolCallError,
    ToolCallParse,
    ToolFamily,
    decode_tool_calls,
    parse_tool_calls,
    text_beside_tags,
    tool_result_message,
    tool_specs,
)
from posttrain.types import Generation

if TYPE_CHECKING:
    from posttrain.policy._embedded import (
        EmbeddedModelSpec,
        build_char_tokenizer,
        build_embedded_default,
        embedded_config,
    )
    from posttrain.policy._endpoint import EndpointSampler
    from posttrain.policy._fast import FastSampler, ReuseSampler, SpecStats
    from posttrain.policy._policy import (
        CHAT_RECORD,
        Architecture,
        ChatSetting,
        ModelFacts,
        Policy,
        PromptLengths,
        chat_unusable,
        count_parameters,
        hub_source,
        inspect_model,
        load_policy,
        measure_prompts,
        read_architecture,
        record_chat,
        recorded_chat,
        resolve_chat,
    )
    from posttrain.policy._ray import RayRollout, RaySampler, RolloutActor, VersionMismatch
    from posttrain.policy._sampler import LocalSampler, process_logits
    from posttrain.policy._spec import SpecConfig

_LAZY = {
    "posttrain.policy._embedded": ("EmbeddedModelSpec", "build_char_tokenizer", "build_embedded_default",
                                   "embedded_config"),
    "posttrain.policy._endpoint": ("EndpointSampler",),
    "posttrain.policy._fast": ("FastSampler", "ReuseSampler", "SpecStats"),
    "posttrain.policy._spec": ("SpecConfig",),
    "posttrain.policy._policy": ("CHAT_RECORD", "Architecture", "ChatSetting", "ModelFacts", "Policy", "PromptLengths",
                                 "chat_unusable", "count_parameters", "hub_source", "inspect_model", "load_policy",
                                 "measure_prompts", "read_architecture", "record_chat", "recorded_chat",
                                 "resolve_chat"),
    "posttrain.policy._ray": ("RayRollout", "RaySampler", "RolloutActor", "VersionMismatch"),
    "posttrain.policy._sampler": ("LocalSampler", "process_logits"),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    """The model and sampler names, imported on first use (they import torch)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'posttrain.policy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CHAT_RECORD",
    "MAX_CALLS",
    "MIN_TEMPERATURE",
    "TOOL_FAMILIES",
    "Architecture",
    "ChatSetting",
    "ChatTemplate",
    "ChatTemplateError",
    "EmbeddedModelSpec",
    "EndpointSampler",
    "FastSampler",
    "Generation",
    "LocalSampler",
    "ModelFacts",
    "Policy",
    "PromptLengths",
    "RayRollout",
    "RaySampler",
    "ReuseSampler",
    "RolloutActor",
    "Sampler",
    "SamplingParams",
    "SpecConfig",
    "SpecStats",
    "ToolCall",
    "ToolCallError",
    "ToolCallParse",
    "ToolFamily",
    "VersionMismatch",
    "build_char_tokenizer",
    "build_embedded_default",
    "chat_unusable",
    "context_length",
    "count_parameters",
    "decode_tool_calls",
    "text_beside_tags",
    "embedded_config",
    "detect_family",
    "has_chat_template",
    "hub_source",
    "inspect_model",
    "load_policy",
    "measure_prompts",
    "parse_tool_calls",
    "process_logits",
    "prompt_template",
    "read_architecture",
    "record_chat",
    "recorded_chat",
    "resolve_chat",
    "tool_result_message",
    "tool_specs",
]

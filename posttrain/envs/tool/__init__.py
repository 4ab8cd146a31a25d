"""The tool domain: OpenAI-format function calls checked against schemas and expected calls
(``_domain.py``: task schema, parsing, verifier), its generator (``_gen.py``), and tool-calling
episodes over the same tasks (``ToolEpisodeEnv``, ``_episode.py``; imported on first use, since it
needs the chat template and the episode runner).

>>> from posttrain.envs.tool import ENV, parse_tool_calls
>>> parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
[ToolCall(name='f', arguments={})]
"""

from __future__ import annotations

from typing import Any

from posttrain.envs.tool._domain import (
    ENV,
    NAME,
    ToolCall,
    ToolCallError,
    ToolEnv,
    call_problems,
    check_tool_calls,
    make_tool_verifier,
    match_calls,
    parse_tool_calls,
    tool_specs,
)

__all__ = [
    "ENV",
    "NAME",
    "ToolCall",
    "ToolCallError",
    "ToolEnv",
    "ToolEpisodeEnv",
    "action_limit",
    "call_problems",
    "demonstration_episode",
    "has_tool_episodes",
    "check_tool_calls",
    "make_tool_verifier",
    "match_calls",
    "parse_tool_calls",
    "tool_episode_envs",
    "tool_specs",
]


def __getattr__(name: str) -> Any:
    if name in ("ToolEpisodeEnv", "action_limit", "demonstration_episode", "has_tool_episodes", "tool_episode_envs"):
        from posttrain.envs.tool import _episode

        return getattr(_episode, name)
    raise AttributeError(f"module 'posttrain.envs.tool' has no attribute {name!r}")

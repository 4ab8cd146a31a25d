"""The tool domain: OpenAI-format function calls checked against schemas and expected calls
(``_domain.py``: task schema and the domain; ``_calls.py``: the checks, run in CPU-budgeted
workers), its generator (``_gen.py``), and tool-calling episodes over the same tasks
(``ToolEpisodeEnv``, ``_episode.py``). Calls are decoded by the tool-call codec of the model layer
(``posttrain.policy.decode_tool_calls``).

>>> from posttrain.envs.tool import ENV, match_calls
>>> from posttrain.policy import decode_tool_calls
>>> match_calls(decode_tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>'), [{"name": "f"}], False)
"""

from __future__ import annotations

from posttrain.envs.tool._calls import (
    CPU_BUDGET_S,
    NAME,
    call_mismatch,
    call_problems,
    check_tool_calls,
    make_tool_verifier,
    match_calls,
)
from posttrain.envs.tool._domain import ENV, ToolEnv
from posttrain.envs.tool._episode import ToolEpisodeEnv

__all__ = [
    "CPU_BUDGET_S",
    "ENV",
    "NAME",
    "ToolEnv",
    "ToolEpisodeEnv",
    "call_mismatch",
    "call_problems",
    "check_tool_calls",
    "make_tool_verifier",
    "match_calls",
]

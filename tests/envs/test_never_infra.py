"""No response can turn a verdict into an infra error: infra errors are dropped from the update
instead of scored 0, so a response that could cause one at will would dodge every penalty."""

from __future__ import annotations

import pytest

from posttrain.envs import get_domain

NASTY = [
    "",
    "\x00" * 100,
    "\ud800 lone surrogate",
    "x" * 1_000_000,
    "9" * 5000,
    '{"a": ' + "9" * 5000 + "}",
    "[" * 50_000 + "]" * 50_000,
    '{"a": ' * 5000 + "1" + "}" * 5000,
    "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
    "\\boxed{" + "9" * 5000 + "}",
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{\\sqrt{-1}^{\\infty}}",
    "\\boxed{\\begin{pmatrix}1 & 2\\end{pmatrix}}",
    "\\boxed{\\int_0^1 x\\,dx}",
    "\\boxed{10^{10^{10^{10}}}}",
    "\\boxed{\\}}",
    "\\boxed{\\\\}",
    "\\boxed{x_{_{_{_{_{_{1}}}}}}}",
    "<tool_call>" + "[" * 50_000 + "</tool_call>",
    '<tool_call>{"name": "f", "arguments": "' + "[" * 50_000 + '"}</tool_call>',
    '{"tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": '
    + "[" * 3000 + "]" * 3000 + "}}}]}",
    "```json\n" + '{"name": ' + "[" * 3000 + "]" * 3000 + "}\n```",
    '{"name": 1e309}',
]


@pytest.mark.parametrize("domain", ["math", "json", "tool"])
def test_nasty_responses_fail_and_are_never_infra_errors(domain: str) -> None:
    env = get_domain(domain)
    verify = env.make_verifier(None)
    (task,) = env.generate_tasks(1, seed=5)
    for i, response in enumerate(NASTY):
        v = verify(task, response)
        assert v.outcome == "fail", (domain, i, response[:60], v)

"""Task domains: one module per domain (math, code, json, tool) behind one ``Env`` protocol.

>>> from posttrain.envs import get_env, DOMAINS
>>> env = get_env("math")
>>> task = env.parse_task({"id": "t1", "domain": "math", "prompt": "1+1?", "answer": "2"}, "inline")
>>> env.render_prompt(task)
'1+1?'

``env.make_verifier(pool)`` builds the domain's ``Verifier`` (``Callable[[Task, str], Verdict]``);
only ``code`` needs a sandbox pool. Schemas are documented in docs/tasks.md.

Not here: task files and pools (``posttrain.tasks``), reward weighting (``posttrain.verify``).
"""

from __future__ import annotations

from typing import Any

from posttrain.envs._base import BatchVerifier, Env, Verifier, guard, task_to_record
from posttrain.errors import TaskError

DOMAINS: tuple[str, ...] = ("math", "code", "json", "tool")

_MODULES = {
    "math": "posttrain.envs.math_env",
    "code": "posttrain.envs.code_env",
    "json": "posttrain.envs.json_env",
    "tool": "posttrain.envs.tool_env",
}


def get_env(domain: str) -> Env:
    """The ``Env`` of ``domain``; raises ``TaskError`` for an unknown domain name."""
    import importlib

    if domain not in _MODULES:
        raise TaskError(f"unknown domain {domain!r}; expected one of {list(DOMAINS)}")
    return importlib.import_module(_MODULES[domain]).ENV


def model_prompt(task: Any) -> str:
    """The prompt text the model sees for ``task``, everywhere (SFT, RL, evaluation, generate): its
    domain renders it (tool schemas, json schema, ...); a task of no registered domain (a test
    double) is shown its ``prompt``. For math and code this is exactly ``task.prompt``."""
    return get_env(task.domain).render_prompt(task) if task.domain in _MODULES else task.prompt


def make_verifier(domain: str, pool: Any | None = None) -> Verifier:
    """Shorthand for ``get_env(domain).make_verifier(pool)``."""
    return get_env(domain).make_verifier(pool)


__all__ = ["DOMAINS", "BatchVerifier", "Env", "Verifier", "get_env", "guard", "make_verifier", "model_prompt", "task_to_record"]

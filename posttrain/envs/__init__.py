"""Task domains: one package per domain behind one ``Env`` protocol, looked up by name in a registry.

>>> from posttrain.envs import get_env, domain_names
>>> env = get_env("math")
>>> task = env.parse_task({"id": "t1", "domain": "math", "prompt": "1+1?", "answer": "2"}, "inline")
>>> env.render_prompt(task)
'1+1?'

``env.make_verifier(pool)`` builds the domain's ``Verifier`` (``Callable[[Task, str], Verdict]``);
only domains with ``env.needs_sandbox`` get a sandbox pool. Schemas are documented in docs/tasks.md.

Adding a domain: ``register_domain(name, env)`` in-process, or an entry point in the group
``posttrain.domains`` of any installed package (docs/tasks.md, "Adding a domain"). Every lookup
(``get_env``, task files, a recipe's sources, the quickstart shorthand) reads the registry.

Not here: task files and pools (``posttrain.tasks``), reward weighting (``posttrain.verify``).
"""

from __future__ import annotations

from typing import Any

from posttrain.envs._base import (
    BatchVerifier,
    Env,
    HasDemonstrationMistakes,
    HasDemonstrationShortcuts,
    HasTaskFamilies,
    RecordReader,
    TaskFamily,
    Verifier,
    fail,
    guard,
    parse_common,
    passed,
    task_to_record,
)
from posttrain.envs._registry import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    domain_families,
    domain_family,
    domain_names,
    find_task_family,
    get_env,
    is_registered,
    register_domain,
    task_families,
)

DOMAINS: tuple[str, ...] = tuple(BUILTIN)
"""posttrain's own domains; ``domain_names()`` lists every registered one (plugins included)."""


def model_prompt(task: Any) -> str:
    """The prompt text the model sees for ``task``, everywhere (SFT, RL, evaluation, generate): its
    domain renders it (tool schemas, json schema, ...); a task of no registered domain (a test
    double) is shown its ``prompt``. For math and code this is exactly ``task.prompt``."""
    return get_env(task.domain).render_prompt(task) if is_registered(task.domain) else task.prompt


def make_verifier(domain: str, pool: Any | None = None) -> Verifier:
    """Shorthand for ``get_env(domain).make_verifier(pool)``."""
    return get_env(domain).make_verifier(pool)


__all__ = [
    "DOMAINS",
    "ENTRY_POINT_GROUP",
    "BatchVerifier",
    "Env",
    "HasDemonstrationMistakes",
    "HasDemonstrationShortcuts",
    "HasTaskFamilies",
    "RecordReader",
    "TaskFamily",
    "Verifier",
    "domain_families",
    "domain_family",
    "domain_names",
    "fail",
    "find_task_family",
    "get_env",
    "guard",
    "is_registered",
    "make_verifier",
    "model_prompt",
    "parse_common",
    "passed",
    "register_domain",
    "task_families",
    "task_to_record",
]

"""Task domains: one package per domain behind one ``Domain`` protocol, looked up by name in a registry;
and ``Env``, the episode protocol a domain's multi-turn environments implement (with its lifecycle:
``close``, the optional ``Restorable``, the ``EpisodeContext`` they are built with, and ``ChatTurns``,
the conversation helper they share).

>>> from posttrain.envs import get_domain, domain_names
>>> domain = get_domain("math")
>>> task = domain.parse_task({"id": "t1", "domain": "math", "prompt": "1+1?", "answer": "2"}, "inline")
>>> domain.render_prompt(task)
'1+1?'

``domain.make_verifier(pool)`` builds the domain's ``Verifier`` (``Callable[[Task, str], Verdict]``);
only domains with ``domain.needs_sandbox`` get a sandbox pool. Schemas are documented in docs/tasks.md.
Every optional hook a domain may offer is a Protocol of ``_hooks.py`` (``HasBatchVerifier``,
``HasTaskFamilies``, ``HasEpisodes``, ...), checked with ``isinstance``.

Adding a domain: ``register_domain(name, domain)`` in-process, or an entry point in the group
``posttrain.domains`` of any installed package (docs/tasks.md, "Adding a domain"). Every lookup
(``get_domain``, task files, a recipe's sources, the quickstart shorthand) reads the registry.

Not here: task files and pools (``posttrain.tasks``), reward weighting (``posttrain.verify``), the
runner that drives episodes (``posttrain.rollout``).
"""

from __future__ import annotations

from typing import Any

from posttrain.envs._base import Domain, RecordReader, fail, guard, parse_common, passed, task_to_record
from posttrain.envs._env import Env, EpisodeContext, Restorable
from posttrain.envs._hooks import (
    HasBatchVerifier,
    HasCanaries,
    HasCapabilities,
    HasDemonstrationMistakes,
    HasDemonstrationShortcuts,
    HasDemonstrationSteps,
    HasEpisodeActions,
    HasEpisodes,
    HasGeneratorParams,
    HasLevels,
    HasTaskFamilies,
    HasViews,
    TaskFamily,
)
from posttrain.envs._registry import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    domain_families,
    domain_family,
    domain_listing,
    domain_names,
    find_task_family,
    get_domain,
    is_registered,
    model_prompt,
    register_domain,
    task_families,
)
from posttrain.envs._repair import (
    FEEDBACK_HEAD,
    FEEDBACK_ONLY,
    RepairEnv,
    VerdictCache,
    is_feedback_only,
    verify_with_retries,
)
from posttrain.envs._turns import ChatTurns
from posttrain.types import BatchVerifier, Observation, StepResult, Verifier

DOMAINS: tuple[str, ...] = tuple(BUILTIN)
"""posttrain's own domains; ``domain_names()`` lists every registered one (plugins included)."""

def make_verifier(domain: str, pool: Any | None = None) -> Verifier:
    """Shorthand for ``get_domain(domain).make_verifier(pool)``."""
    return get_domain(domain).make_verifier(pool)


__all__ = [
    "FEEDBACK_HEAD",
    "FEEDBACK_ONLY",
    "RepairEnv",
    "VerdictCache",
    "is_feedback_only",
    "verify_with_retries",
    "DOMAINS",
    "ENTRY_POINT_GROUP",
    "BatchVerifier",
    "ChatTurns",
    "Domain",
    "Env",
    "EpisodeContext",
    "HasBatchVerifier",
    "HasCanaries",
    "HasCapabilities",
    "HasDemonstrationMistakes",
    "HasDemonstrationShortcuts",
    "HasDemonstrationSteps",
    "HasEpisodeActions",
    "HasEpisodes",
    "HasGeneratorParams",
    "HasLevels",
    "HasTaskFamilies",
    "HasViews",
    "Observation",
    "RecordReader",
    "Restorable",
    "StepResult",
    "TaskFamily",
    "Verifier",
    "domain_families",
    "domain_family",
    "domain_listing",
    "domain_names",
    "fail",
    "find_task_family",
    "get_domain",
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

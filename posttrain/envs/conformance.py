"""What every registered domain must do, one check per function; each returns its problems (empty = ok).

tests/envs/test_domains.py runs every check over every registered domain (posttrain's own and any
plugin's), so a domain added by ``register_domain`` or an entry point is held to the same rules;
a plugin's own tests can call them too:

>>> from posttrain.envs import get_domain
>>> from posttrain.envs.conformance import check_surface, check_parse_errors
>>> check_surface("math") + check_parse_errors(get_domain("math"))
[]

- ``check_surface``: the ``Domain`` has every member, its ``name`` is the registered name;
- ``check_generated``: generated tasks are unique, of the domain, their references pass and their
  no-ops fail, with a total reward of exactly 0 under every weighting a recipe can set (``WEIGHTINGS``);
- ``check_exploits``: the domain ships exploit fixtures and each one is a ``fail`` (never a pass,
  never an ``infra_error``: a reward hack must not be retried into a pass or dropped unseen), and
  none earns more under any weighting than an honest failure can (``beats_an_honest_failure``);
- ``check_parse_errors``: a bad record is a ``TaskError`` that names the field (an unknown field,
  a bad id, a missing prompt, each domain field of the wrong type);
- ``check_round_trip``: generators are deterministic and ``parse_task(task_to_record(t)) == t``.

Verification goes through ``verify_pairs`` (``list[(task, response)] -> list[Verdict]``), which the
caller provides: the tests give it the execution service, the path training uses.

Not here: how fast a domain verifies (bench/), whether its tasks are good to learn from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from posttrain.envs._base import COMMON_KEYS, Domain, task_to_record
from posttrain.envs._registry import DOMAIN_MEMBERS, get_domain
from posttrain.errors import TaskError
from posttrain.types import Task, Verdict
from posttrain.verify.rewards import RewardWeights, combine

VerifyPairs = Callable[[Sequence[tuple[Task, str]]], list[Verdict]]

STARVED = "infra:starved"
"""The one infra error an exploit may get: a check starved of CPU by a loaded machine (measured by
its CPU time, which a response cannot fake); CPU-burning exploits run all at once here."""


WEIGHTINGS: tuple[RewardWeights, ...] = (
    RewardWeights(),
    RewardWeights(outcome=0.0, format=1.0), RewardWeights(outcome=0.0, process=1.0),
    RewardWeights(outcome=1.0, format=0.1), RewardWeights(outcome=1.0, process=0.5),
    RewardWeights(outcome=1.0, format=1.0, process=1.0),
    RewardWeights(outcome=1.0, format=1.0, process=1.0, length=1.0, max_tokens=64, overlong_buffer=16),
)
"""Every reward weighting a recipe can set (``reward:`` in the recipe, ``posttrain.verify.rewards``),
as far as a verdict can pay it: ``combine`` is linear in non-negative weights, so a verdict that
totals 0 under each component alone totals 0 under every mix of them; the length term is a penalty
in [-1, 0] and never pays (here measured with no token count, as a verdict alone is)."""


def _totals(verdict: Verdict) -> list[float]:
    return [combine(verdict, w).total for w in WEIGHTINGS]


def _said(verdict: Verdict) -> str:
    """What a verdict says, for a problem line: its feedback, or an infra error's detail (what crashed)."""
    return (verdict.feedback or str(verdict.evidence.get("detail", "")))[:200]


def beats_an_honest_failure(verdict: Verdict) -> str | None:
    """Why a failing verdict pays more than an honest failure can, or None (issue 21, reward item 7:
    failing differently never pays). An honest failure earns no ``outcome`` and never the whole of
    ``process`` (a failure that passed every check and failed anyway is a detected attack, e.g. a
    code candidate answering by call count); it may earn ``format``, the credit a well-formed wrong
    answer gets. Which failures are detected attacks, and earn nothing at all, is each domain's rule
    (tested in its own tests: code, tool, doc, files)."""
    raw = {name: float(verdict.components.get(name, 0.0)) for name in ("outcome", "format", "process")}
    if raw["outcome"] > 0 or raw["process"] >= 1 or raw["format"] > 1 or min(raw.values()) < 0:
        return f"components {raw}"
    return None


def check_surface(name: str) -> list[str]:
    """The registered ``Domain`` has every member of the protocol and answers to its name."""
    domain = get_domain(name)
    problems = [f"{name}: the Domain has no {m}" for m in DOMAIN_MEMBERS if not hasattr(domain, m)]
    if domain.name != name:
        problems.append(f"{name}: the Domain is named {domain.name!r}")
    if not isinstance(domain.needs_sandbox, bool):
        problems.append(f"{name}: needs_sandbox is {domain.needs_sandbox!r}, expected true or false")
    return problems


def check_generated(domain: Domain, verify_pairs: VerifyPairs, *, n: int = 16, seed: int = 3) -> list[str]:
    """``generate_tasks(n)``: n unique tasks of the domain, each with a reference that passes and a
    no-op (``noop_response``) that fails."""
    tasks = domain.generate_tasks(n, seed=seed)
    problems = []
    if len(tasks) != n or len({t.id for t in tasks}) != n:
        problems.append(f"{domain.name}: generate_tasks({n}) made {len(tasks)} tasks, {len({t.id for t in tasks})} ids")
    problems += [f"{domain.name}: generated task {t.id} has domain {t.domain!r}" for t in tasks if t.domain != domain.name]
    problems += [f"{domain.name}: generated task {t.id} has no reference" for t in tasks if t.reference is None]
    with_ref = [t for t in tasks if t.reference is not None]
    refs = verify_pairs([(t, str(t.reference)) for t in with_ref])
    noops = verify_pairs([(t, domain.noop_response(t)) for t in tasks])
    problems += [f"{domain.name}: reference of {t.id} is {v.outcome} ({v.error_class}: {_said(v)!r})"
                 for t, v in zip(with_ref, refs, strict=True) if not v.passed]
    problems += [f"{domain.name}: no-op response to {t.id} is {v.outcome}, expected fail"
                 for t, v in zip(tasks, noops, strict=True) if v.outcome != "fail"]
    problems += [f"{domain.name}: no-op response to {t.id} totals {max(_totals(v))} under some reward weighting, "
                 f"expected exactly 0 ({v.error_class}, components {dict(v.components)})"
                 for t, v in zip(tasks, noops, strict=True) if v.outcome == "fail" and any(_totals(v))]
    return problems


def check_exploits(domain: Domain, verify_pairs: VerifyPairs) -> list[str]:
    """The domain's exploit fixtures: at least one, names unique, each a ``fail``."""
    fixtures = domain.exploit_fixtures()
    if not fixtures:
        return [f"{domain.name}: no exploit fixtures (every domain ships the known ways to score without solving)"]
    problems = []
    if len({name for name, _, _ in fixtures}) != len(fixtures):
        problems.append(f"{domain.name}: exploit fixture names repeat")
    verdicts = verify_pairs([(task, response) for _, task, response in fixtures])
    problems += [f"{domain.name}: exploit {name!r} is {v.outcome} ({v.error_class})"
                 for (name, _, _), v in zip(fixtures, verdicts, strict=True)
                 if v.outcome != "fail" and v.error_class != STARVED]
    problems += [f"{domain.name}: exploit {name!r} ({v.error_class}) pays more than an honest failure: {why}"
                 for (name, _, _), v in zip(fixtures, verdicts, strict=True)
                 if v.outcome == "fail" and (why := beats_an_honest_failure(v))]
    return problems


def _wrong(value: Any) -> Any:
    """A value of another JSON type than ``value``."""
    if isinstance(value, str):
        return {"not": "a string"}
    if isinstance(value, list | tuple):
        return "not a list"
    if isinstance(value, dict):
        return "not an object"
    return ["not", "a", "scalar"]


def check_parse_errors(domain: Domain, task: Task | None = None) -> list[str]:
    """A bad record (from a generated task's record, one field spoiled) raises a ``TaskError`` that
    names the field: an unknown field, a non-string id, a missing prompt, and each domain field
    replaced by a value of another type."""
    task = task or domain.generate_tasks(1, seed=0)[0]
    record = json.loads(json.dumps(task_to_record(task)))
    cases: list[tuple[str, dict[str, Any]]] = [
        ("zz_unknown", {**record, "zz_unknown": 1}),
        ("id", {**record, "id": 7}),
        ("prompt", {k: v for k, v in record.items() if k != "prompt"}),
    ]
    cases += [(key, {**record, key: _wrong(value)}) for key, value in record.items() if key not in COMMON_KEYS]
    problems = []
    for field, bad in cases:
        try:
            domain.parse_task(bad, "conformance")
        except TaskError as e:
            message = str(e)
            if field not in message or "\n" in message or "conformance" not in message:
                problems.append(f"{domain.name}: bad {field!r}: the error does not name it in one line: {message[:160]!r}")
            continue
        except Exception as e:  # noqa: BLE001 - reported: a bad record must be a TaskError, not a crash
            problems.append(f"{domain.name}: bad {field!r}: {type(e).__name__} instead of a TaskError: {e}")
            continue
        problems.append(f"{domain.name}: bad {field!r} ({json.dumps(bad.get(field))[:60]}) was accepted")
    return problems


def check_round_trip(domain: Domain, *, n: int = 8, seed: int = 11) -> list[str]:
    """Same seed, same tasks; another seed, other tasks; every task survives its JSON record."""
    a, b = domain.generate_tasks(n, seed=seed), domain.generate_tasks(n, seed=seed)
    problems = []
    if a != b:
        problems.append(f"{domain.name}: generate_tasks is not deterministic for seed {seed}")
    if a == domain.generate_tasks(n, seed=seed + 1):
        problems.append(f"{domain.name}: generate_tasks ignores its seed")
    for t in a:
        record = json.loads(json.dumps(task_to_record(t)))
        if domain.parse_task(record, "round trip") != t:
            problems.append(f"{domain.name}: task {t.id} changes through its JSON record")
    return problems


__all__ = ["STARVED", "WEIGHTINGS", "VerifyPairs", "beats_an_honest_failure", "check_exploits", "check_generated",
           "check_parse_errors", "check_round_trip", "check_surface"]

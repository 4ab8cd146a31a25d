"""The domain registry: every lookup of a domain by name goes through here.

A domain is one ``Env`` (``posttrain.envs._base.Env``) registered under its name. Three ways in,
one table:

- posttrain's own domains, each a package of ``posttrain.envs`` named in ``BUILTIN``;
- a package outside posttrain declares an entry point in the group ``posttrain.domains``
  (``[project.entry-points."posttrain.domains"] mydomain = "my_pkg.domain:ENV"``), whose
  object is an ``Env`` or a zero-argument factory returning one;
- ``register_domain(name, env_or_factory)`` in-process (tests, notebooks, a script's own domain).

Domains are imported only when first looked up (the BFCL domain imports torch), so listing the
names (``domain_names()``) imports nothing. A registered name is final: registering another
``Env`` under a taken name is an error, registering the same one again is a no-op.

Task families are looked up lazily too (``find_task_family``): posttrain's own are declared in
``BUILTIN_FAMILIES`` (family -> domain, checked against the domain's ``task_families()`` whenever
it is read), so a recipe of built-in families imports those domains only, and a plugin that fails
to load cannot break it. Any other name is searched in the other registered domains in
registration order, each imported in turn, up to the first that offers it. Only the full listing
(``task_families()``, and an unknown family's error) imports every domain.

Not here: what a domain does (its package), which domains a recipe uses (``posttrain.tasks``).
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from typing import Any

from posttrain.envs._base import Env, HasTaskFamilies, TaskFamily
from posttrain.errors import TaskError

ENTRY_POINT_GROUP = "posttrain.domains"
"""The entry-point group a package outside posttrain declares its domains in."""

BUILTIN: dict[str, str] = {
    "math": "posttrain.envs.math:ENV",
    "code": "posttrain.envs.code:ENV",
    "json": "posttrain.envs.json:ENV",
    "tool": "posttrain.envs.tool._domain:ENV",
    "bfcl": "posttrain.envs.bfcl._domain:ENV",
}
"""posttrain's own domains: name -> ``module:attribute`` of its ``Env`` (the entry-point form)."""

BUILTIN_FAMILIES: dict[str, str] = {
    "quickstart-math": "math",
    "quickstart-code": "code",
    "humaneval": "code",
    "repair": "code",
}
"""posttrain's own task families: family -> the domain offering it. Declared here, not read from the
domains, so that looking one up imports its own domain only (a search in order would import every
domain before the code domain to find ``repair``, and a broken plugin would stop it); a domain whose
``task_families()`` disagrees with this table is an error when its families are read."""

ENV_MEMBERS = ("name", "needs_sandbox", "parse_task", "render_prompt", "make_verifier", "noop_response",
               "exploit_fixtures", "generate_tasks")
"""What an ``Env`` must have; checked when a domain is first resolved."""

_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_lock = threading.RLock()
_specs: dict[str, Env | Callable[[], Env] | str | Any] = {}
"""name -> an Env, a factory, a ``module:attr`` string, or an ``importlib.metadata.EntryPoint``."""
_resolved: dict[str, Env] = {}
_origin: dict[str, str] = {}
_loaded = False


def register_domain(name: str, env: Env | Callable[[], Env]) -> None:
    """Register ``env`` (an ``Env``, or a zero-argument factory called on first lookup) as ``name``.

    Raises ``ValueError`` for a malformed name or a name already taken by another ``Env``.

    >>> from posttrain.envs import get_env, register_domain
    >>> register_domain("math", get_env("math"))  # the same Env again: a no-op
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"domain name {name!r}: expected lowercase letters, digits, '-' or '_', "
                         f"starting with a letter, at most 40 characters")
    if not callable(env) and not _has_env_members(env):
        raise ValueError(f"domain {name!r}: expected an Env (with {', '.join(ENV_MEMBERS)}) or a factory "
                         f"returning one, got {type(env).__name__}")
    if _has_env_members(env) and not isinstance(env, type) and env.name != name:
        raise ValueError(f"domain {name!r}: its Env is named {env.name!r}; the names must agree")
    if name in BUILTIN_FAMILIES:
        raise ValueError(f"domain {name!r}: that name is a task family of domain {BUILTIN_FAMILIES[name]!r}")
    with _lock:
        _load_table()
        if name in _specs:
            if env is _specs[name] or env is _resolved.get(name):
                return
            raise ValueError(f"domain {name!r} is already registered (by {_origin[name]}); "
                             f"a registered name cannot be replaced")
        _specs[name] = env
        _origin[name] = "register_domain"


def domain_names() -> tuple[str, ...]:
    """The registered domains' names: posttrain's own first, then the others in registration order.

    >>> domain_names()[:4]
    ('math', 'code', 'json', 'tool')
    """
    with _lock:
        _load_table()
        return tuple(_specs)


def get_env(name: str) -> Env:
    """The ``Env`` registered as ``name``; ``TaskError`` (one line listing the registered ones) if none."""
    with _lock:
        _load_table()
        if name in _resolved:
            return _resolved[name]
        if name not in _specs:
            raise TaskError(f"unknown domain {name!r}; registered domains: {', '.join(_specs)}")
        env = _resolve(name, _specs[name])
        _resolved[name] = env
        return env


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered domain (without importing it)."""
    return name in domain_names()


def task_families() -> dict[str, tuple[str, TaskFamily]]:
    """Every registered domain's named task families: ``{family: (domain, family)}``. Imports every
    domain; a family name that is also a domain name, or offered by two domains, is an error."""
    out: dict[str, tuple[str, TaskFamily]] = {}
    for domain in domain_names():
        for family, make in domain_families(domain).items():
            if family in out:
                raise TaskError(f"domain {domain!r}: task family {family!r} is already a family of domain "
                                f"{out[family][0]!r}")
            out[family] = (domain, make)
    return out


def find_task_family(name: str) -> tuple[str, TaskFamily] | None:
    """``(domain, family)`` of the task family ``name``, or None; imports only what it needs (module
    docstring): a built-in family its own domain, any other name the other domains in registration
    order up to the first that offers it (where two plugins offer one name, the first registered
    wins here and ``task_families()`` refuses the pair).

    >>> find_task_family("quickstart-math")[0], find_task_family("no-such-family")
    ('math', None)
    """
    if name in BUILTIN_FAMILIES:
        domain = BUILTIN_FAMILIES[name]
        return domain, domain_families(domain)[name]
    for domain in domain_names():
        if domain not in BUILTIN and name in (families := domain_families(domain)):
            return domain, families[name]
    return None


def domain_families(domain: str) -> dict[str, TaskFamily]:
    """The task families of ``domain`` (importing that domain only; none if its Env offers none).

    Raises ``TaskError`` in one line naming the domain when its ``task_families()`` fails, when a
    built-in domain's families differ from ``BUILTIN_FAMILIES``, or when a plugin's family takes a
    domain's name or a built-in family's.
    """
    env = get_env(domain)
    if not isinstance(env, HasTaskFamilies):
        return {}
    where = _origin.get(domain, "registered")
    try:
        families = dict(env.task_families())
    except Exception as e:  # noqa: BLE001 - a broken plugin is named in one line
        raise TaskError(f"domain {domain!r} ({where}): task_families() failed: {type(e).__name__}: {e}") from None
    if domain in BUILTIN:
        declared = sorted(f for f, d in BUILTIN_FAMILIES.items() if d == domain)
        if sorted(families) != declared:
            raise TaskError(f"domain {domain!r}: task_families() offers {sorted(families)}, BUILTIN_FAMILIES "
                            f"declares {declared}; keep them in step")
        return families
    for family in families:
        if family in _specs or family in BUILTIN_FAMILIES:
            taken = "a domain" if family in _specs else f"a family of domain {BUILTIN_FAMILIES[family]!r}"
            raise TaskError(f"domain {domain!r} ({where}): task family {family!r} is already {taken}")
    return families


def domain_family(domain: str, family: str) -> TaskFamily | None:
    """Family ``family`` of ``domain`` (importing that domain only), or None if it has none."""
    return domain_families(domain).get(family)


def _load_table() -> None:
    global _loaded
    if _loaded:
        return
    for name, spec in BUILTIN.items():
        _specs[name], _origin[name] = spec, "posttrain"
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name} = {ep.value!r} ({ENTRY_POINT_GROUP})"
        if ep.name in _specs:
            if _specs[ep.name] == ep or ep.value == _specs[ep.name]:
                continue
            raise TaskError(f"{where}: domain {ep.name!r} is already registered (by {_origin[ep.name]})")
        if not _NAME_RE.fullmatch(ep.name):
            raise TaskError(f"{where}: domain name: expected lowercase letters, digits, '-' or '_'")
        if ep.name in BUILTIN_FAMILIES:
            raise TaskError(f"{where}: domain name {ep.name!r} is a task family of domain {BUILTIN_FAMILIES[ep.name]!r}")
        _specs[ep.name], _origin[ep.name] = ep, where
    _loaded = True


def _resolve(name: str, spec: Any) -> Env:
    where = _origin[name]
    try:
        if isinstance(spec, str):
            module, _, attr = spec.partition(":")
            obj: Any = getattr(importlib.import_module(module), attr)
        elif hasattr(spec, "load") and hasattr(spec, "group"):  # an importlib.metadata.EntryPoint
            obj = spec.load()
        else:
            obj = spec
        if isinstance(obj, type) or (not _has_env_members(obj) and callable(obj)):  # a class is a factory
            obj = obj()
    except Exception as e:  # noqa: BLE001 - a broken plugin is named in one line, never a traceback
        raise TaskError(f"domain {name!r} ({where}) failed to load: {type(e).__name__}: {e}") from None
    missing = [m for m in ENV_MEMBERS if not hasattr(obj, m)]
    if missing:
        raise TaskError(f"domain {name!r} ({where}): expected an Env, got {type(obj).__name__} "
                        f"without {', '.join(missing)}")
    try:
        own = obj.name
    except Exception as e:  # noqa: BLE001 - a broken plugin is named in one line, never a traceback
        raise TaskError(f"domain {name!r} ({where}): reading its Env's name failed: {type(e).__name__}: {e}") from None
    if own != name:
        raise TaskError(f"domain {name!r} ({where}): its Env is named {own!r}; the names must agree")
    return obj


def _has_env_members(obj: Any) -> bool:
    return all(hasattr(obj, m) for m in ENV_MEMBERS)

"""The domain registry: every lookup of a domain by name goes through here.

A domain is one ``Domain`` (``posttrain.envs._base.Domain``) registered under its name. Three ways in,
one table:

- posttrain's own domains, each a package of ``posttrain.envs`` named in ``BUILTIN``;
- a package outside posttrain declares an entry point in the group ``posttrain.domains``
  (``[project.entry-points."posttrain.domains"] mydomain = "my_pkg.domain:ENV"``), whose
  object is an ``Domain`` or a zero-argument factory returning one;
- ``register_domain(name, env_or_factory)`` in-process (tests, notebooks, a script's own domain);
- a namespace of many domains, ``NAMESPACES``: one provider lists its names (``rg/<generator>``
  for each reasoning-gym generator) without importing what they wrap, and resolves one on lookup.

Domains are imported only when first looked up (the BFCL domain imports torch), so listing the
names (``domain_names()``) imports nothing. A registered name is final: registering another
``Domain`` under a taken name is an error, registering the same one again is a no-op.

Task families are looked up lazily too (``find_task_family``), and each domain is the one source
of its families (``HasTaskFamilies.task_families()``; no table copies them): ``quickstart-<d>`` is
looked up in domain ``d`` alone; any other name is searched in the registered domains in
registration order (posttrain's own first, the families' owners math and code at their head),
each imported in turn, up to the first that offers it. So a recipe of posttrain's families imports
math and code at most, and a plugin that fails to load cannot break it. Only the full listing
(``task_families()``, and an unknown family's error) imports every domain.

Not here: what a domain does (its package), which domains a recipe uses (``posttrain.tasks``).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from posttrain.envs._base import Domain
from posttrain.envs._hooks import HasTaskFamilies, TaskFamily
from posttrain.errors import TaskError

ENTRY_POINT_GROUP = "posttrain.domains"

QUICKSTART = "quickstart-"
"""The prefix of the quickstart shorthand's families (``tasks.domains: [d]`` takes ``quickstart-d`` of
domain d): no domain's name starts with it."""
"""The entry-point group a package outside posttrain declares its domains in."""

BUILTIN: dict[str, str] = {
    "math": "posttrain.envs.math:ENV",
    "code": "posttrain.envs.code:ENV",
    "json": "posttrain.envs.json:ENV",
    "tool": "posttrain.envs.tool._domain:ENV",
    "bfcl": "posttrain.envs.bfcl._domain:ENV",
    "cad": "posttrain.envs.cad:ENV",
    "files": "posttrain.envs.files:ENV",
    "doc": "posttrain.envs.doc:ENV",
    "function": "posttrain.envs.function:ENV",
    "recall": "posttrain.envs.recall:ENV",
    "repo": "posttrain.envs.repo:ENV",
}
"""posttrain's own domains: name -> ``module:attribute`` of its ``Domain`` (the entry-point form)."""

NAMESPACES: dict[str, str] = {
    "rg": "posttrain.envs.rg:PROVIDER",
}
"""Namespaced providers: prefix -> ``module:attribute`` of an object with ``names()`` (its domains'
names without the prefix, read without importing what they wrap) and ``domain(name) -> Domain``;
``<prefix>/<name>`` resolves to ``provider.domain(name)`` on first lookup. Only posttrain's own:
``register_domain`` and entry points cannot take a name with a "/"."""

DOMAIN_MEMBERS = ("name", "needs_sandbox", "parse_task", "render_prompt", "make_verifier", "noop_response",
               "exploit_fixtures", "generate_tasks")
"""What an ``Domain`` must have; checked when a domain is first resolved."""

_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_lock = threading.RLock()
_specs: dict[str, Domain | Callable[[], Domain] | str | Any] = {}
"""name -> a Domain, a factory, a ``module:attr`` string, or an ``importlib.metadata.EntryPoint``."""
_resolved: dict[str, Domain] = {}
_origin: dict[str, str] = {}
_loaded = False


def register_domain(name: str, env: Domain | Callable[[], Domain]) -> None:
    """Register ``env`` (an ``Domain``, or a zero-argument factory called on first lookup) as ``name``.

    Raises ``ValueError`` for a malformed name or a name already taken by another ``Domain``.

    >>> from posttrain.envs import get_domain, register_domain
    >>> register_domain("math", get_domain("math"))  # the same Domain again: a no-op
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"domain name {name!r}: expected lowercase letters, digits, '-' or '_', "
                         f"starting with a letter, at most 40 characters")
    if not callable(env) and not _has_domain_members(env):
        raise ValueError(f"domain {name!r}: expected a Domain (with {', '.join(DOMAIN_MEMBERS)}) or a factory "
                         f"returning one, got {type(env).__name__}")
    if _has_domain_members(env) and not isinstance(env, type) and env.name != name:
        raise ValueError(f"domain {name!r}: its Domain is named {env.name!r}; the names must agree")
    if name.startswith(QUICKSTART):
        raise ValueError(f"domain {name!r}: names starting with {QUICKSTART!r} are task families (the quickstart "
                         f"shorthand's quickstart-<domain>)")
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


def domain_listing() -> str:
    """The registered domains for a message, a namespace as one item: ``math, code, ...,
    rg/<generator> (106 domains)``."""
    with _lock:
        _load_table()
        plain = [n for n in _specs if "/" not in n]
        spaced = [f"{p}/<{'generator' if p == 'rg' else 'name'}> ({sum(n.startswith(p + '/') for n in _specs)} domains)"
                  for p in NAMESPACES]
        return ", ".join(plain + spaced)


def get_domain(name: str) -> Domain:
    """The ``Domain`` registered as ``name``; ``TaskError`` (one line listing the registered ones) if none."""
    with _lock:
        _load_table()
        if name in _resolved:
            return _resolved[name]
        if name not in _specs:
            close = difflib.get_close_matches(name, list(_specs), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TaskError(f"unknown domain {name!r}{hint}; registered domains: {domain_listing()}")
        env = _resolve(name, _specs[name])
        _resolved[name] = env
        return env


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered domain (without importing it)."""
    return name in domain_names()


def model_prompt(task: Any) -> str:
    """The prompt text the model sees for ``task``, everywhere (SFT, RL, evaluation, generate): its
    domain renders it (tool schemas, json schema, ...); a task of no registered domain (a test
    double) is shown its ``prompt``. For math and code this is exactly ``task.prompt``."""
    return get_domain(task.domain).render_prompt(task) if is_registered(task.domain) else task.prompt


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
    docstring): ``quickstart-<d>`` domain ``d`` alone, any other name the registered domains in
    registration order up to the first that offers it (where two domains offer one name, the first
    registered wins here and ``task_families()`` refuses the pair).

    >>> find_task_family("quickstart-math")[0], find_task_family("no-such-family")
    ('math', None)
    """
    own = name.removeprefix(QUICKSTART)
    if own != name and own in domain_names() and name in (families := domain_families(own)):
        return own, families[name]
    for domain in domain_names():
        if name in (families := domain_families(domain)):
            return domain, families[name]
    return None


def domain_families(domain: str) -> dict[str, TaskFamily]:
    """The task families of ``domain`` (importing that domain only; none if its Domain offers none).

    Raises ``TaskError`` in one line naming the domain when its ``task_families()`` fails, or when a
    family takes a registered domain's name.
    """
    env = get_domain(domain)
    if not isinstance(env, HasTaskFamilies):
        return {}
    where = _origin.get(domain, "registered")
    try:
        families = dict(env.task_families())
    except Exception as e:  # noqa: BLE001 - a broken plugin is named in one line
        raise TaskError(f"domain {domain!r} ({where}): task_families() failed: {type(e).__name__}: {e}") from None
    order = list(_specs)
    for family in families:
        if family in _specs and order.index(family) > order.index(domain):  # the later one is at fault
            raise TaskError(f"domain {family!r} ({_origin[family]}): its name is a task family of domain {domain!r}")
        if family in _specs:
            raise TaskError(f"domain {domain!r} ({where}): task family {family!r} is already a domain")
        for earlier in order[: order.index(domain)]:  # imported already when a search reached this domain
            if earlier in _resolved and family in _families_of(earlier):
                raise TaskError(f"domain {domain!r} ({where}): task family {family!r} is already a family of "
                                f"domain {earlier!r}")
    return families


def _families_of(domain: str) -> Mapping[str, TaskFamily]:
    env = _resolved[domain]
    return env.task_families() if isinstance(env, HasTaskFamilies) else {}


def domain_family(domain: str, family: str) -> TaskFamily | None:
    """Family ``family`` of ``domain`` (importing that domain only), or None if it has none."""
    return domain_families(domain).get(family)


def _load_table() -> None:
    global _loaded
    if _loaded:
        return
    for name, spec in BUILTIN.items():
        _specs[name], _origin[name] = spec, "posttrain"
    for prefix, spec in NAMESPACES.items():
        module, _, attr = spec.partition(":")
        provider = getattr(importlib.import_module(module), attr)
        for sub in provider.names():
            name = f"{prefix}/{sub}"
            _specs[name], _origin[name] = functools.partial(provider.domain, sub), f"posttrain ({prefix} namespace)"
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name} = {ep.value!r} ({ENTRY_POINT_GROUP})"
        if ep.name in _specs:
            if _specs[ep.name] == ep or ep.value == _specs[ep.name]:
                continue
            raise TaskError(f"{where}: domain {ep.name!r} is already registered (by {_origin[ep.name]})")
        if not _NAME_RE.fullmatch(ep.name) or ep.name.startswith(QUICKSTART):
            raise TaskError(f"{where}: domain name: expected lowercase letters, digits, '-' or '_', not starting "
                            f"with {QUICKSTART!r}")
        _specs[ep.name], _origin[ep.name] = ep, where
    _loaded = True


def _resolve(name: str, spec: Any) -> Domain:
    where = _origin[name]
    try:
        if isinstance(spec, str):
            module, _, attr = spec.partition(":")
            obj: Any = getattr(importlib.import_module(module), attr)
        elif hasattr(spec, "load") and hasattr(spec, "group"):  # an importlib.metadata.EntryPoint
            obj = spec.load()
        else:
            obj = spec
        if isinstance(obj, type) or (not _has_domain_members(obj) and callable(obj)):  # a class is a factory
            obj = obj()
    except Exception as e:  # noqa: BLE001 - a broken plugin is named in one line, never a traceback
        raise TaskError(f"domain {name!r} ({where}) failed to load: {type(e).__name__}: {e}") from None
    missing = [m for m in DOMAIN_MEMBERS if not hasattr(obj, m)]
    if missing:
        raise TaskError(f"domain {name!r} ({where}): expected a Domain, got {type(obj).__name__} "
                        f"without {', '.join(missing)}")
    try:
        own = obj.name
    except Exception as e:  # noqa: BLE001 - a broken plugin is named in one line, never a traceback
        raise TaskError(f"domain {name!r} ({where}): reading its Domain's name failed: {type(e).__name__}: {e}") from None
    if own != name:
        raise TaskError(f"domain {name!r} ({where}): its Domain is named {own!r}; the names must agree")
    return obj


def _has_domain_members(obj: Any) -> bool:
    return all(hasattr(obj, m) for m in DOMAIN_MEMBERS)

"""The wiring: a sandbox pool and an execution service for a set of domains.

Every command that verifies (``posttrain run``, ``eval``, ``audit``, ``verify``, ``tasks validate``)
opens one service here and passes it down; nothing below this layer looks domains up to build a
service: ``posttrain.sched`` is handed each domain's hooks (``DomainHooks``), a Ray backend the
factory that builds them on each node (``domain_hooks``).

>>> with open_service(["math"]) as svc:
...     [v.outcome for v in svc.verify_pairs([(get_domain("math").generate_tasks(1)[0], "no")])]
['fail']
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from posttrain.envs import HasBatchVerifier, get_domain
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.types import Task

__all__ = ["domain_hooks", "open_service", "pool_for"]


def sandbox_of(service: Service) -> Any | None:
    """The sandbox pool of a local service (tool episodes run BFCL's backends in it), else None."""
    return service.backend.pool if isinstance(service.backend, LocalBackend) else None


def domain_hooks(domains: Sequence[str], pool: Any | None) -> dict[str, DomainHooks]:
    """``DomainHooks`` for each domain (``make_verifier`` and, when the domain has it,
    ``make_batch_verifier``: ``HasBatchVerifier``) over ``pool``. A ``sched.HooksFactory``: a Ray
    backend calls it on each node, over that node's pool."""
    out = {}
    for d in sorted(set(domains)):
        domain = get_domain(d)
        batch = domain.make_batch_verifier(pool) if isinstance(domain, HasBatchVerifier) else None
        # a domain whose verdict is a draw (``verdict_is_a_draw``, optional: a plugin's default is no) has
        # a pass replayed only once confirmed (``sched.Service``): a lucky pass was a pass for ever
        out[d] = DomainHooks(domain.make_verifier(pool), batch, replay=not getattr(domain, "verdict_is_a_draw", False))
    return out


@contextlib.contextmanager
def pool_for(domains: Iterable[str | Task], size: int | None = None, *,
             episodes: bool = False) -> Iterator[Any | None]:
    """A sandbox pool of ``size`` slots (default: the usable CPUs) if any of ``domains`` (names, or
    tasks whose domains count) needs one (``Domain.needs_sandbox``; closed on exit), else None. With
    ``episodes`` (agent episodes will run), a domain whose episodes live in a ``Workspace``
    (``HasWorkspaceEpisodes``: files, doc) needs one too, though its single responses do not.

    >>> with pool_for(["math"]) as pool:
    ...     pool is None
    True
    """
    from posttrain.envs.workspace import HasWorkspaceEpisodes

    names = {d.domain if isinstance(d, Task) else d for d in domains}
    if not any(get_domain(d).needs_sandbox or (episodes and isinstance(get_domain(d), HasWorkspaceEpisodes))
               for d in names):
        yield None
        return
    from posttrain.sandbox import open_pool

    with open_pool(size=size) as pool:
        yield pool


@contextlib.contextmanager
def open_service(domains: Iterable[str], *, size: int | None = None,
                 policy: SchedPolicy | None = None, episodes: bool = False) -> Iterator[Service]:
    """A ``Service`` over this machine for ``domains``: a sandbox pool of ``size`` slots (default:
    the usable CPUs) only when a domain needs one (``pool_for``: ``Domain.needs_sandbox``, or workspace
    episodes with ``episodes``), closed on exit."""
    names = sorted(set(domains))
    with pool_for(names, size=size, episodes=episodes) as pool, Service(LocalBackend(domain_hooks(names, pool), pool), policy) as svc:
        yield svc

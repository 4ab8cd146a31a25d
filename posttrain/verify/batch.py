"""A sandbox pool only when a domain needs one.

Verification itself runs through the execution service (``posttrain.sched``: ``open_service``
opens this pool and a ``Service`` over it; ``Service.verify_pairs`` verifies many pairs).

>>> with pool_for(["math"]) as pool:
...     pool is None
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from posttrain.types import Task


@contextlib.contextmanager
def pool_for(domains: Iterable[str | Task], size: int | None = None) -> Iterator[Any | None]:
    """A sandbox pool of ``size`` slots (default: the usable CPUs) if any of ``domains`` (names, or
    tasks whose domains count) needs one (``Env.needs_sandbox``; closed on exit), else None."""
    from posttrain.envs import get_env

    names = {d.domain if isinstance(d, Task) else d for d in domains}
    if not any(get_env(d).needs_sandbox for d in names):
        yield None
        return
    from posttrain.sandbox import open_pool

    with open_pool(size=size) as pool:
        yield pool

"""Defaults a run gives to task records that leave a field out, per domain, while it loads its tasks.

One user: a recipe's top-level ``reward: package.module:function`` is the ``reward`` of the
function-domain records that name none (``posttrain.envs.function.default_reward``). The parsed
tasks carry the value, so a task file written from them names it itself; a task-file cache keys
on ``defaults_key()`` (the same file parses to other tasks under other defaults).

>>> with record_defaults({"function": {"reward": "m:f"}}):
...     record_default("function", "reward"), record_default("math", "answer")
('m:f', None)
>>> record_default("function", "reward") is None
True
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

_active: contextvars.ContextVar[Mapping[str, Mapping[str, Any]]] = contextvars.ContextVar(
    "posttrain_record_defaults", default=MappingProxyType({}))


@contextlib.contextmanager
def record_defaults(defaults: Mapping[str, Mapping[str, Any]]) -> Iterator[None]:
    """While active, ``record_default(domain, field)`` reads ``defaults[domain][field]``."""
    token = _active.set({d: dict(v) for d, v in defaults.items()})
    try:
        yield
    finally:
        _active.reset(token)


def record_default(domain: str, field: str) -> Any | None:
    """The active default of ``field`` for records of ``domain``, or None."""
    return _active.get().get(domain, {}).get(field)


def defaults_key() -> str:
    """The active defaults as a string (for caches of parsed task files)."""
    return json.dumps(dict(_active.get()), sort_keys=True)

"""The worker side of a reward function: import it once, call it per check, say what it returned.

A ``posttrain.verify._deadline`` worker runs this module with ``POSTTRAIN_REWARD_FUNCTION`` set to
one ``package.module:function``: ``warm_up()`` imports it before the worker says it is ready (so
an import is never charged to a check's CPU budget), ``handle_check(request)`` calls it on one
``{"prompt", "completion", "data"}`` and returns one of ``{"value": x}`` (a finite or non-finite
float: the client judges it), ``{"verdict": ...}`` (a ``posttrain.types.Verdict``), or
``{"bad_type": name}`` (numpy's scalars and 0-d arrays are
read as the Python values they hold; a refused type is named with its module: ``numpy.ndarray``). An exception propagates: the worker reports it as ``raised`` with its
class, and the client scores the response a fail (the function is the user's code; what a
completion makes it raise is the completion's doing).

``python -m posttrain.envs.function._worker --probe package.module:function`` prints the
function's form (``{"style": "single" | "batched"}``) or ``{"error": why}`` on one JSON line.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import numbers
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

ENV_VAR = "POSTTRAIN_REWARD_FUNCTION"
_SINGLE = ("prompt", "completion")
_BATCHED = ("prompts", "completions")
_loaded: tuple[Callable[..., Any], str] | None = None


def load(function: str) -> tuple[Callable[..., Any], str]:
    """``(callable, style)`` for ``package.module:function``; ``ValueError`` (one line) if unusable."""
    module_name, _, attr = function.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises while importing is reported
        raise ValueError(f"cannot import {module_name}: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{attr} is a {type(obj).__name__}, not a function")
    return obj, _style(obj)


def _style(fn: Callable[..., Any]) -> str:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        raise ValueError("its signature cannot be read; define it as f(prompt, completion, **data)") from None
    names = [p.name for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for style, first in (("single", _SINGLE), ("batched", _BATCHED)):
        if tuple(names[:2]) == first:
            return style
    raise ValueError(f"its parameters start ({', '.join(names[:3]) or 'nothing'}); expected f(prompt, completion, "
                     "**data) or TRL's f(prompts, completions, **data)")


def call(fn: Callable[..., Any], style: str, prompt: str, completion: str, data: Mapping[str, Any]) -> Any:
    """Call ``fn`` on one completion in its form; TRL's batched form gets lists of one."""
    if style == "batched":
        out = fn([prompt], [completion], **{k: [v] for k, v in data.items()})
        if not isinstance(out, list | tuple) or len(out) != 1:
            return _BadType(f"{type(out).__name__} of {len(out) if hasattr(out, '__len__') else '?'} (expected a "
                            "list of one value for one completion)")
        return out[0]
    return fn(prompt, completion, **data)


class _BadType:
    def __init__(self, name: str) -> None:
        self.name = name


def encode(value: Any) -> dict[str, Any]:
    """What the worker sends back for ``value`` (JSON-safe)."""
    from posttrain.types import Verdict

    if isinstance(value, _BadType):
        return {"bad_type": value.name}
    if isinstance(value, Verdict):
        return {"verdict": value.to_json()}
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        value = value.item()  # numpy's scalars (np.bool_, np.float32) and 0-d arrays, as Python's
    if isinstance(value, bool):
        return {"value": 1.0 if value else 0.0}
    if isinstance(value, numbers.Real):
        x = float(value)
        return {"value": x} if math.isfinite(x) else {"nonfinite": repr(x)}
    if value is None:
        return {"bad_type": "None (TRL's 'this function does not apply': here every function of a task scores "
                            "each of its completions)"}
    kind = type(value)
    return {"bad_type": kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"}


def warm_up() -> None:
    global _loaded
    _loaded = load(os.environ[ENV_VAR])


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    assert _loaded is not None, "warm_up() runs first"
    fn, style = _loaded
    return encode(call(fn, style, request["prompt"], request["completion"], request["data"]))


def _probe_main(function: str) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the user's module prints on import goes to stderr, not into the reply
    try:
        _, style = load(function)
        out.write(json.dumps({"style": style}) + "\n")
    except ValueError as e:
        out.write(json.dumps({"error": str(e)}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        raise SystemExit(_probe_main(sys.argv[2]))
    raise SystemExit("usage: python -m posttrain.envs.function._worker --probe package.module:function")

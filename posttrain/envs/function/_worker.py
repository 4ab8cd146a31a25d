"""The worker side of a reward function: import it once, call it per check, say what it returned.

A ``posttrain.verify._deadline`` worker runs this module with ``POSTTRAIN_REWARD_FUNCTION`` set to
one ``package.module:function``: ``warm_up()`` imports it before the worker says it is ready (so
an import is never charged to a check's CPU budget), ``handle_check(request)`` calls it on one
``{"prompt", "completion", "data"}`` and returns one of ``{"value": x}`` (a finite or non-finite
float: the client judges it), ``{"verdict": ...}`` (a ``posttrain.types.Verdict``), or
``{"bad_type": name}`` (numpy's scalars and 0-d arrays are
read as the Python values they hold; a refused type is named with its module: ``numpy.ndarray``). An exception propagates: the worker reports it as ``raised`` with its
class, and the client scores the response a fail (the function is the user's code; what a
completion makes it raise is the completion's doing). After a check that started a process, the
processes of the worker's group that are no longer below it (a completion the function ran forked
and exited: its child was reparented away) are killed before the reply (``reap_strays``).

``python -m posttrain.envs.function._worker --probe package.module:function`` prints the
function's form (``{"style": "single" | "batched"}``, with the keyword arguments it takes:
``keywords``) or ``{"error": why}`` on one JSON line.
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


def _processes() -> dict[int, tuple[int, int, bytes]]:
    """``{pid: (parent pid, process group, state)}`` of every process this one can see."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[int(name)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def strays() -> set[int]:
    """Live processes of this worker's process group that are not below it: what a check's
    subprocess left running as it exited (a completion that forks and returns: its child is
    reparented away from the worker, so the check's CPU accounting no longer sees it). Empty unless
    this process leads its own group (a check worker, started in a new session): elsewhere the group
    is a shell's or a test runner's, whose other members are none of ours."""
    me = os.getpid()
    if os.getpgrp() != me:
        return set()
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    below, stack = {me}, [me]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in below:
                below.add(c)
                stack.append(c)
    return {pid for pid, (_, group, state) in procs.items() if group == me and pid not in below and state != b"Z"}


_EXIT_WAIT_S = 5.0
_spared: set[int] = set()
"""Strays that were there once the function was imported (a server its module daemonized): kept."""


def _child_activity() -> tuple[float, ...]:
    """What changes when this process reaps a child (``RUSAGE_CHILDREN``): a check that started none
    needs no look for strays."""
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (u.ru_utime, u.ru_stime, float(u.ru_minflt), float(u.ru_nvcsw), float(u.ru_nivcsw))


def _has_children() -> bool:
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                if f.read().strip():
                    return True
        except OSError:
            continue
    return False


def reap_strays() -> None:
    """Kill the strays a check left (``strays``), so that a completion run by the user's function
    cannot leave a process spinning beside the next checks (up to the 300 s of CPU that the worker's
    ``RLIMIT_CPU`` backstop lets a child have). Not covered: a process that also left the group
    (``setsid``, ``setpgid``)."""
    import signal
    import time

    killed = strays() - _spared
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + _EXIT_WAIT_S  # a SIGKILL lands when its process next runs: wait for it
    while killed and time.monotonic() < deadline:
        procs = _processes()
        killed = {pid for pid in killed if pid in procs and procs[pid][2] != b"Z"}
        if killed:
            time.sleep(0.01)


def warm_up() -> None:
    global _loaded
    _loaded = load(os.environ[ENV_VAR])
    _spared.update(strays())


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    assert _loaded is not None, "warm_up() runs first"
    fn, style = _loaded
    before = _child_activity()
    try:
        return encode(call(fn, style, request["prompt"], request["completion"], request["data"]))
    finally:
        if os.getpgrp() == os.getpid() and (_child_activity() != before or _has_children()):
            reap_strays()


def keywords(fn: Callable[..., Any]) -> dict[str, Any]:
    """The keyword arguments ``fn`` takes after its first two parameters: ``required`` (no default),
    ``accepted`` (by name) and ``any`` (it has ``**data``)."""
    params = list(inspect.signature(fn).parameters.values())[2:]
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)]
    return {"required": [p.name for p in named if p.default is p.empty],
            "accepted": [p.name for p in named if p.kind != p.POSITIONAL_ONLY],
            "any": any(p.kind == p.VAR_KEYWORD for p in params)}


def _probe_main(function: str) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the user's module prints on import goes to stderr, not into the reply
    try:
        fn, style = load(function)
        out.write(json.dumps({"style": style, **keywords(fn)}) + "\n")
    except ValueError as e:
        out.write(json.dumps({"error": str(e)}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        raise SystemExit(_probe_main(sys.argv[2]))
    raise SystemExit("usage: python -m posttrain.envs.function._worker --probe package.module:function")

"""Which reward functions score a task: ``RewardTerm`` (function, weight, range), read from a recipe
or a task record, each checked once per process by importing it in a subprocess.

A function is named ``package.module:function`` (``module:Class.attribute`` works too). It is
imported the way the check workers import it: ``python -s -m ...`` in this process's working
directory, with this process's ``PYTHONPATH``, so a ``my_rewards.py`` next to the recipe is found
by both. The probe (``probe``) imports it and reads its signature:

- ``f(prompt, completion, **data)`` (posttrain's form) or
- ``f(prompts, completions, **data)`` (TRL's batched form: called with lists of one, its list's
  one value used),

and anything else is refused in one line (the module cannot be imported, the name is not there,
it is not callable, its parameters are neither form).

>>> RewardTerm("posttrain.envs.function.examples:exact_match").range
(0.0, 1.0)
>>> as_terms("posttrain.envs.function.examples:exact_match")[0].weight
1.0
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.config import PositiveFloat
from posttrain.errors import ConfigError
from posttrain.shown import clipped
from posttrain.strict_json import finite_number
from posttrain.verify._deadline import child_env

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
PROBE_TIMEOUT_S = 120.0
"""How long importing a reward function may take (the probe; a check worker's start-up)."""

Style = Literal["single", "batched"]


@dataclass(frozen=True)
class RewardTerm:
    """One reward function of a recipe or a task, with its weight and the range its values lie in."""

    function: str
    """``package.module:function``: called as ``f(prompt, completion, **data)`` (or TRL's
    ``f(prompts, completions, **data)``), returns a float in ``range`` or a ``Verdict``."""
    weight: PositiveFloat = 1.0
    """Its share of the task's reward: the reward is the weighted mean of each function's value scaled
    to [0, 1] by its range."""
    range: tuple[float, ...] = (0.0, 1.0)
    """``[low, high]``: the values the function returns; a value outside (or NaN) is refused (a fail).
    The top of the range is a pass."""

    def __post_init__(self) -> None:
        problem = term_problem(self.function, self.weight, self.range)
        if problem:
            raise ConfigError(problem)

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "weight": self.weight, "range": list(self.range)}


def term_problem(function: Any, weight: Any, rng: Any) -> str | None:
    """What is wrong with a term (one line naming the key), or None; imports the function once."""
    if not isinstance(function, str) or not _NAME_RE.fullmatch(function):
        return f"function: expected 'package.module:function', got {function!r}"
    if not finite_number(weight) or weight <= 0:
        return f"weight: expected a number > 0, got {weight!r}"
    if (not isinstance(rng, list | tuple) or len(rng) != 2
            or not all(finite_number(x) for x in rng)
            or not rng[0] < rng[1]):
        return f"range: expected [low, high] with finite low < high, got {list(rng) if isinstance(rng, tuple) else rng!r}"
    try:
        probe(function)
    except ConfigError as e:
        return f"function: {e}"
    return None


def as_terms(spec: Any) -> tuple[RewardTerm, ...]:
    """A reward spec as terms: a ``package.module:function`` string, a ``RewardTerm``, a mapping
    ``{function, weight, range}``, or a list of those. ``ConfigError`` naming what is wrong."""
    items = list(spec) if isinstance(spec, list | tuple) else [spec]
    if not items:
        raise ConfigError("expected at least one reward function")
    out = []
    for i, item in enumerate(items):
        where = f"[{i}]" if isinstance(spec, list | tuple) else ""
        if isinstance(item, RewardTerm):
            out.append(item)
            continue
        if isinstance(item, str):
            item = {"function": item}
        if not isinstance(item, dict) or "function" not in item or set(item) - {"function", "weight", "range"}:
            raise ConfigError(f"{where + ': ' if where else ''}expected 'package.module:function' or "
                              f"{{function, weight, range}}, got {clipped(item)}")
        problem = term_problem(item["function"], item.get("weight", 1.0), item.get("range", [0.0, 1.0]))
        if problem:
            raise ConfigError(f"{where}.{problem}" if where else problem)
        out.append(RewardTerm(item["function"], float(item.get("weight", 1.0)),
                              tuple(float(x) for x in item.get("range", [0.0, 1.0]))))
    if len({t.function for t in out}) != len(out):
        raise ConfigError("a reward function is named twice; give it one term with its weight")
    return tuple(out)


def terms_json(terms: Sequence[RewardTerm]) -> list[dict[str, Any]]:
    """Terms as a task record writes them."""
    return [t.to_json() for t in terms]


@dataclass(frozen=True)
class Keywords:
    """The keyword arguments a reward function takes besides the prompt and the completion (a task's
    ``data``): ``required`` (no default), ``accepted`` (by name), ``any`` (it has ``**data``)."""

    required: tuple[str, ...]
    accepted: tuple[str, ...]
    any: bool

    def problem(self, keys: Sequence[str]) -> str | None:
        """Why a task's ``data`` with ``keys`` cannot be passed (the call would raise TypeError on
        every completion, its reference included), or None."""
        missing = [k for k in self.required if k not in keys]
        if missing:
            return f"it requires {', '.join(missing)}"
        unknown = [] if self.any else sorted(set(keys) - set(self.accepted))
        if unknown:
            return f"it takes {', '.join(self.accepted) or 'none'} and has no **data, not {', '.join(unknown)}"
        return None


_probed: dict[str, Style | ConfigError] = {}
_keywords: dict[str, Keywords] = {}
_probe_lock = threading.Lock()


def keywords(function: str) -> Keywords:
    """The keyword arguments ``function`` takes (``probe`` it first; ``ConfigError`` as it says)."""
    probe(function)
    with _probe_lock:
        return _keywords[function]


def probe(function: str) -> Style:
    """Import ``function`` in a fresh ``python -s -m`` (as a check worker will) and read its form;
    cached per process. ``ConfigError`` (one line) when it cannot be used."""
    with _probe_lock:
        known = _probed.get(function)
    if known is None:
        known = _run_probe(function)
        with _probe_lock:
            _probed[function] = known
    if isinstance(known, ConfigError):
        raise ConfigError(str(known))
    return known


def _run_probe(function: str) -> Style | ConfigError:
    cmd = [sys.executable, "-s", "-m", "posttrain.envs.function._worker", "--probe", function]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=child_env())
    except subprocess.TimeoutExpired:
        return ConfigError(f"{function}: importing it took more than {PROBE_TIMEOUT_S:g} s")
    try:
        reply = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return ConfigError(f"{function}: the import probe failed (exit {r.returncode}): {tail[:200]}")
    if "error" in reply:
        return ConfigError(f"{function}: {reply['error']}")
    with _probe_lock:
        _keywords[function] = Keywords(tuple(reply["required"]), tuple(reply["accepted"]), bool(reply["any"]))
    return reply["style"]

"""A reasoning-gym generator's configuration from what a task or a recipe says: a level and parameters.

A task stores how its generator was configured as JSON, ``{"level": L, "params": {...}}`` (either
may be absent), never the configuration object itself: reasoning-gym configs hold enums, nested
dataclasses and ``datetime.time`` values that JSON does not carry (aiw, arc_agi, rearc,
time_intervals, word_sorting). ``build_config`` rebuilds the same object from it wherever it is
needed (the generator in the trainer, the scorer in a check worker), deterministically:

1. the curriculum's configuration at global level ``L`` (``set_global_level`` then
   ``generate_configuration``, reasoning-gym's inclusive ranges: level L spans levels 0..L), or
   the config class's defaults when no level is given (or the generator has no usable curriculum
   and ``L`` is 0);
2. ``params`` on top, field by field (a recipe's ``params: {min_numbers: 3}``); a field of an
   enum type takes the enum's value (``"lowercase"``), ``composite``'s ``datasets`` a list of
   ``{name, weight, config}``;
3. ``seed`` and ``size`` set by the caller, then the config's own ``validate()``.

Every failure is a ``ValueError`` in one line naming the generator and the field or level.

A recipe's params are checked before anything is generated (``check_params``): each value has its
field's type (a whole number for an ``int``, a finite number for a ``float``, true/false for a
``bool``, a list of strings for a list of strings, one of the choices of a ``Literal`` or an enum),
a number lies within ``BOUND_FACTOR`` times the largest the generator itself uses (its default and
every level of its curriculum, ``own_range``), and a ``min_X`` is not above its ``max_X``. A huge
size or count hung the recipe's parse (basic_arithmetic's ``max_terms: 1000000000``; game_of_life_halting's
``grid_size_x: 1000000000`` ran out of memory), a float or a bool passed for an int was taken as it
came, and NaN slipped past every ``min <= max``. The generator's own ``validate()`` still judges the
rest (a count of 0 where it needs 1). Not checked: a value inside the bounds whose tasks are slow to
make where the generator's cost grows faster than its own levels let show; the task source's ``n``
bounds how many are made.
Not here: generating or scoring (``_domain.py``, ``_check.py``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from posttrain.envs.rg._names import GENERATORS, LOWEST_LEVEL
from posttrain.shown import clipped

COMPOSITE_DEFAULT = ({"name": "basic_arithmetic", "weight": 1.0, "config": {}},
                     {"name": "letter_counting", "weight": 1.0, "config": {}},
                     {"name": "spell_backward", "weight": 1.0, "config": {}})
"""``composite`` needs datasets to mix (its default has none): these three, unless params say."""

RESERVED = ("seed", "size")
"""Config fields the generator's caller sets (a source's seed, the number of tasks), never params."""


def config_fields(name: str) -> tuple[str, ...]:
    """The names of generator ``name``'s configuration fields (``seed`` and ``size`` excluded)."""
    from reasoning_gym.factory import DATASETS

    return tuple(f.name for f in dataclasses.fields(DATASETS[name][1]) if f.name not in RESERVED)


def build_config(name: str, spec: Mapping[str, Any], *, seed: int, size: int) -> Any:
    """Generator ``name``'s configuration object for ``spec`` (``{"level": L, "params": {...}}``)."""
    from reasoning_gym.factory import CURRICULA, DATASETS

    _, config_cls = DATASETS[name]
    level, params = spec.get("level"), dict(spec.get("params") or {})
    base: dict[str, Any] = {}
    if level is not None:
        levels, lowest = GENERATORS[name][1], LOWEST_LEVEL.get(name, 0)
        if not lowest <= level < max(levels, 1):
            raise ValueError(f"rg/{name}: level {level}: expected a level in [{lowest}, {max(levels - 1, 0)}]")
        if levels:
            curriculum = CURRICULA[name]()
            curriculum.set_global_level(level)
            made = curriculum.generate_configuration()
            base = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    _check_keys(name, params, owner=name, at="params")
    if name == "composite":
        params.setdefault("datasets", [dict(d) for d in COMPOSITE_DEFAULT])
        params["datasets"] = _dataset_specs(params["datasets"])
    hints = typing.get_type_hints(config_cls)
    kwargs = {**base, **{k: _coerce(name, k, v, hints.get(k)) for k, v in params.items()}, "seed": seed, "size": size}
    try:
        config = config_cls(**kwargs)
        if hasattr(config, "validate"):
            config.validate()
    except Exception as e:  # noqa: BLE001 - a generator's own check, said in one line
        raise ValueError(f"rg/{name}: {describe_spec(spec)}: the generator refuses its configuration: "
                         f"{type(e).__name__}: {_first_line(e)}") from None
    return config


def _check_keys(name: str, params: Mapping[str, Any], *, owner: str, at: str) -> None:
    """``ValueError`` for a reserved key or one that is no field of generator ``name``, said at ``at``
    (``params``, or a composite's ``params.datasets[0].config``) of generator ``owner``, with the
    fields there are. An inner dataset's unknown key was the composite's TypeError from the inner
    config's constructor, its seed taken over the one the composite derives from the source's."""
    for key in RESERVED:
        if key in params:
            raise ValueError(f"rg/{owner}: {at}.{key}: set by the task source ({key} of the source), not a param")
    known = config_fields(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        whose = "the generator's" if owner == name else f"{name}'s"
        raise ValueError(f"rg/{owner}: {at}: unknown field(s) {unknown}; {whose} fields: {', '.join(known)}")


BOUND_FACTOR = 2
"""A param's number may reach this many times the largest the generator uses itself (``own_range``):
room past the top level, short of the sizes that hang. basic_arithmetic (top level: 6 terms of 4
digits) makes 8 tasks of 12 terms of 10 digits (the floor) in 0.01 s; at 4x, 16 digits took 13 s
for 8 tasks and 24 terms of 16 digits had not finished after minutes. A field the generator sets to
0 everywhere may still reach ``BOUND_FLOOR``."""
BOUND_FLOOR = 10
MAX_ITEMS = 1000
"""The longest list a param may be (names, operators, weights: the generator's own are a few dozen)."""


@functools.cache
def own_range(name: str, key: str) -> tuple[float, float] | None:
    """``(lowest, highest)`` value of numeric field ``key`` over generator ``name``'s default
    configuration and its curriculum's levels; None where it is not a number in any of them."""
    levels = [None, *range(LOWEST_LEVEL.get(name, 0), GENERATORS[name][1])]
    values = []
    for level in levels:
        value = getattr(_level_config(name, level), key, None)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            values.append(value)
    return (min(values), max(values)) if values else None


def check_params(name: str, params: Mapping[str, Any], *, level: int | None = None, at: str = "params") -> None:
    """``ValueError`` in one line, ``rg/NAME: params.KEY: expected ..., got VALUE``, for the first
    param whose value has not its field's type or lies outside its bounds (module docstring), or a
    ``min_X``/``X_min`` above its ``max_X``/``X_max``, the other one as given or as ``level`` (or the
    defaults) sets it: ``rg/NAME: params {...}: the generator refuses its configuration: params.min_X:
    expected at most max_X (2), got 9``, worded as the generator's own refusal was. A composite's
    datasets are checked each by its own generator's fields (``params.datasets[0].config.KEY``).
    Unknown and reserved keys, and the shape of a composite's list, are ``build_config``'s to say."""
    from reasoning_gym.factory import DATASETS

    hints = typing.get_type_hints(DATASETS[name][1])
    where = f"rg/{name if at == 'params' else 'composite'}: {at}"
    for key, value in params.items():
        if key not in hints or key in RESERVED:
            continue
        if name == "composite" and key == "datasets":
            _check_datasets(value, at)
            continue
        expected = _type_problem(name, key, value, hints[key])
        if expected is not None:
            raise ValueError(f"{where}.{key}: expected {expected}, got {clipped(value)}")
    pairs = [(k, _partner(k)) for k in hints if _partner(k) in hints and (k in params or _partner(k) in params)]
    if not pairs:
        return
    base = _level_config(name, level if at == "params" else None)
    for low, high in pairs:
        lo, hi = params.get(low, getattr(base, low, None)), params.get(high, getattr(base, high, None))
        if _plain_number(lo) and _plain_number(hi) and lo > hi:
            key, side = (low, f"at most {high} ({_number(hi)})") if low in params else \
                (high, f"at least {low} ({_number(lo)})")
            given = describe_spec({"level": level, "params": params}) if at == "params" else f"{at} {dict(params)}"
            raise ValueError(f"rg/{name if at == 'params' else 'composite'}: {given}: the generator "
                             f"refuses its configuration: {at}.{key}: expected {side}, got {clipped(params[key])}")


def _partner(key: str) -> str | None:
    """``max_X`` for ``min_X``, ``X_max`` for ``X_min``; None for any other field."""
    if key.startswith("min_"):
        return "max_" + key[4:]
    if key.endswith("_min"):
        return key[:-4] + "_max"
    return None


def _plain_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


@functools.cache
def _level_config(name: str, level: int | None) -> Any:
    return build_config(name, {} if level is None else {"level": level}, seed=0, size=1)


def _check_datasets(raw: Any, at: str) -> None:
    if not isinstance(raw, list) or len(raw) > MAX_ITEMS:
        return  # build_config says what the list should be
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            continue
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1e6:
            raise ValueError(f"rg/composite: {at}.datasets[{i}].weight: expected a finite number in (0, 1e6], "
                             f"got {clipped(weight)}")
        config, sub = item.get("config") or {}, item.get("name")
        if isinstance(config, Mapping) and sub in GENERATORS and sub != "composite":
            check_params(sub, config, at=f"{at}.datasets[{i}].config")


def _type_problem(name: str, key: str, value: Any, hint: Any) -> str | None:
    """What ``value`` should have been for a field typed ``hint``, or None where it fits."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _type_problem(name, key, value, inner[0]) if len(inner) == 1 else None
    if origin is typing.Literal:
        return None if value in args and isinstance(value, str | int) else f"one of {', '.join(map(repr, args))}"
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if hint is int or hint is float:
        return _number_problem(name, key, value, whole=hint is int)
    if hint is str:
        return None if isinstance(value, str) and len(value) <= 1000 else "a string (up to 1000 characters)"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return None if isinstance(value, str) and value in {m.value for m in hint} else \
            f"one of {', '.join(repr(m.value) for m in hint)}"
    if origin in (list, tuple, Sequence) or hint is tuple:
        item = args[0] if args else str
        if not isinstance(value, list) or not value or len(value) > MAX_ITEMS:
            return f"a non-empty list (up to {MAX_ITEMS} items) of {_item_words(item)}"
        for x in value:
            if _item_problem(item, x):
                return f"a non-empty list (up to {MAX_ITEMS} items) of {_item_words(item)}"
        return None
    return "a value JSON can carry for this field (a recipe cannot set it)"


def _item_words(item: Any) -> str:
    if item is float:
        return "finite numbers"
    if isinstance(item, type) and issubclass(item, enum.Enum):
        return f"{', '.join(repr(m.value) for m in item)}"
    if typing.get_origin(item) is tuple:
        return "[low, high] pairs of finite numbers"
    return "strings"


def _item_problem(item: Any, x: Any) -> bool:
    if item is float:
        return isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x)
    if isinstance(item, type) and issubclass(item, enum.Enum):
        return x not in {m.value for m in item}
    if typing.get_origin(item) is tuple:
        return not isinstance(x, list) or len(x) != 2 or any(_item_problem(float, v) for v in x)
    return not isinstance(x, str) or len(x) > 1000


def _number_problem(name: str, key: str, value: Any, *, whole: bool) -> str | None:
    what = "a whole number" if whole else "a finite number"
    if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
        return what
    if not math.isfinite(value):
        return what
    own = own_range(name, key)
    top = max(abs(own[0]), abs(own[1])) if own else 0
    high = max(BOUND_FACTOR * top, BOUND_FLOOR)
    low = 0 if own is None or own[0] >= 0 else -high
    if whole:
        high, low = int(high), int(low)
    if low <= value <= high:
        return None
    reach = f"its own go up to {_number(top)}" if own else "it sets none"
    return f"{what} in [{_number(low)}, {_number(high)}] ({BOUND_FACTOR}x the generator's own values; {reach})"


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _coerce(name: str, key: str, value: Any, hint: Any) -> Any:
    """A JSON value for a field whose type is an enum becomes that enum's member (each item of a
    list of an enum, aiw's ``task_types``)."""
    if typing.get_origin(hint) is list and isinstance(value, list):
        return [_coerce(name, key, x, typing.get_args(hint)[0]) for x in value]
    enum_type = next((t for t in (hint, *typing.get_args(hint)) if isinstance(t, type) and issubclass(t, enum.Enum)),
                     None)
    if enum_type is None or isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum_type)
        raise ValueError(f"rg/{name}: params.{key}: expected one of {choices}, got {value!r}") from None


def _dataset_specs(raw: Any) -> list[Any]:
    from reasoning_gym.composite import DatasetSpec

    if not isinstance(raw, list | tuple) or not raw:
        raise ValueError("rg/composite: params.datasets: expected a non-empty list of {name, weight, config}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or set(item) - {"name", "weight", "config"} or "name" not in item:
            raise ValueError(f"rg/composite: params.datasets[{i}]: expected {{name, weight, config}}, got {item!r:.80}")
        if item["name"] not in GENERATORS or item["name"] == "composite":
            raise ValueError(f"rg/composite: params.datasets[{i}].name: unknown generator {item['name']!r}")
        config = item.get("config") or {}
        if not isinstance(config, Mapping):
            raise ValueError(f"rg/composite: params.datasets[{i}].config: expected a mapping of {item['name']}'s "
                             f"fields, got {clipped(config)}")
        _check_keys(item["name"], config, owner="composite", at=f"params.datasets[{i}].config")
        out.append(DatasetSpec(name=item["name"], weight=float(item.get("weight", 1.0)), config=dict(config)))
    return out


def describe_spec(spec: Mapping[str, Any]) -> str:
    """``level 2, params {...}`` or ``the default configuration``, for messages."""
    parts = [f"level {spec['level']}"] if spec.get("level") is not None else []
    if spec.get("params"):
        parts.append(f"params {dict(spec['params'])}")
    return ", ".join(parts) or "the default configuration"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""

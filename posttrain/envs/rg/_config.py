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
Not here: generating or scoring (``_domain.py``, ``_check.py``).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Mapping
from typing import Any

from posttrain.envs.rg._names import GENERATORS, LOWEST_LEVEL

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
    for key in RESERVED:
        if key in params:
            raise ValueError(f"rg/{name}: params.{key}: set by the task source ({key} of the source), not a param")
    known = config_fields(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"rg/{name}: params: unknown field(s) {unknown}; the generator's fields: {', '.join(known)}")
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


def _coerce(name: str, key: str, value: Any, hint: Any) -> Any:
    """A JSON value for a field whose type is an enum becomes that enum's member."""
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
        out.append(DatasetSpec(name=item["name"], weight=float(item.get("weight", 1.0)),
                               config=dict(item.get("config") or {})))
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

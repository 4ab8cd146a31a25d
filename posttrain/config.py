"""Typed configs from YAML, validated at parse time.

A recipe is a tree of frozen dataclasses. ``parse_config(cls, data, where=...)`` walks it and fails
before any work starts on an unknown key (with the closest known key), a value of the wrong type
(naming the expected type), or an invalid combination (each dataclass's ``__post_init__`` raises
``ConfigError``). ``apply_overrides`` applies ``section.key=value`` strings (the CLI's ``--set``)
with the same checks.

Supported field types: bool, int, float, str, Literal[...], X | None, tuple[X, ...], nested
dataclasses. Nothing is instantiated by name from the config (no Hydra ``_target_``, no exec).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from posttrain.errors import ConfigError

C = TypeVar("C")


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or a non-mapping top level is a ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: recipe file not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_config(cls: type[C], data: Mapping[str, Any], *, where: str = "") -> C:
    """Build dataclass ``cls`` from a mapping, strictly. ``where`` is the dotted key of ``data``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'top level'}: expected a mapping for {cls.__name__}, got {type(data).__name__}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        full = f"{where}.{key}" if where else str(key)
        raise ConfigError(f"unknown key {full!r}{hint}; known keys here: {', '.join(fields)}")
    kwargs = {name: _coerce(hints[name], value, f"{where}.{name}" if where else name) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise  # our own configs' __post_init__ name their fields fully
    except ValueError as e:  # a library dataclass's own validation
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _coerce(tp: Any, value: Any, where: str) -> Any:  # noqa: C901 - one branch per supported type
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: expected one of {_type_name(tp)}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, _) = get_args(tp)
        return tuple(_coerce(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return parse_config(tp, value if value is not None else {}, where=where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported field type {tp!r}")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides (value parsed as YAML) to a nested mapping, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. rl.steps=50")
        key, raw = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = yaml.safe_load(raw)
    return data


def to_dict(obj: Any) -> Any:
    """A dataclass tree -> plain dicts/lists (for saving the resolved config)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj

"""A settings dataclass filled from a mapping (a component's `cluster` JSON, a compile-time options file), checked
the one way for all of them: unknown keys and values of the wrong type are one-line errors naming the key and
what it got. Types come from the dataclass's annotations: `int | None` takes null, a float field takes an integer,
an int field never takes a bool."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from slipway.core.errors import SlipwayError

Settings = TypeVar("Settings")


def settings_from(cls: type[Settings], raw: Mapping[str, Any], name: str, key_label: str = "{name}.{key}") -> Settings:
    """cls(**raw), each key known and each value of its field's type.

    Args:
        cls: The settings dataclass.
        raw: The keys given.
        name: The settings as an error names them (e.g. "cluster").
        key_label: How an error names one key (default `cluster.gpus`).

    Returns:
        The settings.
    """
    hints = typing.get_type_hints(cls)
    known = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise SlipwayError(f"{name}: unknown keys {unknown} (known: {', '.join(known)})")
    for key, value in raw.items():
        allowed = _allowed(hints[key])
        if not any(_takes(kind, value) for kind in allowed):
            names = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
            raise SlipwayError(f"{key_label.format(name=name, key=key)}: expected {names}, got {value!r}")
    return cls(**raw)


def _allowed(hint: Any) -> tuple[type, ...]:
    """The plain types a field's annotation allows (dict[str, str] -> dict; int | None -> int, NoneType)."""
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    return tuple(typing.get_origin(kind) or kind for kind in kinds)


def _takes(kind: type, value: Any) -> bool:
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))

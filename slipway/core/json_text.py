"""A JSON object given as text (a flag, a component parameter, a settings string), read one way everywhere: empty is
{}, an object already parsed is taken as it is, anything else is a one-line error naming the input and what it got."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from slipway.core.errors import SlipwayError


def json_object(name: str, text: Any) -> dict[str, Any]:
    """The JSON object `text` holds.

    Args:
        name: The input as the caller spells it (a flag, a parameter), for the error.
        text: JSON text, or a value a Python caller passed (a mapping is taken as it is); None or blank is {}.

    Returns:
        A new dict.
    """
    if isinstance(text, Mapping):
        return dict(text)
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    value = text
    if isinstance(text, str):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SlipwayError(f"{name}: not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        shown, kind = text.strip() if isinstance(text, str) else json.dumps(value, default=str), json_kind(value)
        got = kind if kind == shown else f"{kind} {shown}"  # `true`, not `true true`
        raise SlipwayError(f"{name}: expected a JSON object ({{...}}), got {got}")
    return value


def json_kind(value: Any) -> str:
    """A JSON value's kind as an error names it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    kinds = {list: "a list", tuple: "a list", str: "a string", int: "a number", float: "a number", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)

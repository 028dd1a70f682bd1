"""Pydantic at the boundaries: one way to turn a validation failure into a message that names the field.

The model registry (``models.toml``), the server config and the server's request bodies are all
pydantic models; their failures are shown by :func:`describe_errors`, one ``field.path: what is
wrong`` clause per problem, so the same mistake reads the same wherever it was made.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["describe_errors", "error_field", "field_path"]

_CLASS_NAME = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")


def field_path(location: tuple[Any, ...]) -> str:
    """``("models", "judge", "max_in_flight")`` -> ``models.judge.max_in_flight``; list positions as ``[i]``.

    Examples:
        >>> field_path(("messages", 2, "content"))
        'messages[2].content'
    """
    out = ""
    for part in location:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe_errors(errors: list[Any], *, limit: int = 4) -> str:
    """The errors of a ``pydantic.ValidationError`` (``exc.errors()``) as one line naming each field.

    Inputs are never quoted (a request body may hold secrets); pydantic's ``Value error,`` prefix is dropped.

    Examples:
        >>> describe_errors([{"loc": ("max_in_flight",), "msg": "Input should be a valid integer"}])
        '`max_in_flight`: Input should be a valid integer'
    """
    parts = []
    for error in errors[:limit]:
        message = str(error.get("msg", "invalid"))
        for prefix in ("Value error, ", "Assertion failed, "):
            if message.startswith(prefix):
                message = message[len(prefix):]
        where = error_field(error)
        part = f"`{where}`: {message}" if where else message
        if part not in parts:
            parts.append(part)
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


def error_field(error: Any) -> str:
    """The field one pydantic error is about, as :func:`field_path` writes it (union member tags dropped)."""
    return field_path(tuple(p for p in error.get("loc", ()) if not _is_union_tag(p)))


def _is_union_tag(part: Any) -> bool:
    """Pydantic names the member of a union it tried (``int``, ``function-after[...]``): not a field."""
    if not isinstance(part, str):
        return False
    if part in ("int", "float", "str", "bool", "list", "dict", "none") or "[" in part:
        return True
    if part.startswith(("constrained-", "function-", "lax-", "strict-", "json-or-python", "tagged-union")):
        return True
    return _CLASS_NAME.fullmatch(part) is not None  # a model tried as a member of a union

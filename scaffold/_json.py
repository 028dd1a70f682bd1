"""Any value as JSON data: the one normaliser behind graph specs, stored rows and checkpoints.

It depends only on the value types (:class:`~scaffold._types.Trace`, :class:`~scaffold._template.Template`),
never on the DSL, the executor or the store, so each of them can use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scaffold._template import Template
from scaffold._types import Trace


def to_json(value: Any, *, stable: bool = False) -> Any:
    """``value`` as JSON data: dicts with string keys, lists, strings, numbers, booleans and ``None``.

    Mappings, lists, tuples and sets are converted element by element; a trace becomes its id, a
    template its text, a float JSON cannot hold (NaN, infinities) ``None``, any other object its ``repr``.

    ``stable=True`` gives the same data in every process, for build parameters that are recorded
    and compared across runs: functions are named by module and qualified name (their ``repr``
    holds a memory address) and sets are sorted (their order depends on string hashing).

    Examples:
        >>> import math
        >>> to_json((1, "a", math.sqrt), stable=True), to_json({"k": None, 2: float("nan")})
        ([1, 'a', 'math.sqrt'], {'k': None, '2': None})
        >>> to_json({"b", "a"}, stable=True)
        ['a', 'b']
    """
    if not stable:
        return _plain(value)
    return _convert(value, True)


def _plain(value: Any) -> Any:
    """:func:`to_json` (``stable=False``) for the exact types JSON data is made of, without abstract-class checks or
    keyword arguments (it converts every dataset row and run input); other values go to :func:`_convert`."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if kind is float:
        return value if math.isfinite(value) else None
    return _convert(value, False)


def _convert(value: Any, stable: bool) -> Any:
    """:func:`to_json` of any value."""
    kind = type(value)  # the exact types JSON data is made of first: no abstract-class checks for them
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {str(k): to_json(v, stable=stable) for k, v in value.items()}
    if kind is list:
        return [to_json(v, stable=stable) for v in value]
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_json(v, stable=stable) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, stable=stable) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_json(v, stable=stable) for v in value]
        return sorted(items, key=repr) if stable else items
    if isinstance(value, Trace):
        return value.id
    if isinstance(value, Template):
        return value.text
    name = getattr(value, "__qualname__", None)
    if stable and callable(value) and isinstance(name, str):
        return f"{getattr(value, '__module__', None) or '?'}.{name}"
    return repr(value)

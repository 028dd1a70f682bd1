"""Values every database, JSON encoder and model API takes: checks for what a caller passes, repairs for
what a model returns (a leaf module, standard library only; the store's column limits are in
:mod:`scaffold.store._storable`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
MAX_DEPTH = 64
"""Deepest nesting of lists and objects recorded in JSON columns (inputs deeper than this are refused)."""
_DEEP = "…"


# -- text ---------------------------------------------------------------------------------------------------
def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a surrogate code point that is not UTF-8 encodable (no driver takes it)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clean_text(text: str, no_nul: bool) -> str:
    """``text`` with lone surrogates (and, when ``no_nul``, NUL characters) replaced by U+FFFD.

    Examples:
        >>> clean_text("a\\ud800b\\x00", no_nul=True)
        'a\ufffdb\ufffd'
    """
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a pair split over two code points is joined, a lone half replaced
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if no_nul and "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text


# -- JSON ---------------------------------------------------------------------------------------------------
def json_data(value: Any, no_nul: bool = False, depth: int = 0) -> Any:
    """``value`` as JSON data every database takes: finite numbers, clean strings, at most :data:`MAX_DEPTH`
    levels (deeper parts become ``"…"``), string keys; other objects as their ``repr``.

    Examples:
        >>> json_data({"a": float("nan"), 1: ["\\ud800", (2, 3)]})
        {'a': None, '1': ['\ufffd', [2, 3]]}
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return clean_text(value, no_nul)
    if depth >= MAX_DEPTH:
        return _DEEP
    if isinstance(value, Mapping):
        return {clean_text(str(k), no_nul): json_data(v, no_nul, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_data(v, no_nul, depth + 1) for v in value]
    from scaffold._json import to_json

    return clean_text(str(to_json(value)), no_nul)  # a trace's id, a template's text, any other object's repr


def json_text_is_clean(text: str) -> bool:
    """False when JSON text serialised by the store (ASCII, ``allow_nan=False``) may hold a lone surrogate.

    ``json`` escapes every non-ASCII character, so a lone surrogate shows as ``\\udXXX``; a valid pair
    shows the same way and is a false alarm, which only costs the slow path."""
    return "\\ud" not in text


# -- caller values: refused, never changed ----------------------------------------------------------------------
def check_seed(seed: Any) -> str | None:
    """Why ``seed`` cannot be a run's seed (a 64-bit signed integer), or ``None`` when it can."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        return f"the seed must be an integer, not {type(seed).__name__}"
    if not INT64[0] <= seed <= INT64[1]:
        return f"the seed {seed} does not fit in 64 bits (the store's seed column): use -2**63 to 2**63 - 1"
    return None


def check_value(value: Any, where: str, depth: int = 0) -> str | None:
    """Why ``value`` (a caller's input, row or metadata) cannot be recorded as given, or ``None``.

    Refused: strings with lone surrogates (no database, and no model API, takes them) and nesting deeper
    than :data:`MAX_DEPTH`. NaN and infinities are recorded as ``null`` like everywhere else.

    Examples:
        >>> check_value({"problem": "x\\ud800"}, "inputs")
        'inputs.problem holds a lone surrogate (\\\\ud800), which is not valid Unicode text'
    """
    if _plain_and_recordable(value, depth) or _recordable(value, depth):  # the common cases, without a path
        return None
    if isinstance(value, str):
        if has_lone_surrogate(value):
            bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
            return f"{where} holds a lone surrogate (\\u{ord(bad):04x}), which is not valid Unicode text"
        return None
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        if depth >= MAX_DEPTH:
            return f"{where} is nested more than {MAX_DEPTH} levels deep"
        items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, Mapping) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and has_lone_surrogate(key):
                return f"a key of {where} holds a lone surrogate, which is not valid Unicode text"
            found = check_value(item, f"{where}.{key}" if isinstance(value, Mapping) else f"{where}[{key}]",
                                depth + 1)
            if found is not None:
                return found
    return None


def _plain_and_recordable(value: Any, depth: int) -> bool:
    """True when ``value`` is JSON data (dicts, lists, tuples, texts, numbers) that :func:`check_value` accepts,
    found by the ``json`` module's C encoder: UTF-8 takes every text and key (none holds a lone surrogate), and it
    has too few containers to be nested too deep (each ``[`` or ``{`` of its JSON, texts' own included, is at most
    one level). False when it cannot tell (other types, a surrogate, many containers): :func:`_recordable` walks
    it then."""
    if type(value) is not dict and type(value) is not list:
        return False
    try:
        text = json.dumps(value, ensure_ascii=False)
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # not JSON data, or a lone surrogate (UnicodeEncodeError)
        return False
    return depth + text.count("[") + text.count("{") <= MAX_DEPTH


def _recordable(value: Any, depth: int) -> bool:
    """Whether :func:`check_value` finds nothing to refuse in ``value`` (it says what, and where, when not)."""
    kind = type(value)
    if kind is str:
        return value.isascii() or not has_lone_surrogate(value)
    if value is None or kind is int or kind is float or kind is bool:
        return True
    if kind is dict or kind is list or isinstance(value, (Mapping, list, tuple, set, frozenset)):
        if depth >= MAX_DEPTH:
            return False
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and not key.isascii() and has_lone_surrogate(key):
                    return False
                if not _recordable(item, depth + 1):
                    return False
            return True
        return all(_recordable(item, depth + 1) for item in value)
    if isinstance(value, str):
        return not has_lone_surrogate(value)
    return True

"""What the store's columns can hold, and how values that would not fit are made to.

Two kinds of values reach the database, and they are treated differently:

- **What a model returns** (and what a rule or backend computes from it) is always recorded. It is made
  storable on the writer thread, per field, and each call row whose values changed lists those fields
  in its metadata under ``"sanitised"``:

  =============================================  =========================================================
  field                                          made storable by
  =============================================  =========================================================
  ``text``, ``answer``, ``error``, ``model``...  a lone surrogate (not UTF-8) becomes U+FFFD; on
                                                 PostgreSQL, whose text cannot hold it, NUL becomes U+FFFD
  ``finish_reason`` and other short columns      the same, then cut to the column's length
  ``prompt_tokens``, ``completion_tokens``,      clamped to the column's range (2**31 - 1 on PostgreSQL)
  ``index``, ``n``, ``attempts``
  ``cost``                                       NaN or an infinity becomes ``None`` (unknown)
  ``latency``, ``started_at``                    NaN or an infinity becomes 0.0
  ``token_ids``                                  not stored (``None``) when an id is not an int32
  ``logprobs``                                   an entry that is not a number becomes NaN
  ``metadata`` and other JSON                    NaN and infinities become ``null``, lone surrogates
                                                 U+FFFD, nesting deeper than :data:`MAX_DEPTH` the text
                                                 ``"…"``; an object that is not JSON its ``repr``
  =============================================  =========================================================

- **What a caller passes** (a seed, an input, a run id, a dataset row, a reward) is checked before the
  run starts and refused with a typed error (:mod:`scaffold._values`): silently changing
  it would make a recorded run disagree with the one that was asked for (and break its resumption).

Anything that still reaches the database and is refused fails only the run it belongs to (see
:mod:`scaffold.store._writer`); :func:`diagnose` then names the table, row and field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Integer, LargeBinary, String, Table

from scaffold._values import INT32, INT64, check_value, clean_text, has_lone_surrogate, json_data, json_text_is_clean


# -- rows ---------------------------------------------------------------------------------------------------
class Columns:
    """The limits of a table's columns on one database, and the repair of a row to fit them."""

    def __init__(self, table: Table, names: Iterable[str], dialect: str) -> None:
        self.names = tuple(names)
        self.no_nul = dialect == "postgresql"
        self.kinds: list[tuple[str, Any, bool]] = []
        for name in self.names:
            column = table.c[name]
            kind = column.type
            nullable = bool(column.nullable)
            if isinstance(kind, BigInteger):
                self.kinds.append(("int", INT64, nullable))
            elif isinstance(kind, Integer):
                self.kinds.append(("int", INT32 if dialect == "postgresql" else INT64, nullable))
            elif isinstance(kind, Float):
                self.kinds.append(("float", None, nullable))
            elif isinstance(kind, JSON):
                self.kinds.append(("json", None, nullable))
            elif isinstance(kind, LargeBinary):
                self.kinds.append(("bytes", None, nullable))
            elif isinstance(kind, String):
                self.kinds.append(("text", kind.length, nullable))
            else:
                self.kinds.append(("other", None, nullable))
        # the same, grouped by what is checked, for :meth:`fits` (called for every row the writer writes)
        self._strings = tuple(i for i, (kind, _, _) in enumerate(self.kinds) if kind in ("text", "json"))
        self._json = tuple(i for i, (kind, _, _) in enumerate(self.kinds) if kind == "json")
        self._texts = tuple(i for i, (kind, _, _) in enumerate(self.kinds) if kind == "text")
        self._limited = tuple((i, limit) for i, (kind, limit, _) in enumerate(self.kinds)
                              if kind == "text" and limit is not None)
        self._ints = tuple((i, limit[0], limit[1]) for i, (kind, limit, _) in enumerate(self.kinds) if kind == "int")
        self._floats = tuple(i for i, (kind, _, _) in enumerate(self.kinds) if kind == "float")

    def fits(self, row: tuple[Any, ...]) -> bool:
        """True when every value of ``row`` (in column order) fits as it is: the writer's fast path (all texts
        checked as one when they are ASCII, the common case; else :meth:`fits_each`)."""
        try:
            joined = "".join([v for i in self._strings if (v := row[i]) is not None])
        except TypeError:  # a value that is not text in a text column
            return self.fits_each(row)
        if not joined.isascii():
            return self.fits_each(row)
        if not json_text_is_clean(joined):  # all texts at once first: a JSON column is looked at only then
            for i in self._json:
                v = row[i]
                if v is not None and not json_text_is_clean(v):
                    return False
        if self.no_nul and "\x00" in joined:
            for i in self._texts:
                v = row[i]
                if v is not None and "\x00" in v:
                    return False
        return self._sizes_fit(row)

    def fits_all(self, rows: Sequence[tuple[Any, ...]]) -> bool:
        """True when every row of ``rows`` :meth:`fits`: the texts of all of them checked as one (the lineage of an
        aggregation, the outputs of an imported row), then each row's numbers and limited texts."""
        strings = self._strings
        try:
            joined = "".join([v for row in rows for i in strings if (v := row[i]) is not None])
        except TypeError:
            return all(self.fits_each(row) for row in rows)
        if not joined.isascii() or not json_text_is_clean(joined) or (self.no_nul and "\x00" in joined):
            return all(self.fits(row) for row in rows)
        return all(self._sizes_fit(row) for row in rows)

    def _sizes_fit(self, row: tuple[Any, ...]) -> bool:
        """Whether ``row``'s limited texts, integers and floats fit (its texts' characters are checked apart)."""
        for i, limit in self._limited:
            v = row[i]
            if v is not None and len(v) > limit:
                return False
        for i, low, high in self._ints:
            v = row[i]
            if v is not None and not low <= v <= high:
                return False
        isfinite = math.isfinite
        for i in self._floats:
            v = row[i]
            if v is not None and not isfinite(v):
                return False
        return True

    def fits_each(self, row: tuple[Any, ...]) -> bool:
        """:meth:`fits`, value by value."""
        no_nul = self.no_nul
        for value, (kind, limit, _) in zip(row, self.kinds):
            if value is None:
                continue
            if kind == "text" or kind == "json":
                if not value.isascii():
                    if kind == "json" or has_lone_surrogate(value):
                        return False
                elif kind == "json":
                    if not json_text_is_clean(value):
                        return False
                if no_nul and kind == "text" and "\x00" in value:
                    return False
                if limit is not None and len(value) > limit:
                    return False
            elif kind == "int":
                if not limit[0] <= value <= limit[1]:
                    return False
            elif kind == "float":
                if not math.isfinite(value):
                    return False
        return True

    def repair(self, row: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[str]]:
        """``row`` made to fit, and the names of the fields that changed."""
        import json

        out = list(row)
        changed: list[str] = []
        for i, (value, (kind, limit, nullable)) in enumerate(zip(row, self.kinds)):
            if value is None:
                continue
            name = self.names[i]
            fixed = value
            if kind == "text":
                fixed = clean_text(value, self.no_nul)
                if limit is not None and len(fixed) > limit:
                    fixed = fixed[:limit]
            elif kind == "json":  # NUL escapes stay: both databases' JSON takes \u0000
                if not value.isascii() or not json_text_is_clean(value):
                    fixed = json.dumps(json_data(json.loads(value)), allow_nan=False)
            elif kind == "int":
                fixed = min(max(value, limit[0]), limit[1])
            elif kind == "float":
                fixed = value if math.isfinite(value) else (None if nullable else 0.0)
            if fixed is not value:
                out[i] = fixed
                changed.append(name)
        return tuple(out), changed


def diagnose(table: Table, row: Mapping[str, Any], dialect: str) -> str | None:
    """The first field of ``row`` that ``table`` on ``dialect`` cannot hold, described; ``None`` if none is seen.

    Examples:
        >>> from scaffold.store._schema import RUNS
        >>> diagnose(RUNS, {"id": "r", "seed": 2**64}, "sqlite")
        'runs.seed = 18446744073709551616 is outside the column (BIGINT: -9223372036854775808 to 9223372036854775807)'
    """
    no_nul = dialect == "postgresql"
    for name, value in row.items():
        if name not in table.c or value is None:
            continue
        kind = table.c[name].type
        where = f"{table.name}.{name}"
        if isinstance(value, str):
            if has_lone_surrogate(value):
                return f"{where} holds a lone surrogate (not valid Unicode text)"
            if no_nul and "\x00" in value and not isinstance(kind, JSON):
                return f"{where} holds a NUL character, which PostgreSQL text cannot hold"
            length = getattr(kind, "length", None)
            if length is not None and len(value) > length:
                return f"{where} is {len(value)} characters long; the column holds {length}"
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and isinstance(kind, Integer):
            low, high = INT64 if isinstance(kind, BigInteger) or dialect != "postgresql" else INT32
            if not low <= value <= high:
                size = "BIGINT" if (low, high) == INT64 else "INTEGER"
                return f"{where} = {value} is outside the column ({size}: {low} to {high})"
        elif isinstance(value, float) and not math.isfinite(value) and isinstance(kind, JSON):
            return f"{where} is {value}, which JSON cannot hold"
        elif isinstance(kind, JSON) and check_value(value, where) is not None:
            return check_value(value, where)
    return None

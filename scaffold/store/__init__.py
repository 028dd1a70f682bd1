"""The trajectory store: every run recorded call by call in SQL, resumable, queryable, exportable.

``Store`` opens a SQLite file (the default, ``./scaffold.db``) or a PostgreSQL URL.
``Graph.run`` records into the default store unless given ``store=`` (``None`` turns it off).
SQLAlchemy is imported when a store is first opened, not with ``scaffold``.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from scaffold.store._default import DEFAULT, close_stores, default_target, resolve_store

if _TYPE_CHECKING:
    from scaffold.store._query import RunInfo, Totals
    from scaffold.store._store import Store

__all__ = ["Store", "RunInfo", "Totals", "DEFAULT", "default_target", "resolve_store", "close_stores"]


def __getattr__(name: str) -> _Any:
    if name == "Store":
        from scaffold.store._store import Store

        return Store
    if name in ("RunInfo", "Totals"):
        from scaffold.store import _query as query

        return getattr(query, name)
    raise AttributeError(f"module 'scaffold.store' has no attribute {name!r}")

"""Which store a run records to when it is not told: ``$SCAFFOLD_STORE``, else ``./scaffold.db``.

Kept free of SQLAlchemy imports so that ``store=None`` costs nothing.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from scaffold.store._store import Store

DEFAULT: Final[Any] = type("DefaultStore", (), {"__repr__": lambda self: "<default store>"})()
"""The ``store=`` default: ``$SCAFFOLD_STORE`` if set, else a SQLite file ``scaffold.db`` in the working directory."""

ENV_VAR = "SCAFFOLD_STORE"
OFF = frozenset({"", "off", "none", "0", "false", "no"})
_opened: dict[str, Store] = {}
_lock = threading.Lock()


def default_target() -> str | None:
    """The default store's URL or path, ``None`` when ``$SCAFFOLD_STORE`` turns recording off."""
    value = os.environ.get(ENV_VAR)
    if value is None:
        return str(Path.cwd() / "scaffold.db")
    return None if value.strip().lower() in OFF else value


def resolve_store(store: Any) -> Store | None:
    """A :class:`Store` from a ``store=`` argument: a ``Store``, a URL or path, ``None`` (off) or ``DEFAULT``.

    URLs and paths open one ``Store`` per process and target, shared by every run.
    """
    if store is None or store is False:
        return None
    from scaffold.store._store import Store

    if isinstance(store, Store):
        return store
    if callable(getattr(store, "recorder", None)) and callable(getattr(store, "replay_for", None)):
        return store  # type: ignore[no-any-return]  # a store's stand-in (a cluster worker's RemoteStore)
    if store is DEFAULT:
        store = default_target()
        if store is None:
            return None
    if not isinstance(store, (str, os.PathLike)):
        raise TypeError(f"store must be a Store, a URL or path, or None; got {type(store).__name__}")
    key = os.fspath(store)
    if "://" not in key:
        key = str(Path(key).expanduser().resolve())
    with _lock:
        opened = _opened.get(key)
        if opened is None or opened.writer.closed:
            opened = _opened[key] = Store(key)
        return opened


def opened_store(store: Any) -> Any:
    """The store a ``store=`` argument names if it is open in this process, without opening it: a ``Store`` (or
    a stand-in) as given, a URL, path or ``DEFAULT`` if a run has opened it; ``None`` otherwise."""
    if store is None or store is False:
        return None
    if store is DEFAULT:
        store = default_target()
        if store is None:
            return None
    if not isinstance(store, (str, os.PathLike)):
        return store
    key = os.fspath(store)
    if "://" not in key:
        key = str(Path(key).expanduser().resolve())
    with _lock:
        return _opened.get(key)


def close_stores() -> None:
    """Close every store opened from a URL or path by ``store=`` (they reopen on next use)."""
    with _lock:
        opened = list(_opened.values())
        _opened.clear()
    for store in opened:
        store.close()

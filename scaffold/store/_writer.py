"""The store's writer: one background thread turning queued records into batched transactions.

Recorders (called on the event loop) only put records on a bounded queue; this thread
converts and writes them, many per transaction, in dependency order (datasets, runs,
requests, calls, edges, run endings, rewards). When the queue is full, ``put`` waits:
memory stays bounded however fast calls finish. Writes are idempotent upserts keyed by
run id and trace id, so a resumed run that records a trace again replaces its row
instead of duplicating it.

A batch that fails is retried; if it still fails the writer stops, remembers the error,
and every later ``put`` and every pending run ending raises :class:`StoreError`: a store
that cannot record must not let runs go on as if it had.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, Engine, Table, Text, bindparam, cast, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from scaffold._errors import StoreError
from scaffold._types import Trace, TraceKind
from scaffold.store import _codec as codec
from scaffold.store._schema import CALLS, DATASETS, EDGES, ITEMS, REQUESTS, REWARDS, RUNS

_log = logging.getLogger("scaffold.store")

Done = Callable[[BaseException | None], None]
"""Called on the writer thread once a record is durable (``None``) or could not be written."""


@dataclass(slots=True)
class _Batch:
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    items: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    request_keys: dict[int, str] = field(default_factory=dict)
    """``id(request) -> key``: the choices of one request share it (the traces keep the request alive)."""
    calls: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    edges: dict[tuple[str, int], tuple[str, int, str]] = field(default_factory=dict)
    ends: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[dict[str, Any]] = field(default_factory=list)
    done: list[Done] = field(default_factory=list)
    size: int = 0


class Writer:
    """Owns the queue and the thread that writes it (internal; use :class:`~scaffold.store.Store`)."""

    def __init__(self, engine: Engine, *, max_queue: int = 20_000, batch_size: int = 2_000,
                 linger: float = 0.005, retries: int = 3) -> None:
        dialect = engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            raise StoreError(f"the store supports SQLite and PostgreSQL, not {dialect!r}")
        self.engine = engine
        self._no_nul = dialect == "postgresql"  # PostgreSQL text cannot hold a NUL character
        self._insert = insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        bulk = _Bulk if dialect == "sqlite" else _ColumnBulk
        self._requests = bulk(engine, REQUESTS, codec.REQUEST_COLUMNS, keys=None)
        self._calls = bulk(engine, CALLS, codec.CALL_COLUMNS, keys=("id",))
        self._edges = bulk(engine, EDGES, codec.EDGE_COLUMNS, keys=("call_id", "position"))
        runs = insert(RUNS)  # a run started again (resumed) keeps its row and counts the attempt
        self._run_upsert = runs.on_conflict_do_update(
            index_elements=["id"],
            set_={"status": runs.excluded.status, "error": None, "finished_at": None, "attempts": RUNS.c.attempts + 1},
        )
        self._run_end = update(RUNS).where(RUNS.c.id == bindparam("b_id")).values(
            {name: bindparam(f"b_{name}") for name in _END_COLUMNS})
        self.batch_size = batch_size
        self.linger = linger
        self.retries = retries
        self.error: StoreError | None = None
        self.written = 0
        """Trace rows written so far (a counter for benchmarks and tests)."""
        self.max_queue = max_queue
        self._items: deque[tuple[Any, ...]] = deque()
        self._wake = threading.Event()
        self._room = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scaffold-store-writer", daemon=True)
        self._closed = False
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- producer side (any thread) ---------------------------------------------------------
    def put(self, record: tuple[Any, ...]) -> None:
        """Queue one record; waits while the queue is full. Raises if the writer has failed.

        A deque append and, only when the writer sleeps, one wake-up: the recorder calls this
        on the event loop for every trace, so it must cost well under a microsecond.
        """
        if self.error is not None:
            raise self.error
        if self._closed:
            raise StoreError("the store is closed")
        items = self._items
        items.append(record)
        if not self._wake.is_set():
            self._wake.set()
        if len(items) >= self.max_queue:
            self._wait_for_room()

    def _wait_for_room(self) -> None:
        while len(self._items) >= self.max_queue and self.error is None and self._thread.is_alive():
            self._room.clear()
            self._room.wait(0.05)

    @property
    def pending(self) -> int:
        """Records queued and not yet taken by the writer."""
        return len(self._items)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far is written (raises the writer's error, if any)."""
        if self._closed and not self._thread.is_alive():
            if self.error is not None:
                raise self.error
            return
        written = threading.Event()
        failure: list[BaseException] = []

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                failure.append(exc)
            written.set()

        self.put(("flush", done))
        if not written.wait(timeout):
            raise StoreError(f"the store did not finish writing within {timeout}s")
        if failure:
            raise StoreError(f"the store could not write: {failure[0]}")

    def close(self, timeout: float | None = 30.0) -> None:
        """Write what is queued, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._items.append(("stop",))
        self._wake.set()
        self._thread.join(timeout)

    # -- writer thread --------------------------------------------------------------------
    def _loop(self) -> None:
        items, wake = self._items, self._wake
        stop = False
        while not stop:
            wake.wait()
            wake.clear()
            if len(items) < self.batch_size and self.linger:
                time.sleep(self.linger)  # let a batch gather: one transaction for many calls
            while items and not stop:
                batch = _Batch()
                while items and batch.size < self.batch_size and not stop:
                    stop = self._add_safely(batch, items.popleft())
                self._write(batch)
                self._room.set()

    def _add_safely(self, batch: _Batch, record: tuple[Any, ...]) -> bool:
        """:meth:`_add`; a record that cannot be converted fails the store instead of killing this thread
        (a dead writer would leave every run waiting for its ending forever)."""
        try:
            return self._add(batch, record)
        except Exception as exc:
            if self.error is None:
                self.error = StoreError(f"the store could not encode a {record[0]!r} record: "
                                        f"{type(exc).__name__}: {exc}")
            return False

    def _add(self, batch: _Batch, record: tuple[Any, ...]) -> bool:
        kind = record[0]
        batch.size += 1
        if kind == "trace":
            trace: Trace = record[1]
            key = None
            request = trace.request
            if request is not None and trace.kind is TraceKind.MODEL:
                key = batch.request_keys.get(id(request))
                if key is None:
                    values = codec.request_values(request)
                    key = batch.request_keys[id(request)] = values[0]
                    batch.requests.setdefault(key, _without_nul(values) if self._no_nul else values)
            values = codec.call_values(trace, key, record[2])
            batch.calls[trace.id] = _without_nul(values) if self._no_nul else values
            if trace.inputs:
                for edge in codec.edge_values(trace):
                    batch.edges[edge[:2]] = edge
        elif kind == "run":
            row = record[1]
            batch.runs[row["id"]] = row
        elif kind == "end":
            batch.ends.append({k: _without_nul(v) for k, v in record[1].items()} if self._no_nul else record[1])
            if record[2] is not None:
                batch.done.append(record[2])
        elif kind == "dataset":
            batch.datasets.setdefault(record[1]["name"], record[1])
        elif kind == "item":
            row = record[1]
            batch.items[(row["dataset"], row["position"])] = row
        elif kind == "reward":
            batch.rewards.append(record[1])
        elif kind == "flush":
            batch.done.append(record[1])
        elif kind == "stop":
            return True
        return False

    def _write(self, batch: _Batch) -> None:
        if self.error is None:
            for attempt in range(self.retries + 1):
                try:
                    with self.engine.begin() as conn:
                        self._statements(conn, batch)
                    self.written += len(batch.calls)
                    break
                except Exception as exc:  # not only DBAPIError: an OverflowError must reach the waiters too
                    if attempt == self.retries or not _transient(exc):
                        self.error = StoreError(f"the store could not write a batch of {len(batch.calls)} "
                                                f"calls: {type(exc).__name__}: {_short(exc)}")
                        break
                    time.sleep(0.1 * 2**attempt)
        for done in batch.done:
            try:
                done(self.error)
            except Exception:  # a waiter's loop may be closed; the record is written either way
                pass

    def _statements(self, conn: Any, batch: _Batch) -> None:
        insert = self._insert
        if batch.datasets:
            conn.execute(insert(DATASETS).on_conflict_do_nothing(), list(batch.datasets.values()))
        if batch.items:
            conn.execute(insert(ITEMS).on_conflict_do_nothing(), list(batch.items.values()))
        if batch.runs:
            conn.execute(self._run_upsert, list(batch.runs.values()))
        if batch.requests:
            self._requests.execute(conn, batch.requests.values())
        if batch.calls:
            self._calls.execute(conn, batch.calls.values())
        if batch.edges:
            self._edges.execute(conn, batch.edges.values())
        if batch.ends:
            conn.execute(self._run_end, [{f"b_{k}": v for k, v in end.items()} for end in batch.ends])
        if batch.rewards:
            rewards = _known_targets(conn, batch.rewards)
            if rewards:
                conn.execute(REWARDS.insert(), rewards)


def _upsert(insert: Any, table: Table, columns: tuple[str, ...], keys: tuple[str, ...] | None,
            source: Any = None) -> Any:
    """INSERT of ``columns`` (from ``source``, a SELECT, if given) that replaces the row with the same ``keys``
    (``keys=None``: keeps the existing row)."""
    stmt = insert(table) if source is None else insert(table).from_select(list(columns), source)
    if keys is None:
        return stmt.on_conflict_do_nothing()
    return stmt.on_conflict_do_update(index_elements=list(keys),
                                      set_={c: stmt.excluded[c] for c in columns if c not in keys})


class _Bulk:
    """SQLite: an upsert compiled once by SQLAlchemy (bound parameters), executed for many rows at once.

    The hot tables skip SQLAlchemy's per-row parameter processing, which cost more than
    SQLite itself: rows arrive as tuples in ``columns`` order with JSON already serialised
    (the columns' JSON type reads them back as usual).
    """

    def __init__(self, engine: Engine, table: Table, columns: tuple[str, ...], *, keys: tuple[str, ...] | None) -> None:
        compiled = _upsert(sqlite.insert, table, columns, keys).compile(dialect=engine.dialect)
        self.sql = str(compiled)
        names = list(compiled.positiontup or columns)
        self.order = None if names == list(columns) else [columns.index(name) for name in names]

    def execute(self, conn: Any, rows: Iterable[tuple[Any, ...]]) -> None:
        order = self.order
        params = list(rows) if order is None else [tuple(row[i] for i in order) for row in rows]
        conn.exec_driver_sql(self.sql, params)


class _ColumnBulk:
    """PostgreSQL: the same upsert as one statement per batch, each column sent as one array parameter
    (``INSERT ... SELECT * FROM unnest(...)``), instead of one round of parameter adaptation per row."""

    def __init__(self, engine: Engine, table: Table, columns: tuple[str, ...], *, keys: tuple[str, ...] | None) -> None:
        arrays = [cast(bindparam(f"c{i}"), postgresql.ARRAY(_array_type(table.c[name].type)))
                  for i, name in enumerate(columns)]
        rows = func.unnest(*arrays).table_valued(*columns).render_derived()
        source = select(*[_from_array(rows.c[name], table.c[name].type) for name in columns])
        self.sql = str(_upsert(postgresql.insert, table, columns, keys, source).compile(dialect=engine.dialect))
        self.names = [f"c{i}" for i in range(len(columns))]

    def execute(self, conn: Any, rows: Iterable[tuple[Any, ...]]) -> None:
        conn.exec_driver_sql(self.sql, dict(zip(self.names, map(list, zip(*rows)))))


def _array_type(kind: Any) -> Any:
    return Text() if isinstance(kind, JSON) else kind  # JSON travels as text (already serialised), cast back below


def _from_array(column: Any, kind: Any) -> Any:
    return cast(column, JSON) if isinstance(kind, JSON) else column


_END_COLUMNS = ("status", "error", "finished_at", "output", "answer", "calls", "prompt_tokens",
                "completion_tokens", "cost")


def _without_nul(value: Any) -> Any:
    """``value`` with each NUL character replaced by U+FFFD (a string, or the strings of a tuple)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, tuple):
        return tuple(_without_nul(v) for v in value)
    return value


def _known_targets(conn: Any, rewards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rewards whose run (and call) exist; the others are logged and dropped, not the whole batch."""
    runs = set(conn.execute(select(RUNS.c.id).where(RUNS.c.id.in_({r["run_id"] for r in rewards}))).scalars())
    named = {r["call_id"] for r in rewards if r["call_id"] is not None}
    calls = set(conn.execute(select(CALLS.c.id).where(CALLS.c.id.in_(named))).scalars()) if named else set()
    known = []
    for reward in rewards:
        if reward["run_id"] in runs and (reward["call_id"] is None or reward["call_id"] in calls):
            known.append(reward)
        else:
            _log.warning("reward dropped: the store has no run %r or no call %r", reward["run_id"], reward["call_id"])
    return known


def _transient(exc: BaseException) -> bool:
    """Worth retrying: a locked SQLite file or a dropped PostgreSQL connection."""
    text = str(exc).lower()
    return getattr(exc, "connection_invalidated", False) or "locked" in text or "busy" in text \
        or "connection" in text or "deadlock" in text


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__

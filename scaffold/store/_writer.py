"""The store's writer: one background thread turning queued records into batched transactions.

Recorders (called on the event loop) only put records on a bounded queue; this thread
converts and writes them, many per transaction, in dependency order (datasets, runs,
requests, calls, edges, run endings, rewards). When the queue is full, ``put`` waits:
memory stays bounded however fast calls finish. Writes are idempotent upserts keyed by
run id and trace id, so a resumed run that records a trace again replaces its row
instead of duplicating it.

Values are made storable before they reach the database (:mod:`scaffold.store._storable`). One
refused record must not cost any other run its record, so a failed batch is handled in steps:

1. a batch that fails for a passing reason (a locked file, a dropped connection) is retried whole;
2. a batch the database refuses is written again one run at a time: every other run in it is kept;
3. within the refused run, its records are written one at a time: the run keeps every trace that fits,
   and ends as ``error`` with a :class:`~scaffold._errors.RecordError` naming the run, the table, the
   row and the field. A refused run whose end comes later still ends as ``error``.

When the database itself cannot be written (unreachable, read-only, full), every waiter of the batch
gets a :class:`~scaffold._errors.StoreError`, :attr:`Writer.failure` says why (``/health`` reads it), new
runs are refused at their start, and the thread tries the database again every second until it answers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, Engine, Table, Text, bindparam, cast, func, literal_column, null, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from scaffold._errors import RecordError, StoreError
from scaffold._types import Trace, TraceKind
from scaffold._values import json_data
from scaffold.store import _codec as codec
from scaffold.store._schema import CALLS, DATASETS, EDGES, ITEMS, REQUESTS, REWARDS, RUNS
from scaffold.store._storable import Columns, diagnose

_log = logging.getLogger("scaffold.store")

Done = Callable[[BaseException | None], None]
"""Called on the writer thread once a record is durable (``None``) or could not be written."""

_REFUSED_KEPT = 10_000
_PROBE_SECONDS = 1.0


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
    done: list[tuple[str | None, Done]] = field(default_factory=list)
    """Waiters, with the run each one waits for (``None``: the whole batch, a flush)."""
    records: list[tuple[Any, ...]] = field(default_factory=list)
    """The records as queued, to write them again in smaller parts if the database refuses the batch."""
    size: int = 0


class Writer:
    """Owns the queue and the thread that writes it (internal; use :class:`~scaffold.store.Store`)."""

    def __init__(self, engine: Engine, *, max_queue: int = 20_000, batch_size: int = 2_000,
                 linger: float = 0.005, retries: int = 3) -> None:
        dialect = engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            raise StoreError(f"the store supports SQLite and PostgreSQL, not {dialect!r}")
        self.engine = engine
        self.dialect = dialect
        self._insert = insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        bulk = _Bulk if dialect == "sqlite" else _ColumnBulk
        self._requests = bulk(engine, REQUESTS, codec.REQUEST_COLUMNS, keys=None)
        self._calls = bulk(engine, CALLS, codec.CALL_COLUMNS, keys=("id",))
        self._edges = bulk(engine, EDGES, codec.EDGE_COLUMNS, keys=("call_id", "position"))
        self._rewards = bulk(engine, REWARDS, _REWARD_COLUMNS, keys=None)
        self._call_columns = Columns(CALLS, codec.CALL_COLUMNS, dialect)
        self._request_columns = Columns(REQUESTS, codec.REQUEST_COLUMNS, dialect)
        self._edge_columns = Columns(EDGES, codec.EDGE_COLUMNS, dialect)
        self._end_columns = Columns(RUNS, ("id", *_END_COLUMNS), dialect)
        runs = insert(RUNS)  # a run started again (resumed) keeps its row and counts the attempt
        self._run_upsert = runs.on_conflict_do_update(
            index_elements=["id"],
            set_={"status": runs.excluded.status, "error": null(), "finished_at": null(),
                  "attempts": RUNS.c.attempts + literal_column("1")},
        )
        self._run_end = update(RUNS).where(RUNS.c.id == bindparam("b_id")).values(
            {name: bindparam(f"b_{name}") for name in _END_COLUMNS})
        # SQLite: runs, their ends and dataset items as statements compiled once, for many rows at a time
        self._run_rows = self._end_rows = self._item_rows = None
        if dialect == "sqlite":
            self._run_rows = _RowBulk(engine, self._run_upsert, _RUN_COLUMNS)
            self._end_rows = _RowBulk(engine, self._run_end, (), prefix="b_")
            self._item_rows = _RowBulk(engine, insert(ITEMS).on_conflict_do_nothing(), ("dataset", "position", "data"))
        self.batch_size = batch_size
        self.linger = linger
        self.retries = retries
        self.failure: StoreError | None = None
        """Why the database could not be written the last time it was tried, ``None`` while it can."""
        self._refused: OrderedDict[str, RecordError] = OrderedDict()
        """Runs whose records the database refused (their ends are written as ``error``), oldest first."""
        self._stage = ""
        self.written = 0
        """Trace rows written so far (a counter for benchmarks and tests)."""
        self.max_queue = max_queue
        self._items: deque[tuple[Any, ...]] = deque()
        self._wake = threading.Event()
        self._room = threading.Event()
        self._writing = threading.Lock()
        """Held while a batch is written, by the writer thread or by :meth:`write` (one transaction at a time)."""
        self._thread = threading.Thread(target=self._loop, name="scaffold-store-writer", daemon=True)
        self._closed = False
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> StoreError | None:
        """Why this writer cannot write now: closed with its thread gone, or the database failing."""
        if not self._thread.is_alive() and not self._closed:
            return StoreError("the store's writer thread is not running")
        return self.failure

    # -- producer side (any thread) ---------------------------------------------------------
    def put(self, record: tuple[Any, ...]) -> None:
        """Queue one record; waits while the queue is full. Raises if the store is closed, and refuses
        a new run (a ``"run"`` record) while the database cannot be written.

        A deque append and, only when the writer sleeps, one wake-up: the recorder calls this
        on the event loop for every trace, so it must cost well under a microsecond.
        """
        if self._closed:
            raise StoreError("the store is closed")
        if self.failure is not None and record[0] == "run":
            raise self.failure
        items = self._items
        items.append(record)
        if not self._wake.is_set():
            self._wake.set()
        if len(items) >= self.max_queue:
            self._wait_for_room()

    def _wait_for_room(self) -> None:
        while len(self._items) >= self.max_queue and self._thread.is_alive():
            self._room.clear()
            self._room.wait(0.05)

    @property
    def pending(self) -> int:
        """Records queued and not yet taken by the writer."""
        return len(self._items)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far is written or refused; raises :class:`StoreError` if the
        database could not be written (a run's refused record is reported to that run, not here)."""
        if self._closed and not self._thread.is_alive():
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

    def write(self, records: Iterable[tuple[Any, ...]]) -> None:
        """Write ``records`` in the calling thread, :attr:`batch_size` at a time, after everything queued before
        them: a bulk load (an import) without handing each record to the writer thread. A refused record is
        handled as the thread handles it (its run ends as an error); raises :class:`StoreError` if the database
        could not be written. Stopped part way (an exception from ``records``), the batches written so far stay
        written."""
        self.flush()
        failure: list[BaseException] = []

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                failure.append(exc)

        for chunk in _chunks(records, self.batch_size):
            if self._closed:
                raise StoreError("the store is closed")
            batch = self._build([*chunk, ("flush", done)])
            with self._writing:
                self._write(batch)
            if failure:
                raise StoreError(f"the store could not write: {failure[0]}")

    def refusal(self, run_id: str) -> RecordError | None:
        """Why the database refused a record of run ``run_id`` since it last started (``None``: nothing refused;
        the last 10,000 refused runs are remembered)."""
        return self._refused.get(run_id)

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
            if self.failure is not None and not items:
                wake.wait(_PROBE_SECONDS)
                self._probe()
            else:
                wake.wait()
            wake.clear()
            if len(items) < self.batch_size and self.linger:
                time.sleep(self.linger)  # let a batch gather: one transaction for many calls
            while items and not stop:
                batch = _Batch()
                while items and batch.size < self.batch_size and not stop:
                    record = items.popleft()
                    batch.records.append(record)
                    stop = self._add_safely(batch, record)
                with self._writing:
                    self._write(batch)
                self._room.set()

    def _probe(self) -> None:
        """While the database is failing: clear :attr:`failure` as soon as it takes a write again (one that is
        rolled back)."""
        try:
            with self.engine.connect() as conn:
                with conn.begin() as transaction:
                    conn.execute(text("UPDATE schema_info SET version = version WHERE id = 1"))
                    transaction.rollback()
        except Exception:
            return
        self.failure = None

    def _add_safely(self, batch: _Batch, record: tuple[Any, ...]) -> bool:
        """:meth:`_add`; a record that cannot be converted fails its run instead of killing this thread
        (a dead writer would leave every run waiting for its ending forever)."""
        try:
            return self._add(batch, record)
        except Exception as exc:
            run = _run_of(record)
            refusal = RecordError(f"the store could not encode a {record[0]!r} record of run {run!r}: "
                                  f"{type(exc).__name__}: {exc}")
            _log.warning("%s", refusal)
            if run is not None:
                self._remember(run, refusal)
            done = _done_of(record)
            if done is not None:
                batch.done.append((run, _failing(done, refusal)))
            return False

    def _add(self, batch: _Batch, record: tuple[Any, ...]) -> bool:
        kind = record[0]
        batch.size += 1
        if kind == "trace":
            self._add_trace(batch, record[1], record[2])
        elif kind == "calls":  # ``calls`` rows made by the caller (an imported row's outputs), JSON serialised
            self._add_calls(batch, record[1])
        elif kind == "call":
            self._add_calls(batch, (record[1],))
        elif kind == "run":
            row = record[1]
            self._refused.pop(row["id"], None)  # started again (resumed): a new chance
            batch.runs[row["id"]] = row
        elif kind == "end":
            self._add_end(batch, record[1], record[2])
        elif kind == "dataset":
            batch.datasets.setdefault(record[1]["name"], record[1])
        elif kind == "item":
            row = record[1]
            batch.items[(row["dataset"], row["position"])] = row
        elif kind == "reward":
            batch.rewards.append(record[1])
        elif kind == "rewards":
            batch.rewards.extend(record[1])
        elif kind == "flush":
            batch.done.append((None, record[1]))
        elif kind == "stop":
            return True
        return False

    def _add_trace(self, batch: _Batch, trace: Trace, backend: str | None) -> None:
        key = None
        request = trace.request
        if request is not None and trace.kind is TraceKind.MODEL:
            key = batch.request_keys.get(id(request))
            if key is None:
                values = codec.request_values(request)
                if not self._request_columns.fits(values):
                    values = self._request_columns.repair(values)[0]
                key = batch.request_keys[id(request)] = values[0]
                batch.requests.setdefault(key, values)
        batch.calls[trace.id] = self._call_row(trace, key, backend)
        if trace.inputs:
            edges = codec.edge_values(trace)
            fitting = self._edge_columns.fits_all(edges)
            for edge in edges:
                if not fitting and not self._edge_columns.fits(edge):
                    edge = self._edge_columns.repair(edge)[0]  # type: ignore[assignment]
                batch.edges[edge[:2]] = edge

    def _add_calls(self, batch: _Batch, rows: Sequence[tuple[Any, ...]]) -> None:
        columns, calls = self._call_columns, batch.calls
        if columns.fits_all(rows):
            for row in rows:
                calls[row[0]] = row
            return
        for row in rows:
            calls[row[0]] = row if columns.fits(row) else self._stored_call(row, [])

    def _add_end(self, batch: _Batch, end: dict[str, Any], done: Done | None) -> None:
        end = self._end_row(end)
        refused = self._refused.get(end["id"])
        if refused is not None:  # an earlier record of this run was refused: it ends as an error
            end = {**end, "status": "error", "error": str(refused)}
        batch.ends.append(end)
        if done is not None:
            if refused is not None:
                batch.done.append((end["id"], _failing(done, refused)))
            else:
                batch.done.append((end["id"], done))

    def _call_row(self, trace: Trace, key: str | None, backend: str | None) -> tuple[Any, ...]:
        """The ``calls`` row of ``trace``, made storable (:mod:`scaffold.store._storable`)."""
        changed: list[str] = []
        try:
            values = codec.call_values(trace, key, backend)
        except (OverflowError, TypeError, ValueError, RecursionError):
            values, changed = _repaired_call(trace, key, backend)
        if not changed and self._call_columns.fits(values):
            return values
        return self._stored_call(values, changed)

    def _stored_call(self, values: tuple[Any, ...], changed: list[str]) -> tuple[Any, ...]:
        """A ``calls`` row that does not fit as it is, repaired; the fields that changed (``changed`` and the
        repair's) are named in its metadata's ``sanitised``."""
        values, more = self._call_columns.repair(values)
        changed += more
        if changed:
            meta = json.loads(values[-1])
            meta["sanitised"] = sorted(set(changed))
            values = (*values[:-1], json.dumps(meta, allow_nan=False))
        return values

    def _end_row(self, end: dict[str, Any]) -> dict[str, Any]:
        columns = self._end_columns
        row = tuple(json.dumps(end[name]) if name == "output" else end[name] for name in columns.names)
        if columns.fits(row):
            return end
        fixed = columns.repair(row)[0]
        out = dict(zip(columns.names, fixed))
        out["output"] = json.loads(out["output"])
        return out

    def _remember(self, run: str, refusal: RecordError) -> None:
        self._refused[run] = refusal
        self._refused.move_to_end(run)
        while len(self._refused) > _REFUSED_KEPT:
            self._refused.popitem(last=False)

    # -- writing, and what to do when the database refuses -------------------------------------------
    def _write(self, batch: _Batch) -> None:
        error = self._commit(batch)
        if error is None:
            self.failure = None
            self._settle(batch.done, None)
        elif _refusal(error):  # the database refused something in it: find what, keep the rest
            self._write_in_parts(batch, error)
        else:
            self._settle(batch.done, self._failing(error))

    def _failing(self, error: BaseException) -> StoreError:
        """The database itself failed (unreachable, read-only, full): new runs are refused until it answers."""
        self.failure = StoreError(f"the store cannot write to its database: {type(error).__name__}: {_short(error)}")
        _log.error("%s", self.failure)
        return self.failure

    def _commit(self, batch: _Batch) -> BaseException | None:
        """Write ``batch`` in one transaction, retrying passing failures; the last error, or ``None``."""
        for attempt in range(self.retries + 1):
            try:
                with self.engine.begin() as conn:
                    self._statements(conn, batch)
                self.written += len(batch.calls)
                return None
            except Exception as exc:  # not only DBAPIError: an OverflowError must reach the waiters too
                if attempt == self.retries or not _transient(exc):
                    return exc
                time.sleep(0.1 * 2**attempt)
        return None  # pragma: no cover - the loop always returns

    def _write_in_parts(self, batch: _Batch, error: BaseException) -> None:
        """Write a refused batch again: datasets and items one by one, then one run at a time, then one record
        at a time within a refused run."""
        groups: dict[str | None, list[tuple[Any, ...]]] = {}
        for record in batch.records:
            groups.setdefault(_run_of(record), []).append(record)
        flushes: list[tuple[str | None, Done]] = []
        shared = groups.pop(None, [])
        for record in shared:
            if record[0] == "flush":
                flushes.append((None, record[1]))
            else:
                self._write_records([record], None)
        for run, records in groups.items():
            part = self._build(records)
            failed = error if len(groups) == 1 and not shared else self._commit(part)
            if failed is None:
                self._settle(part.done, None)
            elif not _refusal(failed):
                self._settle(part.done, self._failing(failed))
            else:
                assert run is not None
                self._write_run_record_by_record(run, records, failed)
        self._settle(flushes, self.failure)

    def _write_run_record_by_record(self, run: str, records: list[tuple[Any, ...]], first: BaseException) -> None:
        """Keep what fits of a refused run: each record on its own; the run ends as ``error`` naming the first
        refused record."""
        refusal: StoreError | None = None
        waiting: list[tuple[str | None, Done]] = []
        for record in _singly(records):
            if record[0] == "end":
                waiting.extend(self._build([record]).done)
                continue
            why = self._write_records([record], run)
            if why is not None and refusal is None:
                refusal = why
        if refusal is None:  # every record fitted alone: the batch failed for a reason seen only together
            refusal = RecordError(f"the store refused the records of run {run!r}: {_short(first)}")
        if not isinstance(refusal, RecordError):  # the database failed meanwhile: nothing to blame on the run
            self._settle(waiting, refusal)
            return
        self._remember(run, refusal)
        _log.warning("%s", refusal)
        ends = [r for r in records if r[0] == "end"]
        row = ends[-1][1] if ends else {"id": run}
        self._mark_failed(row, refusal)
        self._settle(waiting, refusal)

    def _write_records(self, records: list[tuple[Any, ...]], run: str | None) -> StoreError | None:
        part = self._build(records)
        error = self._commit(part)
        if error is None:
            self._settle(part.done, None)
            return None
        if not _refusal(error):
            failure = self._failing(error)
            self._settle(part.done, failure)
            return failure
        where = self._diagnosis(part) or f"{self._stage or 'a'} row"
        owner = f" of run {run!r}" if run is not None else ""
        refusal = RecordError(f"the store refused {_record_name(records[0])}{owner}: {where} "
                              f"({type(error).__name__}: {_short(error)})")
        if run is None:
            _log.warning("%s", refusal)
        self._settle(part.done, refusal)
        return refusal

    def _build(self, records: Iterable[tuple[Any, ...]]) -> _Batch:
        part = _Batch()
        for record in records:
            part.records.append(record)
            self._add_safely(part, record)
        return part

    def _mark_failed(self, end: dict[str, Any], refusal: RecordError) -> None:
        """End a refused run as ``error`` with the reason (its row may hold earlier, committed records)."""
        row = self._end_row({**{name: end.get(name) for name in _END_COLUMNS}, "id": end["id"], "status": "error",
                             "error": str(refusal), "finished_at": end.get("finished_at") or time.time(),
                             "output": None})
        values = {name: row[name] for name in _END_COLUMNS if row[name] is not None or name in ("output", "answer")}
        try:
            with self.engine.begin() as conn:
                conn.execute(update(RUNS).where(RUNS.c.id == end["id"]).values(values))
        except Exception as exc:  # the run's row itself was refused: there is nothing to mark
            _log.warning("could not mark run %r as failed: %s", end["id"], _short(exc))

    def _diagnosis(self, part: _Batch) -> str | None:
        """The first field of ``part``'s rows that its table cannot hold, described."""
        tables: list[tuple[Table, Iterable[dict[str, Any]]]] = [
            (DATASETS, part.datasets.values()), (ITEMS, part.items.values()), (RUNS, part.runs.values()),
            (REQUESTS, (dict(zip(codec.REQUEST_COLUMNS, row)) for row in part.requests.values())),
            (CALLS, (dict(zip(codec.CALL_COLUMNS, row)) for row in part.calls.values())),
            (EDGES, (dict(zip(codec.EDGE_COLUMNS, row)) for row in part.edges.values())),
            (RUNS, part.ends), (REWARDS, part.rewards)]
        for table, rows in tables:
            for row in rows:
                found = diagnose(table, row, self.dialect)
                if found is not None:
                    key = row.get("id") or row.get("name") or row.get("call_id")
                    return f"{found} (row {key!r})" if key is not None else found
        return None

    @staticmethod
    def _settle(waiters: Iterable[tuple[str | None, Done]], error: BaseException | None) -> None:
        for _run, done in waiters:
            try:
                done(error)
            except Exception:  # a waiter's loop may be closed; the record is written (or refused) either way
                pass

    def _statements(self, conn: Any, batch: _Batch) -> None:
        insert = self._insert
        if batch.datasets:
            self._stage = "datasets"
            conn.execute(insert(DATASETS).on_conflict_do_nothing(), list(batch.datasets.values()))
        if batch.items:
            self._stage = "items"
            if self._item_rows is not None:
                self._item_rows.execute(conn, batch.items.values())
            else:
                conn.execute(insert(ITEMS).on_conflict_do_nothing(), list(batch.items.values()))
        if batch.runs:
            self._stage = "runs"
            if self._run_rows is not None:
                self._run_rows.execute(conn, batch.runs.values())
            else:
                conn.execute(self._run_upsert, list(batch.runs.values()))
        if batch.requests:
            self._stage = "requests"
            self._requests.execute(conn, batch.requests.values())
        if batch.calls:
            self._stage = "calls"
            self._calls.execute(conn, batch.calls.values())
        if batch.edges:
            self._stage = "edges"
            self._edges.execute(conn, batch.edges.values())
        if batch.ends:
            self._stage = "run end"
            if self._end_rows is not None:
                self._end_rows.execute(conn, batch.ends)
            else:
                conn.execute(self._run_end, [{f"b_{k}": v for k, v in end.items()} for end in batch.ends])
        if batch.rewards:
            self._stage = "rewards"
            rewards = _known_targets(conn, batch.rewards, batch)
            if rewards:  # JSON serialised here, as for calls: no per-row parameter processing
                self._rewards.execute(conn, [(r["run_id"], r["call_id"], r["value"], r["source"], r["created_at"],
                                              codec.dumps(r["metadata"]) if r["metadata"] else "{}") for r in rewards])
        self._stage = ""


def _chunks(records: Iterable[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    """``records`` in lists of ``size`` (the last one shorter)."""
    chunk: list[tuple[Any, ...]] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _singly(records: Iterable[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """``records`` with each group (``"calls"``, ``"rewards"``) given as its members, one record each."""
    for record in records:
        kind = record[0]
        if kind == "calls" or kind == "rewards":
            yield from ((kind[:-1], member) for member in record[1])
        else:
            yield record


def _failing(done: Done, error: BaseException) -> Done:
    """``done`` told ``error`` whatever the batch's outcome (a record already known to be refused)."""

    def settle(_outcome: BaseException | None) -> None:
        done(error)

    return settle


def _run_of(record: tuple[Any, ...]) -> str | None:
    """The run a queued record belongs to (``None`` for datasets, items and flushes)."""
    kind = record[0]
    if kind == "trace":
        return record[1].run_id  # type: ignore[no-any-return]
    if kind == "call":
        return record[1][1]  # type: ignore[no-any-return]
    if kind == "calls":
        return record[1][0][1]  # type: ignore[no-any-return]
    if kind == "rewards":
        return record[1][0]["run_id"]  # type: ignore[no-any-return]
    if kind in ("run", "end"):
        return record[1]["id"]  # type: ignore[no-any-return]
    if kind == "reward":
        return record[1]["run_id"]  # type: ignore[no-any-return]
    return None


def _done_of(record: tuple[Any, ...]) -> Done | None:
    if record[0] == "end":
        return record[2]  # type: ignore[no-any-return]
    if record[0] == "flush":
        return record[1]  # type: ignore[no-any-return]
    return None


def _record_name(record: tuple[Any, ...]) -> str:
    kind = record[0]
    if kind == "trace":
        return f"trace {record[1].id!r}"
    if kind == "call":  # groups ("calls", "rewards") are written one member at a time before they are named
        return f"trace {record[1][0]!r}"
    if kind == "dataset":
        return f"dataset {record[1]['name']!r}"
    if kind == "item":
        return f"row {record[1]['position']} of dataset {record[1]['dataset']!r}"
    return {"run": "the run's row", "end": "the run's end", "reward": "a reward"}.get(kind, f"a {kind!r} record")


def _repaired_call(trace: Trace, key: str | None, backend: str | None) -> tuple[tuple[Any, ...], list[str]]:
    """``codec.call_values`` of a trace whose token ids, logprobs or metadata cannot be packed as they are."""
    import dataclasses
    import math

    changed: list[str] = []
    token_ids, logprobs, metadata = trace.token_ids, trace.logprobs, trace.metadata
    try:
        codec.pack_ints(token_ids)
    except (OverflowError, TypeError, ValueError):
        token_ids = None
        changed.append("token_ids")
    try:
        codec.pack_floats(logprobs)
    except (OverflowError, TypeError, ValueError):
        logprobs = tuple(float(v) if isinstance(v, (int, float)) else math.nan for v in logprobs or ())
        changed.append("logprobs")
    try:
        codec.call_values(dataclasses.replace(trace, token_ids=None, logprobs=None), key, backend)
    except (OverflowError, TypeError, ValueError, RecursionError):
        metadata = json_data(dict(metadata))
        changed.append("metadata")
    fixed = dataclasses.replace(trace, token_ids=token_ids, logprobs=logprobs, metadata=metadata)
    return codec.call_values(fixed, key, backend), changed


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
        compiled = _upsert(sqlite.insert, table, columns, keys).compile(dialect=engine.dialect,
                                                                        column_keys=list(columns))
        self.sql = str(compiled)
        names = list(compiled.positiontup or columns)
        self.order = None if names == list(columns) else [columns.index(name) for name in names]

    def execute(self, conn: Any, rows: Iterable[tuple[Any, ...]]) -> None:
        order = self.order
        params = list(rows) if order is None else [tuple(row[i] for i in order) for row in rows]
        conn.exec_driver_sql(self.sql, params)


class _RowBulk:
    """SQLite: a statement compiled once (bound parameters in a fixed order), executed for many rows given as dicts,
    their JSON columns serialised here as the JSON type would (:func:`codec.dumps`, ``None`` as ``null``):
    SQLAlchemy's per-row parameter processing cost more than SQLite itself. ``prefix``: the statement's parameter
    names are the rows' keys with it (an UPDATE's ``b_id``)."""

    def __init__(self, engine: Engine, statement: Any, columns: tuple[str, ...], *, prefix: str = "") -> None:
        compiled = statement.compile(dialect=engine.dialect, column_keys=list(columns) or None)
        self.sql = str(compiled)
        names = list(compiled.positiontup or ())
        self.keys = [name[len(prefix):] if prefix and name.startswith(prefix) else name for name in names]
        table = statement.table
        self.json = [isinstance(table.c[key].type, JSON) for key in self.keys]

    def execute(self, conn: Any, rows: Iterable[dict[str, Any]]) -> None:
        plan = list(zip(self.keys, self.json))
        done: dict[int, tuple[Any, str]] = {}  # id -> a value these rows share (every run's spec...) and its JSON;
        # the value is kept, so its id is not reused while this runs

        def dumps(value: Any) -> str:
            if value is None:
                return "null"
            if type(value) is str:
                return codec.dumps(value)
            if not value and (type(value) is dict or type(value) is list):
                return "{}" if type(value) is dict else "[]"  # what json.dumps gives, without its encoder
            found = done.get(id(value))
            if found is None:
                found = done[id(value)] = (value, codec.dumps(value))
            return found[1]

        conn.exec_driver_sql(self.sql, [tuple(dumps(row[key]) if is_json else row[key] for key, is_json in plan)
                                        for row in rows])


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


_RUN_COLUMNS = ("id", "graph", "spec", "params", "inputs", "models", "seed", "status", "error", "started_at",
                "finished_at", "output", "answer", "dataset", "item", "calls", "prompt_tokens", "completion_tokens",
                "cost", "attempts")
"""The columns a run's first record holds (:class:`~scaffold.store._recorder.Recorder`)."""

_REWARD_COLUMNS = ("run_id", "call_id", "value", "source", "created_at", "metadata")
"""The columns a reward is written with (its id is the database's)."""


def _known_targets(conn: Any, rewards: list[dict[str, Any]], batch: _Batch) -> list[dict[str, Any]]:
    """The rewards whose run (and call) exist, in the database or in ``batch`` (written just before them); the
    others are logged and dropped, not the whole batch."""
    runs = {r["run_id"] for r in rewards} - batch.runs.keys()
    if runs:
        runs = set(conn.execute(select(RUNS.c.id).where(RUNS.c.id.in_(runs))).scalars())
    named = {r["call_id"] for r in rewards if r["call_id"] is not None} - batch.calls.keys()
    calls = set(conn.execute(select(CALLS.c.id).where(CALLS.c.id.in_(named))).scalars()) if named else set()
    known = []
    for reward in rewards:
        run, call = reward["run_id"], reward["call_id"]
        if (run in batch.runs or run in runs) and (call is None or call in batch.calls or call in calls):
            known.append(reward)
        else:
            _log.warning("reward dropped: the store has no run %r or no call %r", run, call)
    return known


def _refusal(exc: BaseException) -> bool:
    """Whether the database refused the records (a value out of range, a text it cannot hold, a missing
    reference), as opposed to failing itself (unreachable, locked, read-only, full, its schema gone)."""
    from sqlalchemy.exc import DataError, IntegrityError, StatementError

    orig = getattr(exc, "orig", None)
    if isinstance(exc, (DataError, IntegrityError)):
        return True
    if isinstance(exc, StatementError) and orig is not None:
        exc = orig
    if isinstance(exc, (ValueError, TypeError, OverflowError, RecursionError)):  # raised while binding values
        return True
    name = type(exc).__name__
    if name in ("DataError", "IntegrityError"):
        return True
    return name == "ProgrammingError" and "binding parameter" in str(exc).lower()


def _transient(exc: BaseException) -> bool:
    """Worth retrying: a locked SQLite file or a dropped PostgreSQL connection."""
    text = str(exc).lower()
    return getattr(exc, "connection_invalidated", False) or "locked" in text or "busy" in text \
        or "connection" in text or "deadlock" in text


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__

"""Streaming export of recorded calls, one row per trace, to JSONL or Parquet.

Runs are chosen by the filters of :func:`scaffold.store._query.filter_runs` (``graph``,
``dataset``, ``model``, ``status``, ``since``, ``until``) and/or explicit ``run_ids`` (both
given: the runs that are listed *and* match). Rows come out run by run (oldest run first),
each run's traces in execution order (start time, then id), with their request, exact token
ids and logprobs, lineage and rewards.

Memory stays flat in the size of the store: runs are read in pages (keyset pagination on
``(started_at, id)``), each page's calls and edges are streamed with ``yield_per``, and Parquet
is written row group by row group with a fixed schema. Columns (:data:`COLUMNS`)::

    run_id graph dataset item run_status run_seed              the run
    trace_id node index kind alias model backend               the trace
    messages prompt params                                     its request (messages: [{role, content}])
    text answer token_ids logprobs finish_reason               its output
    prompt_tokens completion_tokens cost latency started_at attempts status error
    inputs                                                     trace ids it read, in prompt order
    rewards run_reward                                         summed rewards of the call / of the run, or null

``params`` (the sampling parameters) is a JSON string in both formats (``json.loads`` it): one
column type whatever the parameters, and a JSONL file whose rows have different parameter keys
would otherwise be re-encoded by ``datasets.load_dataset("json")`` through a JSON codec that keeps
10 decimals, corrupting every logprob of the file. JSON has no infinities: a non-finite float
becomes ``null`` in JSONL (Parquet keeps it). Parquet needs ``pyarrow``
(``pip install scaffold-sdk[parquet]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sqlalchemy import Connection, and_, func, or_, select

from scaffold._errors import StoreError
from scaffold._json import to_json
from scaffold._messages import message_dict
from scaffold.store import _codec as codec
from scaffold.store._query import filter_runs
from scaffold.store._schema import CALLS, EDGES, REQUESTS, REWARDS, RUNS

if TYPE_CHECKING:
    from scaffold.store._store import Store

FORMATS = ("jsonl", "parquet")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}

COLUMNS = (
    "run_id", "graph", "dataset", "item", "run_status", "run_seed",
    "trace_id", "node", "index", "kind", "alias", "model", "backend",
    "messages", "prompt", "params",
    "text", "answer", "token_ids", "logprobs",
    "prompt_tokens", "completion_tokens", "cost", "latency", "started_at", "attempts",
    "status", "error", "finish_reason", "inputs", "rewards", "run_reward",
)
"""The exported columns, in order."""

RUN_PAGE = 200
"""Runs read per page; each page's calls are streamed, never held."""
YIELD_PER = 100
"""Call rows fetched from the database at a time (edges: four times as many)."""
ROW_GROUP_ROWS = 10_000
ROW_GROUP_BYTES = 64 * 2**20
"""A Parquet row group is written once it holds this many rows or about this many bytes."""

PARQUET_HINT = "Parquet export needs pyarrow: pip install 'scaffold-sdk[parquet]'"


def export(store: Store, path: str | os.PathLike[str], *, format: str | None = None,
           run_ids: Sequence[str] | None = None, row_group_rows: int = ROW_GROUP_ROWS,
           **filters: Any) -> int:
    """Write the calls of the selected runs to ``path``; returns the number of rows written.

    ``format`` is ``"jsonl"`` or ``"parquet"`` (default: from the suffix, ``.jsonl`` or
    ``.parquet``). ``run_ids`` and ``filters`` select the runs (nothing selects every run);
    a listed run id the store does not have raises :class:`~scaffold._errors.StoreError`.
    What is queued for writing is flushed first, so the export sees every finished run.

    Examples:
        >>> import scaffold as sf, tempfile, os, json
        >>> from scaffold.testing import ScriptedBackend
        >>> from scaffold.store._export import export
        >>> @sf.graph
        ... def solve(problem):
        ...     return sf.generate("Solve {problem}", model="m")
        >>> folder = tempfile.mkdtemp()
        >>> store = sf.Store(os.path.join(folder, "runs.db"))
        >>> _ = solve.run_sync({"problem": "1+1"}, models={"m": ScriptedBackend(lambda r: r"\\boxed{2}")},
        ...                    store=store, run_id="demo")
        >>> export(store, os.path.join(folder, "calls.jsonl"), graph="solve")
        1
        >>> with open(os.path.join(folder, "calls.jsonl")) as file:
        ...     row = json.loads(file.readline())
        >>> row["trace_id"], row["answer"], row["messages"]
        ('demo/generate#0', '2', [{'role': 'user', 'content': 'Solve 1+1'}])
        >>> store.close()
    """
    fmt = export_format(path, format)
    unknown = set(filters) - {"graph", "dataset", "model", "status", "since", "until"}
    if unknown:
        raise TypeError(f"unknown export filter(s): {', '.join(sorted(unknown))}")
    if isinstance(run_ids, str):
        run_ids = [run_ids]
    store.flush()
    writer = _ParquetRows(path, row_group_rows) if fmt == "parquet" else _JsonlRows(path)
    with store.engine.connect() as conn:
        try:
            for row in iter_rows(conn, run_ids=run_ids, **filters):
                writer.add(row)
        except BaseException:
            writer.abort()
            raise
    return writer.close()


def export_format(path: str | os.PathLike[str], format: str | None) -> str:
    """The export format: ``format`` if given, else from ``path``'s suffix."""
    if format is not None:
        if format.lower() not in FORMATS:
            raise ValueError(f"export format must be one of {', '.join(FORMATS)}; got {format!r}")
        return format.lower()
    suffix = Path(os.fspath(path)).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"cannot tell the export format from {os.fspath(path)!r}: "
                         f"use a .jsonl or .parquet suffix, or give format=")
    return SUFFIXES[suffix]


# -- reading ----------------------------------------------------------------------------------
def iter_rows(conn: Connection, *, run_ids: Sequence[str] | None = None, page: int | None = None,
              **filters: Any) -> Iterator[dict[str, Any]]:
    """Export rows (dicts keyed by :data:`COLUMNS`; ``params`` a dict here) of the selected runs."""
    for ids in run_pages(conn, run_ids=run_ids, page=page, **filters):
        yield from _page_rows(conn, ids)


def run_pages(conn: Connection, *, run_ids: Sequence[str] | None = None, page: int | None = None,
              **filters: Any) -> Iterator[list[str]]:
    """Ids of the selected runs, oldest first, ``page`` (default :data:`RUN_PAGE`) at a time.

    Keyset pagination on ``(started_at, id)``: runs recorded while the export runs never shift a page.
    """
    page = page or RUN_PAGE
    runs = RUNS.c
    if run_ids is not None:
        wanted = list(dict.fromkeys(run_ids))
        _check_exist(conn, wanted)
        for start in range(0, len(wanted), page):
            chunk = wanted[start:start + page]
            stmt = filter_runs(select(runs.id), **filters).where(runs.id.in_(chunk))
            ids = list(conn.execute(stmt.order_by(runs.started_at, runs.id)).scalars())
            if ids:
                yield ids
        return
    after: tuple[float, str] | None = None
    while True:
        stmt = filter_runs(select(runs.id, runs.started_at), **filters)
        if after is not None:
            stmt = stmt.where(or_(runs.started_at > after[0], and_(runs.started_at == after[0], runs.id > after[1])))
        rows = conn.execute(stmt.order_by(runs.started_at, runs.id).limit(page)).all()
        if not rows:
            return
        yield [row.id for row in rows]
        if len(rows) < page:
            return
        after = (rows[-1].started_at, rows[-1].id)


def _check_exist(conn: Connection, run_ids: Sequence[str]) -> None:
    missing: list[str] = []
    for start in range(0, len(run_ids), 500):
        chunk = run_ids[start:start + 500]
        found = set(conn.execute(select(RUNS.c.id).where(RUNS.c.id.in_(chunk))).scalars())
        missing += [run_id for run_id in chunk if run_id not in found]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise StoreError(f"no run {shown} in the store")


def _page_rows(conn: Connection, run_ids: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of one page of runs: calls and their edges streamed side by side in the same order."""
    calls, runs, requests, edges, rewards = CALLS.c, RUNS.c, REQUESTS.c, EDGES.c, REWARDS.c
    call_rewards = (select(rewards.call_id.label("call_id"), func.sum(rewards.value).label("total"))
                    .where(rewards.run_id.in_(run_ids), rewards.call_id.is_not(None))
                    .group_by(rewards.call_id).subquery())
    run_rewards = (select(rewards.run_id.label("run_id"), func.sum(rewards.value).label("total"))
                   .where(rewards.run_id.in_(run_ids), rewards.call_id.is_(None))
                   .group_by(rewards.run_id).subquery())
    # the same total order in both statements (the call id breaks ties), so edges are merged by equality only
    order = (runs.started_at, runs.id, calls.started_at, calls.id)
    stmt = (
        select(runs.graph, runs.dataset, runs.item, runs.status.label("run_status"), runs.seed.label("run_seed"),
               calls.id, calls.run_id, calls.node, calls.index, calls.kind, calls.alias, calls.model, calls.backend,
               requests.messages, requests.prompt, requests.params, calls.text, calls.answer, calls.token_ids,
               calls.logprobs, calls.prompt_tokens, calls.completion_tokens, calls.cost, calls.latency,
               calls.started_at, calls.attempts, calls.status, calls.error, calls.finish_reason,
               call_rewards.c.total.label("rewards"), run_rewards.c.total.label("run_reward"))
        .select_from(
            CALLS.join(RUNS, runs.id == calls.run_id)
            .outerjoin(REQUESTS, requests.key == calls.request_key)
            .outerjoin(call_rewards, call_rewards.c.call_id == calls.id)
            .outerjoin(run_rewards, run_rewards.c.run_id == calls.run_id))
        .where(calls.run_id.in_(run_ids))
        .order_by(*order)
        .execution_options(yield_per=YIELD_PER)
    )
    edge_stmt = (
        select(edges.call_id, edges.input_id)
        .select_from(EDGES.join(CALLS, calls.id == edges.call_id).join(RUNS, runs.id == calls.run_id))
        .where(calls.run_id.in_(run_ids))
        .order_by(*order, edges.position)
        .execution_options(yield_per=YIELD_PER * 4)
    )
    lineage = _Lineage(conn.execute(edge_stmt))
    try:
        for row in conn.execute(stmt):
            yield _row(row._mapping, lineage.inputs_of(row.id))
    finally:
        lineage.close()


class _Lineage:
    """Walks the edge stream alongside the call stream: every edge belongs to a call of the page, and
    both are in the same order, so the edges of the current call are exactly those at the head."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.rows: Iterator[Any] = iter(result)
        self.head: Any = next(self.rows, None)

    def inputs_of(self, call_id: str) -> list[str]:
        found: list[str] = []
        while self.head is not None and self.head[0] == call_id:
            found.append(self.head[1])
            self.head = next(self.rows, None)
        return found

    def close(self) -> None:
        self.result.close()


def _row(row: Mapping[Any, Any], inputs: list[str]) -> dict[str, Any]:
    messages = row["messages"]
    return {
        "run_id": row["run_id"], "graph": row["graph"], "dataset": row["dataset"], "item": row["item"],
        "run_status": row["run_status"], "run_seed": row["run_seed"],
        "trace_id": row["id"], "node": row["node"], "index": row["index"], "kind": row["kind"],
        "alias": row["alias"], "model": row["model"], "backend": row["backend"],
        "messages": [message_dict(m) for m in messages] if messages is not None else [],
        "prompt": row["prompt"], "params": row["params"] if row["params"] is not None else {},
        "text": row["text"], "answer": row["answer"],
        "token_ids": _list(codec.unpack_ints(row["token_ids"])),
        "logprobs": _list(codec.unpack_floats(row["logprobs"])),
        "prompt_tokens": row["prompt_tokens"] or 0, "completion_tokens": row["completion_tokens"] or 0,
        "cost": row["cost"], "latency": row["latency"] or 0.0, "started_at": row["started_at"],
        "attempts": row["attempts"] or 1, "status": row["status"], "error": row["error"],
        "finish_reason": row["finish_reason"], "inputs": inputs,
        "rewards": _float(row["rewards"]), "run_reward": _float(row["run_reward"]),
    }


def _list(values: tuple[Any, ...] | None) -> list[Any] | None:
    return None if values is None else list(values)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


# -- writing ----------------------------------------------------------------------------------
def _partial(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``path`` and the hidden file next to it that is written first, then renamed over it when complete
    (a failed export leaves any earlier file at ``path`` as it was)."""
    final = Path(path)
    return final, final.with_name(f".{final.name}.{os.getpid()}.partial")


class _JsonlRows:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path, self.partial = _partial(path)
        self.file: TextIO = open(self.partial, "w", encoding="utf-8")
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        row["params"] = json.dumps(row["params"], sort_keys=True, ensure_ascii=False)
        try:
            line = json.dumps(row, ensure_ascii=False, allow_nan=False)
        except ValueError:  # an infinite logprob or cost: JSON has no such number
            line = json.dumps(to_json(row), ensure_ascii=False)
        self.file.write(line)
        self.file.write("\n")
        self.count += 1

    def close(self) -> int:
        self.file.close()
        os.replace(self.partial, self.path)
        return self.count

    def abort(self) -> None:
        self.file.close()
        self.partial.unlink(missing_ok=True)


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise StoreError(PARQUET_HINT) from None
    return pyarrow, pyarrow.parquet


def parquet_schema() -> Any:
    """The Parquet export's schema (a ``pyarrow.Schema``), the same whatever the rows."""
    pa, _ = _pyarrow()
    string, int64, float64 = pa.string(), pa.int64(), pa.float64()
    types = {
        "run_id": string, "graph": string, "dataset": string, "item": int64, "run_status": string,
        "run_seed": int64, "trace_id": string, "node": string, "index": int64, "kind": string, "alias": string,
        "model": string, "backend": string,
        "messages": pa.list_(pa.struct([("role", string), ("content", string)])),
        "prompt": string, "params": string, "text": string, "answer": string,
        "token_ids": pa.list_(pa.int32()), "logprobs": pa.list_(float64),
        "prompt_tokens": int64, "completion_tokens": int64, "cost": float64, "latency": float64,
        "started_at": float64, "attempts": int64, "status": string, "error": string, "finish_reason": string,
        "inputs": pa.list_(string), "rewards": float64, "run_reward": float64,
    }
    return pa.schema([(name, types[name]) for name in COLUMNS])


class _ParquetRows:
    """Buffers rows column by column and writes a row group whenever the buffer is full."""

    def __init__(self, path: str | os.PathLike[str], row_group_rows: int) -> None:
        self.pa, pq = _pyarrow()
        self.schema = parquet_schema()
        self.path, self.partial = _partial(path)
        self.writer = pq.ParquetWriter(os.fspath(self.partial), self.schema, compression="zstd")
        self.row_group_rows = max(1, row_group_rows)
        self.columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        self.buffered = 0
        self.bytes = 0
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        row["params"] = json.dumps(row["params"], sort_keys=True, ensure_ascii=False)
        for name, column in self.columns.items():
            column.append(row[name])
        self.buffered += 1
        self.bytes += _size(row)
        if self.buffered >= self.row_group_rows or self.bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self.buffered:
            return
        table = self.pa.Table.from_pydict(self.columns, schema=self.schema)
        self.writer.write_table(table, row_group_size=self.buffered)
        self.count += self.buffered
        self.columns = {name: [] for name in COLUMNS}
        self.buffered = self.bytes = 0

    def close(self) -> int:
        self._flush()
        self.writer.close()
        os.replace(self.partial, self.path)
        return self.count

    def abort(self) -> None:
        self.writer.close()
        self.partial.unlink(missing_ok=True)


def _size(row: dict[str, Any]) -> int:
    """Roughly the memory a buffered row holds (texts, and ~40 bytes per Python int or float of the arrays)."""
    size = 500 + len(row["text"] or "") + len(row["prompt"] or "") + len(row["params"])
    size += sum(len(m["content"] or "") for m in row["messages"])
    size += 40 * (len(row["token_ids"] or ()) + len(row["logprobs"] or ()))
    return size + sum(len(i) for i in row["inputs"])


__all__ = ["COLUMNS", "FORMATS", "export", "export_format", "iter_rows", "run_pages", "parquet_schema"]

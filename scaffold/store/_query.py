"""Reading the store: runs by filter, a run's traces, its DAG, and rollups of tokens, cost and latency.

Filters (every function that lists runs takes them): ``graph``, ``dataset``, ``model``
(an alias or a concrete model name used by any call of the run), ``status``, and
``since`` / ``until`` (Unix seconds or a ``datetime``) on the run's start time.
Rollups are computed by the database (``GROUP BY``), so they stay fast on large stores.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Select, and_, case, exists, func, or_, select

from scaffold._types import Trace
from scaffold.store import _codec as codec
from scaffold.store._schema import CALLS, EDGES, ITEMS, REQUESTS, REWARDS, RUNS

if TYPE_CHECKING:
    import networkx


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A stored run's summary row."""

    id: str
    graph: str
    status: str
    """``running`` (or killed while running), ``ok``, ``error``, ``timeout`` or ``cancelled``."""
    seed: int
    started_at: float
    finished_at: float | None
    inputs: Mapping[Any, Any]
    params: Mapping[Any, Any]
    models: Mapping[Any, Any]
    """Alias -> ``{"model": ..., "backend": ...}``."""
    answer: str | None
    error: str | None
    dataset: str | None
    item: int | None
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    """Dollars; ``None`` when a price was unknown."""
    attempts: int
    """Times the run was started (more than one once resumed)."""
    output: Any = None
    """The output's shape with trace ids in place of traces."""

    @property
    def wall_time(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at


@dataclass(frozen=True, slots=True)
class Totals:
    """Tokens, cost and latency summed over a group of calls."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    """``None`` when any call's price was unknown."""
    latency: float
    """Seconds summed over the calls (not wall time: calls overlap)."""
    errors: int = 0
    """Calls that failed or were cancelled."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _timestamp(value: float | datetime | None) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else value


def filter_runs(stmt: Select[Any], *, graph: str | None = None, dataset: str | None = None, model: str | None = None,
                status: str | None = None, since: float | datetime | None = None,
                until: float | datetime | None = None) -> Select[Any]:
    """``stmt`` (a select over ``runs``) restricted by the common filters."""
    runs = RUNS.c
    if graph is not None:
        stmt = stmt.where(runs.graph == graph)
    if dataset is not None:
        stmt = stmt.where(runs.dataset == dataset)
    if status is not None:
        stmt = stmt.where(runs.status == status)
    if (start := _timestamp(since)) is not None:
        stmt = stmt.where(runs.started_at >= start)
    if (end := _timestamp(until)) is not None:
        stmt = stmt.where(runs.started_at < end)
    if model is not None:
        calls = CALLS.c
        uses = or_(calls.alias == model, calls.model == model)
        stmt = stmt.where(exists().where(and_(calls.run_id == runs.id, uses)))
    return stmt


def run_info(row: Mapping[Any, Any]) -> RunInfo:
    return RunInfo(
        id=row["id"], graph=row["graph"], status=row["status"], seed=row["seed"], started_at=row["started_at"],
        finished_at=row["finished_at"], inputs=row["inputs"] or {}, params=row["params"] or {},
        models=row["models"] or {}, answer=row["answer"], error=row["error"], dataset=row["dataset"],
        item=row["item"], calls=row["calls"] or 0, prompt_tokens=row["prompt_tokens"] or 0,
        completion_tokens=row["completion_tokens"] or 0, cost=row["cost"], attempts=row["attempts"] or 1,
        output=row["output"],
    )


def list_runs(conn: Connection, *, limit: int | None = None, offset: int = 0, newest_first: bool = True,
              **filters: Any) -> list[RunInfo]:
    runs = RUNS
    order = runs.c.started_at.desc() if newest_first else runs.c.started_at.asc()
    stmt = filter_runs(select(runs), **filters).order_by(order, runs.c.id).offset(offset)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [run_info(row._mapping) for row in conn.execute(stmt)]


def get_run(conn: Connection, run_id: str) -> RunInfo | None:
    row = conn.execute(select(RUNS).where(RUNS.c.id == run_id)).first()
    return None if row is None else run_info(row._mapping)


def load_traces(conn: Connection, run_ids: Sequence[str], *, ok_only: bool = False) -> Iterator[Trace]:
    """The recorded traces of ``run_ids`` (ordered by start time), with requests and lineage."""
    calls, edges, requests = CALLS, EDGES, REQUESTS
    stmt = select(calls).where(calls.c.run_id.in_(run_ids))
    if ok_only:
        stmt = stmt.where(calls.c.status == "ok")
    rows = [row._mapping for row in conn.execute(stmt.order_by(calls.c.started_at, calls.c.id))]
    lineage: dict[str, list[str]] = {}
    edge_rows = conn.execute(
        select(edges.c.call_id, edges.c.input_id).join(calls, calls.c.id == edges.c.call_id)
        .where(calls.c.run_id.in_(run_ids)).order_by(edges.c.call_id, edges.c.position))
    for call_id, input_id in edge_rows:
        lineage.setdefault(call_id, []).append(input_id)
    keys = {row["request_key"] for row in rows if row["request_key"] is not None}
    request_rows: dict[str, Mapping[Any, Any]] = {}
    for chunk in _chunks(sorted(keys), 500):
        for found in conn.execute(select(requests).where(requests.c.key.in_(chunk))):
            request_rows[found.key] = found._mapping
    for call in rows:
        key = call["request_key"]
        request = codec.request_from_row(request_rows.get(key) if key else None, call["seed"], call["n"])
        yield codec.trace_from_row(call, lineage.get(call["id"], ()), request)


def _chunks(values: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def rewards_of(conn: Connection, run_id: str) -> list[dict[str, Any]]:
    table = REWARDS
    rows = conn.execute(select(table).where(table.c.run_id == run_id).order_by(table.c.id))
    return [dict(row._mapping) for row in rows]


def dag(traces: Sequence[Trace], rewards: Sequence[Mapping[Any, Any]] = ()) -> networkx.DiGraph:
    """A run as a ``networkx.DiGraph``: one node per trace (keyed by trace id), an edge from each
    input to the trace that read it (``position`` = its place in the prompt).

    Node attributes: ``node``, ``index``, ``kind``, ``model``, ``status``, ``text``, ``answer``,
    ``prompt_tokens``, ``completion_tokens``, ``cost``, ``latency``, ``error``, ``reward``
    (the sum of the trace's recorded rewards, ``None`` without any).
    """
    import networkx

    graph = networkx.DiGraph()
    reward: dict[str, float] = {}
    for row in rewards:
        if row.get("call_id") is not None:
            reward[row["call_id"]] = reward.get(row["call_id"], 0.0) + row["value"]
    for t in traces:
        graph.add_node(t.id, node=t.node, index=t.index, kind=t.kind.value, model=t.model, status=t.status.value,
                       text=t.text, answer=t.answer, prompt_tokens=t.usage.prompt_tokens,
                       completion_tokens=t.usage.completion_tokens, cost=t.cost, latency=t.latency, error=t.error,
                       reward=reward.get(t.id))
    for t in traces:
        for position, source in enumerate(t.inputs):
            graph.add_edge(source, t.id, position=position)
    return graph


ROLLUP_KEYS = ("node", "model", "alias", "run", "graph", "dataset", "status")


def rollup(conn: Connection, by: str, *, run_id: str | None = None, **filters: Any) -> dict[str | None, Totals]:
    """Totals of the model calls grouped ``by`` one of :data:`ROLLUP_KEYS`, over one run or the filtered runs.

    ``node`` groups loop iterations together (``agg@0``, ``agg@1`` -> ``agg``); ``model`` is the
    concrete model, ``alias`` the graph's alias; ``status`` the call's status.
    """
    if by not in ROLLUP_KEYS:
        raise ValueError(f"rollup by must be one of {', '.join(ROLLUP_KEYS)}; got {by!r}")
    calls, runs = CALLS.c, RUNS.c
    key_column: Any = {
        "node": calls.node, "model": calls.model, "alias": calls.alias, "run": calls.run_id,
        "graph": runs.graph, "dataset": runs.dataset, "status": calls.status,
    }[by]
    unknown_cost = func.sum(case((calls.cost.is_(None), 1), else_=0))
    failed = func.sum(case((calls.status != "ok", 1), else_=0))
    stmt = (select(key_column.label("key"), func.count(), func.sum(calls.prompt_tokens),
                   func.sum(calls.completion_tokens), func.sum(calls.cost), unknown_cost, func.sum(calls.latency),
                   failed)
            .select_from(CALLS.join(RUNS, runs.id == calls.run_id))
            .where(calls.kind == "model"))
    stmt = stmt.where(runs.id == run_id) if run_id is not None else filter_runs(stmt, **filters)
    totals: dict[str | None, Totals] = {}
    for key, count, prompt, completion, cost, unknown, latency, errors in conn.execute(stmt.group_by(key_column)):
        if by == "node" and key is not None:
            key = key.split("@", 1)[0]
        previous = totals.get(key)
        current = Totals(int(count), int(prompt or 0), int(completion or 0), None if unknown else float(cost or 0.0),
                         float(latency or 0.0), int(errors or 0))
        totals[key] = current if previous is None else _add(previous, current)
    return totals


def _add(a: Totals, b: Totals) -> Totals:
    cost = None if a.cost is None or b.cost is None else a.cost + b.cost
    return Totals(a.calls + b.calls, a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens,
                  cost, a.latency + b.latency, a.errors + b.errors)


def count_runs(conn: Connection, **filters: Any) -> tuple[int, Totals]:
    """How many runs the filters select, and their calls, tokens and cost summed (from the runs' own counters)."""
    runs = RUNS.c
    unknown_cost = func.sum(case((runs.cost.is_(None), 1), else_=0))
    columns: Any = select(func.count(), func.sum(runs.calls), func.sum(runs.prompt_tokens),
                                  func.sum(runs.completion_tokens), func.sum(runs.cost), unknown_cost,
                                  func.sum(case((runs.status.in_(("ok", "running")), 0), else_=1)))
    stmt = filter_runs(columns, **filters)
    count, calls, prompt, completion, cost, unknown, failed = conn.execute(stmt).one()
    return int(count), Totals(int(calls or 0), int(prompt or 0), int(completion or 0),
                              None if unknown else float(cost or 0.0), 0.0, int(failed or 0))


def distinct_values(conn: Connection) -> dict[str, list[str]]:
    """The graphs, datasets, statuses and models (aliases and concrete models) the store's runs use."""
    runs, calls = RUNS.c, CALLS.c
    found: dict[str, list[str]] = {}
    for name, column in (("graph", runs.graph), ("dataset", runs.dataset), ("status", runs.status)):
        found[name] = sorted(v for (v,) in conn.execute(select(column).distinct()) if v is not None)
    models = {v for (v,) in conn.execute(select(calls.model).distinct()) if v is not None}
    models |= {v for (v,) in conn.execute(select(calls.alias).distinct()) if v is not None}
    found["model"] = sorted(models)
    return found


def dataset_item(conn: Connection, dataset: str, position: int) -> dict[str, Any] | None:
    """Row ``position`` of a recorded dataset, or ``None``."""
    items = ITEMS.c
    row = conn.execute(select(items.data).where(and_(items.dataset == dataset, items.position == position))).first()
    return None if row is None else dict(row[0] or {})

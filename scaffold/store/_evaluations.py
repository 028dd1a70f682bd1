"""Reading and writing evaluations: named groups of runs ``{name}-{item}`` made by ``scaffold eval``."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, insert, select

from scaffold._errors import EvaluationError
from scaffold._json import to_json
from scaffold._types import Status, Trace, TraceKind, Usage
from scaffold.store._codec import unpack_floats
from scaffold.store._query import RunInfo, run_info
from scaffold.store._schema import CALLS, EDGES, EVALUATIONS, REWARDS, RUNS

EVAL_SOURCE = "eval"
"""The source of the correctness rewards an evaluation records (1.0 or 0.0 for the run's answer and for every
model trace's and given output's)."""


@dataclass(frozen=True, slots=True)
class EvaluationInfo:
    """A stored evaluation: what was run (``settings``) over how many problems."""

    name: str
    graph: str
    dataset: str | None
    settings: Mapping[str, Any]
    """Topology, build parameters as given, model specs (never keys), data source, limit, seed, sampling."""
    problems: int
    created_at: float


def _info(row: Mapping[Any, Any]) -> EvaluationInfo:
    return EvaluationInfo(name=row["name"], graph=row["graph"], dataset=row["dataset"], settings=row["settings"] or {},
                          problems=row["problems"], created_at=row["created_at"])


def save(conn: Connection, name: str, *, graph: str, dataset: str | None, settings: Mapping[str, Any],
         problems: int) -> None:
    conn.execute(insert(EVALUATIONS).values(name=name, graph=graph, dataset=dataset,
                                            settings=to_json(dict(settings)), problems=problems,
                                            created_at=time.time()))


def get(conn: Connection, name: str) -> EvaluationInfo | None:
    row = conn.execute(select(EVALUATIONS).where(EVALUATIONS.c.name == name)).first()
    return None if row is None else _info(row._mapping)


def listed(conn: Connection, prefix: str | None = None) -> list[EvaluationInfo]:
    stmt = select(EVALUATIONS)
    if prefix:
        stmt = stmt.where(EVALUATIONS.c.name.startswith(prefix, autoescape=True))
    return [_info(row._mapping) for row in conn.execute(stmt.order_by(EVALUATIONS.c.created_at, EVALUATIONS.c.name))]


def runs_of(conn: Connection, name: str) -> list[RunInfo]:
    """The runs of evaluation ``name`` (ids ``{name}-{item}``), by item."""
    runs = RUNS.c
    stmt = select(RUNS).where(runs.id.startswith(f"{name}-", autoescape=True), runs.item.is_not(None))
    found = [run_info(row._mapping) for row in conn.execute(stmt)]
    return sorted((r for r in found if r.id == f"{name}-{r.item}"), key=lambda r: r.item or 0)


def answer_traces(conn: Connection, run_ids: Sequence[str], chunk: int = 200) -> dict[str, list[Trace]]:
    """Each run's traces with what a report reads (id, node, index, kind, answer, status, lineage), oldest first.

    Requests, texts, token ids and logprobs are not loaded: a report of 100,000 traces reads only
    a few small columns (:meth:`Store.traces` gives whole traces).
    """
    calls, edges = CALLS.c, EDGES.c
    traces: dict[str, list[Trace]] = {run_id: [] for run_id in run_ids}
    for start in range(0, len(run_ids), chunk):
        part = list(run_ids[start:start + chunk])
        lineage: dict[str, list[str]] = {}
        stmt = (select(edges.call_id, edges.input_id).join(CALLS, calls.id == edges.call_id)
                .where(calls.run_id.in_(part)).order_by(edges.call_id, edges.position))
        for call_id, input_id in conn.execute(stmt):
            lineage.setdefault(call_id, []).append(input_id)
        rows = conn.execute(select(calls.id, calls.run_id, calls.node, calls.index, calls.kind, calls.answer,
                                   calls.status, calls.started_at)
                            .where(calls.run_id.in_(part)).order_by(calls.started_at, calls.id))
        for found in rows:
            row = found._mapping  # not attributes: a Row's .index and .count are tuple methods
            traces[row["run_id"]].append(Trace(
                id=row["id"], run_id=row["run_id"], node=row["node"], index=row["index"], kind=TraceKind(row["kind"]),
                answer=row["answer"], status=Status(row["status"]), started_at=row["started_at"] or 0.0,
                inputs=tuple(lineage.get(row["id"], ())),
            ))
    return traces


def node_traces(conn: Connection, run_ids: Sequence[str], node: str, *, texts: bool = False,
                logprobs: bool = False, chunk: int = 200) -> dict[str, list[Trace]]:
    """Each run's finished model (or given) traces of ``node``, in index order, with what a replay reads: answer,
    usage, cost, metadata, and the texts and logprobs when asked (they are the large columns)."""
    calls = CALLS.c
    columns = [calls.id, calls.run_id, calls.index, calls.kind, calls.answer, calls.prompt_tokens,
               calls.completion_tokens, calls.cost, calls.metadata]
    columns += [calls.text] if texts else []
    columns += [calls.logprobs] if logprobs else []
    found: dict[str, list[Trace]] = {run_id: [] for run_id in run_ids}
    for start in range(0, len(run_ids), chunk):
        part = list(run_ids[start:start + chunk])
        stmt = (select(*columns).where(calls.run_id.in_(part), calls.node == node,
                                       calls.kind.in_([TraceKind.MODEL.value, TraceKind.EXTERNAL.value]),
                                       calls.status == Status.OK.value)
                .order_by(calls.run_id, calls.index))
        for row in conn.execute(stmt):
            values = row._mapping
            found[values["run_id"]].append(Trace(
                id=values["id"], run_id=values["run_id"], node=node, index=values["index"],
                kind=TraceKind(values["kind"]),
                answer=values["answer"], usage=Usage(values["prompt_tokens"] or 0, values["completion_tokens"] or 0),
                cost=values["cost"], metadata=dict(values["metadata"] or {}), text=values["text"] if texts else "",
                logprobs=unpack_floats(values["logprobs"]) if logprobs else None,
            ))
    return found


def rewards_of(conn: Connection, run_ids: Sequence[str], source: str, chunk: int = 500) -> list[dict[str, Any]]:
    """The rewards from ``source`` of the given runs."""
    table = REWARDS
    rows: list[dict[str, Any]] = []
    for start in range(0, len(run_ids), chunk):
        stmt = select(table).where(table.c.run_id.in_(list(run_ids[start:start + chunk])), table.c.source == source)
        rows.extend(dict(row._mapping) for row in conn.execute(stmt.order_by(table.c.id)))
    return rows


def same_evaluation(found: EvaluationInfo, graph: str, dataset: str, settings: Mapping[str, Any],
                    problems: int) -> None:
    """Resuming under a name recorded with other settings would mix two evaluations: refuse it."""
    differences = []
    if found.graph != graph:
        differences.append(f"graph {found.graph!r} != {graph!r}")
    if found.dataset != dataset:
        differences.append(f"dataset {found.dataset!r} != {dataset!r}")
    if found.problems != problems:
        differences.append(f"{found.problems} problems != {problems}")
    for key in sorted(set(found.settings) | set(settings)):
        if found.settings.get(key) != settings.get(key):
            differences.append(f"{key}: {_short(found.settings.get(key))} != {_short(settings.get(key))}")
    if differences:
        raise EvaluationError(f"evaluation {found.name!r} was recorded with other settings ({'; '.join(differences)}); "
                              "resume it with the same ones or choose another name")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""``Graph.map(..., cluster=...)``: rows spread over Ray workers, results streamed back as they finish.

The driver reads rows lazily and keeps at most ``concurrency`` of them in flight per worker,
handing the next row to whichever worker has a free place, so fast workers take more (a pull by
free places: nothing is assigned ahead; see :mod:`scaffold.cluster._jobs`). Each worker
(``RowWorker``) runs ``Graph.run`` on its rows with the async executor, its models rebuilt from
the driver's (same backends, same parameters) and their limits leased from one
:class:`~scaffold.cluster._limits.LimitsCoordinator`.

Every row has its run id fixed by the driver before it is sent (``{run_id}-{i}``, or a fresh id).
When a worker dies, its rows go back to the front of the queue and run again *under the same
id*: ``Graph.run`` finds the recorded calls and does not send them again (resume). A replacement
worker is started while ``Cluster.max_restarts`` allows; with no worker left the job fails with
:class:`~scaffold.ClusterError`, its recorded data intact.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._budget import Budget
from scaffold._errors import ClusterError
from scaffold._graph_map import _END, _progress, _row_reader
from scaffold._result import RunResult
from scaffold.cluster._cluster import Cluster
from scaffold.cluster._jobs import ClusterJob, Dispatcher, JobRow

if TYPE_CHECKING:
    from scaffold._graph import Graph


async def map_on_cluster(
    graph: Graph,
    rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
    *,
    cluster: Cluster,
    models: Mapping[str, Any],
    concurrency: int,
    seed: int | None,
    progress: bool,
    run_id: str | None,
    dataset: str | None,
    store: Any,
    items: Sequence[int] | None,
    run_kwargs: dict[str, Any],
) -> AsyncIterator[RunResult]:
    """What ``Graph.map(..., cluster=...)`` yields: one result per row, in completion order."""
    per_worker, budget = _checked(cluster, concurrency, run_kwargs)
    job = ClusterJob(cluster, budget)
    try:
        await job.start(graph, models, store, run_kwargs)
    except BaseException:
        await job.close()
        raise
    feed = _Feed(rows, items, seed, run_id, recorded=dataset is not None)
    dispatch = Dispatcher(job, per_worker, dataset)
    bar = _progress(progress, rows)
    try:
        while True:
            while not dispatch.pending and dispatch.has_place():
                job_row = await feed.next()
                if job_row is None:
                    break
                dispatch.add(job_row)
            result = await dispatch.next()
            if result is None:
                if not feed.exhausted:  # rows are left and no worker can take them
                    raise ClusterError("every worker of the job died and no replacement may start; what was "
                                       "recorded is kept: run the job again with the same run_id to resume")
                break
            if bar is not None:
                bar.update(1)
            yield result
    finally:
        dispatch.cancel()
        await job.close()
        if bar is not None:
            bar.close()


def _checked(cluster: Cluster, concurrency: int, run_kwargs: dict[str, Any]) -> tuple[int, Budget | None]:
    """Rows in flight per worker, and the budget (taken out of ``run_kwargs``: workers lease it)."""
    per_worker = cluster.concurrency or concurrency
    if per_worker < 1:
        raise ValueError(f"concurrency must be at least 1, got {per_worker}")
    budget = run_kwargs.pop("budget", None)
    if budget is not None and not isinstance(budget, Budget):
        raise ClusterError(f"budget must be a scaffold Budget, got {type(budget).__name__}")
    for unsupported in ("subscribers", "on_delta"):
        if run_kwargs.get(unsupported):
            raise ClusterError(f"{unsupported}= runs in the caller's process and cannot go to cluster workers")
    return per_worker, budget


class _Feed:
    """The dataset's rows, read lazily, each with its position, seed and run id fixed when it is read."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
                 items: Sequence[int] | None, seed: int | None, run_id: str | None, *, recorded: bool) -> None:
        self.read = _row_reader(rows)
        self.numbers = None if items is None else iter(items)
        self.seed, self.run_id, self.recorded = seed, run_id, recorded
        self.position = 0
        self.exhausted = False

    async def next(self) -> JobRow | None:
        if self.exhausted:
            return None
        row = await self.read()
        if row is _END:
            self.exhausted = True
            return None
        if self.numbers is not None:
            given = next(self.numbers, None)
            if given is None:
                raise ValueError("items has fewer positions than there are rows")
            self.position = given
        position = self.position
        self.position += 1
        return JobRow(row, position, None if self.seed is None else self.seed + position,
                      f"{self.run_id}-{position}" if self.run_id is not None else uuid.uuid4().hex[:16],
                      position if self.recorded else None)

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

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scaffold._budget import Budget
from scaffold._errors import ClusterError
from scaffold._result import RunResult
from scaffold._runner import MapRequest, RowFeed, progress_bar
from scaffold.cluster._jobs import ClusterJob, Dispatcher

if TYPE_CHECKING:
    from scaffold.cluster._cluster import Cluster


async def map_on_cluster(request: MapRequest, cluster: Cluster) -> AsyncIterator[RunResult]:
    """What ``Graph.map(..., runner=cluster)`` yields: one result per row, in completion order."""
    run_kwargs = dict(request.run_kwargs)
    per_worker, budget = _checked(cluster, request.concurrency, run_kwargs)
    job = ClusterJob(cluster, budget)
    try:
        await job.start(request.graph, request.models, request.store, run_kwargs)
    except BaseException:
        await job.close()
        raise
    feed = RowFeed(request, fresh_ids=True)  # a retried row must keep its id: fixed here, before it is sent
    dispatch = Dispatcher(job, per_worker, request.dataset)
    bar = progress_bar(request.progress, request.rows)
    try:
        while True:
            while not dispatch.pending and dispatch.has_place():
                planned = await feed.next()
                if planned is None:
                    break
                dispatch.add(planned)
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

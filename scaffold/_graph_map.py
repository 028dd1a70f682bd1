"""The local runner: ``Graph.map``'s rows in this process, a bounded number at a time, results streamed.

Rows are read lazily from any iterable or async iterable and results are yielded, never kept,
so memory does not grow with the dataset. Every row shares the same bound models (so per-alias
limits hold across the batch) and the same budget; a row that fails yields a failed result
instead of stopping the batch. Rows are numbered by :class:`~scaffold._runner.RowFeed`, as every
runner numbers them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from scaffold._errors import GraphError, InputError, StoreError
from scaffold._executor import bind_models
from scaffold._result import RunResult
from scaffold._runner import MapRequest, PlannedRow, RowFeed, progress_bar
from scaffold.store._default import resolve_store


class LocalRunner:
    """The default :class:`~scaffold._runner.Runner`: rows run as tasks of this process's event loop.

    Examples:
        >>> LocalRunner().map.__name__
        'map'
    """

    def map(self, request: MapRequest) -> AsyncIterator[RunResult]:
        """``request``'s results, in completion order (see :meth:`Graph.map <scaffold.Graph.map>`)."""
        return map_runs(request)


LOCAL = LocalRunner()
"""The runner ``Graph.map`` uses when given none."""


async def map_runs(request: MapRequest) -> AsyncIterator[RunResult]:
    """What :meth:`Graph.map <scaffold.Graph.map>` yields in this process."""
    if request.concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {request.concurrency}")
    graph = request.graph
    bound = bind_models(graph, request.models)
    run_kwargs = {**request.run_kwargs, "store": await asyncio.to_thread(resolve_store, request.store),
                  "dataset": request.dataset}
    bar = progress_bar(request.progress, request.rows)
    feed = RowFeed(request)
    pending: set[asyncio.Task[RunResult]] = set()
    try:
        while True:
            while len(pending) < request.concurrency:
                planned = await feed.next()
                if planned is None:
                    break
                pending.add(asyncio.create_task(_run_row(graph, planned, bound, run_kwargs)))
            if not pending:
                break
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if bar is not None:
                    bar.update(1)
                yield task.result()
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if bar is not None:
            bar.close()


async def _run_row(graph: Any, planned: PlannedRow, models: Mapping[str, Any], kwargs: dict[str, Any]) -> RunResult:
    try:
        result = await graph.run(planned.row, models=models, seed=planned.seed, raise_on_error=False,
                                 run_id=planned.run_id, item=planned.item, **kwargs)
    except (InputError, GraphError, StoreError) as exc:  # a bad row must not stop the batch
        result = RunResult(run_id="", graph=graph.name, inputs=planned.row, seed=planned.seed or 0, status="error",
                           output=None, error=exc)
    result.index = planned.position
    return result

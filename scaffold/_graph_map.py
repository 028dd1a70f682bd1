"""``Graph.map``: one graph over a dataset, a bounded number of rows at a time, results streamed as they finish.

Rows are read lazily from any iterable or async iterable and results are yielded, never kept,
so memory does not grow with the dataset. Every row shares the same bound models (so per-alias
limits hold across the batch) and the same budget; a row that fails yields a failed result
instead of stopping the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._errors import GraphError, InputError, StoreError
from scaffold._executor import bind_models
from scaffold._result import RunResult
from scaffold.store._default import resolve_store

if TYPE_CHECKING:
    from scaffold._graph import Graph

_END: Any = object()


async def map_runs(
    graph: Graph,
    rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
    *,
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
    """What :meth:`Graph.map <scaffold.Graph.map>` yields (its docstring says what each argument does)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    numbers = None if items is None else iter(items)
    bound = bind_models(graph, models)
    run_kwargs["store"] = await asyncio.to_thread(resolve_store, store)
    bar = _progress(progress, rows)
    next_row = _row_reader(rows)
    pending: set[asyncio.Task[RunResult]] = set()
    position = 0
    try:
        while True:
            while len(pending) < concurrency:
                row = await next_row()
                if row is _END:
                    break
                if numbers is not None:
                    given = next(numbers, None)
                    if given is None:
                        raise ValueError("items has fewer positions than there are rows")
                    position = given
                row_seed = None if seed is None else seed + position
                row_kwargs = {**run_kwargs, "dataset": dataset, "item": position if dataset else None,
                              "run_id": None if run_id is None else f"{run_id}-{position}"}
                pending.add(asyncio.create_task(_run_row(graph, row, position, bound, row_seed, row_kwargs)))
                position += 1
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


async def _run_row(
    graph: Graph, row: Mapping[str, Any], index: int, models: Mapping[str, Any], seed: int | None,
    kwargs: dict[str, Any],
) -> RunResult:
    try:
        result = await graph.run(row, models=models, seed=seed, raise_on_error=False, **kwargs)
    except (InputError, GraphError, StoreError) as exc:  # a bad row must not stop the batch
        result = RunResult(run_id="", graph=graph.name, inputs=row, seed=seed or 0, status="error",
                           output=None, error=exc)
    result.index = index
    return result


def _row_reader(dataset: Iterable[Any] | AsyncIterable[Any]) -> Callable[[], Awaitable[Any]]:
    """An async ``next`` over a sync or async iterable, returning ``_END`` when it is exhausted."""
    if isinstance(dataset, AsyncIterable):
        rows_async = aiter(dataset)

        async def next_async() -> Any:
            try:
                return await anext(rows_async)
            except StopAsyncIteration:
                return _END

        return next_async
    rows = iter(dataset)

    async def next_sync() -> Any:
        return next(rows, _END)

    return next_sync


def _progress(enabled: bool, dataset: Iterable[Any] | AsyncIterable[Any]) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    total = len(dataset) if hasattr(dataset, "__len__") else None  # type: ignore[arg-type]
    return tqdm(total=total, unit="run")

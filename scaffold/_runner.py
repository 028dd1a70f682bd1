"""Where ``Graph.map``'s rows run: the :class:`Runner` protocol, the one row numbering, and the row feed.

``Graph.map`` turns its arguments into a :class:`MapRequest` and hands it to a runner: this process
(:class:`~scaffold._graph_map.LocalRunner`, the default) or Ray workers (:class:`~scaffold.Cluster`).
The core knows runners only through this protocol, so it imports no scale-out code; a runner of your
own (a job queue, another cluster manager) is any object with a ``map(request)`` method.

Every runner numbers rows the same way (:func:`plan_row`): row ``i`` of a map (``i`` its position, or
the one ``items`` gives it) runs with seed ``seed + i`` and run id ``{run_id}-{i}``, and is recorded as
item ``i`` of ``dataset`` when one is named. :class:`RowFeed` reads the rows lazily and numbers them.

Examples:
    >>> plan_row({"problem": "1+1"}, 3, seed=10, run_id="eval", recorded=True)
    PlannedRow(row={'problem': '1+1'}, position=3, seed=13, run_id='eval-3', item=3)
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from scaffold._result import RunResult

if TYPE_CHECKING:
    from scaffold._graph import Graph

Rows = Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]]
"""A dataset: any iterable or async iterable of input mappings, read lazily."""


@dataclass(frozen=True, kw_only=True)
class MapRequest:
    """One ``Graph.map`` call, as a runner receives it (:meth:`Graph.map <scaffold.Graph.map>` says what each
    field does)."""

    graph: Graph
    rows: Rows
    models: Mapping[str, Any]
    concurrency: int
    seed: int | None = None
    progress: bool = False
    run_id: str | None = None
    dataset: str | None = None
    store: Any = None
    items: Sequence[int] | None = None
    run_kwargs: dict[str, Any]
    """The rest of ``Graph.map``'s keyword arguments: what each row's ``Graph.run`` gets."""


@runtime_checkable
class Runner(Protocol):
    """Runs a :class:`MapRequest`'s rows and yields one :class:`~scaffold.RunResult` per row as each finishes
    (``result.index`` is the row's position); a row that fails yields a failed result.

    Examples:
        >>> from scaffold._graph_map import LocalRunner
        >>> isinstance(LocalRunner(), Runner)
        True
    """

    def map(self, request: MapRequest) -> AsyncIterator[RunResult]:
        """The results of ``request``'s rows, in completion order."""
        ...


@dataclass(frozen=True)
class PlannedRow:
    """One row with everything fixed before it first runs, so a retry or a resume runs it the same way."""

    row: Mapping[str, Any]
    position: int
    """The row's position in its dataset (``RunResult.index`` of its result)."""
    seed: int | None
    run_id: str | None
    """``None``: the run picks a fresh id (a runner that must know it beforehand passes ``fresh_ids``)."""
    item: int | None = None
    """The dataset item it is recorded as (``None``: none)."""


def plan_row(row: Mapping[str, Any], position: int, *, seed: int | None, run_id: str | None, recorded: bool,
             fresh_id: bool = False) -> PlannedRow:
    """Row ``position``'s seed (``seed + position``), run id (``{run_id}-{position}``; without ``run_id``,
    ``None`` or, with ``fresh_id``, a new random one) and dataset item (``position`` when ``recorded``)."""
    if run_id is not None:
        planned_id: str | None = f"{run_id}-{position}"
    else:
        planned_id = uuid.uuid4().hex[:16] if fresh_id else None
    return PlannedRow(row, position, None if seed is None else seed + position, planned_id,
                      position if recorded else None)


END: Any = object()
"""What :func:`row_reader`'s ``next`` returns once the rows are exhausted."""


def row_reader(rows: Rows) -> Callable[[], Awaitable[Any]]:
    """An async ``next`` over a sync or async iterable, returning :data:`END` when it is exhausted."""
    if isinstance(rows, AsyncIterable):
        rows_async = aiter(rows)

        async def next_async() -> Any:
            try:
                return await anext(rows_async)
            except StopAsyncIteration:
                return END

        return next_async
    plain = iter(rows)

    async def next_sync() -> Any:
        return next(plain, END)

    return next_sync


class RowFeed:
    """A request's rows, read lazily, each planned (:func:`plan_row`) when it is read.

    Examples:
        >>> import asyncio
        >>> feed = RowFeed(MapRequest(graph=None, rows=[{"x": 1}, {"x": 2}], models={}, concurrency=1, seed=0,
        ...                           run_kwargs={}))
        >>> asyncio.run(feed.next()).seed, asyncio.run(feed.next()).seed, asyncio.run(feed.next())
        (0, 1, None)
    """

    def __init__(self, request: MapRequest, *, fresh_ids: bool = False) -> None:
        self.read = row_reader(request.rows)
        self.numbers = None if request.items is None else iter(request.items)
        self.seed, self.run_id, self.recorded = request.seed, request.run_id, bool(request.dataset)
        self.fresh_ids = fresh_ids
        self.position = 0
        self.exhausted = False

    async def next(self) -> PlannedRow | None:
        """The next row, planned; ``None`` once the rows are exhausted."""
        if self.exhausted:
            return None
        row = await self.read()
        if row is END:
            self.exhausted = True
            return None
        if self.numbers is not None:
            given = next(self.numbers, None)
            if given is None:
                raise ValueError("items has fewer positions than there are rows")
            self.position = given
        position = self.position
        self.position += 1
        return plan_row(row, position, seed=self.seed, run_id=self.run_id, recorded=self.recorded,
                        fresh_id=self.fresh_ids)


def progress_bar(enabled: bool, rows: Rows, unit: str = "run") -> Any:
    """A tqdm bar over ``rows`` (its total when they have a length), or ``None`` when not ``enabled``."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    total = len(rows) if hasattr(rows, "__len__") else None  # type: ignore[arg-type]
    return tqdm(total=total, unit=unit)

"""What runs leave to Python's cyclic garbage collector, and how much they make it work.

Every collection pauses every run in the process, so a finished run (failed or not) must be freed by
reference counting alone, and the call path must allocate few objects that outlive a collection.
The cycle tests hold on any CPython (reference counting frees what no cycle holds); the counts of allocations
and collections are CPython 3.11-3.13's (a generational collector triggered by allocations), and only those
tests skip elsewhere.
"""

from __future__ import annotations

import asyncio
import gc
import platform
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from helpers import rsa

import scaffold as sf
from scaffold import _call, _executor
from scaffold._errors import BackendError
from scaffold._kinds import call as call_kind
from scaffold._types import Request
from scaffold.testing import SimulatedBackend

pytestmark = pytest.mark.skipif(platform.python_implementation() != "CPython",
                                reason="reference counting (what frees a finished run at once) is CPython's")
generational_counts = pytest.mark.skipif(not (3, 11) <= sys.version_info[:2] <= (3, 13),
                                         reason="counts of CPython 3.11-3.13's generational collector")

SMALL_RSA = rsa.build(n=8, k=4, steps=3)


class FailingSeeds(SimulatedBackend):
    """Raises a ``BackendError`` for every request whose seed is a multiple of 7, after a loop turn or at
    once (then calls started in the same turn are cancelled before they run)."""

    def __init__(self, *, at_once: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.at_once = at_once

    async def complete(self, request: Request) -> Any:
        if (request.seed or 0) % 7 == 0:
            if not self.at_once:
                await asyncio.sleep(0)
            raise BackendError("refused")
        return await super().complete(request)


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """The cyclic collector off (and back as it was after the test)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def left_for_the_collector(batch: Callable[[], Awaitable[Any]]) -> int:
    """Objects that only the cyclic collector can free once ``batch`` has run (collector paused) and its
    results are dropped; a first run warms caches, whose entries are not garbage."""
    asyncio.run(batch())
    gc.collect()
    asyncio.run(batch())
    return gc.collect()


def batch_of(graph: sf.Graph, backend: Any, problems: int = 6, **run: Any) -> Callable[[], Awaitable[Any]]:
    run = {"store": None, **run}

    async def batch() -> None:
        await asyncio.gather(*[graph.run({"problem": f"p{i}"}, models={"solver": backend}, seed=i, **run)
                               for i in range(problems)])

    return batch


@pytest.mark.parametrize("supports_n", [False, True])
def test_a_finished_rsa_batch_leaves_nothing_for_the_cyclic_collector(collector_paused, supports_n):
    """Concurrent RSA runs with latency (calls suspended and resumed) are freed by reference counting alone."""
    backend = SimulatedBackend(median=0.002, sigma=0.5, supports_n=supports_n)
    assert left_for_the_collector(batch_of(SMALL_RSA, backend)) == 0


@pytest.mark.parametrize("cache", [False, True])
def test_a_recorded_batch_leaves_nothing_for_the_cyclic_collector(collector_paused, tmp_path, cache):
    """Recording into a SQLite store (events, the recorder, the writer thread), and answering calls from its
    response cache (the second batch repeats the first one's requests), add no reference cycle."""
    store = sf.Store(str(tmp_path / "runs.db"))
    backend = SimulatedBackend(median=0.0)
    try:
        assert left_for_the_collector(batch_of(SMALL_RSA, backend, store=store, cache=cache)) == 0
    finally:
        store.close()
    assert backend.calls == 6 * 32 * (1 if cache else 2)


# plain try/except below: pytest.raises keeps the traceback in a cycle of its own
async def raised_and_caught(graph: sf.Graph, backend: Any) -> None:
    for i in range(4):
        try:
            await graph.run({"problem": f"p{i}"}, models={"solver": backend}, seed=i, store=None)
        except sf.RunError:
            continue
        raise AssertionError("the run should have failed")


async def mapped(graph: sf.Graph, backend: Any) -> None:
    rows = [{"problem": f"p{i}"} for i in range(8)]
    statuses = [r.status async for r in graph.map(rows, models={"solver": backend}, concurrency=4, seed=0, store=None)]
    assert "error" in statuses


async def cancelled_by_the_caller(graph: sf.Graph, backend: Any) -> None:
    task = asyncio.ensure_future(graph.run({"problem": "p"}, models={"solver": backend}, seed=0, store=None))
    await asyncio.sleep(0.02)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("the run should have been cancelled")


@pytest.mark.parametrize("how", ["failure returned", "failure at once", "failure raised", "failure in a map",
                                 "run timeout", "call timeout", "cancelled"])
def test_a_failed_run_leaves_nothing_for_the_cyclic_collector(collector_paused, how):
    """A run that fails, times out or is cancelled, with calls in flight and jobs still waiting, is freed by
    reference counting once its result and error are dropped (no run -> error -> traceback -> run cycle)."""
    slow = SimulatedBackend(median=0.05, sigma=0.1)
    batches: dict[str, Callable[[], Awaitable[Any]]] = {
        "failure returned": batch_of(SMALL_RSA, FailingSeeds(median=0.002), raise_on_error=False),
        "failure at once": batch_of(SMALL_RSA, FailingSeeds(median=0.002, at_once=True), raise_on_error=False),
        "failure raised": lambda: raised_and_caught(SMALL_RSA, FailingSeeds(median=0.002)),
        "failure in a map": lambda: mapped(SMALL_RSA, FailingSeeds(median=0.002, at_once=True)),
        "run timeout": batch_of(SMALL_RSA, slow, timeout=0.02, raise_on_error=False),
        "call timeout": batch_of(SMALL_RSA, slow, call_timeout=0.02, raise_on_error=False),
        "cancelled": lambda: cancelled_by_the_caller(SMALL_RSA, slow),
    }
    assert left_for_the_collector(batches[how]) == 0


def test_the_per_call_path_makes_no_closure_cells():
    """The functions run once per model call keep their locals out of cells (a comprehension reading a local,
    or a walrus inside one, makes a cell object on every call, which then lives as long as the call)."""
    for function in (_call.call, _call.answered, call_kind.fire_call, _executor.Run.resolve, _executor.Run.finish,
                     _executor.Run.when_ready, _executor.Run.schedule, _executor.ok_traces):
        assert function.__code__.co_cellvars == (), function.__qualname__


@generational_counts
def test_results_hold_six_container_objects_per_model_call(collector_paused):
    """A finished batch's results keep about six container objects per model call (the trace, its request, the
    messages and their pair, the lineage tuple, the metadata): nothing else of the run survives it."""
    results: list[sf.RunResult] = []

    async def batch() -> None:
        models = {"solver": SimulatedBackend(median=0.0)}
        results.extend(await asyncio.gather(*[
            rsa.build().run({"problem": f"p{i}"}, models=models, seed=i, store=None) for i in range(8)]))

    asyncio.run(batch())
    results.clear()
    gc.collect()
    before = gc.get_count()[0]  # with the collector off it counts every container allocated, minus those freed
    asyncio.run(batch())
    calls = sum(len(r.traces) - 1 for r in results)  # every trace but the vote is a model call
    assert (gc.get_count()[0] - before) / calls < 6.5


@generational_counts
def test_a_64_problem_batch_triggers_few_young_collections():
    """Allocation pressure: at the default thresholds, 64 concurrent RSA problems (11,264 calls, zero latency)
    trigger under 13.5 collections per 1,000 calls (15.6 before the call path was trimmed; each collection
    means 700 more container objects allocated than freed)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    counts: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            counts.append(info["generation"])

    async def batch() -> int:
        models = {"solver": SimulatedBackend(median=0.0)}
        results = await asyncio.gather(*[
            rsa.build().run({"problem": f"p{i}"}, models=models, seed=i, store=None) for i in range(64)])
        return sum(len(r.traces) - 1 for r in results)

    try:
        asyncio.run(batch())
        gc.collect()
        gc.callbacks.append(count)
        try:
            calls = asyncio.run(batch())
        finally:
            gc.callbacks.remove(count)
    finally:
        gc.set_threshold(*thresholds)
    assert calls == 64 * 176
    assert len(counts) / calls * 1000 < 13.5

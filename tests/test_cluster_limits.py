"""Cluster-wide limits, in one process: the coordinator and the workers' leases, called as Ray would.

A fake actor handle turns ``handle.method.remote(...)`` into a task on the same event loop, so the
lease logic (never more places or units than the limit, no deadlock, dead workers' places freed)
is checked quickly and exactly; the Ray tests check the same at a real server.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest
from helpers import max_in_window, wait_until_async

from scaffold import BudgetExceeded, ClusterError, Request
from scaffold.backends._model import estimate_tokens
from scaffold.cluster._limits import LeasedBudget, LeasedPlaces, LeasedRate, LimitsCoordinator, LimitSpec
from scaffold.cluster._store import store_plan
from scaffold.store import Store


class _Method:
    def __init__(self, target: Any, name: str, delay: float) -> None:
        self.target, self.name, self.delay = target, name, delay

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        async def call() -> Any:
            await asyncio.sleep(self.delay)  # a round trip
            value = getattr(self.target, self.name)(*args)
            return await value if asyncio.iscoroutine(value) else value

        return asyncio.ensure_future(call())


async def settled(timeout: float = 30.0) -> None:
    """Wait until every other task on this loop (fake remote calls, leases waiting for their answers) is done;
    fail the test if some are still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while others := asyncio.all_tasks() - {asyncio.current_task()}:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{len(others)} tasks never finished: {others}")
        await asyncio.wait(others, timeout=left)


class FakeHandle:
    """``handle.method.remote(...)`` on the running loop, after ``delay`` seconds (like a Ray actor call)."""

    def __init__(self, target: Any, delay: float = 0.001) -> None:
        self.target, self.delay = target, delay

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.target, name, self.delay)


@pytest.mark.parametrize(("limit", "workers"), [(6, 4), (2, 4), (1, 3)])
def test_leased_places_never_pass_the_limit_and_every_call_gets_one(limit: int, workers: int) -> None:
    """Many calls on several workers: at most ``limit`` at once in all, even with fewer places than workers."""

    async def main() -> tuple[int, int]:
        owner = LimitsCoordinator({"m": LimitSpec("in_flight", limit)})
        handle = FakeHandle(owner)
        leases = [LeasedPlaces(handle, "m", w, limit, keep=limit // workers) for w in range(workers)]
        level = peak = done = 0
        rng = random.Random(0)

        async def call(lease: LeasedPlaces) -> None:
            nonlocal level, peak, done
            await lease.acquire()
            level += 1
            peak = max(peak, level)
            await asyncio.sleep(rng.uniform(0.0, 0.004))
            level -= 1
            lease.release()
            done += 1

        await asyncio.wait_for(asyncio.gather(*(call(leases[i % workers]) for i in range(200))), 30)
        await settled()  # the places given back are with the coordinator
        assert owner.places["m"].limit - owner.places["m"].free == sum(lease.lease for lease in leases)
        return peak, done

    peak, done = asyncio.run(main())
    assert done == 200 and peak == limit  # reached, never passed


def test_a_dead_workers_places_return_to_the_others() -> None:
    async def main() -> None:
        owner = LimitsCoordinator({"m": LimitSpec("in_flight", 2)})
        handle = FakeHandle(owner)
        dead, alive = LeasedPlaces(handle, "m", 0, 2, keep=1), LeasedPlaces(handle, "m", 1, 2, keep=1)
        await dead.acquire()
        await dead.acquire()  # both places held by a worker that then dies without releasing
        waiting = asyncio.ensure_future(alive.acquire())
        await wait_until_async(lambda: owner.places["m"].waiters, timeout=30,
                               message="the live worker's request for a place never reached the coordinator")
        assert not waiting.done()
        owner.forget(0)
        await asyncio.wait_for(waiting, 1)
        assert owner.places["m"].held == {1: 1}

    asyncio.run(main())


def test_leased_rates_keep_the_shared_pace_across_workers() -> None:
    """Four workers drawing batches from one 1,200/min pacer start no faster than it allows."""
    per_minute, workers, calls = 1200.0, 4, 80

    async def main() -> list[float]:
        owner = LimitsCoordinator({"r": LimitSpec("rate", per_minute)})
        handle = FakeHandle(owner, delay=0.002)
        rates = [LeasedRate(handle, "r", per_minute, batch=20 / (2 * workers)) for _ in range(workers)]
        starts: list[float] = []

        async def call(rate: LeasedRate) -> None:
            await rate.acquire()
            starts.append(time.monotonic())

        await asyncio.gather(*(call(rates[i % workers]) for i in range(calls)))
        return sorted(starts)

    starts = asyncio.run(main())
    burst, per_second = per_minute / 60, per_minute / 60
    for window in (0.25, 0.5, 1.0):
        assert max_in_window(starts, window) <= burst + window * per_second + 1
    assert starts[-1] - starts[0] >= (calls - burst - 1) / per_second * 0.95  # the pace held over the whole job


def test_a_round_trip_longer_than_a_batch_books_ahead_and_wastes_no_batches() -> None:
    """A coordinator 0.3 s away (a loaded cluster) and batches 0.125 s long: booked for "now", every batch had
    passed when it arrived and was dropped, each wasted batch pushing the shared pace back (35 fetches for 30
    calls). Booked twice the round trip ahead, batches arrive before their time: 30 calls need about 12."""
    per_minute, workers, calls = 1200.0, 2, 30

    async def main() -> list[float]:
        owner = LimitsCoordinator({"r": LimitSpec("rate", per_minute)})
        handle = FakeHandle(owner, delay=0.15)  # each way: a 0.3 s round trip
        rates = [LeasedRate(handle, "r", per_minute, batch=20 / (2 * 4)) for _ in range(workers)]
        starts: list[float] = []

        async def call(rate: LeasedRate) -> None:
            await rate.acquire()
            starts.append(time.monotonic())

        try:
            await asyncio.wait_for(asyncio.gather(*(call(rates[i % workers]) for i in range(calls))), 30)
        except TimeoutError:
            pytest.fail(f"{len(starts)} of {calls} calls started in 30 s; fetches: {[r.fetches for r in rates]}")
        assert all(rate.lead >= 0.3 for rate in rates)  # at least one round trip ahead
        assert sum(rate.fetches for rate in rates) <= 24
        return sorted(starts)

    starts = asyncio.run(main())
    burst, per_second = per_minute / 60, per_minute / 60
    for window in (0.25, 0.5, 1.0):
        assert max_in_window(starts, window) <= burst + window * per_second + 1


def test_a_finished_prefetch_whose_units_passed_does_not_spin() -> None:
    """A prefetch that has finished, before its done-callback ran, with every unit it brought already passed (a
    starved worker): awaiting it returned at once without yielding, so ``acquire`` spun for ever holding the
    event loop (a cluster test hung for 40 minutes beside a pocket build). Now it fetches afresh and starts."""
    finished = threading.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        owner = LimitsCoordinator({"r": LimitSpec("rate", 1200.0)})
        rate = LeasedRate(FakeHandle(owner), "r", 1200.0, batch=2.5)
        prefetch = asyncio.get_running_loop().create_future()
        prefetch.set_result(None)
        rate._prefetch = prefetch  # finished; its units came and passed (none left in rate._grants)
        await rate.acquire()
        assert rate.fetches == 1

    def worker() -> None:
        try:
            asyncio.run(main())
        except BaseException as error:  # reported by the test thread
            failure.append(error)
        finished.set()

    # a spinning event loop cannot time itself out: watch it from another thread
    threading.Thread(target=worker, daemon=True).start()
    assert finished.wait(30), "acquire() spun on a finished prefetch without yielding"
    assert failure == []


def test_leased_budget_never_grants_more_than_the_budget() -> None:
    async def main() -> tuple[int, int, dict[str, float]]:
        owner = LimitsCoordinator({"b": LimitSpec("budget", 1000)})
        handle = FakeHandle(owner)
        budgets = [LeasedBudget(handle, "b", 1000, None, workers=3) for _ in range(3)]
        request = Request(messages=(("user", "x" * 40),), params={"max_tokens": 90})  # books 101 tokens
        booked = refused = 0
        for i in range(30):
            try:
                booked += await budgets[i % 3].book_async(request)
            except BudgetExceeded:
                refused += 1
        for budget in budgets:
            await budget.flush(final=True)
        return booked, refused, owner.report()["budgets"]["b"]

    booked, refused, totals = asyncio.run(main())
    # each request books its estimate (90 max_tokens + 40 characters / 4 + 1 for the message: 101); three workers
    # leasing chunks of one budget still grant every request that fits whole (9), and refuse the other 21
    per_request = estimate_tokens(Request(messages=(("user", "x" * 40),), params={"max_tokens": 90}))
    fits = 1000 // per_request
    assert (booked, refused) == (fits * per_request, 30 - fits) and totals["refused"] == refused
    assert totals["granted_tokens"] <= 1000


def test_sqlite_is_refused_for_a_cluster_of_several_machines(tmp_path: Any) -> None:
    store = Store(tmp_path / "runs.db")
    try:
        assert store_plan(store, 1)[0] == "writer"
        with pytest.raises(ClusterError, match="PostgreSQL"):
            store_plan(store, 2)
    finally:
        store.close()


def test_a_backend_that_cannot_be_sent_to_workers_is_named() -> None:
    import threading

    import scaffold as sf
    from scaffold.cluster._worker import plan_models
    from scaffold.testing import ScriptedBackend

    class Local:
        capabilities = ScriptedBackend(lambda r: "x").capabilities

        def __init__(self) -> None:
            self.lock = threading.Lock()

        async def complete(self, request: Request) -> list[Any]:
            raise NotImplementedError

    with pytest.raises(ClusterError, match="'solver'.*Local.*cannot be sent"):
        plan_models({"solver": sf.Model(Local())})

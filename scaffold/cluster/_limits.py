"""Limits that hold across a Ray cluster: one coordinator actor owns each, workers hold leases.

A ``Model``'s ``max_in_flight``, ``requests_per_minute`` and ``tokens_per_minute`` and a run's
:class:`~scaffold.Budget` are counted by one :class:`LimitsCoordinator` actor for the whole job.
Asking it on every call would cost a round trip (about a millisecond), so workers lease:

- **in flight** — a worker holds a lease of places; a call takes a local one (no round trip) and,
  when none is free, the worker asks the coordinator for more. The coordinator never leases more
  than ``max_in_flight`` places in all, so the calls in flight across the cluster never pass it. A
  worker keeps at most its fair share (``limit // workers``) of idle places and gives back the rest.
- **rates** — the coordinator runs the one GCRA pacer (:class:`~scaffold.RateLimit`) and hands
  out *batches* of units with the time the first may start; the worker starts unit ``j`` of a batch
  no earlier than ``start + j × interval``, exactly when one-by-one reservations would have let it,
  and drops units whose time passed unused. Batches are a fraction of the burst and fetched ahead,
  so the bound is the single pacer's and the round trip is off the call's path. A batch is booked to
  start no sooner than twice the last round trip from now (``LeasedRate.lead``), so on a slow cluster
  its units are still ahead when they arrive: booked for "now", they would all have passed on arrival,
  and a worker would fetch and drop batch after batch without ever starting a call.
- **budget** — tokens and dollars are granted in chunks; a worker books against its chunk and asks
  for another when it runs out. The coordinator never grants more than the budget, so the job never
  spends more than it (up to one call's overshoot per worker for dollars, as for one process).

When a worker dies the driver calls :meth:`LimitsCoordinator.forget`: its leased places return.
The 429-driven pacing (:class:`~scaffold._throttle.Throttle`) stays per worker: each backs off on
the rate limits it sees.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scaffold._errors import BudgetExceeded, ClusterError
from scaffold._limits import RateLimit
from scaffold._types import Completion, Request
from scaffold.backends._model import estimate_tokens


@dataclass(frozen=True)
class LimitSpec:
    """One shared limit: ``kind`` is ``"in_flight"`` (``value`` places), ``"rate"`` (``value`` units
    a minute, ``burst`` units at once) or ``"budget"`` (``value`` tokens, ``cost`` dollars).

    Examples:
        >>> LimitSpec("in_flight", 8).kind
        'in_flight'
    """

    kind: str
    value: float | None
    burst: float | None = None
    cost: float | None = None


class _Places:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.free = limit
        self.held: dict[int, int] = {}
        self.waiters: deque[tuple[asyncio.Future[int], int, int]] = deque()
        self.peak = 0

    def serve(self) -> None:
        while self.waiters and self.free > 0:
            future, worker, wanted = self.waiters.popleft()
            if future.done():
                continue
            self.grant(future, worker, wanted)

    def grant(self, future: asyncio.Future[int], worker: int, wanted: int) -> None:
        given = min(wanted, self.free, 1 if self.waiters else wanted)  # one each while others wait
        self.free -= given
        self.held[worker] = self.held.get(worker, 0) + given
        self.peak = max(self.peak, self.limit - self.free)
        future.set_result(given)


class LimitsCoordinator:
    """The one owner of a job's shared limits (run as a Ray actor; internal).

    Examples:
        >>> import asyncio
        >>> owner = LimitsCoordinator({"m:in_flight": LimitSpec("in_flight", 2)})
        >>> asyncio.run(owner.lease("m:in_flight", worker=0, wanted=5))
        2
    """

    def __init__(self, specs: Mapping[str, LimitSpec]) -> None:
        self.places: dict[str, _Places] = {}
        self.rates: dict[str, RateLimit] = {}
        self.budgets: dict[str, dict[str, float]] = {}
        for key, spec in specs.items():
            if spec.kind == "in_flight":
                self.places[key] = _Places(int(spec.value or 1))
            elif spec.kind == "rate":
                self.rates[key] = RateLimit(float(spec.value or 1), spec.burst)
            elif spec.kind == "budget":
                self.budgets[key] = {"max_tokens": float("inf") if spec.value is None else spec.value,
                                     "max_cost": float("inf") if spec.cost is None else spec.cost,
                                     "granted_tokens": 0.0, "granted_cost": 0.0, "tokens": 0.0, "cost": 0.0,
                                     "unpriced": 0.0, "refused": 0.0}
            else:
                raise ClusterError(f"unknown limit kind {spec.kind!r}")

    async def lease(self, key: str, worker: int, wanted: int) -> int:
        """Places for ``worker`` (waits until at least one is free; returns how many it got)."""
        places = self.places[key]
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if places.free > 0 and not places.waiters:
            places.grant(future, worker, max(1, wanted))
        else:
            places.waiters.append((future, worker, max(1, wanted)))
        return await future

    def give_back(self, key: str, worker: int, count: int) -> None:
        """``worker`` returns ``count`` idle places."""
        places = self.places[key]
        count = min(count, places.held.get(worker, 0))
        places.held[worker] = places.held.get(worker, 0) - count
        places.free += count
        places.serve()

    def reserve(self, key: str, units: float, lead: float = 0.0) -> float:
        """Book ``units`` on the shared pacer, the first no sooner than ``lead`` seconds from now (the time the
        answer takes to reach the worker); seconds until the first may start."""
        return lead + self.rates[key].reserve(units, now=time.monotonic() + max(0.0, lead))

    def grant_tokens(self, key: str, wanted: float) -> float:
        """Up to ``wanted`` tokens of the budget (0 once it is all granted)."""
        budget = self.budgets[key]
        given = max(0.0, min(wanted, budget["max_tokens"] - budget["granted_tokens"]))
        budget["granted_tokens"] += given
        return given

    def grant_cost(self, key: str, wanted: float) -> float:
        """Up to ``wanted`` dollars of the budget (0 once they are all granted)."""
        budget = self.budgets[key]
        given = max(0.0, min(wanted, budget["max_cost"] - budget["granted_cost"]))
        budget["granted_cost"] += given
        return given

    def spent(self, key: str, tokens: float, cost: float, unpriced: int, refused: int,
              returned_tokens: float = 0.0, returned_cost: float = 0.0) -> None:
        """A worker reports what it spent (and may return grants it will not use)."""
        budget = self.budgets[key]
        budget["tokens"] += tokens
        budget["cost"] += cost
        budget["unpriced"] += unpriced
        budget["refused"] += refused
        budget["granted_tokens"] -= returned_tokens
        budget["granted_cost"] -= returned_cost

    def forget(self, worker: int) -> None:
        """``worker`` died: every place it held is free again."""
        for places in self.places.values():
            count = places.held.pop(worker, 0)
            places.free += count
            places.serve()

    def report(self) -> dict[str, Any]:
        """Peak places leased per in-flight limit, and each budget's totals."""
        return {"peaks": {key: p.peak for key, p in self.places.items()},
                "held": {key: p.limit - p.free for key, p in self.places.items()},
                "budgets": {key: dict(b) for key, b in self.budgets.items()}}


class LeasedPlaces:
    """A worker's side of a cluster-wide in-flight limit (stands in for :class:`~scaffold.InFlightLimit`).

    Used on the worker's one event loop. ``acquire`` takes a leased place, asking the coordinator for
    one only when every leased place is taken.

    Examples:
        >>> LeasedPlaces.__mro__[0].__name__
        'LeasedPlaces'
    """

    def __init__(self, coordinator: Any, key: str, worker: int, limit: int, keep: int) -> None:
        self.coordinator, self.key, self.worker = coordinator, key, worker
        self.limit = limit
        self.keep = keep
        self.in_flight = 0
        self.peak = 0
        self.lease = 0
        self.asks = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._asking = False

    async def acquire(self) -> None:
        """Take a place (a leased one, or one the coordinator grants)."""
        if self.in_flight < self.lease and not self._waiters:
            self._take()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._ask()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a place while being cancelled: pass it on
            else:
                try:
                    self._waiters.remove(future)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        """Give a place back: to a local waiter, or to the coordinator beyond this worker's share."""
        self.in_flight -= 1
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                self._take()
                future.set_result(None)
                return
        idle = self.lease - self.in_flight
        if idle > self.keep:
            self.lease -= idle - self.keep
            self.coordinator.give_back.remote(self.key, self.worker, idle - self.keep)

    def _take(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight

    def _ask(self) -> None:
        if self._asking:
            return
        self._asking = True
        self.asks += 1
        asyncio.ensure_future(self._leased(self.coordinator.lease.remote(self.key, self.worker, len(self._waiters))))

    async def _leased(self, ref: Any) -> None:
        try:
            given = await ref
        except BaseException as exc:  # the coordinator is gone: nobody can grant a place any more
            self._asking = False
            while self._waiters:
                future = self._waiters.popleft()
                if not future.done():
                    future.set_exception(ClusterError(f"the limits coordinator is gone: {exc}"))
            return
        self._asking = False
        self.lease += given
        while self._waiters and self.in_flight < self.lease:
            future = self._waiters.popleft()
            if not future.done():
                self._take()
                future.set_result(None)
        idle = self.lease - self.in_flight
        if idle > self.keep and not self._waiters:
            self.lease -= idle - self.keep
            self.coordinator.give_back.remote(self.key, self.worker, idle - self.keep)
        if self._waiters:
            self._ask()


class LeasedRate:
    """A worker's side of a cluster-wide rate (stands in for :class:`~scaffold.RateLimit`).

    Examples:
        >>> LeasedRate.__mro__[0].__name__
        'LeasedRate'
    """

    def __init__(self, coordinator: Any, key: str, per_minute: float, batch: float) -> None:
        self.coordinator, self.key = coordinator, key
        self.per_minute = per_minute
        self.interval = 60.0 / per_minute
        self.batch = max(1.0, batch)
        self.fetches = 0
        self._grants: deque[list[float]] = deque()  # [time the next unit may start, units left]
        self._debt = 0.0
        self._gate = asyncio.Lock()
        self._prefetch: asyncio.Future[None] | None = None
        self.lead = 0.0
        """Seconds ahead a batch is booked: twice the slowest recent round trip to the coordinator."""

    async def acquire(self, cost: float = 1.0) -> None:
        """Wait until ``cost`` units may start (first come, first served), then spend them."""
        async with self._gate:
            need = cost + self._debt
            self._debt = 0.0
            start: float | None = None
            while need > 1e-9:
                now = time.monotonic()
                self._drop_expired(now)
                if not self._grants:
                    prefetch = self._prefetch
                    if prefetch is not None and not prefetch.done():
                        await asyncio.shield(prefetch)
                    else:  # awaiting a finished prefetch would not yield: its units are spent or passed, fetch more
                        self._prefetch = None
                        await self._fetch(max(self.batch, need))
                    continue
                grant = self._grants[0]
                take = min(need, grant[1])
                if start is None:
                    start = grant[0]
                grant[0] += take * self.interval
                grant[1] -= take
                need -= take
                if grant[1] <= 1e-9:
                    self._grants.popleft()
            if need < 0:
                self._debt = need  # a credit from adjust(): fewer units next time
            if self._prefetch is None and sum(g[1] for g in self._grants) < self.batch / 2:
                self._prefetch = asyncio.ensure_future(self._fetch(self.batch))
                self._prefetch.add_done_callback(self._prefetched)
            if start is not None:
                wait = start - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)

    def adjust(self, delta: float) -> None:
        """Correct an earlier acquisition by ``delta`` units (the real token count was known late)."""
        self._debt += delta

    def _drop_expired(self, now: float) -> None:
        """Units whose time passed unused are lost: spending them late would be a burst."""
        while self._grants:
            grant = self._grants[0]
            if grant[0] >= now:
                return
            lost = (now - grant[0]) / self.interval
            if lost < grant[1]:
                grant[0], grant[1] = now, grant[1] - lost
                return
            self._grants.popleft()

    async def _fetch(self, units: float) -> None:
        self.fetches += 1
        sent = time.monotonic()
        delay = await self.coordinator.reserve.remote(self.key, units, self.lead)
        arrived = time.monotonic()
        self.lead = max(2.0 * (arrived - sent), 0.8 * self.lead)  # follows a slow round trip at once, a fast one slowly
        start = sent + delay  # booked after `sent`: starting from here is never earlier than allowed
        if self._grants:  # units of one worker never overlap in time
            last = self._grants[-1]
            start = max(start, last[0] + last[1] * self.interval)
        self._grants.append([start, units])

    def _prefetched(self, future: asyncio.Future[None]) -> None:
        if self._prefetch is future:  # acquire() may have let it go already and started another
            self._prefetch = None
        if not future.cancelled():
            future.exception()  # retrieved: a failed prefetch is retried by the next acquire


class LeasedBudget:
    """A worker's side of a cluster-wide :class:`~scaffold.Budget` (booked asynchronously, in chunks).

    Examples:
        >>> LeasedBudget.__mro__[0].__name__
        'LeasedBudget'
    """

    def __init__(self, coordinator: Any, key: str, max_tokens: int | None, max_cost: float | None,
                 workers: int) -> None:
        self.coordinator, self.key = coordinator, key
        self.max_tokens, self.max_cost = max_tokens, max_cost
        self.token_chunk = max(1.0, (max_tokens or 0) / (8 * workers))
        self.cost_chunk = (max_cost or 0.0) / (8 * workers)
        self.tokens_left = 0.0
        self.cost_left = 0.0
        self._report = {"tokens": 0.0, "cost": 0.0, "unpriced": 0, "refused": 0}
        self._flush: asyncio.Handle | None = None

    def book(self, request: Request) -> int:  # pragma: no cover - budget_layer uses book_async
        raise ClusterError("a cluster budget is booked with book_async")

    async def book_async(self, request: Request) -> int:
        """Reserve an estimate for ``request`` or raise :class:`~scaffold.BudgetExceeded`."""
        if self.max_cost is not None and self.cost_left <= 0:
            self.cost_left += await self.coordinator.grant_cost.remote(self.key, self.cost_chunk - self.cost_left)
            if self.cost_left <= 0:
                self._count("refused", 1)
                raise BudgetExceeded(f"dollar budget spent across the cluster (${self.max_cost:.4f})")
        booked = estimate_tokens(request) if self.max_tokens is not None else 0
        if self.max_tokens is not None and self.tokens_left < booked:
            wanted = booked - self.tokens_left + self.token_chunk
            self.tokens_left += await self.coordinator.grant_tokens.remote(self.key, wanted)
            if self.tokens_left < booked:
                self._count("refused", 1)
                raise BudgetExceeded(f"token budget of {self.max_tokens} granted across the cluster; "
                                     f"this call may need {booked}, {int(self.tokens_left)} are left here")
        self.tokens_left -= booked
        return booked

    def settle(self, booked: int, completions: list[Completion] | tuple[Completion, ...] | None) -> None:
        """Replace a booking by what the call used; report spending to the coordinator (batched)."""
        used = sum(c.usage.total_tokens for c in completions or ())
        if completions and not used:
            used = booked
        self.tokens_left += booked - used
        cost = sum(c.cost for c in completions or () if c.cost is not None)
        self.cost_left -= cost
        self._count("tokens", used)
        self._count("cost", cost)
        self._count("unpriced", sum(1 for c in completions or () if c.cost is None))

    def _count(self, name: str, value: float) -> None:
        self._report[name] += value
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(0.2, self.flush)

    def flush(self, *, final: bool = False) -> Any:
        """Send what was spent since the last report (and, at the end, give back unused grants)."""
        self._flush = None
        report = self._report
        self._report = {"tokens": 0.0, "cost": 0.0, "unpriced": 0, "refused": 0}
        returned_tokens = max(0.0, self.tokens_left) if final else 0.0
        returned_cost = max(0.0, self.cost_left) if final else 0.0
        if final:
            self.tokens_left -= returned_tokens
            self.cost_left -= returned_cost
        return self.coordinator.spent.remote(self.key, report["tokens"], report["cost"], int(report["unpriced"]),
                                             int(report["refused"]), returned_tokens, returned_cost)

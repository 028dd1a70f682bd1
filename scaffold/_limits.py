"""Limits that several runs (and nested fan-out) share: in flight and per minute.

- :class:`InFlightLimit`: at most ``n`` requests at once. Unlike ``asyncio.Semaphore`` it is
  not tied to the first event loop that used it, so one :class:`~scaffold.backends.Model`
  can serve ``run_sync`` calls made one after another, or at once from several threads;
  it measures its peak.
- :class:`RateLimit`: requests or tokens per minute, paced evenly with a small burst, on a
  :class:`~scaffold._clock.Clock` (the real monotonic clock unless a test gives a virtual one).

The pace a provider's 429 answers impose is :class:`~scaffold._throttle.Throttle`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from scaffold._clock import MONOTONIC, Clock


class InFlightLimit:
    """At most ``limit`` holders at once; waiters are served first come, first served.

    Safe to share between event loops in different threads (``run_sync`` from a thread pool):
    a place freed on one loop is handed to a waiter on another through that waiter's loop.

    Examples:
        >>> limit = InFlightLimit(2)
        >>> limit.limit, limit.peak
        (2, 0)
    """

    __slots__ = ("limit", "in_flight", "peak", "_waiters", "_lock")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an in-flight limit must be at least 1, got {limit}")
        self.limit = limit
        self.in_flight = 0
        self.peak = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._lock = threading.Lock()

    async def acquire(self) -> None:
        """Wait for a free place and take it."""
        with self._lock:
            if self.in_flight < self.limit and not self._waiters:
                self.in_flight += 1
                if self.in_flight > self.peak:
                    self.peak = self.in_flight
                return
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                handed = fut.done() and not fut.cancelled()
                if not handed:
                    try:
                        self._waiters.remove(fut)
                    except ValueError:
                        pass  # already popped: _hand_over will pass the place on
            if handed:
                self.release()  # we were handed a place after being cancelled: pass it on
            raise

    def release(self) -> None:
        """Give a place back, handing it straight to the oldest waiter."""
        with self._lock:
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    break
            else:
                self.in_flight -= 1
                return
        loop = fut.get_loop()  # the place moves to the waiter; in_flight is unchanged
        if loop is _running_loop():
            self._hand_over(fut)
            return
        try:
            loop.call_soon_threadsafe(self._hand_over, fut)  # futures are not thread-safe
        except RuntimeError:  # the waiter's loop is closed: nobody will take the place
            self.release()

    def _hand_over(self, fut: asyncio.Future[None]) -> None:
        if fut.done():  # cancelled while the place was on its way: pass it on
            self.release()
        else:
            fut.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class RateLimit:
    """At most ``per_minute`` units (requests or tokens) per minute, paced evenly.

    A generic-cell-rate pacer: each reservation of ``cost`` units moves a theoretical
    arrival time forward by ``cost * 60 / per_minute`` seconds, and a reservation waits
    until that time is less than ``burst`` units ahead of now. Over any window of ``w``
    seconds at most ``burst + w * per_minute / 60`` units start. ``burst`` defaults to one
    second's worth. Reservations never reorder: whoever reserves first starts first.

    Args:
        per_minute: units allowed per minute.
        burst: units that may start at once after a pause (default: one second's worth, at least 1).
        clock: what :meth:`acquire` waits on and what :meth:`reserve` reads when not given ``now=``
            (default: the real monotonic clock; a test passes :class:`scaffold.testing.VirtualClock`).

    Examples:
        >>> limit = RateLimit(600)             # 10 per second
        >>> [round(limit.reserve(now=0.0), 2) for _ in range(12)][-3:]
        [0.0, 0.1, 0.2]
    """

    __slots__ = ("per_minute", "interval", "tolerance", "clock", "_now", "_tat", "_gate", "_lock")

    def __init__(self, per_minute: float, burst: float | None = None, *, clock: Clock | None = None) -> None:
        if per_minute <= 0:
            raise ValueError(f"a rate limit must be positive, got {per_minute}")
        self.per_minute = per_minute
        self.interval = 60.0 / per_minute
        burst = max(1.0, per_minute / 60.0) if burst is None else max(1.0, burst)
        self.tolerance = (burst - 1.0) * self.interval
        self.clock: Clock = MONOTONIC if clock is None else clock
        self._now = self.clock.now  # the real clock's is time.monotonic itself
        self._tat = float("-inf")
        self._gate = InFlightLimit(1)
        self._lock = threading.Lock()  # adjust() runs outside the gate, maybe in another thread

    def reserve(self, cost: float = 1.0, *, now: float | None = None) -> float:
        """Book ``cost`` units and return how many seconds to wait before starting."""
        now = self._now() if now is None else now
        with self._lock:
            tat = max(self._tat, now)
            start = max(now, tat - self.tolerance)
            self._tat = tat + cost * self.interval
        return start - now

    def adjust(self, delta: float) -> None:
        """Correct an earlier reservation by ``delta`` units (the real token count was known late)."""
        with self._lock:
            self._tat += delta * self.interval

    async def acquire(self, cost: float = 1.0) -> None:
        """Wait until ``cost`` units may start, then book them.

        Waiters queue first come, first served; the head re-checks at least every 50 ms,
        so units given back by :meth:`adjust` while it waits let it start sooner.
        """
        async with self._gate:
            while True:
                now = self._now()
                delay = max(self._tat, now) - self.tolerance - now
                if delay <= 0:
                    self.reserve(cost, now=now)
                    return
                await self.clock.sleep(min(delay, 0.05))

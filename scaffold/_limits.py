"""Limits that several runs (and nested fan-out) share: in flight, per minute, and after 429s.

- :class:`InFlightLimit`: at most ``n`` requests at once. Unlike ``asyncio.Semaphore`` it is
  not tied to the first event loop that used it, so one :class:`~scaffold.backends.Model`
  can serve ``run_sync`` calls made one after another, or at once from several threads;
  it measures its peak.
- :class:`RateLimit`: requests or tokens per minute, paced evenly with a small burst.
- :class:`Throttle`: the pace learned from a provider's 429 answers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque


class InFlightLimit:
    """At most ``limit`` holders at once; waiters are served first come, first served.

    Safe to share between event loops in different threads (``run_sync`` from a thread pool):
    a place freed on one loop is handed to a waiter on another through that waiter's loop.

    Example:
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

    Example:
        >>> limit = RateLimit(600)             # 10 per second
        >>> [round(limit.reserve(now=0.0), 2) for _ in range(12)][-3:]
        [0.0, 0.1, 0.2]
    """

    __slots__ = ("per_minute", "interval", "tolerance", "_tat", "_gate", "_lock")

    def __init__(self, per_minute: float, burst: float | None = None) -> None:
        if per_minute <= 0:
            raise ValueError(f"a rate limit must be positive, got {per_minute}")
        self.per_minute = per_minute
        self.interval = 60.0 / per_minute
        burst = max(1.0, per_minute / 60.0) if burst is None else max(1.0, burst)
        self.tolerance = (burst - 1.0) * self.interval
        self._tat = float("-inf")
        self._gate = InFlightLimit(1)
        self._lock = threading.Lock()  # adjust() runs outside the gate, maybe in another thread

    def reserve(self, cost: float = 1.0, *, now: float | None = None) -> float:
        """Book ``cost`` units and return how many seconds to wait before starting."""
        now = time.monotonic() if now is None else now
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
                now = time.monotonic()
                delay = max(self._tat, now) - self.tolerance - now
                if delay <= 0:
                    self.reserve(cost, now=now)
                    return
                await asyncio.sleep(min(delay, 0.05))


class Throttle:
    """Slows one model's requests down after it answers 429, and speeds up again.

    No provider publishes its live limit, so the pace is learned (additive-increase,
    multiplicative-decrease on the request rate): the first 429 holds every request back
    for the provider's ``Retry-After`` and sets the pace to it, at most one second (without one, to the spacing
    of the recent successes); each further 429 slows the pace by 5%; each success after
    a quiet spell (no 429 for twenty paces, at least one second) speeds it up by 1%, and
    once the pace is negligible the throttle is off. Providers' limits are steady, so the
    probing is slow: every 429 costs a round trip and the client's time. 429s for requests that were already in flight
    when the pace last changed count once.

    Example:
        >>> throttle = Throttle()
        >>> throttle.delay(now=0.0)
        0.0
        >>> throttle.rate_limited(retry_after=0.5, sent_at=0.0, now=0.0)
        >>> throttle.delay(now=0.0), throttle.delay(now=0.0)
        (0.5, 1.0)
    """

    __slots__ = ("window", "interval", "_tat", "_successes", "_last_limited", "limited")

    def __init__(self, window: float = 2.0) -> None:
        self.window = window
        self.interval = 0.0
        """Current pace in seconds between request starts (0: not throttled)."""
        self.limited = 0
        """How many 429s changed the pace."""
        self._tat = float("-inf")
        self._successes: deque[float] = deque()
        self._last_limited = float("-inf")

    def delay(self, *, now: float | None = None) -> float:
        """Seconds the next request must wait; books its start."""
        now = time.monotonic() if now is None else now
        if self._tat <= now and self.interval == 0.0:
            return 0.0
        start = max(now, self._tat)
        self._tat = start + self.interval
        return start - now

    def give_back(self) -> None:
        """A request booked by :meth:`delay` gave up before starting: free its place in the pace."""
        self._tat -= self.interval

    def succeeded(self, *, now: float | None = None) -> None:
        """Count a success; speed up after a quiet spell."""
        now = time.monotonic() if now is None else now
        successes = self._successes
        successes.append(now)
        if len(successes) > 64:
            successes.popleft()
        if self.interval and now - self._last_limited > max(1.0, 20 * self.interval):
            self.interval *= 0.99
            if self.interval < 1e-3:
                self.interval = 0.0

    def rate_limited(self, retry_after: float | None, sent_at: float, *, now: float | None = None) -> None:
        """React to a 429 for a request sent at ``sent_at`` (``time.monotonic()``)."""
        now = time.monotonic() if now is None else now
        wait = retry_after if retry_after is not None and retry_after > 0 else None
        if self.interval == 0.0:
            self._tat = max(self._tat, now + (wait or 0.0))
        if sent_at < self._last_limited:  # already in flight when the pace last changed
            return
        self._last_limited = now
        self.limited += 1
        if self.interval:
            self.interval = min(self.interval * 1.05, 60.0)
            return
        recent = [t for t in self._successes if t >= now - self.window]
        if wait is not None:
            self.interval = min(wait, 1.0)  # a long Retry-After is a pause, not a pace
        elif len(recent) >= 3 and recent[-1] > recent[0]:
            self.interval = (recent[-1] - recent[0]) / (len(recent) - 1)
        else:
            self.interval = 0.05

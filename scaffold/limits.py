"""An in-flight limit that several runs (and nested fan-out) share.

Unlike ``asyncio.Semaphore`` it is not tied to the first event loop that used
it, so one :class:`~scaffold.backends.base.Model` can serve ``run_sync`` calls
made one after another. It also measures the largest number ever in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque


class InFlightLimit:
    """At most ``limit`` holders at once; waiters are served first come, first served.

    Example:
        >>> limit = InFlightLimit(2)
        >>> limit.limit, limit.peak
        (2, 0)
    """

    __slots__ = ("limit", "in_flight", "peak", "_waiters")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an in-flight limit must be at least 1, got {limit}")
        self.limit = limit
        self.in_flight = 0
        self.peak = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        """Wait for a free place and take it."""
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
            if fut.done() and not fut.cancelled():
                self.release()  # we were handed a place after being cancelled: pass it on
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        """Give a place back, handing it straight to the oldest waiter."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the place moves to the waiter; in_flight is unchanged
                return
        self.in_flight -= 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

"""A clock whose time moves only when a test moves it, or when everything waits on it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import threading
import weakref


class VirtualClock:
    """A :class:`~scaffold._clock.Clock` for tests: virtual seconds, which cost no real time.

    Give it to a :class:`~scaffold.Model` (``Model(..., clock=clock)``), a :class:`~scaffold.Throttle` or a
    :class:`~scaffold.RateLimit`, and their pacing, retry backoff and timeouts run in virtual time: a test
    asserts *exactly when* (on this clock) each request was sent, instead of bounding real seconds that a
    loaded machine can stretch. A backend a test writes can wait on it too (``await clock.sleep(10)``
    stands for a slow answer).

    Time moves in two ways:

    - :meth:`advance` moves it on by a given amount (from the test, in any thread) and wakes the sleeps
      that fall due, in the order they fall due;
    - with ``auto_advance`` (the default), whenever the event loop of a sleeping task has nothing left to
      run, time jumps to the earliest pending wake-up and wakes it: a discrete-event simulation, as fast as
      the code runs. A task waiting on I/O, on a thread (a store's writer: pass ``store=None`` to a run whose
      virtual times matter) or on a real-time timer counts as idle, so auto-advance suits in-process backends
      (:class:`~scaffold.testing.ScriptedBackend`), not a real HTTP server: there, use ``auto_advance=False``
      and :meth:`advance` once the server holds the request. It reads the ready queue of asyncio's own event
      loops; under another loop, use ``auto_advance=False`` too. With sleepers on several event loops in
      threads at once, an idle loop moves time for all: use :meth:`advance` there.

    A run's own ``timeout=`` is kept by its event loop in real time, not on this clock.

    Args:
        start: the time :meth:`now` reads at first.
        auto_advance: jump to the next wake-up whenever the sleeper's event loop is idle.

    Examples:
        >>> import asyncio
        >>> from scaffold import Model, Request
        >>> from scaffold.testing import ScriptedBackend
        >>> clock = VirtualClock()
        >>> sent = []
        >>> model = Model(ScriptedBackend(lambda r: sent.append(clock.now()) or "ok"),
        ...               requests_per_minute=60, clock=clock)        # one request a second
        >>> request = Request(messages=(("user", "hi"),))
        >>> async def three():
        ...     await asyncio.gather(*(model.complete(request) for _ in range(3)))
        >>> asyncio.run(three())                                       # returns at once
        >>> [round(t, 9) for t in sent]                                # sent on the virtual clock
        [0.0, 1.0, 2.0]
    """

    def __init__(self, start: float = 0.0, *, auto_advance: bool = True) -> None:
        self._now = float(start)
        self.auto_advance = auto_advance
        self.slept = 0
        """Sleeps of a positive length begun on this clock."""
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []  # a heap of (wake-up, order, future)
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._checking: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()  # loops with an idle check
        self._watchers: list[tuple[int, asyncio.Future[None]]] = []  # wait_sleeping: (count, future)

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r}, sleeping={self.sleeping})"

    def now(self) -> float:
        """The virtual time, in seconds."""
        return self._now

    @property
    def sleeping(self) -> int:
        """Sleeps pending on this clock."""
        with self._lock:
            return sum(1 for _, _, future in self._sleepers if not future.done())

    @property
    def next_wakeup(self) -> float | None:
        """When the earliest pending sleep falls due (``None``: none pending)."""
        with self._lock:
            self._drop_cancelled()
            return self._sleepers[0][0] if self._sleepers else None

    async def sleep(self, seconds: float, /) -> None:
        """Return once ``seconds`` have passed on this clock (after one turn of the loop if ``seconds <= 0``)."""
        if not seconds > 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            # at least one representable step on: a wake-up that rounds to now would spin a pacer for ever
            wakeup = max(self._now + seconds, math.nextafter(self._now, math.inf))
            heapq.heappush(self._sleepers, (wakeup, next(self._order), future))
            self.slept += 1
            watchers = []
            if self._watchers:  # someone waits for a number of sleepers (counting them costs a pass)
                pending = sum(1 for _, _, f in self._sleepers if not f.done())
                watchers = [w for w in self._watchers if w[0] <= pending]
                self._watchers = [w for w in self._watchers if w[0] > pending]
        for _, watcher in watchers:
            _resolve(watcher)
        if self.auto_advance:
            self._check_soon(loop)
        await future

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` and wake every sleep that falls due, in the order they fall due.

        Callable from the test itself or any thread; the woken tasks run when their loops next turn.
        """
        if not seconds >= 0:
            raise ValueError(f"time cannot go back: advance({seconds})")
        with self._lock:
            self._now += seconds
            due = self._pop_due()
        for future in due:
            _resolve(future)

    async def wait_sleeping(self, count: int = 1, *, timeout: float = 10.0) -> None:
        """Return once at least ``count`` sleeps are pending on this clock: the tasks being tested have reached
        their waits (say, a request backing off before its retry). Raises ``TimeoutError`` naming the count
        if that takes more than ``timeout`` real seconds.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            pending = sum(1 for _, _, f in self._sleepers if not f.done())
            if pending >= count:
                return
            self._watchers.append((count, future))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"{self.sleeping} sleep(s) pending on the virtual clock after {timeout}s of real time, "
                f"waiting for {count}"
            ) from None
        finally:
            with self._lock:
                self._watchers = [w for w in self._watchers if w[1] is not future]

    # -- internals (under the lock where they touch the heap) ------------------------------------------
    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)

    def _pop_due(self) -> list[asyncio.Future[None]]:
        due = []
        while self._sleepers and self._sleepers[0][0] <= self._now:
            future = heapq.heappop(self._sleepers)[2]
            if not future.done():
                due.append(future)
        return due

    def _check_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make sure an idle check is queued on ``loop``."""
        if not hasattr(loop, "_ready"):
            raise RuntimeError(
                f"VirtualClock(auto_advance=True) needs one of asyncio's own event loops, not {type(loop).__name__}: "
                "use auto_advance=False and advance()"
            )
        with self._lock:
            if loop in self._checking:
                return
            self._checking.add(loop)
        loop.call_soon(self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        """If ``loop`` has nothing else to run, jump to the earliest wake-up; else look again next turn."""
        # asyncio's (CPython's) ready queue: callbacks due this turn or the next; checked in _check_soon
        if loop._ready:  # type: ignore[attr-defined]
            loop.call_soon(self._check, loop)
            return
        with self._lock:
            self._drop_cancelled()
            if not self._sleepers:
                self._checking.discard(loop)
                return
            self._now = max(self._now, self._sleepers[0][0])
            due = self._pop_due()
        for future in due:
            _resolve(future)
        loop.call_soon(self._check, loop)  # the woken tasks run first; sleepers may remain


def _resolve(future: asyncio.Future[None]) -> None:
    """Complete ``future`` on its own loop (now if that is the running one, else through its loop's queue)."""
    loop = future.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is running:
        if not future.done():
            future.set_result(None)
        return
    try:
        loop.call_soon_threadsafe(_set_if_pending, future)
    except RuntimeError:  # its loop is closed: nobody waits on it any more
        pass


def _set_if_pending(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

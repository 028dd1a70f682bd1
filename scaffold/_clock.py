"""The clock a model's time-dependent parts read and wait on: real by default, injectable for tests.

Every part of a :class:`~scaffold.backends.Model` that depends on time — its
:class:`~scaffold.Throttle`, its :class:`~scaffold.RateLimit` pacers, the retry backoff, the
per-attempt ``timeout`` and a run's ``call_timeout`` around its calls — reads the time and waits
through one :class:`Clock`. The default, :data:`MONOTONIC`, is ``time.monotonic`` and ``asyncio.sleep``
(and ``asyncio.timeout`` for timeouts), exactly what these parts used before the clock could be
chosen; a test passes :class:`scaffold.testing.VirtualClock` instead and runs all of it in virtual
time: no test waits for real seconds, and none can fail because a loaded machine was slow.

Examples:
    >>> import asyncio
    >>> async def timed_out() -> bool:
    ...     try:
    ...         async with timeout(MONOTONIC, 0.01):
    ...             await MONOTONIC.sleep(10)
    ...     except TimeoutError:
    ...         return True
    ...     return False
    >>> asyncio.run(timed_out())
    True
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Final, Protocol


class Clock(Protocol):
    """What a time-dependent part needs of a clock: the time, and a way to wait for it to pass.

    ``now()`` is in seconds from any fixed origin (only differences count) and never goes back.
    ``sleep(seconds)`` returns once ``now()`` has moved on by at least ``seconds`` (after one turn of the
    event loop when ``seconds <= 0``); cancelling it cancels the wait.
    """

    def now(self) -> float:
        """The current time, in seconds."""
        ...

    async def sleep(self, seconds: float, /) -> None:
        """Wait until ``seconds`` have passed on this clock."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic()`` and ``asyncio.sleep``; the default everywhere.

    ``now`` *is* ``time.monotonic`` and ``sleep`` *is* ``asyncio.sleep``, so a part on this clock costs
    what it cost before the clock could be chosen.

    Examples:
        >>> clock = MonotonicClock()
        >>> clock.now() <= clock.now()
        True
    """

    __slots__ = ()

    now = staticmethod(time.monotonic)
    sleep = staticmethod(asyncio.sleep)

    def __repr__(self) -> str:
        return "MonotonicClock()"


MONOTONIC: Final = MonotonicClock()
"""The real clock (the one instance every part shares by default)."""


def is_real(clock: Clock) -> bool:
    """True for the real clock, whose timeouts are ``asyncio.timeout`` (the event loop's own timers)."""
    return type(clock) is MonotonicClock


def timeout(clock: Clock, seconds: float) -> AbstractAsyncContextManager[object]:
    """``asyncio.timeout(seconds)`` measured on ``clock``: once ``seconds`` pass on it, the body is cancelled
    and ``TimeoutError`` raised. On the real clock this *is* ``asyncio.timeout``; on another, a watchdog task
    sleeps on the clock and then cancels the body, with ``asyncio.timeout``'s rules for cancellations that
    come from elsewhere (they propagate as they are).
    """
    if type(clock) is MonotonicClock:
        return asyncio.timeout(seconds)
    return _ClockTimeout(clock, seconds)


class _ClockTimeout:
    """:func:`timeout` on a clock other than the real one."""

    __slots__ = ("_clock", "_seconds", "_task", "_watchdog", "_cancelling", "_expired")

    def __init__(self, clock: Clock, seconds: float) -> None:
        self._clock = clock
        self._seconds = seconds
        self._expired = False
        self._cancelling = 0
        self._task: asyncio.Task[object] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _ClockTimeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a timeout must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._watchdog = asyncio.get_running_loop().create_task(self._watch(task))
        return self

    async def _watch(self, task: asyncio.Task[object]) -> None:
        await self._clock.sleep(self._seconds)
        self._expired = True
        task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None and self._watchdog is not None
        self._watchdog.cancel()
        if self._expired and self._task.uncancel() <= self._cancelling and exc_type is not None:
            if issubclass(exc_type, asyncio.CancelledError):  # cancelled by the watchdog, and by nothing else
                raise TimeoutError from exc

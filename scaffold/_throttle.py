"""The pace a provider's 429 answers impose on one model, told apart from sporadic 429s.

A :class:`Throttle` is off until a provider shows a real limit, then paces every request of the
model (across runs, event loops and threads) while the limit holds. It reads the answers in
windows (at least ``min_window`` seconds and ``min_requests`` requests, at most ``max_window``
seconds) and asks one question of each: what share of the requests sent in it were answered 429?

- **A limit** — to engage, more than ``sure_share`` of a window's requests were 429s (at least
  ``min_refused``); once engaged, more than ``threshold``, by two standard deviations or over
  ``evidence`` requests. The provider accepted ``1 - share`` of what was offered, so the pace
  becomes that accepted rate plus ``headroom`` (engaging cuts to no less than ``max_cut`` of the
  offered rate). The cut is *to the measured accepted rate*, never a blind halving, so a false
  alarm costs little, and a provider under transient load that refuses a steady share of requests
  at random (sporadic 429s) never engages it at all. 429s to requests sent before the last cut say
  nothing of the new pace and are not counted.
- **Below the limit** — a window in which the pace held requests back raises the pace: by
  ``increase`` per request sent while 429s still come now and then (probing near the limit), and,
  once ``quiet / 4`` seconds and ``min_requests / 2`` requests passed without one, by steps that
  double from ``headroom / 2`` up to 50% a window (a raised limit is found within seconds). The
  first 429 after such a step sets the pace back to what it was before the step.
- **Off** — ``quiet`` seconds without a 429, in which the pace held nothing back: full speed.
- ``Retry-After`` is the business of the request that received it (:class:`~scaffold.backends.Retry`
  waits it out before that request's retry): one 429's hint never stalls every other request.

This is a delivery-rate controller (the idea behind BBR) rather than TCP's AIMD, whose halving
on every loss is what collapses under random 429s: there, each 429 cuts the rate, and a steady
share of random 429s holds it near zero.

Examples:
    >>> throttle = Throttle()
    >>> throttle.rate is None                  # off: nothing is paced
    True
    >>> for i in range(30):                    # 100 requests/s, four in five answered 429 at once
    ...     number = throttle.started(now=i / 100)
    ...     if i % 5:
    ...         throttle.rate_limited(number, now=i / 100)
    >>> round(throttle.rate), throttle.limited  # a limit: the pace is half the rate offered (one window's most)
    (52, 1)
"""

from __future__ import annotations

import itertools
import threading
from collections import deque

from scaffold._clock import MONOTONIC, Clock
from scaffold._limits import InFlightLimit


class Throttle:
    """Paces a model's requests while its provider shows a rate limit (see the module docstring).

    Thread-safe: one ``Throttle`` serves every run, event loop and thread using its
    :class:`~scaffold.backends.Model`. All rates are requests per second.

    Args:
        threshold: share of a window's answers that are 429s above which the window shows a limit.
        headroom: after a limit, the pace is the accepted rate times ``1 + headroom``.
        increase: pace growth per request sent while probing near the limit (429s lately).
        min_change: a cut smaller than this share of the pace is taken for noise and not made.
        quiet: seconds without a 429 (and without the pace holding a request back) before the throttle
            switches off.
        min_window: shortest window, in seconds.
        max_window: longest window, in seconds (it closes then however few answers it saw).
        min_requests: requests a window needs before it may close ahead of ``max_window``.
        evidence: requests a window gathers (up to ``max_window`` seconds) when its share of 429s is above
            ``threshold`` but not above ``sure_share``, before it may show a limit.
        sure_share: a share of 429s that shows a limit in a window of ``min_requests``.
        min_refused: 429s a window needs to show a limit.
        max_cut: one window cuts the pace to no less than this share of the rate it offered.
        floor: the slowest pace.
        clock: what :meth:`wait` waits on and what the methods read when not given ``now=`` (default: the real
            monotonic clock; a test passes :class:`scaffold.testing.VirtualClock` to run in virtual time).
    """

    def __init__(
        self,
        *,
        threshold: float = 0.1,
        headroom: float = 0.12,
        increase: float = 0.0005,
        min_change: float = 0.03,
        quiet: float = 2.0,
        min_window: float = 0.25,
        max_window: float = 3.0,
        min_requests: int = 24,
        evidence: int = 64,
        sure_share: float = 0.3,
        min_refused: int = 3,
        max_cut: float = 0.5,
        floor: float = 0.05,
        clock: Clock | None = None,
    ) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be between 0 and 1, got {threshold}")
        if not (floor > 0 and min_window > 0 and max_window >= min_window):
            raise ValueError("floor and windows must be positive, with max_window >= min_window")
        self.threshold, self.headroom = threshold, headroom
        self.increase, self.min_change = increase, min_change
        self.quiet, self.floor = quiet, floor
        self.min_window, self.max_window = min_window, max_window
        self.min_requests, self.min_refused, self.max_cut = min_requests, min_refused, max_cut
        self.evidence, self.sure_share = evidence, sure_share
        self.clock: Clock = MONOTONIC if clock is None else clock
        """The clock the pace is kept on."""
        self._now = self.clock.now  # the real clock's is time.monotonic itself
        self.rate: float | None = None
        """Current pace; ``None`` while the throttle is off."""
        self.limited = 0
        """Windows that showed a limit (each set the pace)."""
        self.refused = 0
        """429 answers seen in all."""
        self.changes: deque[tuple[float, float | None]] = deque(maxlen=256)
        """``(clock time, pace)`` of the latest limits seen and of switching off (``None``)."""
        self._lock = threading.Lock()
        self._gate = InFlightLimit(1)  # paced requests leave one at a time, first come first served
        self._next_start = float("-inf")
        self._numbers = itertools.count()
        self._last_number = self._refused_number = -1
        self._window_start: float | None = None
        self._window_number = self._window_refused = self._cut_number = 0
        self._held = False  # the pace held a request back during this window
        self._last_refused = self._last_held = float("-inf")
        self._step = headroom / 2  # the next probing step while no 429 comes
        self._before_step: float | None = None  # the pace before the last such step (no 429 came at it)

    def __repr__(self) -> str:
        pace = "off" if self.rate is None else f"{self.rate:.3g}/s"
        return f"Throttle({pace}, limited={self.limited}, refused={self.refused})"

    # -- the request path ---------------------------------------------------------------------------
    async def wait(self) -> None:
        """Return when the next request may start (at once while the throttle is off)."""
        if self.rate is None:
            return
        async with self._gate:
            while (delay := self.reserve()) > 0:
                await self.clock.sleep(min(delay, 0.05))  # re-read the pace: it may rise while we wait

    def reserve(self, *, now: float | None = None) -> float:
        """Book the next start if it is due (returns 0), else return the seconds until it is.

        :meth:`wait` calls it in a loop; a simulation may call it with its own clock.
        """
        with self._lock:
            rate = self.rate
            if rate is None:
                return 0.0
            now = self._now() if now is None else now
            interval = 1.0 / rate
            if now >= self._next_start:
                # a wake-up a little late keeps the schedule; after idling the next start is one interval away
                late = now - self._next_start > 0.5 * interval
                self._next_start = (now if late else self._next_start) + interval
                return 0.0
            self._held = True
            return self._next_start - now

    def started(self, *, now: float | None = None) -> int:
        """Count a request about to be sent; returns its number, for :meth:`rate_limited`.

        While the throttle is off this takes no lock and reads no clock (only 429s can engage it).
        """
        number = next(self._numbers)  # atomic: threads never draw the same number
        self._last_number = number
        if self.rate is not None:
            with self._lock:
                self._maybe_decide(self._now() if now is None else now, number)
        return number

    def rate_limited(self, number: int, *, now: float | None = None) -> None:
        """Count a 429 answer to request ``number`` (what :meth:`started` returned)."""
        now = self._now() if now is None else now
        with self._lock:
            self.refused += 1
            if number < self._cut_number:  # sent before the pace was last cut: says nothing of the new pace
                return
            self._window_refused += 1
            self._refused_number = max(self._refused_number, number)
            self._last_refused = now
            if self._before_step is not None and self.rate is not None and self._before_step < self.rate:
                # the first 429 after probing steps: the step overshot, so go back to the last quiet pace now
                self.rate = self._before_step
                self._cut_number = self._last_number + 1
                self.changes.append((now, self.rate))
            self._before_step = None
            self._step = self.headroom / 2
            self._maybe_decide(now, number)

    # -- decisions (under the lock) -----------------------------------------------------------------
    def _maybe_decide(self, now: float, number: int) -> None:
        """Close the window if it has seen enough (``number``: the request of the event that called)."""
        start = self._window_start
        if start is None:  # a window opens with its first event (and counts the requests from its request on)
            self._window_start, self._window_number = now, number
            return
        elapsed = now - start
        sent, refused = self._last_number - self._window_number + 1, self._window_refused
        quiet = self.rate is not None and self._quiet(now)
        if elapsed < self.min_window:
            if refused < 2 * self.min_requests or elapsed < 0.05:  # a burst of 429s: react at once
                return
        elif sent < self.min_requests and elapsed < self.max_window and not quiet:
            return
        share = min(1.0, refused / sent) if sent else 1.0
        # engaging needs a clear limit; once engaged, a smaller excess of 429s over a larger sample will do
        threshold = self.threshold if self.rate is not None else self.sure_share
        if threshold < share and sent < self.evidence and elapsed < self.max_window and not self._clear(sent, refused):
            return  # a few more 429s than allowed, in a small sample: it may be chance, so gather more
        if self._held:
            self._last_held = now
        if refused >= self.min_refused and share > threshold:
            offered = sent / elapsed
            pace = max(offered * (1.0 - share) * (1.0 + self.headroom), self.floor)
            if self.rate is None:  # engaging: answers may still be arriving from a burst, so cut half at most
                pace = max(pace, offered * self.max_cut)
            if self.rate is None or pace < self.rate * (1.0 - self.min_change):  # else: within the noise
                self.rate = pace
                self.limited += 1
                self._cut_number = self._last_number + 1
                self.changes.append((now, pace))
        elif self.rate is not None:
            if now - self._last_refused >= self.quiet and now - self._last_held >= self.quiet:
                self.rate = None
                self._cut_number = self._last_number + 1
                self.changes.append((now, None))
            elif self._held:  # the pace, not the demand, bounded this window: probe upwards
                if quiet:  # no 429 for a while: the limit rose (or went); probe with steps that double
                    self._before_step = self.rate
                    self.rate *= 1.0 + self._step
                    self._step = min(2.0 * self._step, 0.5)
                else:
                    self.rate *= (1.0 + self.increase) ** min(sent, 200)
        self._window_start = None
        self._window_refused = 0
        self._held = False

    def _clear(self, sent: int, refused: int) -> bool:
        """The share of 429s is clearly above what is allowed: by two standard deviations once engaged
        (``threshold``), above ``sure_share`` to engage."""
        if self.rate is None:
            return refused > self.sure_share * sent
        spread = (sent * self.threshold * (1.0 - self.threshold)) ** 0.5
        return refused - self.threshold * sent >= 2.0 * spread

    def _quiet(self, now: float) -> bool:
        """No 429 lately: for ``quiet / 4`` seconds and ``min_requests / 2`` requests.

        At a limit the pace is ``headroom`` over it, so about one request in ten is refused: twelve
        in a row answered is a sign (not a proof) that the limit rose, and the first probing step is
        only ``headroom / 2``, so a false sign costs a few points of pace until the next 429."""
        since = self._last_number - self._refused_number
        return now - self._last_refused >= self.quiet / 4 and since >= self.min_requests / 2

"""What goes wrong on :class:`~scaffold.testing.OpenAIServer`: injected :class:`Fault` s and the rate bucket.

A :class:`FaultPlan` decides, for each completion request, which fault applies — the next one
queued by :meth:`OpenAIServer.inject <scaffold.testing.OpenAIServer.inject>`, else the server's
``faults`` rule — and whether ``allowed_rate`` lets the request through. It is thread-safe: tests
inject from their own thread while the server's loop consumes. :func:`random_faults` makes a rule
that fails a given share of requests at random (:data:`SPORADIC_FAULTS`: what a provider under
transient load does, whatever the request rate).
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from scaffold.testing._fake_answers import ServerRequest

FaultKind = Literal["rate_limit", "server_error", "slow", "malformed", "drop", "truncated"]


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected failure; build it with the class methods.

    Examples:
        >>> Fault.server_error(503).status, Fault.rate_limit(0.2).seconds
        (503, 0.2)
    """

    kind: FaultKind
    """What goes wrong."""
    status: int = 200
    """HTTP status sent (0 for ``drop``: nothing is sent)."""
    seconds: float = 0.0
    """``rate_limit``: the retry hint; ``slow``: extra delay before a normal answer."""
    tokens: int = 0
    """``truncated``: token events a stream sends before it is cut."""

    @classmethod
    def rate_limit(cls, retry_after: float = 1.0) -> Fault:
        """429 with ``Retry-After`` (whole seconds, rounded up) and ``retry-after-ms`` headers."""
        return cls("rate_limit", 429, retry_after)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """An OpenAI-style error answer with this status (500, 502, 503...)."""
        return cls("server_error", status)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Wait ``seconds`` more, then answer normally."""
        return cls("slow", 200, seconds)

    @classmethod
    def malformed(cls) -> Fault:
        """200 with a JSON content type and a body that is not valid JSON (a stream: an event that is not JSON)."""
        return cls("malformed", 200)

    @classmethod
    def truncated(cls, tokens: int = 2) -> Fault:
        """200 whose body stops early, then the connection closes: a stream after ``tokens`` token events
        (no final chunk, no ``[DONE]``); a JSON answer halfway, its ``Content-Length`` promising all of it."""
        return cls("truncated", 200, tokens=tokens)

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection after reading the request, without answering."""
        return cls("drop", 0)


class FaultPlan:
    """The faults queued for the next completion requests, the ``rule`` for the others, and the rate bucket.

    ``allowed_rate`` requests per second (bursts of ``burst``) pass :meth:`take_rate_token`;
    ``None`` lets every request through.

    Examples:
        >>> plan = FaultPlan(allowed_rate=None)
        >>> plan.inject(Fault.drop(), times=2)
        >>> [plan.next_fault(None, n) for n in range(3)]  # doctest: +ELLIPSIS
        [Fault(kind='drop', ...), Fault(kind='drop', ...), None]
    """

    def __init__(self, *, rule: Callable[[ServerRequest, int], Fault | None] | None = None,
                 allowed_rate: float | None = None, burst: int = 1) -> None:
        if allowed_rate is not None and allowed_rate <= 0:
            raise ValueError(f"allowed_rate must be positive, got {allowed_rate}")
        self.rule = rule
        self.allowed_rate = allowed_rate
        self.burst = burst
        self._lock = threading.Lock()
        self._queued: deque[Fault] = deque()
        self._tokens = float(burst)
        self._refilled_at = time.monotonic()

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Apply ``fault`` to the next ``times`` completion requests, after any fault already queued."""
        with self._lock:
            self._queued.extend([fault] * times)

    def next_fault(self, request: ServerRequest, number: int) -> Fault | None:
        """The fault for request ``number``: the next queued one, else what the rule says (``None``: none)."""
        with self._lock:
            if self._queued:
                return self._queued.popleft()
        return self.rule(request, number) if self.rule is not None else None

    def take_rate_token(self) -> float:
        """Take a token from the bucket; returns 0, or the seconds until one is available."""
        if self.allowed_rate is None:
            return 0.0
        with self._lock:
            if self.allowed_rate is None:
                return 0.0
            self._refill(time.monotonic())
            if self._tokens >= 1 - 1e-9:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self.allowed_rate

    def set_allowed_rate(self, rate: float | None) -> None:
        """Change the rate the bucket allows from now on (``None``: no limit); tokens earned so far stay."""
        if rate is not None and rate <= 0:
            raise ValueError(f"allowed_rate must be positive, got {rate}")
        with self._lock:
            self._refill(time.monotonic())
            self.allowed_rate = rate

    def _refill(self, now: float) -> None:
        """Credit the bucket with the tokens earned at the current rate up to ``now`` (under the lock)."""
        if self.allowed_rate is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._refilled_at) * self.allowed_rate)
        self._refilled_at = now

    def reset(self) -> None:
        """Drop queued faults and refill the rate bucket."""
        with self._lock:
            self._queued.clear()
            self._tokens, self._refilled_at = float(self.burst), time.monotonic()


SPORADIC_FAULTS: Mapping[Fault, float] = {
    Fault.rate_limit(1.0): 0.08,
    Fault.server_error(500): 0.04,
    Fault.server_error(503): 0.03,
    Fault.truncated(): 0.03,
    Fault.drop(): 0.02,
}
"""One request in five fails at random: 8% 429 with ``Retry-After: 1``, 4% 500, 3% 503, 3% truncated
bodies, 2% dropped connections (a provider under transient load, not a rate limit)."""


def random_faults(mix: Mapping[Fault, float] = SPORADIC_FAULTS, *, seed: int = 0
                  ) -> Callable[[ServerRequest, int], Fault | None]:
    """A ``faults`` rule for :class:`~scaffold.testing.OpenAIServer` that gives each request one fault of
    ``mix`` (fault -> share of requests) or none, drawn independently of every other request and of
    the rate (seeded: the same arrival order gets the same faults).

    Examples:
        >>> rule = random_faults({Fault.drop(): 0.5}, seed=1)
        >>> sum(rule(None, n) is not None for n in range(1000))
        473
    """
    if sum(mix.values()) > 1.0 or any(share < 0 for share in mix.values()):
        raise ValueError("fault shares must be non-negative and add up to at most 1")
    rng = random.Random(seed)
    lock = threading.Lock()
    table = list(mix.items())

    def rule(request: ServerRequest, number: int) -> Fault | None:
        with lock:
            draw = rng.random()
        for fault, share in table:
            if draw < share:
                return fault
            draw -= share
        return None

    return rule

"""Retry policy: exponential backoff with jitter that honours ``Retry-After``.

Only errors a backend marks ``retryable`` are retried (429, 5xx, timeouts, dropped
connections); authentication, bad-request and context-length errors fail at once.
A retry never turns an error into an empty answer: when the attempts run out, the
last error is raised with ``attempts`` set.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scaffold._errors import BackendError


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How often and how patiently a failed request is sent again.

    The wait before attempt ``a + 1`` is drawn uniformly from
    ``[(1 - jitter) * d, d]`` with ``d = min(max_delay, initial_delay * multiplier ** (a - 1))``
    ("full jitter" when ``jitter=1``). When the provider said how long to wait
    (``Retry-After``, capped at ``max_retry_after``), that wait is used instead, stretched by
    up to 10% of jitter: the provider knows better than a guess, and the model's shared
    :class:`~scaffold._limits.Throttle` spreads the retries out.

    Examples:
        >>> Retry(attempts=3, initial_delay=1.0, jitter=0.0).delay(2, BackendError("x", retryable=True))
        2.0
        >>> Retry.never().attempts
        1
        >>> import random
        >>> retry = Retry(initial_delay=1.0, seed=7)
        >>> retry.delay(1, BackendError("x", retryable=True), random.Random(retry.seed)) == retry.delay(
        ...     1, BackendError("x", retryable=True), random.Random(7))
        True
    """

    attempts: int = 5
    """Total attempts, the first included (1: never retry)."""
    initial_delay: float = 0.5
    """Base wait after the first failure, in seconds."""
    multiplier: float = 2.0
    """Growth of the base wait per attempt."""
    max_delay: float = 30.0
    """Cap on the base wait."""
    jitter: float = 1.0
    """Fraction of the wait that is randomised (0: none, 1: full jitter)."""
    max_retry_after: float = 120.0
    """Longest ``Retry-After`` honoured; a provider asking for more gets this."""
    seed: int | None = None
    """Seeds a model's jitter draws, so its waits repeat from run to run (``None``: fresh draws each time,
    which keeps many clients from retrying in step)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry.attempts must be at least 1, got {self.attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"Retry.jitter must be between 0 and 1, got {self.jitter}")

    @classmethod
    def never(cls) -> Retry:
        """A policy that sends every request once."""
        return cls(attempts=1)

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """True when ``error`` (raised by attempt number ``attempt``) may be retried."""
        return isinstance(error, BackendError) and error.retryable and attempt < self.attempts

    def delay(self, attempt: int, error: BaseException, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt number ``attempt`` failed with ``error``."""
        draw = (rng or random).random()
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return min(float(retry_after), self.max_retry_after) * (1.0 + 0.1 * self.jitter * draw)
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * draw)


def retry_after_from_headers(headers: Mapping[str, Any] | Any) -> float | None:
    """Seconds a provider asked to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date).

    ``headers`` is any mapping of header names to values (case does not matter); a value that is
    not a finite, non-negative wait is ignored.

    Examples:
        >>> retry_after_from_headers({"Retry-After": "2", "retry-after-ms": "1500"})
        1.5
        >>> retry_after_from_headers({"retry-after": "soon"}) is None
        True
    """
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lower.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (ValueError, TypeError, IndexError):
                continue
            if when.tzinfo is None:  # "-0000": an HTTP date is UTC, never local time
                when = when.replace(tzinfo=datetime.UTC)
            seconds = max(0.0, when.timestamp() - time.time())
        if math.isfinite(seconds) and seconds >= 0:  # "inf" or "nan" would stall or spin the throttle
            return seconds
    return None

"""Throttle: a rate limit is found and followed, sporadic 429s are not mistaken for one (simulated clock)."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable

import pytest
from helpers import boxed

import scaffold as sf
from scaffold._types import Request
from scaffold.testing import ScriptedBackend, VirtualClock

REQUEST = Request(messages=(("user", "2+2?"),))


def simulate(
    throttle: sf.Throttle, limit_at: Callable[[float], float | None], seconds: float, *,
    offered: float = 300.0, noise: float = 0.0, seed: int = 0, burst: int = 4,
) -> list[tuple[float, bool]]:
    """A client with endless work offering ``offered`` requests/s through ``throttle`` to a provider that
    allows ``limit_at(t)`` requests/s (a token bucket; ``None``: no limit) and refuses a ``noise`` share
    of requests at random whatever the rate. Returns ``(send time, refused)`` per request."""
    rng = random.Random(seed)
    now, tokens, last = 0.0, float(burst), 0.0
    sends: list[tuple[float, bool]] = []
    while now < seconds:
        delay = throttle.reserve(now=now)
        if delay > 0:
            now += delay
            continue
        number = throttle.started(now=now)
        limit = limit_at(now)
        refused = rng.random() < noise
        if limit is not None:
            tokens = min(burst, tokens + (now - last) * limit)
            if not refused:
                if tokens >= 1:
                    tokens -= 1
                else:
                    refused = True
        last = now
        if refused:
            throttle.rate_limited(number, now=now)
        sends.append((now, refused))
        now += 1.0 / offered
    return sends


def per_second(sends: list[tuple[float, bool]], start: float, end: float, *, accepted: bool = False) -> list[int]:
    """Requests sent (or accepted) in each whole second of ``[start, end)``."""
    counts = [0] * int(end - start)
    for t, refused in sends:
        if start <= t < end and not (accepted and refused):
            counts[int(t - start)] += 1
    return counts


@pytest.mark.parametrize("noise", [0.08, 0.12])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sporadic_429s_never_slow_the_client(noise, seed):
    """429s refusing a steady share of requests at random, whatever the rate, never engage the throttle."""
    throttle = sf.Throttle()
    sends = simulate(throttle, lambda t: None, 60.0, noise=noise, seed=seed)
    assert throttle.limited == 0 and throttle.rate is None
    assert min(per_second(sends, 0, 60)) >= 299


@pytest.mark.parametrize("limit", [2.0, 10.0, 40.0, 200.0])
def test_a_rate_limit_is_found_and_followed_closely(limit):
    """Against a provider allowing ``limit``/s, the client settles within a few seconds between the
    limit and 20% above it, and the provider accepts (nearly) all it allows."""
    throttle = sf.Throttle()
    sends = simulate(throttle, lambda t: limit, 40.0)
    settled = per_second(sends, 5, 40)
    if limit >= 10:
        assert all(limit <= rate <= 1.2 * limit for rate in settled), settled
    else:  # a few requests a second: whole counts, and a window sees only a few 429s (at most 30% over)
        assert sum(settled) <= 1.3 * limit * len(settled) and max(settled) <= limit + 1, settled
    assert sum(per_second(sends, 5, 40, accepted=True)) >= 0.97 * limit * 35


def test_a_limit_that_moves_is_followed_within_seconds():
    """40 -> 10 -> 40 requests/s: within 3 s of each change the client sends within 20% of the new limit
    (the issue's target is 5 s), and within 5 s of a rise from 10 to 25 requests/s."""
    throttle = sf.Throttle()
    sends = simulate(throttle, lambda t: 10.0 if 20 <= t < 40 else 40.0, 60.0)
    for start, limit in ((23, 10.0), (43, 40.0)):
        rates = per_second(sends, start, start + 15)
        assert all(abs(rate - limit) <= 0.2 * limit for rate in rates), (start, rates)
    throttle = sf.Throttle()
    sends = simulate(throttle, lambda t: 10.0 if t < 20 else 25.0, 40.0)
    for start, limit in ((25, 25.0),):
        rates = per_second(sends, start, start + 15)
        assert all(abs(rate - limit) <= 0.2 * limit for rate in rates), (start, rates)


def test_the_throttle_switches_off_once_the_limit_is_gone():
    """When 429s stop for good, the client is back at full speed within seconds and the throttle is off."""
    throttle = sf.Throttle()
    sends = simulate(throttle, lambda t: 40.0 if t < 10 else None, 20.0)
    assert throttle.limited > 0 and throttle.rate is None
    assert per_second(sends, 15, 20) == [300] * 5
    assert throttle.changes[-1][1] is None and throttle.changes[-1][0] < 15


def test_a_limit_with_sporadic_429s_on_top_keeps_the_client_near_the_limit():
    """A real limit plus 5% random 429s: the pace neither collapses nor runs away."""
    throttle = sf.Throttle()
    sends = simulate(throttle, lambda t: 40.0, 40.0, noise=0.05)
    assert sum(per_second(sends, 5, 40, accepted=True)) >= 0.95 * 40 * 35
    assert sum(per_second(sends, 5, 40)) <= 1.25 * 40 * 35


def test_429s_for_requests_sent_before_a_cut_do_not_cut_again():
    """A burst of 429s answering requests sent at the old pace says nothing of the new one."""
    throttle = sf.Throttle()
    numbers = [throttle.started(now=0.0) for _ in range(60)]  # 60 requests in flight
    for i, number in enumerate(numbers[:30]):  # the first 30 answered 429 over 0.3 s: engages
        throttle.rate_limited(number, now=i / 100)
    assert throttle.limited == 1
    pace = throttle.rate
    for i, number in enumerate(numbers[30:]):  # fresh requests at the new pace; 429s only for those sent before
        throttle.started(now=1.0 + i / 10)
        throttle.rate_limited(number, now=1.0 + i / 10)
    assert pace == pytest.approx(152.32)
    # not cut again; and with those 429s counting for nothing, the last one counted (at 0.29 s) was ``quiet``
    # (2 s) old when a window closed at 2.5 s, so the throttle switched off there
    assert throttle.limited == 1 and throttle.rate is None
    assert list(throttle.changes) == [(0.25, pace), (2.5, None)]
    assert throttle.refused == 60


def test_counts_are_exact_across_threads(fast_thread_switching):
    """Several threads counting on one throttle lose nothing (the counters are locked)."""
    throttle = sf.Throttle()

    def hammer():
        for _ in range(5_000):
            throttle.rate_limited(throttle.started())

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)  # a deadlock fails here instead of hanging (40,000 counts take well under a second)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck on the throttle's lock"
    assert throttle.refused == 40_000


def test_settings_are_checked():
    """Nonsense settings raise at once."""
    with pytest.raises(ValueError, match="threshold"):
        sf.Throttle(threshold=1.5)
    with pytest.raises(ValueError, match="windows"):
        sf.Throttle(min_window=1.0, max_window=0.5)


# -- through Model -----------------------------------------------------------------------------------


def test_retry_after_holds_back_only_the_request_that_received_it():
    """One 429 asking for 0.5 s delays that request's retry; the model's other requests go at once."""
    clock = VirtualClock()
    starts: dict[str, list[float]] = {}
    first = [True]

    def script(request):
        starts.setdefault(request.last_content, []).append(clock.now())
        if request.last_content == "slow" and first[0]:
            first[0] = False
            raise sf.RateLimitError("429", status_code=429, retry_after=0.5)
        return boxed(1)

    model = sf.Model(ScriptedBackend(script), retry=sf.Retry(attempts=3, jitter=0.0), clock=clock)

    async def main():
        await asyncio.gather(model.complete(Request(messages=(("user", "slow"),))),
                             *(model.complete(Request(messages=(("user", f"q{i}"),))) for i in range(5)))

    asyncio.run(main())
    assert starts == {"slow": [0.0, 0.5], **{f"q{i}": [0.0] for i in range(5)}}
    assert model.throttle.rate is None and model.throttle.refused == 1


def test_a_model_shares_its_pace_with_every_run_and_event_loop():
    """A pace on a Model holds across runs made one after another on different event loops."""
    clock = VirtualClock()
    sent: list[float] = []
    model = sf.Model(ScriptedBackend(lambda r: sent.append(clock.now()) or boxed(1)), clock=clock)
    model.throttle.rate = 20.0  # as a limit would set it: 20 requests per second

    async def five():
        for _ in range(5):
            await model.complete(REQUEST)

    asyncio.run(five())
    asyncio.run(five())  # the second loop's first request waits for its turn after the first loop's last
    assert sent == pytest.approx([i / 20 for i in range(10)], abs=1e-9)

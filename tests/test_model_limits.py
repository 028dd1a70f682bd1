"""Model: retries, per-attempt timeout, requests/tokens per minute and 429 pacing, measured on the real executor."""

from __future__ import annotations

import asyncio
import itertools
import random
import time

import pytest
from helpers import boxed, max_in_window

import scaffold as sf
from scaffold._limits import RateLimit
from scaffold._types import Completion, Request, Usage
from scaffold.backends import Retry
from scaffold.testing import ScriptedBackend

FAST = Retry(attempts=4, initial_delay=0.01, max_delay=0.02)


@sf.graph
def fan_out(problem, *, n: int = 8, k: int = 2):
    pop = sf.sample("Solve {problem}", model="m", n=n)
    return sf.aggregate(pop, model="m", k=k, n=n)


def flaky(failures: int, error_factory):
    """A script that raises ``error_factory()`` for its first ``failures`` calls, then answers 7."""
    counter = itertools.count()

    def script(request):
        if next(counter) < failures:
            raise error_factory()
        return boxed(7)

    return script


# -- retries -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [sf.RateLimitError, sf.ServerError, sf.ConnectionFailed, sf.RequestTimeout])
def test_retryable_errors_are_retried_and_the_attempt_is_recorded(error):
    """429, 5xx, dropped connections and timeouts are retried; the trace records which attempt succeeded."""
    backend = ScriptedBackend(flaky(2, lambda: error("transient")))

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    result = g.run_sync({"problem": "p"}, models={"m": sf.Model(backend, retry=FAST)})
    assert result.answer == "7"
    assert backend.calls == 3
    assert result.traces[0].attempt == 3


@pytest.mark.parametrize("error", [sf.AuthenticationError, sf.BadRequestError, sf.ContextLengthError])
def test_permanent_errors_are_never_retried(error):
    """Authentication, bad-request and context-length errors fail on the first attempt, typed."""
    backend = ScriptedBackend(flaky(1, lambda: error("permanent")))

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    with pytest.raises(sf.CallError) as info:
        g.run_sync({"problem": "p"}, models={"m": sf.Model(backend, retry=FAST)})
    assert backend.calls == 1
    assert type(info.value.__cause__) is error
    assert info.value.__cause__.retryable is False


def test_giving_up_raises_the_last_typed_error_with_the_attempt_count():
    """After the last attempt the typed error is raised with ``attempts``; the failed trace says so."""
    backend = ScriptedBackend(flaky(100, lambda: sf.ServerError("503 down", status_code=503)))

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    with pytest.raises(sf.CallError) as info:
        g.run_sync({"problem": "p"}, models={"m": sf.Model(backend, retry=FAST)})
    assert backend.calls == 4
    cause = info.value.__cause__
    assert isinstance(cause, sf.ServerError) and cause.attempts == 4 and cause.status_code == 503
    assert info.value.trace.attempt == 4
    assert "after 4 attempts" in info.value.trace.error
    assert info.value.trace.text == ""  # a failure is never turned into an answer


def test_retry_after_is_honoured():
    """A 429 asking for 0.2 s delays the retry by at least that, even with a tiny backoff."""
    arrivals: list[float] = []

    def script(request):
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            raise sf.RateLimitError("slow down", status_code=429, retry_after=0.2)
        return boxed(1)

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    g.run_sync({"problem": "p"}, models={"m": sf.Model(ScriptedBackend(script), retry=FAST)})
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 0.2


def test_backoff_grows_exponentially_with_jitter_inside_its_bounds():
    """Waits follow initial * multiplier^(attempt-1), capped, randomised within the jitter fraction."""
    policy = Retry(attempts=6, initial_delay=0.1, multiplier=2.0, max_delay=0.5, jitter=0.5)
    rng = random.Random(0)
    error = sf.ServerError("x")
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (5, 0.5)]:
        waits = [policy.delay(attempt, error, rng) for _ in range(200)]
        assert all(base * 0.5 - 1e-9 <= w <= base + 1e-9 for w in waits)
        assert max(waits) - min(waits) > base * 0.3  # really randomised
    assert 1.0 <= Retry(max_retry_after=1.0).delay(1, sf.RateLimitError("x", retry_after=30.0)) <= 1.1
    assert 0.3 <= Retry(initial_delay=5.0).delay(1, sf.RateLimitError("x", retry_after=0.3)) <= 0.33  # provider wins


def test_per_attempt_timeout_is_retried_then_typed():
    """A hung attempt is abandoned after ``timeout`` and retried; the next attempt can succeed."""
    calls = itertools.count()

    async def script(request):
        if next(calls) == 0:
            await asyncio.sleep(10)
        return boxed(3)

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    t0 = time.perf_counter()
    result = g.run_sync({"problem": "p"}, models={"m": sf.Model(ScriptedBackend(script), timeout=0.1, retry=FAST)})
    assert result.answer == "3" and result.traces[0].attempt == 2
    assert time.perf_counter() - t0 < 1.0


def test_retry_policy_rejects_nonsense():
    """Zero attempts or a jitter outside [0, 1] is refused when the policy is made."""
    with pytest.raises(ValueError):
        Retry(attempts=0)
    with pytest.raises(ValueError):
        Retry(jitter=1.5)


# -- limits -------------------------------------------------------------------------------------------


def test_requests_per_minute_hold_across_nested_fan_out_and_concurrent_runs():
    """Measured start times of 4 concurrent runs × 16 calls stay within the requests-per-minute pace."""
    starts: list[float] = []

    def script(request):
        starts.append(time.monotonic())
        return boxed(1)

    model = sf.Model(ScriptedBackend(script), requests_per_minute=1200)  # 20 per second, burst of 20

    async def main():
        await asyncio.gather(*(fan_out.run({"problem": f"p{i}"}, models={"m": model}) for i in range(4)))

    t0 = time.monotonic()
    asyncio.run(main())
    elapsed = time.monotonic() - t0
    assert len(starts) == 64
    assert elapsed >= (64 - 20) / 20 * 0.95  # the pace really held the calls back
    for window in (0.5, 1.0, 2.0):
        assert max_in_window(starts, window) <= 20 + window * 20 + 1


def test_tokens_per_minute_budget_paces_by_reported_usage():
    """Measured tokens per second stay within a tokens-per-minute budget; reported usage gives back the unused."""
    log: list[float] = []

    def script(request):
        log.append(time.monotonic())
        return Completion(text=boxed(1), usage=Usage(prompt_tokens=2, completion_tokens=60))

    # 1,000 tokens/s; each request is booked at 102 tokens (prompt estimate + max_tokens) and uses 62
    model = sf.Model(ScriptedBackend(script), tokens_per_minute=60_000, params={"max_tokens": 100})

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=60))

    t0 = time.monotonic()
    g.run_sync({"problem": "p"}, models={"m": model})
    elapsed = time.monotonic() - t0
    assert len(log) == 60
    assert max_in_window(log, 1.0) * 62 <= 1000 + 1000 + 102  # one second's budget plus one second of burst
    assert elapsed >= (60 * 62 - 1000) / 1000 * 0.9  # the budget really held the calls back


def test_one_model_object_shares_its_in_flight_limit_across_runs():
    """Runs sharing one Model never exceed its in-flight limit together (measured at the backend)."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.02)
    model = sf.Model(backend, max_in_flight=3)

    async def main():
        await asyncio.gather(*(fan_out.run({"problem": f"p{i}"}, models={"m": model}) for i in range(5)))

    asyncio.run(main())
    assert backend.peak_in_flight == 3
    assert backend.calls == 80


def test_a_rate_limited_model_slows_all_runs_down_then_recovers():
    """After a burst of 429s every run shares one pace; all calls finish, each answered exactly once."""
    accepted: list[float] = []
    next_free = [0.0]
    interval = 0.02  # the "provider" accepts 50 requests per second

    def script(request):
        now = time.monotonic()
        if now < next_free[0]:
            raise sf.RateLimitError("429", status_code=429, retry_after=next_free[0] - now)
        next_free[0] = max(now, next_free[0]) + interval
        accepted.append(now)
        return boxed(1)

    model = sf.Model(ScriptedBackend(script), retry=Retry(attempts=50, initial_delay=0.01, max_delay=0.05))

    async def main():
        return await asyncio.gather(*(fan_out.run({"problem": f"p{i}"}, models={"m": model}) for i in range(4)))

    results = asyncio.run(main())
    assert all(r.status == "ok" for r in results)
    assert len(accepted) == 64
    assert model.throttle.limited >= 1
    assert max_in_window(accepted, 0.5) <= 0.5 / interval + 2


def test_rate_limit_pacing_is_first_come_first_served():
    """RateLimit books starts in order: a later reservation never starts before an earlier one."""
    limit = RateLimit(60, burst=1)  # one per second
    delays = [limit.reserve(now=100.0) for _ in range(4)]
    assert delays == [0.0, 1.0, 2.0, 3.0]
    limit.adjust(-2)  # two units given back
    assert limit.reserve(now=100.0) == 2.0


def test_credentials_in_params_never_reach_requests():
    """``api_key`` in a Model's params is handed to the backend and removed from every recorded request."""
    backend = sf.LiteLLMBackend("hosted_vllm/tiny", api_base="http://127.0.0.1:9/v1")
    model = sf.Model(backend, params={"api_key": "sk-secret-123456", "temperature": 0.5})
    assert "api_key" not in model.params and model.params == {"temperature": 0.5}
    assert "sk-secret" not in repr(model)
    with pytest.raises(sf.ModelAliasError, match="credentials"):
        sf.Model(ScriptedBackend(lambda r: "x"), params={"api_key": "sk-secret-123456"})


def test_model_spec_strings_build_backends():
    """A string binding becomes a backend: ``hosted_vllm/`` the native OpenAI-compatible one, ``litellm:`` forces
    litellm (``transformers:`` / ``vllm:`` prefixes pick local engines)."""
    model = sf.Model("hosted_vllm/tiny")
    assert isinstance(model.backend, sf.OpenAIBackend) and model.backend.model == "tiny"
    assert model.name == "hosted_vllm/tiny"
    assert isinstance(sf.Model("litellm:hosted_vllm/tiny").backend, sf.LiteLLMBackend)
    assert isinstance(Request(messages=(("user", "x"),)), Request)


def test_credentials_in_node_params_are_refused_at_build_time():
    """A node whose params carry an API key is a GraphDefinitionError: node params are recorded with each request."""
    with pytest.raises(sf.GraphDefinitionError, match="api_key"):

        @sf.graph
        def g(problem):
            return sf.generate("Solve {problem}", model="m", params={"api_key": "sk-leak-1234567"})

        g.build()

"""Model: retries, per-attempt timeout, requests/tokens per minute and 429 pacing, measured on the real executor."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from helpers import boxed, max_in_window

import scaffold as sf
from scaffold._limits import RateLimit
from scaffold._types import Completion, Request, Usage
from scaffold.backends import Retry
from scaffold.testing import ScriptedBackend, VirtualClock

FAST = Retry(attempts=4, initial_delay=0.01, max_delay=0.02, jitter=0.0)
"""Backoffs of 10 then 20 ms, not randomised: on a virtual clock, every retry's time is known."""


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
    """A 429 asking for 0.2 s delays the retry by exactly that, instead of the policy's 10 ms backoff."""
    clock = VirtualClock()
    arrivals: list[float] = []

    def script(request):
        arrivals.append(clock.now())
        if len(arrivals) == 1:
            raise sf.RateLimitError("slow down", status_code=429, retry_after=0.2)
        return boxed(1)

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    g.run_sync({"problem": "p"}, models={"m": sf.Model(ScriptedBackend(script), retry=FAST, clock=clock)})
    assert arrivals == [0.0, 0.2]


def test_backoff_waits_are_slept_on_the_models_clock():
    """Each retry waits initial * multiplier^(attempt-1), capped: the attempts go out at 0, 10, 30 and 50 ms."""
    clock = VirtualClock()
    arrivals: list[float] = []

    def script(request):
        arrivals.append(clock.now())
        raise sf.ServerError("503 down", status_code=503)

    model = sf.Model(ScriptedBackend(script), retry=FAST, clock=clock)
    with pytest.raises(sf.ServerError):
        asyncio.run(model.complete(Request(messages=(("user", "q"),))))
    assert arrivals == pytest.approx([0.0, 0.01, 0.03, 0.05], abs=1e-12)


def test_a_seeded_retry_repeats_its_jittered_waits_exactly():
    """``Retry(seed=...)``: two models with the same seed wait exactly the same jittered times; each wait is
    the seeded generator's draw within the jitter bounds."""
    policy = Retry(attempts=4, initial_delay=0.1, multiplier=2.0, jitter=1.0, seed=11)

    def attempts() -> list[float]:
        clock, arrivals = VirtualClock(), []

        def script(request):
            arrivals.append(clock.now())
            raise sf.ServerError("503 down", status_code=503)

        model = sf.Model(ScriptedBackend(script), retry=policy, clock=clock)
        with pytest.raises(sf.ServerError):
            asyncio.run(model.complete(Request(messages=(("user", "q"),))))
        return arrivals

    first, second = attempts(), attempts()
    assert first == second and len(first) == 4
    draws = random.Random(11)
    expected, now = [0.0], 0.0
    for base in (0.1, 0.2, 0.4):
        now += base * (1.0 - draws.random())  # full jitter: uniform in (0, base]
        expected.append(now)
    assert first == pytest.approx(expected, abs=1e-12)


def test_backoff_grows_exponentially_with_jitter_inside_its_bounds():
    """Waits follow initial * multiplier^(attempt-1), capped, randomised within the jitter fraction."""
    policy = Retry(attempts=6, initial_delay=0.1, multiplier=2.0, max_delay=0.5, jitter=0.5)
    rng = random.Random(0)
    error = sf.ServerError("x")
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (5, 0.5)]:
        waits = [policy.delay(attempt, error, rng) for _ in range(200)]
        assert all(base * 0.5 - 1e-9 <= w <= base + 1e-9 for w in waits)
        assert max(waits) - min(waits) > base * 0.3  # really randomised
    draw = random.Random(1).random()  # the draw each seeded call below makes
    capped = Retry(max_retry_after=1.0).delay(1, sf.RateLimitError("x", retry_after=30.0), random.Random(1))
    assert capped == pytest.approx(1.0 * (1 + 0.1 * draw))
    provider = Retry(initial_delay=5.0).delay(1, sf.RateLimitError("x", retry_after=0.3), random.Random(1))
    assert provider == pytest.approx(0.3 * (1 + 0.1 * draw))  # the provider's wait wins over the policy's


def test_per_attempt_timeout_is_retried_then_typed():
    """A hung attempt is abandoned after ``timeout`` and retried; the next attempt can succeed."""
    clock = VirtualClock()
    sent: list[float] = []

    async def script(request):
        sent.append(clock.now())
        if len(sent) == 1:
            await clock.sleep(10)  # hangs past the timeout
        return boxed(3)

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    model = sf.Model(ScriptedBackend(script), timeout=0.1, retry=FAST, clock=clock)
    result = g.run_sync({"problem": "p"}, models={"m": model})
    assert result.answer == "3" and result.traces[0].attempt == 2
    assert sent == pytest.approx([0.0, 0.1 + 0.01], abs=1e-12)  # abandoned at 0.1 s, retried after a 10 ms backoff


def test_every_attempt_timing_out_raises_request_timeout_with_the_attempt_count():
    """Attempts all hanging past ``timeout`` end in a retryable RequestTimeout with ``attempts``: each cut at 0.1 s."""
    clock = VirtualClock()
    sent: list[float] = []

    async def script(request):
        sent.append(clock.now())
        await clock.sleep(10)

    model = sf.Model(ScriptedBackend(script), timeout=0.1, retry=FAST, clock=clock)
    with pytest.raises(sf.RequestTimeout) as info:
        asyncio.run(model.complete(Request(messages=(("user", "q"),))))
    assert info.value.attempts == 4 and info.value.retryable
    assert sent == pytest.approx([0.0, 0.11, 0.23, 0.35], abs=1e-12)
    assert clock.now() == pytest.approx(0.45, abs=1e-12) and clock.sleeping == 0


def test_a_stream_whose_first_item_is_late_is_abandoned_and_retried():
    """``timeout`` bounds the wait for a stream's first item: a hung attempt is cut and the stream retried."""
    clock = VirtualClock()
    sent: list[float] = []

    async def script(request):
        sent.append(clock.now())
        if len(sent) == 1:
            await clock.sleep(10)
        return "so 4"

    model = sf.Model(ScriptedBackend(script), timeout=0.1, retry=FAST, clock=clock)

    async def items():
        return [item async for item in model.stream(Request(messages=(("user", "2+2?"),)))]

    streamed = asyncio.run(items())
    assert [type(item).__name__ for item in streamed] == ["Delta", "Finished"]
    assert streamed[-1].completions[0].text == "so 4"
    assert sent == pytest.approx([0.0, 0.11], abs=1e-12) and clock.sleeping == 0


def test_retry_policy_rejects_nonsense():
    """Zero attempts or a jitter outside [0, 1] is refused when the policy is made."""
    with pytest.raises(ValueError):
        Retry(attempts=0)
    with pytest.raises(ValueError):
        Retry(jitter=1.5)


# -- limits -------------------------------------------------------------------------------------------


def test_requests_per_minute_hold_across_nested_fan_out_and_concurrent_runs():
    """Start times of 4 concurrent runs × 16 calls follow the requests-per-minute pace exactly: a burst of 20,
    then one every 50 ms (the aggregations queue behind the samples, so the pace never idles)."""
    clock = VirtualClock()
    starts: list[float] = []

    def script(request):
        starts.append(clock.now())
        return boxed(1)

    model = sf.Model(ScriptedBackend(script), requests_per_minute=1200, clock=clock)  # 20 per second, burst of 20

    async def main():
        await asyncio.gather(*(fan_out.run({"problem": f"p{i}"}, models={"m": model}, seed=i) for i in range(4)))

    asyncio.run(main())
    assert starts == pytest.approx([max(0.0, (i - 19) / 20) for i in range(64)], abs=1e-9)
    for window in (0.5, 1.0, 2.0):
        assert max_in_window(starts, window + 1e-9) == 20 + window * 20


def test_tokens_per_minute_budget_paces_by_reported_usage():
    """Tokens per second stay within a tokens-per-minute budget; reported usage gives back the unused."""
    clock = VirtualClock()
    log: list[float] = []

    def script(request):
        log.append(clock.now())
        return Completion(text=boxed(1), usage=Usage(prompt_tokens=2, completion_tokens=60))

    # 1,000 tokens/s; each request is booked at 102 tokens (prompt estimate + max_tokens) and uses 62
    model = sf.Model(ScriptedBackend(script), tokens_per_minute=60_000, params={"max_tokens": 100}, clock=clock)

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=60))

    g.run_sync({"problem": "p"}, models={"m": model})
    assert len(log) == 60
    assert max_in_window(log, 1.0) * 62 <= 1000 + 1000 + 102  # one second's budget plus one second of burst
    # once the burst is spent, one call every 62 ms: the tokens each used, not the 102 booked for it
    gaps = [later - earlier for earlier, later in zip(log[20:], log[21:])]
    assert gaps == pytest.approx([0.062] * 39, abs=1e-9)
    # the last call starts when the 59 before it have used all but one second's burst (999 tokens of tolerance)
    assert log[-1] == pytest.approx(59 * 0.062 - 0.999, abs=1e-9)


def test_one_model_object_shares_its_in_flight_limit_across_runs():
    """Runs sharing one Model never exceed its in-flight limit together (measured at the backend)."""
    clock = VirtualClock()

    async def script(request):
        await clock.sleep(0.02)
        return boxed(1)

    backend = ScriptedBackend(script)
    model = sf.Model(backend, max_in_flight=3, clock=clock)

    async def main():
        await asyncio.gather(*(fan_out.run({"problem": f"p{i}"}, models={"m": model}, seed=i) for i in range(5)))

    asyncio.run(main())
    assert backend.peak_in_flight == 3
    assert backend.calls == 80


def test_a_rate_limited_model_slows_all_runs_down_then_recovers():
    """After a burst of 429s every run shares one pace; all calls finish, each answered exactly once."""
    clock = VirtualClock()
    accepted: list[float] = []
    next_free = [0.0]
    interval = 0.02  # the "provider" accepts 50 requests per second

    def script(request):
        now = clock.now()
        if now < next_free[0]:
            raise sf.RateLimitError("429", status_code=429, retry_after=next_free[0] - now)
        next_free[0] = max(now, next_free[0]) + interval
        accepted.append(now)
        return boxed(1)

    retry = Retry(attempts=50, initial_delay=0.01, max_delay=0.05, jitter=0.0)
    backend = ScriptedBackend(script)
    model = sf.Model(backend, retry=retry, clock=clock)

    async def main():  # seeded runs: the subsets each aggregation reads, hence the order of the requests, are fixed
        return await asyncio.gather(*(fan_out.run({"problem": f"p{i}"}, models={"m": model}, seed=i)
                                      for i in range(4)))

    results = asyncio.run(main())
    assert all(r.status == "ok" for r in results)
    traces = [t for r in results for t in r.traces if t.kind is sf.TraceKind.MODEL]
    assert len(traces) == len(accepted) == 64  # each call answered exactly once
    assert sum(t.attempt for t in traces) == backend.calls  # every 429 was one more attempt of a recorded call
    assert model.throttle.limited >= 1 and model.throttle.refused == backend.calls - 64
    # the shared pace spares the provider most 429s: with the throttle off, the retries of the first burst keep
    # landing on the same free slot, 1,452 refusals for these 64 answers (measured), against 192 paced
    assert model.throttle.refused <= 4 * 64
    # and costs little time: the calls finish within twice the 1.26 s the provider needs for them (1.91 s measured)
    assert 63 * interval <= accepted[-1] <= 2 * 63 * interval


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

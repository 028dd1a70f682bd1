"""Adversarial tests of Model, the shared limits, the litellm backend, the registry and budgets.

Cancellation while waiting, retries under a call timeout, hostile ``Retry-After`` values,
keys quoted back by a provider, wrongly typed registry files and one Model shared by
several threads, each on its own event loop.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import logging
import threading
import time
import traceback

import pytest
from helpers import boxed, chain, peak_in_flight

import scaffold as sf
import scaffold.testing._server as server_module
from scaffold._limits import InFlightLimit, RateLimit
from scaffold._types import Completion, Request, Usage
from scaffold.backends import Retry
from scaffold.testing import ScriptedBackend, VirtualClock
from scaffold.testing._fake_answers import Refusal, error_response
from scaffold.testing._server import Fault, OpenAIServer

KEY = "tgp-v1-7c1d2e3f4a5b6c7d8e9f"  # not shaped like an OpenAI key: only redaction by value can hide it
REQUEST = Request(messages=(("user", "2+2?"),))


@sf.graph
def one_call(problem):
    return sf.generate("Solve {problem}", model="m")


def failing_first(times: int, error_factory, *, answer: object = 1):
    """A script raising ``error_factory()`` for its first ``times`` calls, then answering."""
    counter = itertools.count()

    def script(request):
        if next(counter) < times:
            raise error_factory()
        return boxed(answer)

    return script


@pytest.fixture
def retry_after_headers(monkeypatch) -> list[tuple[str, str]]:
    """The headers the test server's 429 answers carry; the test fills the list."""
    headers: list[tuple[str, str]] = []

    def rate_limited(seconds: float, message: str):
        return error_response(429, message, "rate_limit_error", code="rate_limit_exceeded", headers=tuple(headers))

    monkeypatch.setattr(server_module, "rate_limited_response", rate_limited)
    return headers


@pytest.fixture
def local_time_utc_plus_9(monkeypatch):
    """The process's local time zone is UTC+9 for the test."""
    monkeypatch.setenv("TZ", "JST-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def rate_limit_error_over_http(headers_list: list[tuple[str, str]], headers: tuple[tuple[str, str], ...]):
    """The typed error the litellm backend raises for one 429 answered with ``headers``."""
    headers_list[:] = headers
    with OpenAIServer() as server:
        server.inject(Fault.rate_limit(1.0))
        backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url)

        async def main():
            try:
                await backend.complete(REQUEST)
            except sf.BackendError as exc:
                return exc
            finally:
                await backend.release_loop()

        return asyncio.run(main())


# -- cancellation and timeouts give everything back ----------------------------------------------------


def test_cancelling_requests_queued_on_the_request_rate_gives_back_every_in_flight_place():
    """Requests cancelled while waiting on requests-per-minute or on the in-flight limit leave no place taken."""
    clock = VirtualClock(auto_advance=False)  # time stands still: the pace holds the requests until cancelled
    model = sf.Model(ScriptedBackend(lambda r: boxed(1)), max_in_flight=2, requests_per_minute=60,  # 1 per second
                     clock=clock)

    async def main():
        await model.complete(REQUEST)  # books the first second
        waiting = [asyncio.create_task(model.complete(REQUEST)) for _ in range(4)]
        await clock.wait_sleeping(1)  # the first in line waits on the pace (the others queue behind it)
        assert model.limit.in_flight == 2  # two wait on the pace holding places, two wait for a place
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)

    asyncio.run(main())
    assert model.limit.in_flight == 0


def test_cancelled_requests_waiting_on_the_429_pace_do_not_hold_back_later_runs():
    """Requests cancelled while the learned 429 pace holds them back give their turns back to the next run."""
    clock = VirtualClock()
    sent: list[float] = []
    backend = ScriptedBackend(lambda r: sent.append(clock.now()) or boxed(1))
    model = sf.Model(backend, retry=Retry.never(), clock=clock)
    model.throttle.rate = 1 / 0.3  # as 429s would set it: one request per 0.3 s

    async def main():
        await model.complete(REQUEST)  # sent at 0; the next turn is at 0.3
        queued = [asyncio.create_task(model.complete(REQUEST)) for _ in range(20)]  # their turns would end at 6 s
        await clock.wait_sleeping(1)  # the first in line waits for its turn, the others behind it
        for task in queued:
            task.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        await model.complete(REQUEST)

    asyncio.run(main())
    assert sent == pytest.approx([0.0, 0.3])  # the later request had the next turn; the cancelled ones took none


def test_a_request_backing_off_holds_no_in_flight_place():
    """While a failed request waits to retry, another request may use the model's only in-flight place."""
    clock = VirtualClock()
    finished: dict[str, float] = {}
    flaky = failing_first(1, lambda: sf.ServerError("500"))

    def script(request):
        return flaky(request) if "first" in request.last_content else boxed(2)

    model = sf.Model(ScriptedBackend(script), max_in_flight=1, retry=Retry(attempts=2, initial_delay=0.4, jitter=0),
                     clock=clock)

    async def timed(text: str):
        await model.complete(Request(messages=(("user", text),)))
        finished[text] = clock.now()

    async def main():
        first = asyncio.create_task(timed("first"))
        await clock.wait_sleeping(1)  # the first request failed and is backing off now
        assert model.limit.in_flight == 0
        await timed("second")
        await first

    asyncio.run(main())
    assert finished == {"second": 0.0, "first": 0.4}


def test_a_call_timeout_firing_during_retries_gives_back_the_place_and_the_budget_booking():
    """A call timeout that fires while a call backs off between retries releases its in-flight place and budget."""
    clock = VirtualClock()
    backend = ScriptedBackend(lambda r: sf.ServerError("always 503"))
    retry = Retry(attempts=50, initial_delay=0.03, max_delay=0.03, jitter=0)
    model = sf.Model(backend, max_in_flight=1, retry=retry, clock=clock)
    budget = sf.Budget(max_tokens=10_000)
    result = one_call.run_sync({"problem": "p"}, models={"m": model}, call_timeout=0.2, budget=budget,
                               raise_on_error=False)
    assert isinstance(result.error.__cause__, sf.CallTimeout)
    assert clock.now() == 0.2
    assert backend.calls == 7  # sent at 0, 0.03 ... 0.18: it was backing off to retry when the timeout fired
    assert model.limit.in_flight == 0
    assert budget.remaining_tokens == 10_000 and budget.tokens == 0


def test_a_run_timeout_while_calls_wait_on_the_rate_limit_gives_every_place_back():
    """A run cancelled while its calls queue on the in-flight limit and the request pace leaves the Model clean."""
    model = sf.Model(ScriptedBackend(lambda r: boxed(1), delay=0.05), max_in_flight=2, requests_per_minute=120)

    @sf.graph
    def wide(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=12))

    result = wide.run_sync({"problem": "p"}, models={"m": model}, timeout=0.3, raise_on_error=False)
    assert isinstance(result.error, sf.RunTimeout)
    assert model.limit.in_flight == 0
    assert one_call.run_sync({"problem": "q"}, models={"m": model}).answer == "1"  # and the Model still serves


# -- 429s and Retry-After --------------------------------------------------------------------------------


def test_a_huge_retry_after_is_capped_and_holds_back_no_other_request():
    """Retry-After of a day is capped at ``max_retry_after`` for the retry, and later requests do not wait at all."""
    clock = VirtualClock()
    sent: list[float] = []
    script = failing_first(1, lambda: sf.RateLimitError("come back tomorrow", retry_after=86_400.0))
    backend = ScriptedBackend(lambda r: sent.append(clock.now()) or script(r))
    model = sf.Model(backend, retry=Retry(attempts=3, max_retry_after=0.05, jitter=0), clock=clock)

    async def main():
        for _ in range(3):
            await model.complete(REQUEST)

    asyncio.run(main())
    assert sent == [0.0, 0.05, 0.05, 0.05]  # the retry waited the cap, not a day; the next two did not wait
    assert model.throttle.refused == 1 and model.throttle.rate is None


@pytest.mark.parametrize("usegmt", [True, False], ids=["GMT", "-0000"])
def test_retry_after_as_an_http_date_is_read_as_utc(retry_after_headers, local_time_utc_plus_9, usegmt):
    """``Retry-After: <HTTP date>`` 30 s ahead means 30 s, in either date form, whatever the local time zone."""
    t0 = time.time()
    when = email.utils.formatdate(t0 + 30, usegmt=usegmt)
    error = rate_limit_error_over_http(retry_after_headers, (("Retry-After", when),))
    assert isinstance(error, sf.RateLimitError)
    assert 30 - (time.time() - t0) - 1 <= error.retry_after <= 30


@pytest.mark.parametrize(("headers", "expected"), [
    ((("Retry-After", "inf"),), None),
    ((("Retry-After", "nan"),), None),
    ((("Retry-After", "-5"),), None),
    ((("Retry-After", "soon"),), None),
    ((("retry-after-ms", "soon"), ("Retry-After", "3")), 3.0),
    ((("retry-after-ms", "250"), ("Retry-After", "1")), 0.25),
], ids=["inf", "nan", "negative", "garbage", "bad-ms-good-seconds", "ms-first"])
def test_unusable_retry_after_values_are_ignored(retry_after_headers, headers, expected):
    """Infinite, NaN, negative or unreadable Retry-After values are dropped; a readable one still counts."""
    error = rate_limit_error_over_http(retry_after_headers, headers)
    assert isinstance(error, sf.RateLimitError)
    assert error.retry_after == expected


def test_a_429_without_retry_after_backs_off_and_one_429_does_not_slow_the_model(retry_after_headers):
    """A bare 429 is retried after the policy's own backoff; one 429 is no limit, so the model is not paced."""
    assert retry_after_headers == []  # no headers at all
    with OpenAIServer() as server:
        server.inject(Fault.rate_limit(1.0))
        backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url)
        model = sf.Model(backend, retry=Retry(attempts=3, initial_delay=0.1, jitter=0))
        result = one_call.run_sync({"problem": "p"}, models={"m": model})
        first, second = server.arrivals[:2]
    assert result.status == "ok" and result.traces[0].attempt == 2
    assert second - first >= 0.09
    assert model.throttle.refused == 1 and model.throttle.limited == 0 and model.throttle.rate is None


def test_a_request_larger_than_the_token_burst_is_sent_and_its_tokens_paid_by_the_next():
    """A request bigger than the tokens-per-minute burst does not wait forever; the next one waits for its tokens."""
    limit = RateLimit(600)  # 10 tokens per second, a burst of 10
    assert limit.reserve(30, now=0.0) == 0.0
    assert limit.reserve(1, now=0.0) == pytest.approx(3.0 - 0.9)

    clock = VirtualClock()
    starts: list[float] = []

    def script(request):
        starts.append(clock.now())
        return Completion(text=boxed(1), usage=Usage(prompt_tokens=0, completion_tokens=1500))

    model = sf.Model(ScriptedBackend(script), tokens_per_minute=60_000, params={"max_tokens": 1500},  # burst 1,000
                     clock=clock)
    for _ in range(2):
        one_call.run_sync({"problem": "p"}, models={"m": model})
    # the first goes at once (1,502 tokens booked, 1,500 used); the second waits until all but the burst's 999
    # tokens of tolerance are paid: 1.5 s - 0.999 s
    assert starts == pytest.approx([0.0, 1.5 - 0.999], abs=1e-9)


# -- secrets ---------------------------------------------------------------------------------------------


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception reachable through ``__cause__`` and ``__context__``."""
    chain, todo = [], [error]
    while todo:
        current = todo.pop()
        if current is None or any(current is seen for seen in chain):
            continue
        chain.append(current)
        todo += [current.__cause__, current.__context__]
    return chain


def test_a_key_quoted_back_by_the_provider_is_nowhere_in_the_error_chain(monkeypatch, caplog, capfd):
    """A 401 quoting the key sent (read from ``api_key_env``) reaches no message, repr, chained error or log."""
    monkeypatch.setenv("SCAFFOLD_ADVERSARIAL_KEY", KEY)

    def quoting_check(headers, api_key):
        sent = headers.get("authorization", "").removeprefix("Bearer ")
        if sent != api_key:
            raise Refusal(error_response(401, f"Incorrect API key provided: {sent}.", code="invalid_api_key"))

    monkeypatch.setattr(server_module, "check_api_key", quoting_check)
    caplog.set_level(logging.DEBUG)
    with OpenAIServer(api_key="sk-the-right-one-000000") as server:
        backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url,
                                    api_key_env="SCAFFOLD_ADVERSARIAL_KEY")
        model = sf.Model(backend, retry=Retry.never())
        with pytest.raises(sf.CallError) as info:
            one_call.run_sync({"problem": "p"}, models={"m": model})
    chain = exception_chain(info.value)
    assert any(isinstance(e, sf.AuthenticationError) for e in chain)
    dumped = "".join(f"{e!s}{e!r}{vars(e)!r}" for e in chain)
    dumped += "".join(traceback.format_exception(info.value)) + repr(model) + repr(backend) + repr(info.value.trace)
    dumped += caplog.text + "".join(capfd.readouterr())
    assert "Incorrect API key provided" in dumped  # the provider's message did arrive
    assert KEY not in dumped


# -- registry files --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("setting", "value"), [
    ("max_in_flight", '"8"'), ("max_in_flight", "0"), ("max_in_flight", "true"), ("max_in_flight", "2.5"),
    ("requests_per_minute", '"500"'), ("tokens_per_minute", "true"), ("timeout", '"30"'), ("timeout", "-1"),
    ("retry", '"3"'), ("retry", "2.5"), ("retry", "true"), ("retry", "{ attemps = 3 }"), ("params", '"hot"'),
])
def test_wrongly_typed_registry_settings_are_refused_naming_the_alias(tmp_path, setting, value):
    """A quoted number, a boolean, a fraction, a misspelt retry key or a non-table ``params`` is a ModelAliasError."""
    path = tmp_path / "models.toml"
    path.write_text(f'[models.judge]\nmodel = "hosted_vllm/x"\napi_base = "http://127.0.0.1:9/v1"\n'
                    f'{setting} = {value}\n')
    with pytest.raises(sf.ModelAliasError, match="judge"):
        sf.load_models(path)


def test_wrongly_typed_yaml_settings_are_refused_too(tmp_path):
    """YAML strings where numbers belong are refused as in TOML."""
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  judge:\n    model: hosted_vllm/x\n    requests_per_minute: '500'\n")
    with pytest.raises(sf.ModelAliasError, match="requests_per_minute"):
        sf.load_models(path)


# -- budgets ---------------------------------------------------------------------------------------------


def test_a_budget_counts_the_estimate_of_calls_that_report_no_usage():
    """Calls whose backend reports no token usage still spend their estimate, so the token budget runs out."""
    backend = ScriptedBackend(lambda r: Completion(text=boxed(1), usage=Usage(0, 0)))
    budget = sf.Budget(max_tokens=200)
    model = sf.Model(backend, params={"max_tokens": 50})
    with pytest.raises(sf.BudgetExceeded):
        chain.run_sync({"problem": "p"}, models={"m": model}, budget=budget)
    assert backend.calls == 3
    # each call spent its estimate (prompt characters / 4 + 1 + max_tokens): 52 + 63 + 63; a fourth (63) would not fit
    assert budget.tokens == 178 and budget.remaining_tokens == 22


def test_a_budget_books_n_choices_of_one_request_and_settles_them_together():
    """One request for n=4 books 4 × max_tokens, is refused when that does not fit, and settles to real usage."""
    backend = ScriptedBackend(lambda r: Completion(text=boxed(1), usage=Usage(1, 10)), supports_n=True)

    @sf.graph
    def four(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4))

    model = sf.Model(backend, params={"max_tokens": 50})
    tight = sf.Budget(max_tokens=150)
    with pytest.raises(sf.BudgetExceeded):
        four.run_sync({"problem": "p"}, models={"m": model}, budget=tight)
    assert backend.calls == 0 and tight.remaining_tokens == 150
    roomy = sf.Budget(max_tokens=250)
    four.run_sync({"problem": "p"}, models={"m": model}, budget=roomy)
    assert backend.calls == 1 and roomy.tokens == 44 and roomy.remaining_tokens == 206


# -- one Model, several threads and event loops ---------------------------------------------------------


def run_in_threads(work, threads: int, timeout: float = 10.0) -> list[BaseException]:
    """Run ``work`` in ``threads`` daemon threads; the errors they raised (a hung thread is one)."""
    errors: list[BaseException] = []

    def guarded():
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    pool = [threading.Thread(target=guarded, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in pool:
        thread.join(max(0.0, deadline - time.monotonic()))
    errors += [TimeoutError(f"{thread.name} hung") for thread in pool if thread.is_alive()]
    return errors


def test_one_model_shared_by_run_sync_in_several_threads_keeps_its_limits_and_never_hangs():
    """Four threads running run_sync on one Model (one event loop each) finish, one request in flight at a time."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.01)
    model = sf.Model(backend, max_in_flight=1, requests_per_minute=60_000)

    @sf.graph
    def four(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4))

    def work():
        for _ in range(3):
            assert four.run_sync({"problem": "p"}, models={"m": model}).answer == "1"

    assert run_in_threads(work, threads=4) == []
    assert backend.calls == 48 and backend.peak_in_flight == 1
    assert model.limit.in_flight == 0 and model.limit.peak == 1


def test_a_waiter_cancelled_while_a_place_crosses_threads_passes_the_place_on():
    """A place handed to a waiter on another loop that was cancelled meanwhile returns to the limit."""
    limit = InFlightLimit(1)
    asyncio.run(limit.acquire())
    other = asyncio.new_event_loop()
    waiting = threading.Event()
    waiter: list[asyncio.Task[None]] = []

    async def wait_for_a_place():
        waiter.append(asyncio.current_task())  # type: ignore[arg-type]
        # runs once this task has queued on the limit: acquire() queues in this very step, before it suspends
        other.call_soon(waiting.set)
        try:
            await limit.acquire()
        except asyncio.CancelledError:
            pass

    thread = threading.Thread(target=other.run_until_complete, args=(wait_for_a_place(),), daemon=True)
    thread.start()
    assert waiting.wait(10), "the waiter never queued on the limit"
    other.call_soon_threadsafe(waiter[0].cancel)  # runs on the other loop before the place arrives
    limit.release()
    thread.join(10)
    assert not thread.is_alive(), "the cancelled waiter's loop never finished"
    other.close()
    assert limit.in_flight == 0

    async def take_the_place():  # free and nobody queued: taken at once (the deadline only catches a stale waiter)
        try:
            await asyncio.wait_for(limit.acquire(), timeout=10.0)
        except TimeoutError:
            pytest.fail("the place never came back to the limit")

    asyncio.run(take_the_place())
    assert limit.in_flight == 1


def test_one_litellm_model_shared_by_threads_over_http():
    """Two threads running run_sync on one litellm Model finish; the server sees the in-flight limit held."""
    with OpenAIServer(latency=0.02) as server:
        backend = sf.LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key="sk-local-000000",
                                    supports_n=False)
        model = sf.Model(backend, max_in_flight=2, retry=Retry(attempts=2, initial_delay=0.01))

        @sf.graph
        def three(problem):
            return sf.sample("Solve {problem}", model="m", n=3)

        def work():
            for i in range(2):
                assert three.run_sync({"problem": f"p{i}"}, models={"m": model}).status == "ok"

        assert run_in_threads(work, threads=2, timeout=15.0) == []
        served = [r for r in server.requests if r.status == 200]
    assert len(served) == 12
    assert peak_in_flight(served) <= 2
    assert model.limit.in_flight == 0


def test_a_providers_own_key_variable_is_redacted_from_errors(monkeypatch):
    """A key litellm reads from the provider's variable (not shaped like sk-...) never appears in an error."""
    from scaffold.backends._litellm import LiteLLMBackend

    monkeypatch.setenv("GEMINI_API_KEY", "AIzaSyExample0123456789")
    backend = LiteLLMBackend("gemini/gemini-2.0-flash")
    assert "AIza" not in backend._redact("400 bad key=AIzaSyExample0123456789 in url ?key=AIzaSyExample0123456789")


def test_secret_headers_in_params_reach_the_server_but_not_the_records():
    """An Authorization header given in a Model's params is sent, yet absent from params, requests and traces."""
    from scaffold._secrets import MaskedKey
    from scaffold.backends._litellm import LiteLLMBackend
    from scaffold.testing import OpenAIServer

    with OpenAIServer(policy="\\boxed{1}", api_key="sk-header-secret-123") as server:
        backend = LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key="unused-placeholder")
        model = sf.Model(backend, params={"extra_headers": {"Authorization": "Bearer sk-header-secret-123"}},
                         retry=sf.Retry(attempts=1))
        assert "extra_headers" not in model.params

        @sf.graph
        def g(problem):
            return sf.generate("Solve {problem}", model="m")

        result = g.run_sync({"problem": "p"}, models={"m": model})
        assert result.answer == "1"
        assert "sk-header-secret-123" not in repr(result.traces) + repr(model)
    assert repr(MaskedKey("sk-abc")) == "'***'" and f"Bearer {MaskedKey('sk-abc')}" == "Bearer sk-abc"


@pytest.mark.parametrize(("entry", "message"), [
    ({"max_in_flight": "8"}, "model alias 'judge': `max_in_flight`: Input should be a valid integer"),
    ({"retry": {"attemps": 3}}, "`retry.attemps`: Extra inputs are not permitted"),
    ({"timeout": -1}, "`timeout`: Input should be greater than 0"),
    ({"headers": {"X-Team": 3}}, "`headers.X-Team`: Input should be a valid string"),
    ({"extra": {}}, "unknown setting(s) extra; allowed for backend 'openai'"),
])
def test_registry_errors_name_the_field_as_the_server_config_does(entry, message):
    """The registry's schema is the pydantic ModelEntry: each mistake names its field, the same way everywhere."""
    with pytest.raises(sf.ModelAliasError) as caught:
        sf.load_models({"models": {"judge": {"model": "hosted_vllm/x", **entry}}})
    assert message in str(caught.value)

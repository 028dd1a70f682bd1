"""The native OpenAI-compatible backend over real HTTP against the local test server: calls, failures, cost.

n, token ids, logprobs and usage per choice; every fault kind as the right typed error, retried (or
not) by ``sf.Model``; prices given, from litellm's map, or unknown. Keys, connections and which
backend a spec chooses: ``test_backend_openai_keys.py``.
"""

from __future__ import annotations

import asyncio
import email.utils
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from openai_helpers import (
    FAST,
    KEY,
    QUESTION,
    answers_of,
    backend_for,
    collect_garbage_after,  # noqa: F401  (an autouse fixture)
    complete,
    failure,
    numbered,
    run,
    sample_then_aggregate,
)

import scaffold as sf
import scaffold.testing._server as server_module
from scaffold._types import Request
from scaffold.testing import VirtualClock
from scaffold.testing._fake_answers import error_response, fake_logprob, fake_token_id, fake_tokenize
from scaffold.testing._server import Fault, OpenAIServer, ServerRequest


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A local OpenAI-compatible server that checks the API key."""
    with OpenAIServer(policy=numbered, api_key=KEY) as running:
        yield running


# -- calls ---------------------------------------------------------------------------------------------


def test_native_n_is_one_request_whose_choices_carry_their_own_ids_and_logprobs(server):
    """Four samples go out as one n=4 request asking for logprobs and token ids; each trace gets its choice's."""
    result = run(sample_then_aggregate, sf.Model(backend_for(server), retry=FAST))
    chat = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert len(chat) == 2 and chat[0].request.n == 4
    body = chat[0].request.body
    assert body["logprobs"] is True and body["return_token_ids"] is True and body["model"] == "test-model"
    samples = [t for t in result.traces if t.node == "sample"]
    assert [t.text.split(" for")[0] for t in samples] == ["draft 0", "draft 1", "draft 2", "draft 3"]
    for trace in samples:
        tokens = fake_tokenize(trace.text)
        assert trace.token_ids == tuple(fake_token_id(token) for token in tokens)
        assert trace.logprobs == tuple(fake_logprob(token, i) for i, token in enumerate(tokens))
        assert trace.usage.completion_tokens == len(tokens)


def test_usage_split_per_choice_sums_to_what_the_server_billed(server):
    """Prompt tokens are split evenly over the choices, completion tokens by each choice's own count."""
    completions = complete(backend_for(server), Request(messages=(("user", "what is 2+2?"),), n=3))
    prompt_total = len(fake_tokenize("user: what is 2+2?\n"))
    assert [c.usage.prompt_tokens for c in completions] == [prompt_total // 3 + (i < prompt_total % 3)
                                                            for i in range(3)]
    assert [c.usage.completion_tokens for c in completions] == [len(fake_tokenize(c.text)) for c in completions]
    assert all(c.finish_reason == "stop" and c.model == "test-model" for c in completions)
    assert all(c.token_ids is None and c.logprobs is None for c in completions)  # not asked for


def test_a_raw_prompt_goes_to_the_completions_endpoint_with_logprobs(server):
    """``Request.prompt`` posts to /v1/completions and returns each choice's text, ids and logprobs."""
    completions = complete(backend_for(server), Request(prompt="Once upon a time", n=2, logprobs=True))
    served = server.requests[-1]
    assert served.path == "/v1/completions" and served.request.body["logprobs"] == 1
    assert [c.text for c in completions] == [numbered(ServerRequest("completions", "m", prompt="Once upon a time",
                                                                    choice=i)) for i in range(2)]
    for c in completions:
        assert c.token_ids is not None and c.logprobs is not None and len(c.token_ids) == len(c.logprobs)


def test_sampling_parameters_pass_through_and_client_options_stay_out_of_the_body(server):
    """Sampling params, ``extra_body`` and the request seed reach the server; timeouts and retry counts do not."""
    params = {"temperature": 0.2, "max_tokens": 3, "stop": ["Done"], "top_p": 0.5, "timeout": 5, "num_retries": 2,
              "extra_body": {"top_k": 7}, "extra_headers": {"X-Trace": "abc"}}
    (c,) = complete(backend_for(server, extra_body={"min_p": 0.1}), Request(messages=QUESTION.messages, params=params,
                                                                            seed=42))
    body = server.requests[-1].request.body
    assert {k: body[k] for k in ("temperature", "max_tokens", "stop", "top_p", "top_k", "min_p", "seed")} == {
        "temperature": 0.2, "max_tokens": 3, "stop": ["Done"], "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": 42}
    assert not {"timeout", "num_retries", "extra_body", "extra_headers", "stream"} & set(body)
    assert c.finish_reason == "length" and c.usage.completion_tokens == 3


def test_token_ids_are_not_asked_of_openai_itself_or_when_switched_off(server, monkeypatch):
    """``return_token_ids`` goes only to servers other than OpenAI's own API, and not with ``token_ids=False``."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert sf.OpenAIBackend("gpt-4o-mini").capabilities.returns_token_ids is False
    assert sf.OpenAIBackend("gpt-4o-mini").base_url == "https://api.openai.com/v1"
    (c,) = complete(backend_for(server, token_ids=False), Request(messages=QUESTION.messages, logprobs=True))
    assert "return_token_ids" not in server.requests[-1].request.body
    assert c.token_ids is None and c.logprobs is not None


# -- failures ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fault", "kind", "status"), [
    (Fault.rate_limit(retry_after=0.05), sf.RateLimitError, 429),
    (Fault.server_error(500), sf.ServerError, 500),
    (Fault.server_error(502), sf.ServerError, 502),
    (Fault.server_error(503), sf.ServerError, 503),
    (Fault.malformed(), sf.ServerError, None),
    (Fault.truncated(), sf.ServerError, None),
    (Fault.drop(), sf.ConnectionFailed, None),
], ids=["429", "500", "502", "503", "malformed", "truncated", "dropped"])
def test_each_transient_fault_is_a_typed_retryable_error(server, fault, kind, status):
    """429, 5xx, a body that is not JSON, a body cut short and a dropped connection map to retryable errors."""
    server.inject(fault)
    error = failure(backend_for(server))
    assert type(error) is kind and error.retryable and error.status_code == status
    if status == 429:
        assert error.retry_after == pytest.approx(0.05)  # retry-after-ms wins over the rounded Retry-After


@pytest.mark.parametrize("fault", [
    Fault.rate_limit(retry_after=0.05), Fault.server_error(500), Fault.server_error(503),
    Fault.malformed(), Fault.truncated(), Fault.drop(),
], ids=["429", "500", "503", "malformed", "truncated", "dropped"])
def test_model_retries_transient_faults_until_they_recover(server, fault):
    """Two faults then an answer: the run succeeds on the third attempt, one trace per choice, none twice."""
    server.inject(fault, times=2)
    result = run(sample_then_aggregate, sf.Model(backend_for(server), retry=FAST))
    assert result.status == "ok"
    assert len([r for r in server.requests if r.request is not None and r.request.n == 4]) == 3
    assert [t.attempt for t in result.traces if t.node == "sample"] == [3, 3, 3, 3]
    assert len({t.id for t in result.traces}) == len(result.traces) == 5


def test_a_slow_answer_past_the_backend_timeout_is_a_request_timeout(server):
    """No byte within the backend's ``timeout`` is a retryable RequestTimeout."""
    server.inject(Fault.slow(30.0))  # answered after 30 s: only the backend's timeout ends the call sooner
    error = failure(backend_for(server, timeout=0.2))
    assert isinstance(error, sf.RequestTimeout) and error.retryable


async def until(condition, what: str, timeout: float = 10.0) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` if it has not after ``timeout`` real seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s")
        await asyncio.sleep(0.005)


def test_model_timeout_abandons_a_slow_attempt_and_retries(server):
    """An attempt slower than the Model's timeout is abandoned and retried on a fresh connection.

    The timeout runs on a virtual clock the test moves: the slow attempt is abandoned once the server holds it,
    and the retry, however long a loaded machine makes its round trip, is never cut short.
    """
    server.inject(Fault.slow(30.0))
    clock = VirtualClock(auto_advance=False)
    model = sf.Model(backend_for(server), timeout=0.5, retry=sf.Retry(attempts=4, initial_delay=0.01, jitter=0),
                     clock=clock)

    async def main():
        try:
            task = asyncio.create_task(sample_then_aggregate.run({"problem": "2+2"}, models={"m": model}))
            await until(lambda: any(r.fault is not None for r in server.requests), "the slow attempt's arrival")
            clock.advance(0.5)  # its timeout expires
            await clock.wait_sleeping(1)  # backing off
            clock.advance(0.01)
            return await task
        finally:
            await model.backend.release_loop()

    result = asyncio.run(main())
    assert result.status == "ok"
    assert [t.attempt for t in result.traces if t.node == "sample"] == [2, 2, 2, 2]
    assert [r.fault is not None for r in server.requests] == [True, False, False]


def test_a_refused_connection_is_connection_failed():
    """Nothing listening on the port: ConnectionFailed, retryable."""
    error = failure(sf.OpenAIBackend("m", base_url="http://127.0.0.1:9/v1"))
    assert isinstance(error, sf.ConnectionFailed) and error.retryable


def test_refusals_are_typed_and_sent_once(server):
    """A wrong key, a bad parameter and an unknown path are never retried; each is sent exactly once."""
    cases = [
        (backend_for(server, api_key="sk-wrong-0123456789"), QUESTION, sf.AuthenticationError, 401),
        (backend_for(server), Request(messages=QUESTION.messages, params={"max_tokens": 0}), sf.BadRequestError, 400),
        (sf.OpenAIBackend("m", base_url=server.url + "/v2", api_key=KEY), QUESTION, sf.BadRequestError, 404),
    ]
    for backend, request, kind, status in cases:
        server.reset()
        model = sf.Model(backend, retry=FAST)

        async def once(model=model, request=request):
            try:
                return await model.complete(request)
            finally:
                await model.backend.release_loop()  # type: ignore[attr-defined]

        with pytest.raises(sf.BackendError) as info:
            asyncio.run(once())
        error = info.value
        assert type(error) is kind and not error.retryable and error.status_code == status and error.attempts == 1
        assert len(server.requests) == 1


def test_a_prompt_past_the_context_is_a_context_length_error_sent_once():
    """The server's ``context_length_exceeded`` is a ContextLengthError (a BadRequestError), not retried."""
    with OpenAIServer(policy=numbered, max_context=5) as server:
        model = sf.Model(sf.OpenAIBackend("test-model", base_url=server.base_url), retry=FAST)
        with pytest.raises(sf.CallError) as info:
            run(sample_then_aggregate, model, problem="a long problem " * 20)
        assert isinstance(info.value.__cause__, sf.ContextLengthError)
        assert len(server.requests) == 1


@pytest.fixture
def retry_after_headers(monkeypatch) -> list[tuple[str, str]]:
    """The headers the test server's 429 answers carry; the test fills the list."""
    headers: list[tuple[str, str]] = []

    def rate_limited(seconds: float, message: str):
        return error_response(429, message, "rate_limit_error", code="rate_limit_exceeded", headers=tuple(headers))

    monkeypatch.setattr(server_module, "rate_limited_response", rate_limited)
    return headers


@pytest.mark.parametrize(("headers", "expected"), [
    ((("Retry-After", "3"),), 3.0),
    ((("retry-after-ms", "250"), ("Retry-After", "1")), 0.25),
    ((("Retry-After", "inf"),), None),
    ((("Retry-After", "soon"),), None),
    ((), None),
], ids=["seconds", "ms-first", "inf", "garbage", "none"])
def test_retry_after_is_read_as_the_shared_parser_reads_it(retry_after_headers, headers, expected):
    """``retry-after-ms`` wins over ``Retry-After``; unusable values are ignored (the parser litellm's errors use)."""
    retry_after_headers[:] = headers
    with OpenAIServer() as server:
        server.inject(Fault.rate_limit(1.0))
        error = failure(sf.OpenAIBackend("m", base_url=server.base_url))
    assert isinstance(error, sf.RateLimitError) and error.retry_after == expected


def test_retry_after_as_an_http_date(retry_after_headers):
    """``Retry-After: <HTTP date>`` 30 s ahead is a wait of 30 s less the time the answer took to be read."""
    t0 = time.time()
    retry_after_headers[:] = [("Retry-After", email.utils.formatdate(t0 + 30, usegmt=True))]
    with OpenAIServer() as server:
        server.inject(Fault.rate_limit(1.0))
        error = failure(sf.OpenAIBackend("m", base_url=server.base_url))
    took = time.time() - t0
    # the date has whole seconds (up to 1 s early); read ``took`` after t0, so up to ``took`` later
    assert error.retry_after is not None and 29 - took <= error.retry_after <= 30


# -- cost ----------------------------------------------------------------------------------------------


def test_cost_from_given_prices_from_the_price_map_or_unknown(server):
    """Given prices are used as is; a server other than OpenAI's is not priced by its model's name (a local server
    calling its model gpt-4o-mini costs unknown, not OpenAI's price); told to (a gateway), a model litellm's map
    knows is priced from it; an unknown one is None, not 0."""
    request = Request(messages=QUESTION.messages, n=2)
    for c in complete(backend_for(server, input_cost_per_token=1e-6, output_cost_per_token=2e-6), request):
        assert c.cost == pytest.approx(c.usage.prompt_tokens * 1e-6 + c.usage.completion_tokens * 2e-6)
    local = sf.OpenAIBackend("gpt-4o-mini", base_url=server.base_url, api_key=KEY)
    assert not local.price_by_name and all(c.cost is None for c in complete(local, request))
    assert sf.OpenAIBackend("gpt-4o-mini", api_key=KEY).price_by_name  # OpenAI's own endpoint
    priced = sf.OpenAIBackend("gpt-4o-mini", base_url=server.base_url, api_key=KEY, price_by_name=True)
    for c in complete(priced, request):
        assert c.cost is not None and c.cost > 0
        assert c.cost == pytest.approx(c.usage.prompt_tokens * 0.15e-6 + c.usage.completion_tokens * 0.6e-6)
    assert all(c.cost is None for c in complete(backend_for(server), request))


def test_pricing_reads_the_price_map_without_importing_litellm(server):
    """Pricing from litellm's map does not import litellm (seconds of import) in a process that has not."""
    code = (f"import asyncio, sys, scaffold as sf\n"
            f"from scaffold._types import Request\n"
            f"b = sf.OpenAIBackend('openai/gpt-4o-mini', base_url='{server.base_url}', api_key='{KEY}',"
            f" price_by_name=True)\n"
            f"async def main():\n"
            f"    try:\n"
            f"        return await b.complete(Request(messages=(('user', 'hi'),)))\n"
            f"    finally:\n"
            f"        await b.release_loop()\n"
            f"(c,) = asyncio.run(main())\n"
            f"print(c.cost > 0, 'litellm' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def test_error_bodies_of_openai_and_vllm_map_to_the_same_errors():
    """OpenAI's nested and vLLM's flat error bodies, 408/409, and error events inside a stream map as documented."""
    from scaffold.backends._openai import _stream_error
    from scaffold.backends._openai_errors import error_for_status

    flat = b'{"object": "error", "message": "This model\'s maximum context length is 512 tokens.", "code": 400}'
    nested = b'{"error": {"message": "Invalid n", "type": "invalid_request_error", "code": null}}'
    cases = [
        (error_for_status(400, {}, flat, "m"), sf.ContextLengthError, False),
        (error_for_status(400, {}, nested, "m"), sf.BadRequestError, False),
        (error_for_status(422, {}, b"not json at all", "m"), sf.BadRequestError, False),
        (error_for_status(408, {}, b"", "m"), sf.RequestTimeout, True),
        (error_for_status(409, {}, b"", "m"), sf.ServerError, True),
        (error_for_status(503, {"Retry-After": "2"}, b"", "m"), sf.ServerError, True),
        (_stream_error({"error": {"message": "engine died", "code": 500}}, "m"), sf.ServerError, True),
        (_stream_error({"error": {"message": "bad stop", "code": 400}}, "m"), sf.BadRequestError, False),
    ]
    for error, kind, retryable in cases:
        assert type(error) is kind and error.retryable is retryable, error
    assert "Invalid n" in str(cases[1][0]) and cases[5][0].retry_after == 2.0


@pytest.mark.parametrize("stream", [False, True])
def test_cached_prompt_tokens_are_recorded_and_priced_at_the_cache_price(stream):
    """A provider that serves part of a prompt from its cache says so; the tokens are recorded on the completion
    and charged at the map's cache price (gpt-4o-mini: half the input price), the rest at the input price."""
    with OpenAIServer(policy=numbered, api_key=KEY, prompt_cache=4) as cached_server:
        backend = sf.OpenAIBackend("gpt-4o-mini", base_url=cached_server.base_url, api_key=KEY,
                                   price_by_name=True)
        shared = "Background, repeated in every prompt: " + "the quick brown fox jumps over the lazy dog. " * 6
        (first,) = answers_of(backend, Request(messages=(("user", shared + "Question one?"),)), stream=stream)
        (second,) = answers_of(backend, Request(messages=(("user", shared + "Question two?"),)), stream=stream)
    assert "cached_prompt_tokens" not in first.metadata
    hit = second.metadata["cached_prompt_tokens"]
    assert 0 < hit < second.usage.prompt_tokens and hit % 4 == 0
    expected = ((second.usage.prompt_tokens - hit) * 0.15e-6 + hit * 0.075e-6
                + second.usage.completion_tokens * 0.6e-6)
    assert second.cost == pytest.approx(expected)
    assert first.cost == pytest.approx(first.usage.prompt_tokens * 0.15e-6 + first.usage.completion_tokens * 0.6e-6)

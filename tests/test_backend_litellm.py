"""The litellm backend over real HTTP against the local OpenAI-compatible test server.

Retries, typed errors, limits, token ids, cost and secrets, with the real executor on top.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
from helpers import max_in_window, peak_in_flight

import scaffold as sf
from scaffold._types import Request
from scaffold.backends import Retry
from scaffold.testing import VirtualClock
from scaffold.testing._server import Fault, OpenAIServer, ServerRequest

KEY = "sk-test-9f8e7d6c5b4a"
FAST = Retry(attempts=4, initial_delay=0.01, max_delay=0.05)


def numbered(request: ServerRequest) -> str:
    return f"draft {request.choice} for {request.last_content[-12:]}: \\boxed{{{request.choice % 2}}}"


@sf.graph
def sample_then_aggregate(problem, *, n: int = 4):
    pop = sf.sample("Solve {problem}", model="m", n=n, logprobs=True)
    return sf.aggregate(pop, model="m")


@pytest.fixture(autouse=True)
def collect_garbage_after():
    """Run the garbage collector after each test, so an unclosed connection is blamed on its own test."""
    yield
    import gc

    gc.collect()


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A local OpenAI-compatible server that checks the API key."""
    with OpenAIServer(policy=numbered, api_key=KEY) as running:
        yield running


def vllm_model(server: OpenAIServer, **kwargs) -> sf.Model:
    """The server seen as a vLLM server (``hosted_vllm/``: native n, token ids requested)."""
    backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key=KEY)
    return sf.Model(backend, retry=kwargs.pop("retry", FAST), **kwargs)


def complete(backend: sf.LiteLLMBackend, request: Request):
    """One call on a fresh event loop, releasing litellm's clients of that loop afterwards."""

    async def main():
        try:
            return await backend.complete(request)
        finally:
            await backend.release_loop()

    return asyncio.run(main())


def run(graph, model: sf.Model, problem: str = "2+2", **kwargs) -> sf.RunResult:
    return graph.run_sync({"problem": problem}, models={"m": model}, **kwargs)


# -- calls ---------------------------------------------------------------------------------------------


def test_native_n_is_one_http_request_with_each_choice_its_own_trace(server):
    """Four sibling samples go out as one request with n=4 and come back as four distinct traces."""
    result = run(sample_then_aggregate, vllm_model(server))
    chat = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert len(chat) == 2  # one n=4 request for the samples, one for the aggregation
    assert chat[0].request.n == 4
    samples = [t for t in result.traces if t.node == "sample"]
    assert [t.text.split(" for")[0] for t in samples] == ["draft 0", "draft 1", "draft 2", "draft 3"]
    assert len({t.id for t in result.traces}) == len(result.traces)


def test_token_ids_and_logprobs_arrive_for_every_choice(server):
    """vLLM's per-choice token ids (litellm's provider_specific_fields) and logprobs reach the traces."""
    result = run(sample_then_aggregate, vllm_model(server))
    for trace in (t for t in result.traces if t.node == "sample"):
        assert trace.token_ids is not None and trace.logprobs is not None
        assert len(trace.token_ids) == len(trace.logprobs) == trace.usage.completion_tokens > 0
        assert all(lp < 0 for lp in trace.logprobs)
    body = server.requests[0].request.body
    assert body.get("return_token_ids") is True and body.get("logprobs") is True


def test_usage_per_choice_sums_to_the_servers_usage(server):
    """Per-trace prompt and completion tokens add up to what the server billed for the request."""
    backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key=KEY)
    completions = complete(backend, Request(messages=(("user", "what is 2+2?"),), n=3, logprobs=True))
    served = server.requests[-1]
    assert served.status == 200
    assert sum(c.usage.completion_tokens for c in completions) == sum(len(c.token_ids or ()) for c in completions)
    assert sum(c.usage.prompt_tokens for c in completions) > 0
    assert all(c.finish_reason == "stop" for c in completions)


def test_providers_without_n_get_one_request_per_sample(server):
    """A provider declared without ``n`` receives one request per sample; the traces are the same shape."""
    backend = sf.LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key=KEY, supports_n=False)
    result = run(sample_then_aggregate, sf.Model(backend, retry=FAST))
    chat = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert len(chat) == 5 and all(r.request.n == 1 for r in chat)
    assert len([t for t in result.traces if t.node == "sample"]) == 4


def test_a_pickled_backend_answers_like_the_original(server):
    """A cluster sends a litellm model to its workers by pickling it: the copy keeps the model, server and key,
    leaves the original's per-loop clients behind, and answers."""
    import pickle

    backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key=KEY)
    complete(backend, Request(messages=(("user", "warm"),)))  # the original now holds a client of a loop
    copy = pickle.loads(pickle.dumps(backend))
    assert (copy.model_name, copy.api_base, copy.provider) == (backend.model_name, backend.api_base, backend.provider)
    assert len(copy._text_clients) == 0
    [answer] = complete(copy, Request(messages=(("user", "2+2"),)))
    assert answer.text == "draft 0 for 2+2: \\boxed{0}"  # the server checks the key: the copy sent it


def test_sampling_parameters_are_passed_through(server):
    """Model defaults and node params (temperature, max_tokens, stop, top_p) reach the server; node wins."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m", params={"temperature": 0.2, "stop": ["Done"]})

    model = vllm_model(server, params={"temperature": 0.9, "max_tokens": 3, "top_p": 0.5})
    result = run(g, model)
    body = server.requests[-1].request.body
    assert body["temperature"] == 0.2 and body["max_tokens"] == 3 and body["top_p"] == 0.5
    assert body["stop"] == ["Done"]
    assert result.traces[0].usage.completion_tokens == 3  # max_tokens honoured by the server


def test_raw_completion_prompts_use_the_completions_endpoint(server):
    """A request with a raw ``prompt`` goes to /v1/completions and returns text and logprobs."""
    backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key=KEY)
    completions = complete(backend, Request(prompt="Once upon a time", n=2, logprobs=True))
    assert server.requests[-1].path.endswith("/v1/completions")
    assert len(completions) == 2 and all(c.text and c.logprobs for c in completions)


# -- retries and typed errors --------------------------------------------------------------------------


@pytest.mark.parametrize("fault", [
    Fault.rate_limit(retry_after=0.05), Fault.server_error(500), Fault.server_error(503),
    Fault.malformed(), Fault.drop(),
], ids=["429", "500", "503", "malformed", "dropped"])
def test_transient_faults_are_retried_until_they_recover(server, fault):
    """429, 500, 503, a malformed body and a dropped connection are retried; one trace per choice, once."""
    server.inject(fault, times=2)
    result = run(sample_then_aggregate, vllm_model(server))
    assert result.status == "ok"
    sample_requests = [r for r in server.requests if r.request is not None and r.request.n == 4]
    assert len(sample_requests) == 3  # two faults, then the answer
    assert [t.attempt for t in result.traces if t.node == "sample"] == [3, 3, 3, 3]
    assert len({t.id for t in result.traces}) == len(result.traces) == 5


def test_giving_up_after_the_limit_is_a_typed_error(server):
    """A server that keeps failing exhausts the attempts and raises ServerError with the count."""
    server.inject(Fault.server_error(503), times=10)
    with pytest.raises(sf.CallError) as info:
        run(sample_then_aggregate, vllm_model(server))
    cause = info.value.__cause__
    assert isinstance(cause, sf.ServerError) and cause.attempts == 4 and cause.status_code == 503
    assert len(server.requests) == 4


def test_retry_after_from_the_server_is_honoured(server):
    """The retry after a 429 waits at least the server's Retry-After."""
    server.inject(Fault.rate_limit(retry_after=0.3))
    run(sample_then_aggregate, vllm_model(server))
    first, second = server.arrivals[:2]
    assert second - first >= 0.28


def test_wrong_key_is_an_authentication_error_sent_once(server):
    """A refused key is not retried, and the typed error never quotes the key."""
    backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key="sk-wrong-0123456789")
    with pytest.raises(sf.CallError) as info:
        run(sample_then_aggregate, sf.Model(backend, retry=FAST))
    assert isinstance(info.value.__cause__, sf.AuthenticationError)
    assert len(server.requests) == 1
    assert "sk-wrong-0123456789" not in str(info.value) and "sk-wrong-0123456789" not in info.value.trace.error


def test_context_length_is_typed_and_not_retried():
    """A prompt over the server's context is a ContextLengthError (a BadRequestError), sent once."""
    with OpenAIServer(policy=numbered, max_context=5) as server:
        backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url)
        with pytest.raises(sf.CallError) as info:
            run(sample_then_aggregate, sf.Model(backend, retry=FAST), problem="a long problem " * 20)
        assert isinstance(info.value.__cause__, sf.ContextLengthError)
        assert len(server.requests) == 1


async def until(condition, what: str, timeout: float = 10.0) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` if it has not after ``timeout`` real seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s")
        await asyncio.sleep(0.005)


def test_per_request_timeout_abandons_a_slow_attempt_and_retries(server):
    """An attempt slower than the model's timeout is abandoned as RequestTimeout and retried.

    The timeout runs on a virtual clock the test moves: the slow attempt is abandoned once the server holds it,
    and the retry, however long a loaded machine makes its round trip, is never cut short.
    """
    server.inject(Fault.slow(30.0))
    clock = VirtualClock(auto_advance=False)
    model = vllm_model(server, timeout=0.5, retry=Retry(attempts=4, initial_delay=0.01, jitter=0), clock=clock)

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


# -- limits over HTTP ----------------------------------------------------------------------------------


def test_in_flight_and_request_rate_limits_hold_over_http():
    """Server-side timestamps of 6 concurrent runs show the in-flight and requests-per-minute limits held."""
    with OpenAIServer(policy=numbered, latency=0.05) as server:
        backend = sf.LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key=KEY, supports_n=False)
        # 10/s after a burst of 10: three places at 50 ms could send 60/s, so the pacer decides the pace
        model = sf.Model(backend, max_in_flight=3, requests_per_minute=600, retry=FAST)

        async def main():
            try:
                return await asyncio.gather(*(sample_then_aggregate.run({"problem": f"p{i}"}, models={"m": model})
                                              for i in range(6)))
            finally:
                await backend.release_loop()

        results = asyncio.run(main())
        assert all(r.status == "ok" for r in results)
        served = [r for r in server.requests if r.status == 200]
        assert len(served) == 30
        assert peak_in_flight(served) <= 3
        arrivals = sorted(r.arrived_at for r in served)
        assert max_in_window(arrivals, 0.5) <= 10 + 5 + 1
        assert arrivals[-1] - arrivals[0] >= (30 - 10 - 1) / 10 * 0.95  # the pace held over the whole job


def test_a_server_enforcing_a_rate_is_followed_without_losing_or_duplicating_results():
    """Against a server allowing 40 requests/s, 8 concurrent runs finish; every result is served exactly once."""
    with OpenAIServer(policy=numbered, allowed_rate=40.0, burst=4) as server:
        backend = sf.LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key=KEY, supports_n=False)
        model = sf.Model(backend, retry=Retry(attempts=30, initial_delay=0.02, max_delay=0.5))

        async def main():
            try:
                return await asyncio.gather(*(sample_then_aggregate.run({"problem": f"p{i}"}, models={"m": model})
                                              for i in range(8)))
            finally:
                await backend.release_loop()

        results = asyncio.run(main())
        assert all(r.status == "ok" for r in results)
        assert server.status_counts[429] > 0 and model.throttle.limited > 0
        assert server.answered == 40 == len(set(server.choices_served))
        texts = [t.text for r in results for t in r.traces]
        assert len(texts) == 40


# -- cost ----------------------------------------------------------------------------------------------


def test_cost_comes_from_the_price_map_and_unknown_prices_stay_unknown(server):
    """A priced model's traces carry dollars from litellm's map (told that this endpoint serves OpenAI's model at
    its price); the same name at a custom api_base is not priced by it; an unpriced one records None, never 0."""
    local = sf.LiteLLMBackend("openai/gpt-4o-mini", api_base=server.base_url, api_key=KEY)
    assert all(t.cost is None for t in run(sample_then_aggregate, sf.Model(local, retry=FAST)).traces)
    priced = sf.LiteLLMBackend("openai/gpt-4o-mini", api_base=server.base_url, api_key=KEY, price_by_name=True)
    result = run(sample_then_aggregate, sf.Model(priced, retry=FAST))
    for trace in result.traces:
        expected = trace.usage.prompt_tokens * 0.15e-6 + trace.usage.completion_tokens * 0.6e-6
        assert trace.cost == pytest.approx(expected)
        assert trace.cost > 0
    unpriced = run(sample_then_aggregate, vllm_model(server))
    assert all(t.cost is None for t in unpriced.traces)
    custom = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key=KEY,
                               input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    trace = run(sample_then_aggregate, sf.Model(custom, retry=FAST)).traces[-1]
    assert trace.cost == pytest.approx(trace.usage.prompt_tokens * 1e-6 + trace.usage.completion_tokens * 2e-6)


# -- secrets -------------------------------------------------------------------------------------------


def test_api_keys_never_reach_records_logs_or_errors(server, monkeypatch, caplog, capfd):
    """A key from the environment or from params appears in no trace, log line, printed output or error."""
    monkeypatch.setenv("SCAFFOLD_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    from_env = sf.Model(sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url,
                                          api_key_env="SCAFFOLD_TEST_KEY"), retry=FAST)
    from_params = sf.Model("litellm:hosted_vllm/test-model", params={"api_key": KEY, "temperature": 0.5}, retry=FAST)
    assert isinstance(from_params.backend, sf.LiteLLMBackend)
    from_params.backend.api_base = server.base_url
    records = [run(sample_then_aggregate, from_env), run(sample_then_aggregate, from_params)]
    server.inject(Fault.server_error(500), times=10)
    with pytest.raises(sf.CallError) as info:
        run(sample_then_aggregate, from_env)
    dumped = repr(records) + repr(info.value.trace) + str(info.value) + repr(from_params) + repr(from_env)
    dumped += caplog.text + "".join(capfd.readouterr())
    assert server.requests[0].status == 200  # the key did reach the server
    assert KEY not in dumped


def test_missing_key_variable_is_named(monkeypatch):
    """A backend told to read a variable that is unset fails at once naming the variable."""
    monkeypatch.delenv("SCAFFOLD_MISSING_KEY", raising=False)
    backend = sf.LiteLLMBackend("openai/gpt-4o-mini", api_key_env="SCAFFOLD_MISSING_KEY")
    with pytest.raises(sf.CallError, match="SCAFFOLD_MISSING_KEY"):
        run(sample_then_aggregate, sf.Model(backend))


# -- registry ------------------------------------------------------------------------------------------


def test_one_registry_file_mixes_an_api_model_and_a_local_backend(server, tmp_path, monkeypatch):
    """Aliases loaded from TOML (``backend = "litellm"`` chosen explicitly) point one graph at the HTTP server
    and a scripted local backend."""
    monkeypatch.setenv("SCAFFOLD_TEST_KEY", KEY)
    path = tmp_path / "models.toml"
    path.write_text(f"""
[models.proposer]
backend = "litellm"
model = "hosted_vllm/test-model"
api_base = "{server.base_url}"
api_key_env = "SCAFFOLD_TEST_KEY"
max_in_flight = 2
requests_per_minute = 6000
params = {{ temperature = 0.7 }}
retry = {{ attempts = 3, initial_delay = 0.01 }}
""")
    models = sf.load_models(path)
    assert models["proposer"].limit.limit == 2 and models["proposer"].retry.attempts == 3
    assert isinstance(models["proposer"].backend, sf.LiteLLMBackend)

    @sf.graph
    def moa(problem):
        drafts = sf.sample("Solve {problem}", model="proposer", n=3)
        return sf.aggregate(drafts, model="aggregator")

    from scaffold.testing import ScriptedBackend

    result = moa.run_sync({"problem": "2+2"}, models={**models, "aggregator": ScriptedBackend(lambda r: "\\boxed{4}")})
    assert result.answer == "4"
    assert server.requests[0].request.body["temperature"] == 0.7


def test_registry_errors_are_clear(tmp_path):
    """Keys written in a registry, unknown settings and unknown backends are refused with the alias named."""
    with pytest.raises(sf.ModelAliasError, match="api_key_env"):
        sf.load_models({"models": {"a": {"model": "openai/x", "api_key": KEY}}})
    with pytest.raises(sf.ModelAliasError, match="temprature"):
        sf.load_models({"models": {"a": {"model": "hosted_vllm/x", "temprature": 1}}})
    with pytest.raises(sf.ModelAliasError, match="unknown backend"):
        sf.load_models({"models": {"a": {"model": "x", "backend": "ollama-native"}}})
    yaml_path = tmp_path / "models.yaml"
    yaml_path.write_text("models:\n  judge:\n    model: hosted_vllm/x\n    max_in_flight: 5\n")
    assert sf.load_models(yaml_path)["judge"].limit.limit == 5


@pytest.mark.parametrize(("model", "native_n"), [
    ("openai/gpt-4o-mini", True), ("hosted_vllm/pocket", True),
    ("anthropic/claude-3-5-haiku-latest", False), ("gemini/gemini-2.0-flash", False),
])
def test_n_is_native_only_where_the_provider_takes_it(model, native_n):
    """OpenAI and vLLM get ``n`` in one request; Anthropic and Gemini are fanned out one request per sample."""
    assert sf.LiteLLMBackend(model).capabilities.supports_n is native_n


@pytest.mark.parametrize("stream", [False, True])
def test_cached_prompt_tokens_are_recorded_and_priced_by_the_provider(stream):
    """Streamed or not, cached prompt tokens a provider reports are recorded and priced at its cache price."""
    from openai_helpers import answers_of

    def answer(backend, text: str):
        return answers_of(backend, Request(messages=(("user", text),)), stream=stream)

    with OpenAIServer(policy=numbered, api_key=KEY, prompt_cache=4) as cached_server:
        backend = sf.LiteLLMBackend("openai/gpt-4o-mini", api_base=cached_server.base_url, api_key=KEY,
                                    price_by_name=True)
        shared = "Background, repeated in every prompt: " + "the quick brown fox jumps over the lazy dog. " * 6
        (first,) = answer(backend, shared + "Question one?")
        (second,) = answer(backend, shared + "Question two?")
    hit = second.metadata["cached_prompt_tokens"]
    assert 0 < hit < second.usage.prompt_tokens and "cached_prompt_tokens" not in first.metadata
    full = second.usage.prompt_tokens * 0.15e-6 + second.usage.completion_tokens * 0.6e-6
    assert second.cost == pytest.approx(full - hit * 0.075e-6)  # cached tokens at half the input price

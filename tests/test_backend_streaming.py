"""Streaming from backends: ``stream(request)`` yields Delta records, then the completions ``complete`` gives.

Over real HTTP (the native OpenAI-compatible backend and litellm, against the local test server's
server-sent events) and in process (transformers on a tiny random model): the deltas of each
choice concatenate to its final text, token ids and usage arrive, n > 1 interleaves choices, a
stream cut mid-way is a typed retryable error, and leaving a stream early frees the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from helpers import wait_until

import scaffold as sf
from scaffold._types import Completion, Delta, Finished, Request
from scaffold.backends import stream_completions
from scaffold.testing import ScriptedBackend
from scaffold.testing._fake_answers import fake_tokenize
from scaffold.testing._server import Fault, OpenAIServer, ServerRequest

KEY = "sk-stream-5e4d3c2b1a09"
CHAT = Request(messages=(("user", "what is 2+2?"),), n=3, logprobs=True)
TEXT = Request(prompt="Once upon a time", n=2, logprobs=True)


def numbered(request: ServerRequest) -> str:
    return f"draft {request.choice}: so the answer is \\boxed{{{request.choice}}}."


@pytest.fixture(autouse=True)
def collect_garbage_after():
    """Run the garbage collector after each test, so an unclosed connection is blamed on its own test."""
    yield
    import gc

    gc.collect()


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(policy=numbered, api_key=KEY) as running:
        yield running


def native(server: OpenAIServer) -> sf.OpenAIBackend:
    return sf.OpenAIBackend("test-model", base_url=server.base_url, api_key=KEY, input_cost_per_token=1e-6,
                            output_cost_per_token=2e-6)


def via_litellm(server: OpenAIServer) -> sf.LiteLLMBackend:
    return sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key=KEY,
                             input_cost_per_token=1e-6, output_cost_per_token=2e-6)


def collect(backend: Any, request: Request, *, also_complete: bool = False) -> tuple[list[Any], list[Completion]]:
    """Every item ``backend.stream(request)`` yields and, if asked, what ``complete`` answers, on one loop."""

    async def main() -> tuple[list[Any], list[Completion]]:
        try:
            items = [item async for item in backend.stream(request)]
            completed = list(await backend.complete(request)) if also_complete else []
            return items, completed
        finally:
            release = getattr(backend, "release_loop", None)
            if release is not None:
                await release()

    return asyncio.run(main())


def assert_deltas_add_up(items: list[Any], n: int) -> tuple[Completion, ...]:
    """Deltas then one Finished; each choice's delta texts (and token ids, where any) make its completion."""
    *deltas, finished = items
    assert isinstance(finished, Finished) and len(finished.completions) == n
    assert all(isinstance(d, Delta) for d in deltas)
    for index, completion in enumerate(finished.completions):
        mine = [d for d in deltas if d.choice == index]
        assert mine and "".join(d.text for d in mine) == completion.text
        if completion.token_ids is not None:
            assert tuple(i for d in mine for i in d.token_ids or ()) == completion.token_ids
    return finished.completions


def same_record(a: Completion, b: Completion) -> bool:
    """Equal in everything a trace records (text, ids, logprobs, usage, finish reason, cost, model)."""
    return (a.text, a.token_ids, a.logprobs, a.usage, a.finish_reason, a.cost, a.model) == (
        b.text, b.token_ids, b.logprobs, b.usage, b.finish_reason, b.cost, b.model)


# -- the native OpenAI-compatible backend ---------------------------------------------------------------


@pytest.mark.parametrize("request_", [CHAT, TEXT], ids=["chat", "completions"])
def test_native_stream_ends_with_the_completions_complete_gives(server, request_):
    """n choices stream interleaved with per-token ids and logprobs; Finished equals ``complete``'s answer."""
    items, completed = collect(native(server), request_, also_complete=True)
    streamed = assert_deltas_add_up(items, request_.n)
    assert all(same_record(a, b) for a, b in zip(streamed, completed, strict=True))
    assert [d.choice for d in items[:request_.n]] == list(range(request_.n))  # interleaved, not one after another
    assert all(len(d.token_ids or ()) == 1 and len(d.logprobs or ()) == 1 for d in items[:-1])
    first = server.requests[0].request.body
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assert sum(c.usage.completion_tokens for c in streamed) == sum(len(fake_tokenize(c.text)) for c in streamed)
    assert sum(c.usage.prompt_tokens for c in streamed) > 0 and all(c.cost and c.cost > 0 for c in streamed)
    assert server.connections_opened == 1  # the stream read to its end: the connection was reused


@pytest.mark.parametrize(("fault", "kind"), [
    (Fault.truncated(tokens=4), sf.ServerError), (Fault.drop(), sf.ConnectionFailed),
    (Fault.rate_limit(0.25), sf.RateLimitError), (Fault.malformed(), sf.ServerError),
    (Fault.server_error(503), sf.ServerError),
], ids=["cut-mid-stream", "dropped", "429", "malformed", "503"])
def test_a_failing_stream_raises_a_typed_retryable_error(server, fault, kind):
    """A stream cut after some tokens, a dropped connection, a 429, a bad event or a 5xx: typed, retryable."""
    server.inject(fault)
    backend, received = native(server), []

    async def main() -> None:
        try:
            async for item in backend.stream(CHAT):
                received.append(item)
        finally:
            await backend.release_loop()

    with pytest.raises(sf.BackendError) as info:
        asyncio.run(main())
    assert type(info.value) is kind and info.value.retryable
    if fault.kind == "truncated":
        assert len(received) == 4 and not any(isinstance(item, Finished) for item in received)
    if fault.kind == "rate_limit":
        assert received == [] and info.value.retry_after == pytest.approx(0.25)


def test_leaving_a_native_stream_early_frees_the_call(server):
    """Closing the iterator after the first delta drops the connection: the server's stream ends there, never
    sent to its end; the backend keeps serving."""
    server.token_interval = 0.2  # read to its end the stream takes 9 s; dropped, it ends at the next token or two
    backend = native(server)

    async def main() -> list[Completion]:
        try:
            stream = backend.stream(CHAT)
            first = await anext(stream)
            assert isinstance(first, Delta)
            await stream.aclose()  # type: ignore[attr-defined]
            return await backend.complete(CHAT)
        finally:
            await backend.release_loop()

    assert len(asyncio.run(main())) == 3
    assert [bool(r.request and r.request.body.get("stream")) for r in server.requests] == [True, False]
    wait_until(lambda: server.requests[0].finished_at is not None, timeout=60,
               message="the abandoned stream was never ended")
    assert server.answered == 1 and server.connections_opened == 2  # the abandoned stream's connection closed


# -- litellm ---------------------------------------------------------------------------------------------


def test_litellm_stream_carries_text_token_ids_and_usage(server):
    """litellm's ``stream=True``: deltas add up per choice, vLLM's per-chunk token ids and usage arrive."""
    items, completed = collect(via_litellm(server), CHAT, also_complete=True)
    streamed = assert_deltas_add_up(items, CHAT.n)
    assert [c.text for c in streamed] == [c.text for c in completed]
    assert [c.token_ids for c in streamed] == [c.token_ids for c in completed] and streamed[0].token_ids
    assert [c.logprobs for c in streamed] == [c.logprobs for c in completed]
    assert [c.usage for c in streamed] == [c.usage for c in completed]
    assert all(c.cost == pytest.approx(c.usage.prompt_tokens * 1e-6 + c.usage.completion_tokens * 2e-6)
               for c in streamed)
    assert server.requests[0].request.body["stream_options"] == {"include_usage": True}


def test_litellm_streams_text_completions_and_maps_a_cut_stream(server):
    """A raw prompt streams through litellm's text completion; a stream cut mid-way is a retryable error."""
    items, _ = collect(via_litellm(server), TEXT)
    streamed = assert_deltas_add_up(items, TEXT.n)
    assert [c.text for c in streamed] == [numbered(ServerRequest("completions", "m", choice=i)) for i in range(2)]
    assert sum(c.usage.completion_tokens for c in streamed) == sum(len(fake_tokenize(c.text)) for c in streamed)
    server.inject(Fault.truncated(tokens=2))
    with pytest.raises(sf.BackendError) as info:
        collect(via_litellm(server), CHAT)
    assert info.value.retryable


# -- transformers, in process ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sf.TransformersBackend]:
    """A tiny random chat model in process."""
    from scaffold.testing import build_tiny_model

    backend = sf.TransformersBackend(build_tiny_model(tmp_path_factory.mktemp("tiny-stream")))
    yield backend
    backend.close()


def test_transformers_stream_hands_out_each_sampled_token_and_ends_as_complete_does(local):
    """One delta per sampled token (its id and logprob), texts adding up; the same seed gives ``complete``'s answer."""
    request = Request(messages=(("user", "2+2?"),), n=3, logprobs=True, seed=7, params={"max_tokens": 12})
    items, completed = collect(local, request, also_complete=True)
    streamed = assert_deltas_add_up(items, 3)
    assert all(same_record(a, b) for a, b in zip(streamed, completed, strict=True))
    for index, completion in enumerate(streamed):
        with_ids = [d for d in items[:-1] if d.choice == index and d.token_ids]
        assert len(with_ids) == len(completion.token_ids or ()) == completion.usage.completion_tokens
        assert tuple(lp for d in with_ids for lp in d.logprobs or ()) == completion.logprobs


def test_transformers_stream_never_hands_out_text_past_a_stop_string(local):
    """Text that could be the start of a stop string is held back; the deltas end where the final text is cut."""
    base = Request(prompt="The answer is", seed=3, params={"max_tokens": 24, "temperature": 0})
    (full,) = collect(local, base, also_complete=True)[1]
    stop = next(full.text[i:i + 2] for i in range(4, len(full.text) - 2) if full.text[i:i + 2].strip()
                and full.text.index(full.text[i:i + 2]) == i)
    items, _ = collect(local, Request(prompt=base.prompt, seed=3, params={**base.params, "stop": [stop]}))
    (cut,) = assert_deltas_add_up(items, 1)
    assert cut.text == full.text[: full.text.index(stop)] and cut.finish_reason == "stop"
    handed = ""
    for delta in items[:-1]:
        handed += delta.text
        assert stop not in handed and full.text.startswith(handed)


def test_leaving_a_transformers_stream_early_frees_the_batch(local):
    """Closing the iterator early drops its rows; the backend answers the next request."""

    async def main() -> list[Completion]:
        stream = local.stream(Request(prompt="count", seed=1, params={"max_tokens": 200}))
        await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        return await asyncio.wait_for(local.complete(Request(prompt="count", params={"max_tokens": 3})), 60)

    (answer,) = asyncio.run(main())
    # a random tiny model may sample its end token early: the answer ends at its own limit or at that token
    tokens = answer.usage.completion_tokens
    assert 1 <= tokens <= 3 and len(answer.token_ids or ()) == tokens
    ended = answer.token_ids[-1] in local.eos_ids
    assert answer.finish_reason == ("stop" if ended else "length") and (ended or tokens == 3)


# -- any backend -----------------------------------------------------------------------------------------


def test_stream_completions_gives_any_backend_the_stream_shape(server):
    """A backend that does not stream yields one delta per choice then Finished; one that streams is passed on."""

    async def gather(backend: Any, request: Request) -> list[Any]:
        items: AsyncIterator[Any] = stream_completions(backend, request)
        try:
            return [item async for item in items]
        finally:
            if hasattr(backend, "release_loop"):
                await backend.release_loop()

    scripted = ScriptedBackend(lambda r: "\\boxed{4}")
    items = asyncio.run(gather(scripted, Request(messages=(("user", "x"),), n=2)))
    assert items == [Delta(0, "\\boxed{4}"), Delta(1, "\\boxed{4}"), Finished(items[-1].completions)]
    assert [c.text for c in items[-1].completions] == ["\\boxed{4}"] * 2
    streamed = asyncio.run(gather(native(server), CHAT))
    assert len(streamed) > CHAT.n + 1 and isinstance(streamed[-1], Finished)


def test_a_server_that_ignores_stream_still_gives_the_stream_shape(server):
    """A plain JSON answer to a streamed request becomes one delta per choice, then Finished."""
    request = Request(messages=CHAT.messages, n=2, params={"extra_body": {"stream": False, "stream_options": None}})
    items, completed = collect(native(server), request, also_complete=True)
    assert server.requests[0].request.body["stream"] is False
    streamed = assert_deltas_add_up(items, 2)
    assert len(items) == 3 and all(same_record(a, b) for a, b in zip(streamed, completed, strict=True))


# -- through Model ---------------------------------------------------------------------------------------


def test_model_stream_retries_a_failure_before_the_first_delta_under_its_limits():
    """Model.stream holds an in-flight place, retries a 503 that came before any text, and streams the answer."""
    with OpenAIServer(policy="so the answer is 4") as server:
        server.inject(Fault.server_error(503))
        model = sf.Model(sf.OpenAIBackend("m", base_url=server.base_url), max_in_flight=1,
                         retry=sf.Retry(attempts=3, initial_delay=0.01))

        async def main():
            try:
                return [item async for item in model.stream(sf.Request(messages=(("user", "2+2?"),)))]
            finally:
                await model.backend.release_loop()

        items = asyncio.run(main())
    deltas = [item for item in items if isinstance(item, sf.Delta)]
    assert isinstance(items[-1], sf.Finished) and len(deltas) > 1
    assert "".join(d.text for d in deltas) == items[-1].completions[0].text == "so the answer is 4"
    assert server.status_counts[503] == 1 and model.limit.in_flight == 0 and model.limit.peak == 1


def test_model_stream_does_not_retry_once_text_was_handed_on():
    """A stream cut after its first tokens raises a typed error with its attempt count, and frees its place."""
    with OpenAIServer(policy="so the answer is 4") as server:
        server.inject(Fault.truncated(tokens=2))
        model = sf.Model(sf.OpenAIBackend("m", base_url=server.base_url), max_in_flight=1,
                         retry=sf.Retry(attempts=3, initial_delay=0.01))
        seen: list[str] = []

        async def main():
            try:
                async for item in model.stream(sf.Request(messages=(("user", "2+2?"),))):
                    if isinstance(item, sf.Delta):
                        seen.append(item.text)
            finally:
                await model.backend.release_loop()

        with pytest.raises(sf.BackendError) as caught:
            asyncio.run(main())
    assert caught.value.retryable and caught.value.attempts == 1
    assert "".join(seen) == "so " and len(server.requests) == 1 and model.limit.in_flight == 0

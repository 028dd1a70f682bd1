"""The OpenAI-compatible test server, driven over real HTTP by ``httpx`` and the official ``openai`` client."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from helpers import wait_until
from openai.types.chat import ChatCompletionMessageParam

from scaffold.testing._server import (
    Fault,
    OpenAIServer,
    ServerRequest,
    fake_logprob,
    fake_token_id,
    fake_tokenize,
)

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 2+2?"}]


def numbered(request: ServerRequest) -> str:
    return f"answer {request.choice}: so the result is \\boxed{{4}}. Done"


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A server whose choices differ by index, with an API key."""
    with OpenAIServer(policy=numbered, api_key="sk-test") as running:
        yield running


@pytest.fixture
def client(server: OpenAIServer) -> Iterator[openai.OpenAI]:
    """A sync ``openai`` client for ``server`` that never retries."""
    with openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0) as sync_client:
        yield sync_client


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """One plain ``httpx`` client for the module (building one per request costs ~50 ms of TLS setup)."""
    with httpx.Client() as shared:
        yield shared


Chat = Callable[..., httpx.Response]


@pytest.fixture
def chat(http: httpx.Client) -> Chat:
    """``chat(server, api_key="sk-test", **body)``: POST a chat request for ``USER`` with plain ``httpx``."""

    def post(server: OpenAIServer, api_key: str | None = "sk-test", **body: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        payload = {"model": "test-model", "messages": USER, **body}
        return http.post(server.base_url + "/chat/completions", json=payload, headers=headers)

    return post


# -- answers -------------------------------------------------------------------------------------------


def test_fake_tokenizer_round_trips_and_is_deterministic() -> None:
    """Fake tokens concatenate back to the text; ids and logprobs are stable and logprobs negative."""
    text = "Let x = 3.5;\n\n  so \\boxed{x}!"
    tokens = fake_tokenize(text)
    assert "".join(tokens) == text
    assert tokens[:4] == ("Let", " ", "x", " ")
    assert [fake_token_id(t) for t in tokens] == [fake_token_id(t) for t in fake_tokenize(text)]
    assert all(0 <= fake_token_id(t) < 50_000 for t in tokens)
    assert all(-5 <= fake_logprob(t, i) < 0 for i, t in enumerate(tokens))
    assert fake_logprob("x", 0) == fake_logprob("x", 0)


def test_chat_n3_logprobs_and_token_ids_are_consistent(server: OpenAIServer, chat: Chat) -> None:
    """Chat with n=3 gives one policy call per choice, and token ids, logprobs and usage agree per choice."""
    response = chat(server, n=3, logprobs=True, return_token_ids=True, seed=11)
    assert response.status_code == 200
    answer = response.json()
    assert answer["object"] == "chat.completion" and answer["model"] == "test-model"
    assert answer["id"].startswith("chatcmpl-") and isinstance(answer["created"], int)
    total = 0
    for index, choice in enumerate(answer["choices"]):
        text = choice["message"]["content"]
        assert choice["index"] == index and text == numbered(ServerRequest("chat", "m", choice=index))
        assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
        content = choice["logprobs"]["content"]
        assert "".join(entry["token"] for entry in content) == text
        assert len(choice["token_ids"]) == len(content) == len(fake_tokenize(text))
        assert choice["token_ids"] == [fake_token_id(entry["token"]) for entry in content]
        assert all(entry["logprob"] < 0 and entry["bytes"] == list(entry["token"].encode()) for entry in content)
        total += len(choice["token_ids"])
    prompt_tokens = fake_tokenize("user: What is 2+2?\n")
    assert answer["prompt_token_ids"] == [fake_token_id(token) for token in prompt_tokens]
    usage = {
        "prompt_tokens": len(prompt_tokens),
        "completion_tokens": total,
        "total_tokens": len(prompt_tokens) + total,
    }
    assert answer["usage"] == usage
    seen = server.requests[0].request
    assert seen is not None and seen.n == 3 and seen.seed == 11 and seen.messages == (("user", "What is 2+2?"),)


def test_plain_answers_carry_no_logprobs_or_token_ids(server: OpenAIServer, chat: Chat) -> None:
    """Without ``logprobs`` and ``return_token_ids`` a choice has ``logprobs: null`` and no token ids."""
    answer = chat(server).json()
    assert answer["choices"][0]["logprobs"] is None
    assert "token_ids" not in answer["choices"][0] and "prompt_token_ids" not in answer


def test_completions_n3_with_openai_client(client: openai.OpenAI, server: OpenAIServer) -> None:
    """Completions with n=3 return legacy logprobs and vLLM token ids the ``openai`` client parses."""
    answer = client.completions.create(
        model="test-model", prompt="2+2 =", n=3, logprobs=1, extra_body={"return_token_ids": True}
    )
    assert answer.object == "text_completion" and len(answer.choices) == 3
    assert answer.model_extra is not None
    assert answer.model_extra["prompt_token_ids"] == [fake_token_id(t) for t in fake_tokenize("2+2 =")]
    total = 0
    for choice in answer.choices:
        assert choice.logprobs is not None and choice.logprobs.tokens is not None
        token_ids = (choice.model_extra or {})["token_ids"]
        assert (
            "".join(choice.logprobs.tokens)
            == choice.text
            == numbered(ServerRequest("completions", "m", choice=choice.index))
        )
        assert len(token_ids) == len(choice.logprobs.token_logprobs or []) == len(choice.logprobs.tokens)
        offsets = choice.logprobs.text_offset or []
        assert [choice.text[offset:] for offset in offsets] == [
            "".join(choice.logprobs.tokens[i:]) for i in range(len(offsets))
        ]
        total += len(token_ids)
    assert answer.usage is not None
    assert answer.usage.completion_tokens == total and answer.usage.prompt_tokens == len(fake_tokenize("2+2 ="))


def test_stop_string_truncates_before_the_earliest_match(server: OpenAIServer, chat: Chat) -> None:
    """``stop`` cuts each choice at the earliest stop string, which is not included; the reason is ``stop``."""
    choice = chat(server, stop=[". Done", "result"], return_token_ids=True).json()["choices"][0]
    assert choice["message"]["content"] == "answer 0: so the "
    assert choice["finish_reason"] == "stop"
    assert len(choice["token_ids"]) == len(fake_tokenize("answer 0: so the "))


def test_max_tokens_truncates_with_finish_reason_length(client: openai.OpenAI) -> None:
    """``max_tokens`` keeps that many tokens and reports ``length``; a generous limit reports ``stop``."""
    short = client.chat.completions.create(model="m", messages=USER, max_tokens=3)
    assert short.choices[0].message.content == "answer 0"
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 3
    full = client.chat.completions.create(model="m", messages=USER, max_completion_tokens=500)
    assert full.choices[0].finish_reason == "stop"


def test_string_policy_and_default_echo(chat: Chat) -> None:
    """A string policy answers every choice with itself; the default policy echoes the last message."""
    with OpenAIServer(policy="fixed") as fixed, OpenAIServer() as echo:
        assert chat(fixed, api_key=None, n=2).json()["choices"][1]["message"]["content"] == "fixed"
        assert chat(echo, api_key=None, n=2).json()["choices"][1]["message"]["content"] == "[1] What is 2+2?"


def test_models_health_and_async_policy(chat: Chat, http: httpx.Client) -> None:
    """``/v1/models`` lists the model name, ``/health`` answers, and an async policy is awaited."""

    async def policy(request: ServerRequest) -> str:
        await asyncio.sleep(0)
        return "async"

    with OpenAIServer(policy=policy, model_name="tiny") as server:
        models = http.get(server.base_url + "/models").json()
        assert [model["id"] for model in models["data"]] == ["tiny"]
        assert http.get(server.url + "/health").status_code == 200
        assert chat(server, api_key=None).json()["choices"][0]["message"]["content"] == "async"


# -- refusals ------------------------------------------------------------------------------------------


def test_api_key_is_checked(server: OpenAIServer, chat: Chat) -> None:
    """A missing or wrong key gets 401 with an OpenAI-style error; the right key gets 200."""
    missing = chat(server, api_key=None)
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert missing.json()["error"]["code"] == "invalid_api_key" and missing.json()["error"]["message"]
    with openai.OpenAI(base_url=server.base_url, api_key="sk-wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model="m", messages=USER)
    assert chat(server).status_code == 200
    assert server.status_counts == {401: 2, 200: 1}


def test_context_length_exceeded() -> None:
    """A prompt over ``max_context`` tokens gets 400 ``context_length_exceeded`` worded like OpenAI and vLLM."""
    with OpenAIServer(max_context=5) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as small:
            small.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.BadRequestError) as raised:
                small.chat.completions.create(model="m", messages=USER)
    assert raised.value.code == "context_length_exceeded"
    assert "maximum context length is 5 tokens" in raised.value.message


def test_bad_requests_unknown_paths_and_policy_errors(http: httpx.Client) -> None:
    """Invalid JSON and bad fields get 400, unknown paths 404, a failing policy 500, and the server keeps serving."""

    def policy(request: ServerRequest) -> str:
        if "boom" in request.last_content:
            raise RuntimeError("policy exploded")
        return "fine"

    with OpenAIServer(policy=policy) as server:
        chat_url, completions_url = server.base_url + "/chat/completions", server.base_url + "/completions"
        assert http.post(chat_url, content=b"{not json").status_code == 400
        assert http.post(chat_url, json={"model": "m", "messages": []}).status_code == 400
        assert http.post(completions_url, json={"model": "m", "prompt": "x", "n": 0}).status_code == 400
        assert http.post(chat_url, json={"messages": USER, "stream": "yes"}).status_code == 400
        assert http.get(server.base_url + "/nothing").status_code == 404
        assert http.get(chat_url).status_code == 405
        failed = http.post(chat_url, json={"messages": [{"role": "user", "content": "boom"}]})
        assert failed.status_code == 500 and "policy exploded" in failed.json()["error"]["message"]
        assert http.post(chat_url, json={"messages": USER}).json()["choices"][0]["message"]["content"] == "fine"
    assert server.status_counts == {400: 4, 404: 1, 405: 1, 500: 1, 200: 1}


def test_connections_are_kept_alive(server: OpenAIServer, client: openai.OpenAI) -> None:
    """Sequential requests from one client reuse one keep-alive connection."""
    for _ in range(5):
        client.chat.completions.create(model="m", messages=USER)
    assert server.answered == 5 and server.connections_opened == 1


def test_chunked_request_body_and_content_parts(http: httpx.Client) -> None:
    """A chunked request body is read, and list-of-parts message content is joined into text."""
    payload = json.dumps(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "!"}]}]}
    )
    with OpenAIServer() as server:
        response = http.post(
            server.base_url + "/chat/completions", content=iter([payload[:10].encode(), payload[10:].encode()])
        )
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "[0] hi!"


def test_garbage_bytes_get_400_and_connection_close(http: httpx.Client) -> None:
    """Bytes that are not HTTP get a 400 and the connection is closed; the server keeps serving."""
    with OpenAIServer() as server:
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.sendall(b"HELLO\r\n\r\n")
            assert raw.recv(1000).startswith(b"HTTP/1.1 400")
        assert http.get(server.url + "/health").status_code == 200


# -- faults --------------------------------------------------------------------------------------------


def test_rate_limit_fault_sends_retry_after_headers(server: OpenAIServer, client: openai.OpenAI) -> None:
    """``Fault.rate_limit`` gives a 429 with ``Retry-After`` in whole seconds and the exact ``retry-after-ms``."""
    server.inject(Fault.rate_limit(retry_after=0.2))
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert raised.value.response.headers["retry-after"] == "1"
    assert raised.value.response.headers["retry-after-ms"] == "200"
    assert raised.value.code == "rate_limit_exceeded"
    assert client.chat.completions.create(model="m", messages=USER).choices


@pytest.mark.parametrize("status", [500, 503])
def test_server_error_fault(server: OpenAIServer, client: openai.OpenAI, status: int) -> None:
    """``Fault.server_error`` reaches the client as ``InternalServerError`` with that status."""
    server.inject(Fault.server_error(status))
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert raised.value.status_code == status
    assert server.requests[0].fault == Fault.server_error(status) and server.requests[0].status == status


def test_malformed_fault_is_200_with_invalid_json(server: OpenAIServer, client: openai.OpenAI, chat: Chat) -> None:
    """``Fault.malformed`` answers 200 with a body the client cannot decode, and is not counted as answered."""
    server.inject(Fault.malformed(), times=2)
    with pytest.raises(ValueError):
        client.chat.completions.create(model="m", messages=USER)
    response = chat(server)
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()
    assert server.answered == 0 and server.status_counts == {200: 2}


def test_truncated_fault_cuts_the_body_its_content_length_promised(server: OpenAIServer, client: openai.OpenAI,
                                                                   chat: Chat) -> None:
    """``Fault.truncated`` sends half of a JSON answer under a Content-Length for all of it, then closes."""
    server.inject(Fault.truncated(), times=2)
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(httpx.RemoteProtocolError):
        chat(server)
    assert client.chat.completions.create(model="m", messages=USER).choices
    assert server.answered == 1 and [record.fault for record in server.requests][:2] == [Fault.truncated()] * 2


def test_drop_fault_closes_the_connection(server: OpenAIServer, client: openai.OpenAI, chat: Chat) -> None:
    """``Fault.drop`` closes the connection unanswered: a connection error, and the server keeps serving."""
    server.inject(Fault.drop(), times=2)
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(httpx.RemoteProtocolError):
        chat(server)
    assert client.chat.completions.create(model="m", messages=USER).choices
    assert [record.status for record in server.requests] == [None, None, 200]
    assert server.status_counts == {200: 1}


def test_slow_fault_delays_and_can_time_a_client_out(server: OpenAIServer, client: openai.OpenAI, chat: Chat) -> None:
    """``Fault.slow`` answers normally after the delay, or trips a client timeout shorter than it."""
    server.inject(Fault.slow(0.15))
    started = time.monotonic()
    assert chat(server).status_code == 200
    assert time.monotonic() - started >= 0.15
    server.inject(Fault.slow(60.0))  # the client gives up at 0.1 s, long before: a margin no load closes
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.1).chat.completions.create(model="m", messages=USER)


def test_injected_faults_are_fifo_and_counted(server: OpenAIServer, chat: Chat, http: httpx.Client) -> None:
    """Queued faults apply to the next completion requests in order, ``times`` each; health checks skip them."""
    server.inject(Fault.server_error(500), times=2)
    server.inject(Fault.rate_limit(0.05))
    assert http.get(server.url + "/health").status_code == 200
    assert [chat(server).status_code for _ in range(4)] == [500, 500, 429, 200]


def test_faults_rule_sees_request_and_arrival_number(chat: Chat) -> None:
    """A ``faults`` rule gets the request and its arrival number and can fail any request it picks."""
    seen: list[tuple[str, int]] = []

    def every_other(request: ServerRequest, number: int) -> Fault | None:
        seen.append((request.last_content, number))
        return Fault.server_error(503) if number % 2 else None

    with OpenAIServer(faults=every_other) as server:
        assert [chat(server).status_code for _ in range(4)] == [200, 503, 200, 503]
    assert seen == [("What is 2+2?", number) for number in range(4)]


# -- rate ----------------------------------------------------------------------------------------------


def test_allowed_rate_refuses_bursts_and_accepts_a_paced_client(http: httpx.Client) -> None:
    """Above ``allowed_rate`` requests get 429 with the wait; a client pacing itself below it gets none."""
    # One request per 10 s: the burst's four local round trips (milliseconds each) fit in one refill period with
    # a margin of seconds, even on a loaded 2-core machine, so the 2nd to 4th are always refused.
    with OpenAIServer(allowed_rate=0.1) as server:
        url, body = server.base_url + "/chat/completions", {"messages": USER}
        burst = [http.post(url, json=body) for _ in range(4)]
        assert [response.status_code for response in burst] == [200, 429, 429, 429]
        waits = [int(response.headers["retry-after-ms"]) for response in burst[1:]]
        assert all(0 < wait <= 10_000 for wait in waits) and waits == sorted(waits, reverse=True)
        for response, wait in zip(burst[1:], waits):
            assert response.headers["retry-after"] == str(max(1, -(-wait // 1000)))  # whole seconds, rounded up
        server.allowed_rate = 10
        server.reset()
        for _ in range(4):  # pacing slower than the rate: load only makes the gaps longer
            assert http.post(url, json=body).status_code == 200
            time.sleep(0.11)
        assert server.status_counts == {200: 4}


def test_openai_client_honouring_retry_after_gets_every_answer() -> None:
    """The ``openai`` client's own retries, which honour ``retry-after-ms``, get every request through."""
    # 5 per second: a request sent right after the previous answer comes well inside its 200 ms, so at least one
    # is refused even on a loaded machine (the client then waits the exact hint and is let through).
    with OpenAIServer(allowed_rate=5) as server:
        with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=3) as patient:
            for _ in range(5):
                patient.chat.completions.create(model="m", messages=USER)
    assert server.answered == 5 and server.status_counts[429] >= 1
    accepted = [record.arrived_at for record in server.requests if record.status == 200]
    assert all(later - earlier >= 1 / 5 - 1e-3 for earlier, later in zip(accepted, accepted[1:]))


# -- bookkeeping and concurrency -----------------------------------------------------------------------


def test_bookkeeping_and_reset(server: OpenAIServer, chat: Chat) -> None:
    """Requests, arrivals, answers, status counts and served choices are recorded, and ``reset`` clears them."""
    before = time.monotonic()
    chat(server, n=2)
    chat(server, api_key=None)
    records = server.requests
    assert [record.number for record in records] == [0, 1] and [r.status for r in records] == [200, 401]
    assert records[0].path == "/v1/chat/completions" and records[0].method == "POST"
    assert records[1].request is None and records[1].response_id is None
    assert before <= server.arrivals[0] <= server.arrivals[1] <= time.monotonic()
    assert records[0].finished_at is not None and records[0].finished_at >= records[0].arrived_at
    assert server.answered == 1 and server.status_counts == {200: 1, 401: 1}
    assert server.choices_served == [(records[0].response_id, 0), (records[0].response_id, 1)]
    server.inject(Fault.drop())
    server.reset()
    assert server.requests == [] and server.arrivals == [] and server.answered == 0
    assert server.status_counts == {} and server.choices_served == []
    assert chat(server).status_code == 200 and server.requests[0].number == 0


def test_fifty_concurrent_async_requests_are_all_answered_once() -> None:
    """50 simultaneous ``AsyncOpenAI`` requests are all in flight on the server at once; each choice is served once."""
    arrived = 0
    everyone = asyncio.Event()  # used only on the server's loop

    async def wait_for_everyone(request: ServerRequest) -> str:
        nonlocal arrived
        if request.choice == 0:
            arrived += 1
            if arrived == 50:
                everyone.set()
        try:  # a server answering one by one would wait here until the deadline
            await asyncio.wait_for(everyone.wait(), timeout=60)
        except TimeoutError:
            everyone.set()
            return f"only {arrived} of 50 arrived together"
        return "together"

    async def main(server: OpenAIServer) -> list[tuple[str, list[str | None]]]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=120) as aclient:
            answers = await asyncio.gather(
                *(aclient.chat.completions.create(model="m", messages=USER, n=2) for _ in range(50))
            )
        return [(answer.id, [choice.message.content for choice in answer.choices]) for answer in answers]

    with OpenAIServer(policy=wait_for_everyone) as server:
        answers = asyncio.run(main(server))
    ids = [response_id for response_id, _ in answers]
    assert [texts for _, texts in answers] == [["together", "together"]] * 50
    assert len(set(ids)) == 50 and server.answered == 50 and server.status_counts == {200: 50}
    served = server.choices_served
    assert len(served) == len(set(served)) == 100 and {response_id for response_id, _ in served} == set(ids)


def test_stop_closes_connections_and_joins_quickly(http: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    """``stop`` returns without waiting for a request in flight (whose answer would take an hour) and quietly;
    that request's client then sees a connection error."""
    server = OpenAIServer(latency=3600).start()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            http.post(server.base_url + "/chat/completions", json={"model": "test-model", "messages": USER},
                      timeout=120)
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: server.requests, timeout=60, message="the request never reached the server")
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    stopping.join(timeout=60)  # a deadline against a stop that waits for the answer, not a bound on speed
    assert not stopping.is_alive(), "stop() waited for the request in flight"
    caller.join(timeout=60)
    assert not caller.is_alive(), "the client never saw its connection close"
    assert len(errors) == 1 and isinstance(errors[0], httpx.RemoteProtocolError)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    with pytest.raises(httpx.ConnectError):
        http.get(server.url + "/health")

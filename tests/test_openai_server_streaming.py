"""The test server's streamed answers (``stream: true``): server-sent events over chunked transfer encoding.

Read with plain ``httpx`` and the official ``openai`` client: one token per event, choices
interleaved, per-chunk logprobs and token ids, a usage chunk, ``[DONE]``; faults before and inside
a stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from scaffold.testing._server import Fault, OpenAIServer, ServerRequest, fake_tokenize

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
    """One plain ``httpx`` client for the module."""
    with httpx.Client() as shared:
        yield shared



def sse_events(response: httpx.Response) -> list[Any]:
    """The ``data`` of every event of a streamed answer: JSON payloads, and the final ``"[DONE]"``."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_a_streamed_chat_answer_is_server_sent_events_one_token_each(server: OpenAIServer, http: httpx.Client) -> None:
    """``stream: true``: chunked SSE, choices interleaved one token per event with their logprob and id, a usage
    chunk, then ``[DONE]``; the pieces add up to the answer the same request gets unstreamed."""
    body = {"model": "m", "messages": USER, "n": 2, "logprobs": True, "return_token_ids": True}
    headers = {"Authorization": "Bearer sk-test"}
    plain = http.post(server.base_url + "/chat/completions", json=body, headers=headers).json()
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", server.base_url + "/chat/completions", json=streamed, headers=headers) as response:
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["transfer-encoding"] == "chunked"
        events = sse_events(response)
    assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["usage"] == plain["usage"]
    chunks = events[:-2]
    assert all(chunk["object"] == "chat.completion.chunk" and chunk["usage"] is None for chunk in chunks)
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [{"role": "assistant", "content": ""}] * 2
    tokens = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert [c["choices"][0]["index"] for c in tokens[:4]] == [0, 1, 0, 1]
    for index, choice in enumerate(plain["choices"]):
        mine = [c["choices"][0] for c in tokens if c["choices"][0]["index"] == index]
        assert "".join(piece["delta"]["content"] for piece in mine) == choice["message"]["content"]
        assert [i for piece in mine for i in piece["token_ids"]] == choice["token_ids"]
        assert [e for piece in mine for e in piece["logprobs"]["content"]] == choice["logprobs"]["content"]
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["index"] == index]
        assert [f for f in finishes if f] == [choice["finish_reason"]] == ["stop"] and finishes[-1] == "stop"
    assert server.answered == 2 and len(set(server.choices_served)) == 4


def test_a_streamed_completion_and_the_openai_clients_own_streaming(server: OpenAIServer, client: openai.OpenAI,
                                                                    http: httpx.Client) -> None:
    """``/v1/completions`` streams text_completion chunks; the official client reads a chat stream to the usage."""
    body = {"model": "m", "prompt": "Once upon", "max_tokens": 3, "logprobs": 1, "stream": True}
    with http.stream("POST", server.base_url + "/completions", json=body,
                     headers={"Authorization": "Bearer sk-test"}) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]" and all(e["object"] == "text_completion" for e in events[:-1])
    assert "usage" not in events[0]  # no include_usage: no usage chunk
    pieces = [e["choices"][0] for e in events[:-1]]
    assert "".join(p["text"] for p in pieces) == "answer 0" and pieces[-1]["finish_reason"] == "length"
    assert [p["logprobs"]["text_offset"] for p in pieces[:3]] == [[0], [6], [7]]
    stream = client.chat.completions.create(model="m", messages=USER, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == numbered(
        ServerRequest("chat", "m"))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(fake_tokenize(numbered(
        ServerRequest("chat", "m"))))


def test_faults_apply_to_streams(server: OpenAIServer, http: httpx.Client) -> None:
    """A 429 comes before any event; ``truncated`` cuts a stream after its tokens, without [DONE];
    ``malformed`` sends an event that is not JSON; ``token_interval`` spaces the token events."""
    body = {"model": "m", "messages": USER, "stream": True}
    headers = {"Authorization": "Bearer sk-test"}
    server.inject(Fault.rate_limit(0.5))
    refused = http.post(server.base_url + "/chat/completions", json=body, headers=headers)
    assert refused.status_code == 429 and refused.headers["retry-after-ms"] == "500"
    server.inject(Fault.truncated(tokens=3))
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with http.stream("POST", server.base_url + "/chat/completions", json=body, headers=headers) as response:
            for line in response.iter_lines():
                seen.append(line)
    contents = [json.loads(line[6:])["choices"][0]["delta"].get("content") for line in seen if line.startswith("data")]
    assert [c for c in contents if c] == ["answer", " ", "0"] and "data: [DONE]" not in seen
    server.inject(Fault.malformed())
    with http.stream("POST", server.base_url + "/chat/completions", json=body, headers=headers) as response:
        first = next(line for line in response.iter_lines() if line.startswith("data"))
    with pytest.raises(json.JSONDecodeError):
        json.loads(first[6:])
    assert server.answered == 0
    server.token_interval = 0.02
    started = time.monotonic()
    with http.stream("POST", server.base_url + "/chat/completions", json=body, headers=headers) as response:
        events = sse_events(response)
    assert time.monotonic() - started >= 0.02 * (len(fake_tokenize(numbered(ServerRequest("chat", "m")))) - 1)
    assert events[-1] == "[DONE]" and server.answered == 1

"""A real OpenAI-compatible HTTP server for boundary tests, with fault injection.

:class:`OpenAIServer` speaks enough HTTP/1.1 (keep-alive, ``Content-Length`` and chunked request
bodies, JSON answers) for ``httpx``, ``openai`` and ``litellm`` to talk to it as they would to
OpenAI or vLLM. It runs its own event loop in a background thread, so sync code and tests with
their own event loop can both use it. Standard library only.

It serves ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/embeddings`` (deterministic
bag-of-words vectors, :func:`~scaffold.testing._fake_answers.fake_embedding`), ``GET /v1/models`` and
``GET /health``. Each choice's text comes from ``policy``; the server then applies ``stop`` and
``max_tokens`` and adds usage, logprobs (``logprobs``) and vLLM's token ids (``return_token_ids``).
With ``stream: true`` the answer is server-sent events over chunked transfer encoding, one token per
event, choices interleaved, per-chunk ``token_ids``, a usage chunk when
``stream_options.include_usage``, then ``data: [DONE]`` (:mod:`scaffold.testing._fake_stream`).
Failures come from :meth:`OpenAIServer.inject` (a FIFO of :class:`Fault`), from a ``faults`` rule,
from ``allowed_rate`` (a token bucket answering 429 with ``Retry-After``) — all three kept by the
server's :class:`~scaffold.testing._faults.FaultPlan` — from ``api_key`` (401) and ``max_context``
(400 ``context_length_exceeded``).

Where it departs from the real services:

- Tokens come from a fake tokenizer (:func:`fake_tokenize`): words, single punctuation marks and
  whitespace runs; ids are ``crc32(token) % 50000`` (:func:`fake_token_id`) and logprobs a
  deterministic negative function of (token, position). Chat prompts are counted as rendered
  by :attr:`ServerRequest.prompt_text` (one ``"role: content\\n"`` line per message).
- ``Retry-After`` is whole seconds rounded up (what ``litellm`` parses); the exact wait goes in
  ``retry-after-ms`` (which the ``openai`` client prefers).
- Faults and ``allowed_rate`` apply to completion requests only, streamed or not (a stream's
  faults: ``Fault.truncated`` cuts it after some tokens, ``Fault.malformed`` sends an event that is
  not JSON); lists of prompts are refused with a 400. Tools are checked for shape only: which
  tool is called, and when, is the policy's (it sees ``ServerRequest.tools``). The model name is not checked.
- A stream's chunks always carry one token each (real servers may merge tokens), and a chat stream
  sends a separate last chunk per choice with the finish reason (as OpenAI does; vLLM puts it on the
  last token's chunk). ``token_interval`` spaces the token events; there is no other pacing.

Examples:
    >>> import json, urllib.request
    >>> body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}).encode()
    >>> with OpenAIServer(policy=r"\\boxed{4}") as server:
    ...     with urllib.request.urlopen(server.base_url + "/chat/completions", body) as response:
    ...         reply = json.load(response)
    >>> reply["choices"][0]["message"]["content"], reply["usage"]["completion_tokens"]
    ('\\\\boxed{4}', 5)
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from scaffold import Completion
from scaffold._openai_wire import DONE, sse
from scaffold.testing._fake_answers import (
    PolicyReply,
    Refusal,
    ServerRequest,
    check_api_key,
    check_context,
    completion_body,
    embeddings_answer,
    error_response,
    fake_logprob,
    fake_token_id,
    fake_tokenize,
    json_response,
    parse_request,
    rate_limited_response,
)
from scaffold.testing._fake_stream import StreamedAnswer, stream_chunks
from scaffold.testing._faults import Fault, FaultKind, FaultPlan
from scaffold.testing._http import CutStream, HTTPResponse, StreamedResponse, phrase, serve_connection

__all__ = [
    "Fault",
    "FaultKind",
    "OpenAIServer",
    "Policy",
    "ServedRequest",
    "ServerRequest",
    "fake_logprob",
    "fake_token_id",
    "fake_tokenize",
]

Policy = Callable[[ServerRequest], Any] | str

_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """What the server saw and did for one HTTP request (an entry of :attr:`OpenAIServer.requests`)."""

    number: int
    """Arrival number from 0: the position in ``OpenAIServer.requests``."""
    method: str
    """HTTP method."""
    path: str
    """Request path, query string removed."""
    arrived_at: float
    """``time.monotonic()`` once the whole request had been read."""
    request: ServerRequest | None = None
    """The parsed completion request (``choice`` 0); ``None`` for other paths and rejected bodies."""
    status: int | None = None
    """HTTP status answered; ``None`` while in flight and when the connection was dropped."""
    fault: Fault | None = None
    """The injected fault applied, if any (``allowed_rate`` refusals carry none)."""
    response_id: str | None = None
    """``id`` of the completion answered."""
    finished_at: float | None = None
    """``time.monotonic()`` when the answer was written or the connection dropped."""


class OpenAIServer:
    """An OpenAI-compatible HTTP server on ``127.0.0.1`` in a background thread (see the module docstring).

    ``policy`` gives the text of one choice: a function of the :class:`ServerRequest` (sync or
    async; called once per choice, on the server's event loop) or a fixed string; a function may
    return a :class:`~scaffold.Completion` instead, whose ``tool_calls`` the choice asks for (the
    server's scripted tool calls, streamed in pieces when the request streams). The default
    answers ``"[choice] last message"``. ``latency`` (seconds, or a function of the request) is
    waited before every completion answer, ``token_interval`` between the token events of a streamed
    one. ``prompt_cache`` (a block size in tokens) reports cached prompt tokens as a provider's prompt cache does.
    ``faults(request, number)`` may return a :class:`Fault`
    for any request that :meth:`inject` left unfaulted. ``allowed_rate`` requests per second
    (bursts of ``burst``) are accepted; faster ones get 429 with the exact wait until one is.

    Counters (:attr:`requests`, :attr:`status_counts`...) are safe to read from any thread.

    Examples:
        >>> with OpenAIServer(api_key="sk-test") as server:
        ...     server.inject(Fault.server_error(503), times=2)
        ...     server.base_url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        api_key: str | None = None,
        model_name: str = "test-model",
        allowed_rate: float | None = None,
        burst: int = 1,
        latency: float | Callable[[ServerRequest], float] = 0.0,
        token_interval: float = 0.0,
        max_context: int | None = None,
        faults: Callable[[ServerRequest, int], Fault | None] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        prompt_cache: int | None = None,
    ) -> None:
        self.plan = FaultPlan(rule=faults, allowed_rate=allowed_rate, burst=burst)
        """The queued faults, the ``faults`` rule and the ``allowed_rate`` bucket (:mod:`scaffold.testing._faults`)."""
        self.policy: Policy = _echo if policy is None else policy
        self.api_key = api_key
        self.model_name = model_name
        self.latency = latency
        self.token_interval = token_interval
        self.max_context = max_context
        self.host = host
        self.port = port
        self.prompt_cache = prompt_cache
        """Blocks of this many prompt tokens are cached as a provider's prompt cache does: a prompt's longest prefix
        (whole blocks) shared with an earlier prompt is reported as ``usage.prompt_tokens_details.cached_tokens``
        (``None``: no cache, no details)."""
        self._seen_prompts: list[list[int]] = []
        self._lock = threading.Lock()
        self._records: list[ServedRequest] = []
        self._status_counts: Counter[int] = Counter()
        self._answered = 0
        self._connections_opened = 0
        self._choices_served: list[tuple[str, int]] = []
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the port is known once started)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: ``http://127.0.0.1:PORT/v1``."""
        return self.url + "/v1"

    def start(self) -> OpenAIServer:
        """Bind and serve in a background thread; returns once the port is open."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="OpenAIServer", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Close every connection (in-flight requests get no answer) and join the thread."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None or loop is None or stopping is None:
            return
        if thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as exc:  # reported to start() when binding failed
            failure.append(exc)
        finally:
            ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        await self._stopping.wait()
        server.close()
        connections = dict(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        for writer in connections.values():
            writer.transport.abort()  # a client that stopped reading would keep a closing socket open
        await server.wait_closed()
        await asyncio.sleep(0)  # let the aborted transports close their sockets

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        with self._lock:
            self._connections_opened += 1
        try:
            await serve_connection(reader, writer, self._respond, partial(error_response, 400))
        except asyncio.CancelledError:
            pass  # stop(): asyncio's stream callback would log a cancelled handler as an error
        finally:
            del self._connections[task]

    # -- bookkeeping ------------------------------------------------------------------------------

    @property
    def allowed_rate(self) -> float | None:
        """Requests per second accepted before answering 429 (``None``: no limit); may be changed while serving."""
        return self.plan.allowed_rate

    @allowed_rate.setter
    def allowed_rate(self, rate: float | None) -> None:
        self.plan.set_allowed_rate(rate)

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Apply ``fault`` to the next ``times`` completion requests, after any fault already queued."""
        self.plan.inject(fault, times)

    def reset(self) -> None:
        """Forget every request and counter, drop queued faults and refill the rate bucket."""
        with self._lock:
            self._records, self._choices_served = [], []
            self._status_counts, self._answered, self._connections_opened = Counter(), 0, 0
            self._generation += 1
        self.plan.reset()

    @property
    def requests(self) -> list[ServedRequest]:
        """Every HTTP request received, in arrival order."""
        with self._lock:
            return list(self._records)

    @property
    def arrivals(self) -> list[float]:
        """``time.monotonic()`` arrival time of every request, in order."""
        with self._lock:
            return [record.arrived_at for record in self._records]

    @property
    def answered(self) -> int:
        """Completion requests answered in full with a valid 200 (not ``Fault.malformed`` or ``Fault.truncated``)."""
        with self._lock:
            return self._answered

    @property
    def status_counts(self) -> Counter[int]:
        """How many answers were sent with each HTTP status (dropped connections are not counted)."""
        with self._lock:
            return Counter(self._status_counts)

    @property
    def connections_opened(self) -> int:
        """TCP connections accepted (clients that keep connections alive open few)."""
        with self._lock:
            return self._connections_opened

    @property
    def choices_served(self) -> list[tuple[str, int]]:
        """``(response id, choice index)`` of every choice answered, in order."""
        with self._lock:
            return list(self._choices_served)

    def _update(self, generation: int, number: int, **changes: Any) -> None:
        with self._lock:
            if generation == self._generation:
                self._records[number] = replace(self._records[number], **changes)

    # -- handling ---------------------------------------------------------------------------------

    async def _respond(self, method: str, target: str, headers: Mapping[str, str],
                       body: bytes) -> HTTPResponse | StreamedResponse | None:
        path = target.split("?", 1)[0]
        with self._lock:
            generation, number = self._generation, len(self._records)
            self._records.append(ServedRequest(number, method, path, time.monotonic()))
        response: HTTPResponse | StreamedResponse | None
        try:
            response = await self._route(generation, number, method, path, headers, body)
        except Refusal as refusal:
            response = refusal.response
        except Exception as exc:  # a bug here or in the policy must not kill the server
            response = error_response(500, f"test server failed: {type(exc).__name__}: {exc}", "server_error")
        status = None if response is None else response.status
        self._update(generation, number, status=status, finished_at=time.monotonic())
        if status is not None:
            with self._lock:
                if generation == self._generation:
                    self._status_counts[status] += 1
        return response

    def _plain(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> HTTPResponse:
        """``/health``, and ``/v1/embeddings`` (no faults, no rate limit)."""
        if path == "/health":
            return json_response(200, {"status": "ok"})
        if method != "POST":
            raise Refusal(error_response(405, f"Method {method} not allowed on {path}", code="method_not_allowed"))
        check_api_key(headers, self.api_key)
        return json_response(200, embeddings_answer(body, self.model_name))

    async def _route(
        self, generation: int, number: int, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> HTTPResponse | StreamedResponse | None:
        if path in ("/health", "/v1/embeddings"):
            return self._plain(method, path, headers, body)
        endpoint = _ENDPOINTS.get(path)
        if endpoint is None and path != "/v1/models":
            raise Refusal(error_response(404, f"Unknown path {path}", code="not_found"))
        if method != ("GET" if endpoint is None else "POST"):
            raise Refusal(error_response(405, f"Method {method} not allowed on {path}", code="method_not_allowed"))
        check_api_key(headers, self.api_key)
        if endpoint is None:
            model = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "scaffold"}
            return json_response(200, {"object": "list", "data": [model]})
        request = parse_request(endpoint, body, self.model_name)
        self._update(generation, number, request=request)
        fault = self.plan.next_fault(request, number)
        if fault is not None:
            self._update(generation, number, fault=fault)
            if fault.kind == "drop":
                return None
            if fault.kind == "slow":
                await asyncio.sleep(fault.seconds)
            elif fault.kind not in ("malformed", "truncated"):
                raise Refusal(_fault_response(fault))
        wait = self.plan.take_rate_token()
        if wait:
            raise Refusal(rate_limited_response(wait, "Rate limit reached: too many requests per second"))
        check_context(request, self.max_context)
        latency = self.latency(request) if callable(self.latency) else self.latency
        if latency:
            await asyncio.sleep(latency)
        if request.body.get("stream"):
            texts = [await self._policy_text(replace(request, choice=index)) for index in range(request.n)]
            streamed = stream_chunks(request, texts)
            self._note_cache(request, *[chunk["usage"] for chunk in streamed.chunks if chunk.get("usage")])
            self._update(generation, number, response_id=streamed.id)
            return StreamedResponse(self._events(generation, number, streamed, fault))
        answer = await self._answer(request)
        self._note_cache(request, answer["usage"])
        if fault is not None and fault.kind in ("malformed", "truncated"):
            text = json.dumps(answer).encode()
            if fault.kind == "malformed":
                return HTTPResponse(200, text[: len(text) // 2])
            return HTTPResponse(200, text, cut_at=len(text) // 2)
        with self._lock:
            if generation == self._generation:
                self._answered += 1
                self._choices_served.extend((answer["id"], choice["index"]) for choice in answer["choices"])
        self._update(generation, number, response_id=answer["id"])
        return json_response(200, answer)

    async def _events(self, generation: int, number: int, answer: StreamedAnswer,
                      fault: Fault | None) -> AsyncIterator[bytes]:
        """The events of a streamed answer, ``token_interval`` apart, cut or spoiled as ``fault`` says."""
        try:
            if fault is not None and fault.kind == "malformed":
                yield b'data: {"choices": [{"index": 0, "delta\n\n' + DONE
                return
            sent = 0
            for chunk, token in zip(answer.chunks, answer.token_chunks):
                if token:
                    if fault is not None and fault.kind == "truncated" and sent >= fault.tokens:
                        raise CutStream
                    if self.token_interval and sent:
                        await asyncio.sleep(self.token_interval)
                    sent += 1
                yield sse(chunk)
            yield DONE
            with self._lock:
                if generation == self._generation:
                    self._answered += 1
                    self._choices_served.extend((answer.id, index) for index in range(answer.choices))
        finally:
            self._update(generation, number, finished_at=time.monotonic())

    def _note_cache(self, request: ServerRequest, *usages: dict[str, Any]) -> None:
        """With :attr:`prompt_cache`: add the cached prompt tokens to each of ``usages`` and remember the prompt."""
        if not self.prompt_cache:
            return
        ids = [fake_token_id(token) for token in fake_tokenize(request.prompt_text)]
        with self._lock:
            shared = 0
            for earlier in self._seen_prompts:
                same = 0
                for a, b in zip(ids, earlier):
                    if a != b:
                        break
                    same += 1
                shared = max(shared, same)
            self._seen_prompts.append(ids)
        for usage in usages:
            usage["prompt_tokens_details"] = {"cached_tokens": shared - shared % self.prompt_cache}

    async def _answer(self, request: ServerRequest) -> dict[str, Any]:
        texts = [await self._policy_text(replace(request, choice=index)) for index in range(request.n)]
        return completion_body(request, texts)

    async def _policy_text(self, request: ServerRequest) -> PolicyReply:
        if isinstance(self.policy, str):
            return self.policy
        text = self.policy(request)
        if inspect.isawaitable(text):
            text = await text
        if not isinstance(text, (str, Completion)):
            raise TypeError(f"policy must return a string or a Completion, got {type(text).__name__}")
        return text


def _echo(request: ServerRequest) -> str:
    return f"[{request.choice}] {request.last_content}"


def _fault_response(fault: Fault) -> HTTPResponse:
    if fault.kind == "rate_limit":
        return rate_limited_response(fault.seconds, "Rate limit reached (injected fault)")
    return error_response(fault.status, f"{phrase(fault.status)} (injected fault)", "server_error")

"""The ASGI app: OpenAI's endpoints over served graphs (FastAPI, run by uvicorn).

``POST /v1/chat/completions`` and ``/v1/completions`` (streamed or not), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus) and the API's own docs (``/docs``, ``/redoc``,
``/openapi.json``, their assets served from the installed ``fastapi-offline`` package, no CDN). Bodies are
read and validated here (:mod:`scaffold.serve._body`), so every client mistake is a 4xx in OpenAI's error
shape naming the field — never FastAPI's 422 or a 500.

Per request, in order: 0) the ``Host`` header (:mod:`scaffold.serve._guard`; with keys set, ``/metrics``
and the docs need a key there too), 1) the API key (constant-time comparison), 2) the body (415, 413, 408,
400), 3) the served model (404), 4) its :class:`~scaffold.serve._served.Plan` (400s), 5) a place among the
concurrent requests (429 when the queue is full), 6) the runs — cancelled if the client disconnects —
7) the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scaffold.serve._body import read_json
from scaffold.serve._errors import ApiError, from_run_error
from scaffold.serve._guard import LOOPBACK_HOSTS, Guard, HostCheck
from scaffold.serve._http import HttpLimits
from scaffold.serve._metrics import Metrics
from scaffold.serve._responses import chat_body, completion_body, final_trace, headers
from scaffold.serve._stream import EventStream, stream_runs
from scaffold.serve._wire import ChatRequest, CompletionRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from fastapi import FastAPI

    from scaffold._events import Subscriber
    from scaffold._result import RunResult
    from scaffold.serve._served import Plan, ServedGraph

__all__ = ["Gate", "create_app"]


class Gate:
    """At most ``concurrent`` requests run at once; at most ``queued`` wait; beyond that, a 429."""

    def __init__(self, concurrent: int, queued: int, metrics: Metrics | None = None) -> None:
        self.free = asyncio.Semaphore(concurrent)
        self.queued = queued
        self.waiting = 0
        self.metrics = metrics

    async def enter(self) -> None:
        if self.free.locked():
            if self.waiting >= self.queued:
                raise ApiError(429, "the server is at capacity: too many requests are queued; retry shortly",
                               code="server_busy", headers={"retry-after": "1"})
            self.waiting += 1
            self._gauge()
            try:
                await self.free.acquire()
            finally:
                self.waiting -= 1
                self._gauge()
        else:
            await self.free.acquire()

    def leave(self) -> None:
        self.free.release()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queued.set(self.waiting)


class Keys:
    """The accepted API keys, compared in constant time (as SHA-256 digests, so length leaks nothing)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys if k]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None) -> None:
        if not self._digests:
            return
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, "missing API key: send `Authorization: Bearer KEY`", code="invalid_api_key",
                           redact=False)
        digest = hashlib.sha256(given.strip().encode()).digest()
        found = False
        for known in self._digests:  # no early exit: every key is compared
            found |= hmac.compare_digest(digest, known)
        if not found:
            raise ApiError(401, "invalid API key", code="invalid_api_key", redact=False)


class Handlers:
    """The endpoints of one app, over its served graphs, limits, keys and metrics."""

    def __init__(self, served: Mapping[str, ServedGraph], gate: Gate, keys: Keys, metrics: Metrics,
                 limits: HttpLimits | None = None) -> None:
        self.served, self.gate, self.keys, self.metrics = served, gate, keys, metrics
        self.limits = limits or HttpLimits()
        self.draining = False

    async def shutdown(self) -> None:
        """Release every backend's connections on this loop, then close the stores."""
        self.draining = True
        released: set[int] = set()
        for graph in self.served.values():
            for model in graph.models.values():
                release = getattr(model.backend, "release_loop", None)
                if release is not None and id(model.backend) not in released:
                    released.add(id(model.backend))
                    await release()
        if "litellm" in sys.modules:
            from scaffold.backends._litellm import release_litellm_loop

            await release_litellm_loop()
        from scaffold.store import close_stores

        await asyncio.to_thread(close_stores)

    async def health(self) -> Response:
        """``ok``, or 503 while draining or while a store the served models record into cannot be written.
        With keys set it names no models (anyone may ask it)."""
        if self.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        failing = self.store_error()
        body: dict[str, Any] = {"status": "ok" if failing is None else "store_unavailable"}
        if not self.keys:
            body["models"] = sorted(self.served)
        if failing is not None:
            body["error"] = "the store cannot be written" if self.keys else str(failing)
            return JSONResponse(body, status_code=503, headers={"retry-after": "1"})
        return JSONResponse(body)

    def store_error(self) -> BaseException | None:
        """Why a served model's store cannot be written now, or ``None`` (a default store not yet opened has
        not failed)."""
        from scaffold.store._default import opened_store

        for graph in self.served.values():
            failing = getattr(opened_store(graph.store), "write_error", None)
            if failing is not None:
                return failing  # type: ignore[no-any-return]
        return None

    async def prometheus(self) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def describe(self, name: str) -> dict[str, Any]:
        graph = self.served[name]
        return {"id": name, "object": "model", "created": 0, "owned_by": "scaffold",
                "scaffold": {"topology": graph.config.topology, "request_params": graph.allowed_params,
                             "max_params": graph.config.max_params, "max_calls": graph.config.max_calls,
                             "max_n": graph.config.max_n, "calls": graph.graph.count_calls(),
                             "streams_tokens": graph.graph.streamed_node is not None}}

    async def list_models(self, request: Request) -> Response:
        self.keys.check(request.headers.get("authorization"))
        return JSONResponse({"object": "list", "data": [self.describe(name) for name in self.served]})

    async def one_model(self, name: str, request: Request) -> Response:
        self.keys.check(request.headers.get("authorization"))
        if name not in self.served:
            raise _unknown_model(name, self.served)
        return JSONResponse(self.describe(name))

    async def chat_completions(self, request: Request) -> Response:
        return await self.answer(request, True)

    async def completions(self, request: Request) -> Response:
        return await self.answer(request, False)

    async def answer(self, request: Request, chat: bool) -> Response:
        started = time.perf_counter()
        self.keys.check(request.headers.get("authorization"))
        body: ChatRequest | CompletionRequest = await read_json(
            request, ChatRequest if chat else CompletionRequest, self.limits)  # type: ignore[arg-type]
        graph = self.served.get(body.model)
        if graph is None:
            raise _unknown_model(body.model, self.served)
        endpoint = "chat" if chat else "completions"
        try:
            plan = graph.plan(body)
            await self.gate.enter()
        except ApiError as exc:
            self.metrics.child(self.metrics.requests, graph.name, endpoint, str(exc.status)).inc()
            raise
        self.metrics.child(self.metrics.in_flight, graph.name).inc()
        counter = self.metrics.calls_counter(graph.name)
        if body.stream:
            return self.streamed(graph, plan, chat, body, started, endpoint, counter)
        try:
            results = await _run_watched(request, graph, plan, counter)
        except ApiError as exc:  # the client went away
            self.metrics.child(self.metrics.requests, graph.name, endpoint, str(exc.status)).inc()
            raise
        finally:
            self.gate.leave()
            self.metrics.child(self.metrics.in_flight, graph.name).dec()
        status = 200
        try:
            traces = _answers(results)
            content = (chat_body if chat else completion_body)(graph.name, results, traces)
            elapsed = time.perf_counter() - started
            run_time = max(r.wall_time for r in results)
            timing = {"server-timing": f"run;dur={run_time * 1000:.3f}, total;dur={elapsed * 1000:.3f}"}
            response: Response = JSONResponse(content, headers={**headers(plan.run_ids, content["scaffold"]["cost"]),
                                                                **timing})
        except ApiError as exc:
            status = exc.status
            response = error_response(exc)
            response.headers.update(headers(plan.run_ids))
        self.metrics.child(self.metrics.requests, graph.name, endpoint, str(status)).inc()
        self.metrics.child(self.metrics.latency, graph.name, endpoint).observe(time.perf_counter() - started)
        return response

    def streamed(self, graph: ServedGraph, plan: Plan, chat: bool, body: Any, started: float,
                 endpoint: str, counter: Subscriber) -> Response:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        metrics = self.metrics

        def first_content() -> None:
            metrics.child(metrics.ttft, graph.name).observe(time.perf_counter() - started)

        async def produce(emit: Any) -> None:
            await stream_runs(graph, plan, emit, chat=chat, include_usage=include_usage,
                              first_content=first_content, subscribers=(counter,))

        def closed(gone: bool) -> None:
            self.gate.leave()
            metrics.child(metrics.in_flight, graph.name).dec()
            metrics.child(metrics.requests, graph.name, endpoint, "499" if gone else "200").inc()
            metrics.child(metrics.latency, graph.name, endpoint).observe(time.perf_counter() - started)

        return EventStream(produce, headers(plan.run_ids), closed)


def error_response(error: ApiError) -> Response:
    """``error`` as OpenAI's error JSON with its status and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def create_app(served: Mapping[str, ServedGraph], *, api_keys: Sequence[str] = (), max_concurrent_requests: int = 64,
               max_queued_requests: int = 256, allowed_hosts: Sequence[str] | None = None,
               limits: HttpLimits | None = None) -> Any:
    """The server's ASGI app for ``served`` (model name -> :class:`~scaffold.serve._served.ServedGraph`).

    ``allowed_hosts``: the ``Host`` names it answers (default: the loopback names; ``["*"]`` for any, behind
    a proxy that checks them). ``limits``: body size, read deadlines and connections
    (:class:`~scaffold.serve.HttpLimits`; :class:`~scaffold.serve.ServeThread` and :func:`~scaffold.serve.serve`
    apply the server-level ones). With ``api_keys``, every endpoint but ``/health`` needs a key.

    Examples:
        >>> from scaffold.serve import load_server
        >>> app = create_app(load_server({"served": {"m": {"topology": "single_sample",
        ...                                                 "models": {"solver": "hosted_vllm/x"}}}}, store="none"))
        >>> sorted(r.path for r in app.fastapi.routes if "v1" in r.path)
        ['/v1/chat/completions', '/v1/completions', '/v1/models', '/v1/models/{name:path}']
    """
    from fastapi_offline import FastAPIOffline
    from starlette.exceptions import HTTPException

    limits = limits or HttpLimits(max_connections=max_concurrent_requests + max_queued_requests + 256)
    metrics = Metrics()
    keys = Keys(api_keys)
    handlers = Handlers(served, Gate(max_concurrent_requests, max_queued_requests, metrics), keys, metrics, limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await handlers.shutdown()

    app = FastAPIOffline(title="Scaffold", summary="Test-time-compute graphs as OpenAI-compatible models",
                         lifespan=lifespan)
    app.state.metrics, app.state.served, app.state.handlers = metrics, served, handlers

    async def api_error(request: Request, exc: Exception) -> Response:
        return error_response(exc if isinstance(exc, ApiError) else ApiError(500, "internal error"))

    async def http_error(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 500)
        message = "not found: " + request.url.path if code == 404 else str(getattr(exc, "detail", exc))
        return error_response(ApiError(code, message))

    async def unexpected(request: Request, exc: Exception) -> Response:
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error"))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
    for path, method, endpoint in (
        ("/health", "GET", handlers.health), ("/metrics", "GET", handlers.prometheus),
        ("/v1/models", "GET", handlers.list_models), ("/v1/models/{name:path}", "GET", handlers.one_model),
    ):
        app.add_api_route(path, endpoint, methods=[method], response_model=None)
    # the completion endpoints read and validate their own bodies: plain routes skip FastAPI's dependency
    # solving (~0.1 ms per request) and are documented by the pydantic models of scaffold.serve._wire
    from starlette.routing import Route

    app.router.routes[:0] = [Route("/v1/chat/completions", handlers.chat_completions, methods=["POST"]),
                             Route("/v1/completions", handlers.completions, methods=["POST"])]  # matched first
    return ServerApp(app, Guard(app, hosts=HostCheck(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts),
                                error=_error_body, keys=keys, protected=_needs_key), limits)


class ServerApp:
    """The served ASGI app: the FastAPI app behind its :class:`~scaffold.serve._guard.Guard`, with the limits
    the HTTP server should apply (:class:`~scaffold.serve.ServeThread` and :func:`~scaffold.serve.serve` do)."""

    def __init__(self, fastapi: FastAPI, guarded: Guard, limits: HttpLimits) -> None:
        self.fastapi = fastapi
        self.state = fastapi.state
        self.limits = limits
        self._guarded = guarded

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._guarded(scope, receive, send)


def _error_body(status: int, message: str, code: str | None) -> dict[str, Any]:
    return ApiError(status, message, code=code, redact=False).body()


_KEYED_PATHS = ("/metrics", "/docs", "/redoc", "/openapi.json")


def _needs_key(path: str) -> bool:
    """The pages the guard keeps behind a key (the API endpoints check it themselves)."""
    return path.startswith(_KEYED_PATHS)


def _unknown_model(name: str, served: Mapping[str, Any]) -> ApiError:
    return ApiError(404, f"the model {name!r} does not exist; served: {', '.join(sorted(served))}",
                    code="model_not_found", param="model")


async def _run_watched(request: Request, graph: ServedGraph, plan: Plan, counter: Subscriber) -> list[RunResult]:
    """Run every choice of ``plan`` (concurrently when ``n > 1``) in this task; if the client disconnects
    first, cancel them (every call in flight is recorded as cancelled) and answer 499."""
    budget = plan.new_budget()
    task = asyncio.current_task()
    assert task is not None
    gone = False

    def hung_up(watcher: asyncio.Future[None]) -> None:
        nonlocal gone
        if not watcher.cancelled() and watcher.exception() is None:
            gone = True
            task.cancel()

    watcher = asyncio.ensure_future(_disconnect(request))
    watcher.add_done_callback(hung_up)
    try:
        subscribers = (counter,)
        if plan.n == 1:  # no extra task: each one costs event-loop turns that queue behind every other request
            return [await graph.run(plan, 0, budget=budget, subscribers=subscribers)]
        return list(await asyncio.gather(*[graph.run(plan, i, budget=budget, subscribers=subscribers)
                                           for i in range(plan.n)]))
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        raise ApiError(499, "the client closed the request") from None
    finally:
        watcher.remove_done_callback(hung_up)
        watcher.cancel()


async def _disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


def _answers(results: Sequence[RunResult]) -> list[Any]:
    traces = []
    for result in results:
        if result.error is not None:
            raise from_run_error(result.error)
        trace = final_trace(result)
        if trace is None:
            raise ApiError(502, "the graph produced no answer (every candidate failed)", code="no_answer")
        traces.append(trace)
    return traces

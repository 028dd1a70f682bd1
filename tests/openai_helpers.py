"""What the native OpenAI-compatible backend's tests share: the key and reply of their local server, a
backend on it, one call on a fresh event loop, and the typed error a call raises."""

from __future__ import annotations

import asyncio
import gc

import pytest

import scaffold as sf
from scaffold._types import Request
from scaffold.backends import Retry
from scaffold.testing._server import OpenAIServer, ServerRequest

KEY = "sk-test-4d3c2b1a0f9e8d7c"
FAST = Retry(attempts=4, initial_delay=0.01, max_delay=0.05)
QUESTION = Request(messages=(("user", "what is 2+2?"),))


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
    gc.collect()


def backend_for(server: OpenAIServer, **kwargs) -> sf.OpenAIBackend:
    return sf.OpenAIBackend("test-model", base_url=server.base_url, **{"api_key": KEY, **kwargs})


def complete(backend: sf.OpenAIBackend, request: Request):
    """One call on a fresh event loop, closing the backend's session of that loop afterwards."""

    async def main():
        try:
            return await backend.complete(request)
        finally:
            await backend.release_loop()

    return asyncio.run(main())


def answers_of(backend, request: Request, *, stream: bool):
    """The completions of one call, streamed (the ``Finished`` record's) or not, on a fresh event loop."""
    from scaffold._types import Finished

    async def main():
        try:
            if not stream:
                return await backend.complete(request)
            return [c for item in [i async for i in backend.stream(request)] if isinstance(item, Finished)
                    for c in item.completions]
        finally:
            await backend.release_loop()

    return asyncio.run(main())


def failure(backend: sf.OpenAIBackend, request: Request = QUESTION) -> sf.BackendError:
    """The typed error one call raises."""
    with pytest.raises(sf.BackendError) as info:
        complete(backend, request)
    return info.value


def run(graph, model: sf.Model, problem: str = "2+2", **kwargs) -> sf.RunResult:
    return graph.run_sync({"problem": problem}, models={"m": model}, **kwargs)

"""Streamed answers: server-sent events carrying the final node's tokens as they are generated.

A request's ``n`` runs start together. The final node's deltas go out as ``content`` the moment the
backend yields them (``Graph.run(on_delta=...)``); a graph whose output is a rule (a vote) sends the
chosen text when the rule decides. Progress events, when asked for, go out as ``reasoning_content``
deltas or SSE comments, at most one per :data:`PROGRESS_INTERVAL`. A failure after the stream started
is sent as an ``error`` event (OpenAI's error object), then ``[DONE]``.

:class:`EventStream` is a small ASGI response: it watches the connection while it streams, so a client
that goes away cancels the runs at once — even while the graph is between tokens — and every call in
flight is recorded as cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from scaffold import _openai_wire as wire
from scaffold._events import TraceFinished
from scaffold._openai_wire import DONE, sse
from scaffold._types import Status, TraceKind
from scaffold.serve._errors import ApiError, from_run_error
from scaffold.serve._responses import accounting, chunk, client_calls, final_trace, finish_reason

if TYPE_CHECKING:
    from scaffold._events import Subscriber
    from scaffold._result import RunResult
    from scaffold._types import Delta
    from scaffold.serve._served import Plan, ServedGraph

__all__ = ["EventStream", "stream_runs"]

PROGRESS_INTERVAL = 0.25
"""Seconds between two progress events of one request."""

Emit = Callable[[bytes], None]




class EventStream(Response):
    """An ASGI response streaming what ``produce(emit)`` emits; cancelled if the client disconnects."""

    def __init__(self, produce: Callable[[Emit], Awaitable[None]], headers: dict[str, str],
                 on_close: Callable[[bool], None]) -> None:
        super().__init__(status_code=200, media_type="text/event-stream")
        self.produce = produce
        self.extra_headers = headers
        self.on_close = on_close
        """Called once at the end with whether the client went away before the stream ended."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        producer = asyncio.ensure_future(self._produce(queue))
        watcher = asyncio.ensure_future(_disconnected(receive))
        gone = False
        raw = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]
        raw += [(k.encode(), v.encode()) for k, v in self.extra_headers.items()]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw})
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    gone = True
                    break
                piece = getter.result()
                if piece is None:
                    break
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            if not gone:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away mid-send
            gone = True
        finally:
            watcher.cancel()
            if not producer.done():
                producer.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            self.on_close(gone)

    async def _produce(self, queue: asyncio.Queue[bytes | None]) -> None:
        try:
            await self.produce(queue.put_nowait)
        finally:
            queue.put_nowait(None)


async def _disconnected(receive: Any) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


async def stream_runs(served: ServedGraph, plan: Plan, emit: Emit, *, chat: bool, include_usage: bool,
                      first_content: Callable[[], None], subscribers: Sequence[Subscriber] = ()) -> list[RunResult]:
    """Run ``plan``'s choices, emitting chunks; returns the results (failed ones included)."""
    model, created = served.name, int(time.time())
    response_id = wire.response_id(chat, plan.run_ids[0])
    choice_of = {run_id: i for i, run_id in enumerate(plan.run_ids)}
    # an agent's turns stream under one trace id: only its last turn's text is the answer, sent when it ends
    streamed_node = plan.graph.streamed_node if served.agent is None else None
    streamed: set[int] = set()
    sent_first = False

    def content(choice: int, text: str) -> None:
        nonlocal sent_first
        if not sent_first:
            sent_first = True
            first_content()
        emit(sse(chunk(chat, response_id, model, created, choice, content=text)))

    def on_delta(trace_id: str, delta: Delta) -> None:
        if delta.text:
            choice = choice_of.get(trace_id.split("/", 1)[0])
            if choice is not None and trace_id.endswith("#0"):
                streamed.add(choice)
                content(choice, delta.text)

    progress = _Progress(plan, emit, chat, response_id, model, created) if plan.progress else None
    if chat:
        for choice in range(plan.n):
            emit(sse(chunk(chat, response_id, model, created, choice, role=True, content="")))
    budget = plan.new_budget()
    results: list[RunResult | None] = [None] * plan.n
    watchers: tuple[Subscriber, ...] = (*subscribers, progress) if progress is not None else tuple(subscribers)

    async def one(choice: int) -> None:
        result = await served.run(plan, choice, budget=budget, subscribers=watchers,
                                  on_delta=on_delta if streamed_node is not None else None)
        results[choice] = result
        if result.error is not None:
            raise _RunFailed(result)
        trace = final_trace(result)
        if trace is None:
            raise _RunFailed(result)
        calls = client_calls(trace) if chat else None
        if choice not in streamed and (trace.text or not calls):
            content(choice, trace.text)
        if calls:
            pieces = [{"index": i, **call} for i, call in enumerate(calls)]
            emit(sse(chunk(chat, response_id, model, created, choice, tool_calls=pieces)))
        emit(sse(chunk(chat, response_id, model, created, choice, finish=finish_reason(trace))))

    if not await _all_or_error([one(i) for i in range(plan.n)], emit):
        return [r for r in results if r is not None]
    done = [r for r in results if r is not None]
    if include_usage:
        usage, extension = accounting(done)
        emit(sse({**chunk(chat, response_id, model, created, None), "usage": usage, "scaffold": extension}))
    emit(DONE)
    return done


async def _all_or_error(work: list[Any], emit: Emit) -> bool:
    """Run every choice; on the first failure cancel the others and send the error event (``False``)."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        await asyncio.gather(*tasks)
    except _RunFailed as failed:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        error = from_run_error(failed.result.error) if failed.result.error is not None else ApiError(
            502, "the graph produced no answer (every candidate failed)", code="no_answer")
        emit(sse(error.body()))
        emit(DONE)
        return False
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
    return True


class _RunFailed(Exception):
    def __init__(self, result: RunResult) -> None:
        super().__init__(result.run_id)
        self.result = result


class _Progress:
    """A subscriber turning finished model calls into progress events (at most one per interval)."""

    __name__ = "progress"
    events = (TraceFinished,)

    def __init__(self, plan: Plan, emit: Emit, chat: bool, response_id: str, model: str, created: int) -> None:
        self.emit, self.chat, self.mode = emit, chat, plan.progress
        self.ident = (response_id, model, created)
        self.total = sum(plan.graph.count_calls().values()) * plan.n
        self.done = 0
        self.answers: dict[str, list[str | None]] = {}
        self.last = 0.0

    def __call__(self, event: Any) -> None:
        if type(event) is not TraceFinished:
            return
        trace = event.trace
        if trace.kind is not TraceKind.MODEL or trace.status is Status.SKIPPED:
            return
        self.done += 1
        self.answers.setdefault(trace.node, []).append(trace.answer if trace.status is Status.OK else None)
        now = time.monotonic()
        if now - self.last < PROGRESS_INTERVAL and self.done < self.total:
            return
        self.last = now
        answers = [a for a in self.answers[trace.node] if a is not None]
        agree = ""
        if answers:
            top = max(answers.count(a) for a in set(answers))
            agree = f", {100 * top / len(answers):.0f}% agree"
        text = f"{self.done}/{self.total} calls; {trace.node}: {len(answers)} candidates{agree}"
        if self.mode == "comments":
            self.emit(b": " + text.encode() + b"\n\n")
        elif self.chat:
            response_id, model, created = self.ident
            self.emit(sse(chunk(True, response_id, model, created, 0, reasoning=text + "\n")))

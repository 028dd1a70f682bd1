"""The model-call path: how one request of a call node becomes recorded traces.

A call reads, in order: **reuse** (a resumed run's record or the response cache may answer it) →
**emit** (``CallStarted``) → **send** (:meth:`Model.complete` inside the run's layers) → **trace**
(one record per completion). Any failure on the way is the node's failure, under its policy.

The run's layers wrap ``Model.complete`` and are composed once per model alias and run
(:func:`sender`): the call timeout sits innermost, the token/dollar budget outside it (it books
before the timed call and settles after it). A layer is a function from a ``Send`` to a ``Send``::

    def logged(send: Send) -> Send:
        async def send_logged(request: Request) -> Reply:
            print("sending", request.model)
            return await send(request)
        return send_logged

Without a budget and a call timeout, ``send`` *is* ``Model.complete``: no layer costs anything
on the hot path unless it is used.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from scaffold._clock import Clock, is_real, timeout
from scaffold._errors import BackendError, CallTimeout
from scaffold._events import CallStarted
from scaffold._types import Completion, Delta, Finished, Request, Status, Trace, record_maker
from scaffold._values import clean_text, has_lone_surrogate
from scaffold.backends._model import Model, Reply

if TYPE_CHECKING:
    from scaffold._budget import Budget
    from scaffold._jobs import Slot
    from scaffold._nodes import CallNode
    from scaffold._run_context import RunContext
    from scaffold.answers import AnswerKind

Send = Callable[[Request], Awaitable[Reply]]
"""Something that answers a request: :meth:`Model.complete`, or a layer around it."""
Layer = Callable[[Send], Send]
"""A function wrapping a ``Send`` (timeout, budget, your own logging...)."""

_new_trace = record_maker(Trace)


class ReuseSource(Protocol):
    """Something that may answer a call without sending it (see :mod:`scaffold.store._reuse`)."""

    async def take(
        self, run_id: str, node: str, index: int, request: Request, inputs: tuple[str, ...]
    ) -> list[Trace] | None:
        """The call's traces (ids ``{run_id}/{node}#{index + i}``), or ``None`` to send it."""
        ...

    async def take_trace(self, trace_id: str, request: Request | None, inputs: tuple[str, ...]) -> Trace | None:
        """The trace recorded as ``trace_id`` if it answered the same ``request`` (``None``: any, for a tool
        call) from the same ``inputs``; ``None`` to make it anew (an agent's turns and tool calls)."""
        ...


def call_seed(run_seed: int, node: str, index: int) -> int:
    """The seed a request gets: a pure function of the run seed, the node name and the index.

    Hashed rather than counted up, so that engines deriving choice ``i``'s seed as ``seed + i``
    (vLLM) never give two requests the same samples.

    Examples:
        >>> call_seed(0, "step0", 3) == call_seed(0, "step0", 3) != call_seed(1, "step0", 3)
        True
    """
    return index_seed(node_seed(run_seed, node), index)


def node_seed(run_seed: int, node: str) -> int:
    """The part of :func:`call_seed` that does not depend on the index (a call node computes it once per run)."""
    return zlib.crc32(f"{run_seed}/{node}#".encode())


def index_seed(node_part: int, index: int) -> int:
    """:func:`call_seed` from its node part: the CRC of the seed string continued over the index."""
    return zlib.crc32(b"%d" % index, node_part) & 0x7FFFFFFF


# -- layers around Model.complete -------------------------------------------------------------
def timeout_layer(seconds: float, alias: str | None, clock: Clock | None = None) -> Layer:
    """Abandon a call (every retry included) that runs past ``seconds``: :class:`CallTimeout`.

    ``seconds`` are measured on ``clock`` (:func:`sender` passes the model's; default: real time).
    """

    def wrap(send: Send) -> Send:
        if clock is not None and not is_real(clock):
            async def send_timed_on_clock(request: Request) -> Reply:
                try:
                    async with timeout(clock, seconds):
                        return await send(request)
                except TimeoutError:
                    raise CallTimeout(f"call to {alias!r} ran past {seconds}s") from None

            return send_timed_on_clock

        async def send_timed(request: Request) -> Reply:
            try:
                async with asyncio.timeout(seconds):
                    return await send(request)
            except TimeoutError:
                raise CallTimeout(f"call to {alias!r} ran past {seconds}s") from None

        return send_timed

    return wrap


def budget_layer(budget: Budget) -> Layer:
    """Book the call's worst case against ``budget`` before sending (:class:`BudgetExceeded` if it could
    pass it), settle with what the completions used after."""

    book_async = getattr(budget, "book_async", None)

    def wrap(send: Send) -> Send:
        async def send_budgeted(request: Request) -> Reply:
            # raises BudgetExceeded before anything is sent; a cluster's shared budget books asynchronously
            booked = await book_async(request) if book_async is not None else budget.book(request)
            reply = None
            try:
                reply = await send(request)
                return reply
            finally:
                budget.settle(booked, reply.completions if reply is not None else None)

        return send_budgeted

    return wrap


def layered(send: Send, layers: Sequence[Layer]) -> Send:
    """``send`` wrapped by ``layers``, the first innermost."""
    for layer in layers:
        send = layer(send)
    return send


def sender(model: Model, alias: str | None, *, call_timeout: float | None, budget: Budget | None,
           base: Send | None = None) -> Send:
    """The run's path to ``model``: its ``complete`` (or ``base``) inside the call timeout (on the model's clock),
    inside the budget."""
    layers: list[Layer] = []
    if call_timeout is not None:
        layers.append(timeout_layer(call_timeout, alias, model.clock))
    if budget is not None:
        layers.append(budget_layer(budget))
    return layered(model.complete if base is None else base, layers)


DeltaSink = Callable[[str, Delta], None]
"""Called with a trace id and each :class:`~scaffold.Delta` of a streamed call (``Graph.run(on_delta=...)``)."""


def streamed(model: Model, on_delta: DeltaSink, trace_prefix: str, index: int) -> Send:
    """A ``Send`` that streams the request through :meth:`Model.stream`, handing every delta of choice ``i`` to
    ``on_delta`` as ``(f"{trace_prefix}#{index + i}", delta)``, and answers with the completions at the end."""

    async def send_streamed(request: Request) -> Reply:
        started, t0 = time.time(), time.perf_counter()
        completions: Sequence[Completion] | None = None
        async for item in model.stream(request):
            if isinstance(item, Finished):
                completions = item.completions
            else:
                on_delta(f"{trace_prefix}#{index + item.choice}", item)
        if completions is None:
            raise BackendError("the stream ended without its completions")
        return Reply(completions, 1, started, time.perf_counter() - t0)

    return send_streamed


# -- one call: reuse -> emit -> send -> trace ---------------------------------------------------
async def call(
    run: RunContext, node: CallNode, send: Send, request: Request, inputs: tuple[str, ...], outs: list[Slot], index: int
) -> None:
    """Answer one request of ``node`` (choices ``index ..``) into ``outs``; started as a task by the call kind.

    Loops rather than comprehensions here: a comprehension that reads this frame's variables turns them
    into cells, allocated on every call; and no local may hold the task (see ``_cancelled_by_backend``).
    """
    started, t0 = time.time(), time.perf_counter()
    try:
        try:
            if run.reuse and await reused(run, node, request, inputs, outs, index):
                return
            if run.listeners[CallStarted]:
                ids = []
                for i in range(len(outs)):
                    ids.append(f"{run.run_id}/{node.name}#{index + i}")
                run.emit(CallStarted(run.run_id, tuple(ids), node.alias or ""))
            reply = await send(request)
            completions = reply.completions
            if len(completions) != request.n:
                raise BackendError(f"backend returned {len(completions)} completions for n={request.n}")
        except asyncio.CancelledError:
            if _cancelled_by_backend():
                run.node_failed(node, outs, index, BackendError("the backend raised CancelledError"),
                                request, inputs, started, time.perf_counter() - t0)
                return
            latency = time.perf_counter() - t0
            for i in range(len(outs)):
                run.record(unanswered(run, node, request, inputs, index + i, started, latency))
            raise
        except Exception as exc:
            run.node_failed(node, outs, index, exc, request, inputs, started, time.perf_counter() - t0)
            return
        started, latency, attempt = reply.started, reply.latency, reply.attempts
        traces = []
        try:  # a malformed completion or an extractor that raises is this call's failure
            for i, completion in enumerate(completions):
                traces.append(answered(run, node, request, inputs, index + i, completion, started, latency, attempt))
            kind = run.answers_for(node)
            if kind.reasks:
                for i in range(len(traces)):
                    traces[i] = await reasked(run, node, send, traces[i], kind)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            run.node_failed(node, outs, index, exc, request, inputs, started, latency)
            return
        for slot, trace in zip(outs, traces):
            run.finish(slot, trace)
    finally:  # cheaper than a done-callback, which costs one more loop turn per call
        run.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]


async def reasked(run: RunContext, node: CallNode, send: Send, trace: Trace, kind: AnswerKind) -> Trace:
    """``trace``, or, when its answer kind refuses its text (:meth:`AnswerKind.check`), the reply to asking again
    with the reason, up to ``kind.reasks`` times. Each refused reply is recorded (id ``<trace>.reask<j>``) and read
    by the next; the last reply keeps the call's id, and ``metadata["reasks"]`` says how many it took (with
    ``["invalid"]``, the last reason, when none passed)."""
    problem = kind.check(trace.text)
    asked, lineage = 0, tuple(trace.inputs)
    while problem is not None and asked < kind.reasks and trace.request is not None:
        asked += 1
        refused = dataclasses.replace(trace, id=f"{trace.id}.reask{asked}", answer=None,
                                      metadata={**trace.metadata, "invalid": problem})
        run.record(refused)
        lineage = (*lineage, refused.id)
        request = dataclasses.replace(
            trace.request, n=1, seed=None if trace.request.seed is None else trace.request.seed + asked,
            messages=(*trace.request.messages, ("assistant", trace.text),
                      ("user", f"That reply is not a valid answer: {problem}\n{kind.instruction}")))
        reply = await send(request)
        trace = answered(run, node, request, lineage, trace.index, reply.completions[0], reply.started,
                         reply.latency, reply.attempts)
        problem = kind.check(trace.text)
    if not asked:
        return trace
    metadata = {**trace.metadata, "reasks": asked}
    if problem is not None:
        metadata["invalid"] = problem
    return dataclasses.replace(trace, metadata=metadata)


def _cancelled_by_backend() -> bool:
    """True when a ``CancelledError`` came from the backend rather than from cancelling this task.

    A function of its own: a task kept in the frame that handles its ``CancelledError`` makes a cycle
    (task -> error -> traceback -> frame -> task) that only the cyclic collector frees.
    """
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


async def reused(
    run: RunContext, node: CallNode, request: Request, inputs: tuple[str, ...], outs: list[Slot], index: int
) -> bool:
    """Answer the call from a reuse source (a resumed run's record, the response cache) if one has it."""
    for source in run.reuse:
        traces = await source.take(run.run_id, node.name, index, request, inputs)
        if traces is not None and len(traces) == len(outs):
            for slot, trace in zip(outs, traces):
                run.finish(slot, trace)
            return True
    return False


def answered(
    run: RunContext, node: CallNode, request: Request, inputs: tuple[str, ...], index: int, completion: Completion,
    started: float, latency: float, attempt: int,
) -> Trace:
    """The record of one completion (a lone surrogate in its text, which no UTF-8 reader takes, becomes U+FFFD)."""
    text = completion.text
    if not text.isascii() and has_lone_surrogate(text):
        text = clean_text(text, no_nul=False)
    metadata = completion.metadata
    if completion.finish_reason is not None:
        metadata = {**metadata, "finish_reason": completion.finish_reason}
    return _new_trace(
        id=f"{run.run_id}/{node.name}#{index}", run_id=run.run_id, node=node.name, index=index,
        model=node.alias, request=request, text=text, answer=run.extractor(node)(text),
        token_ids=completion.token_ids, logprobs=completion.logprobs, usage=completion.usage,
        cost=completion.cost, latency=latency, started_at=started, inputs=inputs, attempt=attempt,
        metadata=metadata,
    )


def unanswered(
    run: RunContext, node: CallNode, request: Request, inputs: tuple[str, ...], index: int, started: float,
    latency: float,
) -> Trace:
    """The record of a choice whose call was cancelled in flight."""
    return Trace(
        id=f"{run.run_id}/{node.name}#{index}", run_id=run.run_id, node=node.name, index=index,
        model=node.alias, request=request, inputs=inputs, latency=latency, started_at=started,
        status=Status.CANCELLED, error="cancelled",
    )


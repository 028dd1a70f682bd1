"""The subscriber that records one run: events in, queued records out.

It runs on the event loop, so it only queues: converting traces to rows and writing
them happens on the store's writer thread. When the run ends it queues the run's
totals with a callback, and :meth:`Recorder.wait` lets ``Graph.run`` return only once
the whole run is durable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._errors import StoreError
from scaffold._events import Event, RunFinished, RunStarted, TraceFinished
from scaffold._json import to_json
from scaffold._types import Trace, TraceKind
from scaffold.store import _codec as codec

if TYPE_CHECKING:
    from scaffold._result import RunResult
    from scaffold.backends._model import Model
    from scaffold.store._writer import Writer


class Recorder:
    """Records the events of one run into a store (internal; ``Graph.run(store=...)`` makes one)."""

    __name__ = "store recorder"
    events = (RunStarted, TraceFinished, RunFinished)
    """What it records (a run's start, each trace, its end): no other event is built for it."""

    def __init__(self, writer: Writer, models: Mapping[str, Model], *, dataset: str | None = None,
                 item: int | None = None, source: str | None = None) -> None:
        self.writer = writer
        self.backends = {alias: type(model.backend).__name__ for alias, model in models.items()}
        self.models = {alias: {"model": model.name, "backend": self.backends[alias]} for alias, model in models.items()}
        self.dataset = dataset
        self.item = item
        self.source = source
        self._durable: asyncio.Future[None] | None = None

    def __call__(self, event: Event) -> None:
        if type(event) is TraceFinished:
            trace = event.trace
            self.writer.put(("trace", trace, self.backends.get(trace.model) if trace.model else None))
        elif type(event) is RunStarted:
            self._started(event)
        elif type(event) is RunFinished:
            self._finished(event.result)

    def _started(self, event: RunStarted) -> None:
        inputs = to_json(event.inputs)  # once: the run's inputs and its dataset item are the same JSON
        if self.dataset is not None:
            self.writer.put(("dataset", {"name": self.dataset, "source": self.source, "created_at": time.time()}))
            if self.item is not None:
                self.writer.put(("item", {"dataset": self.dataset, "position": self.item, "data": inputs}))
        self.writer.put(("run", {
            "id": event.run_id, "graph": event.graph, "spec": to_json(event.spec),
            "params": to_json(event.params, stable=True), "inputs": inputs, "models": self.models,
            "seed": event.seed, "status": "running", "error": None, "started_at": time.time(), "finished_at": None,
            "output": None, "answer": None, "dataset": self.dataset, "item": self.item, "calls": 0,
            "prompt_tokens": 0, "completion_tokens": 0, "cost": None, "attempts": 1,
        }))

    def _finished(self, result: RunResult) -> None:
        end = {
            "id": result.run_id, "status": result.status,
            "error": f"{type(result.error).__name__}: {result.error}" if result.error is not None else None,
            "finished_at": result.finished_at or time.time(), "output": codec.output_ids(result.output),
            "answer": result.answer, **run_totals(result.traces),
        }
        loop = asyncio.get_running_loop()
        durable = self._durable = loop.create_future()

        def done(exc: BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(_settle, durable, exc)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

        try:
            self.writer.put(("end", end, done))
        except BaseException as exc:  # a closed store: the waiter must hear it, not wait forever
            _settle(durable, exc)
            raise

    async def wait(self, timeout: float | None = None) -> None:
        """Return once everything the run recorded is written; raise :class:`StoreError` if it was not, or
        if that is not confirmed within ``timeout`` seconds."""
        if self._durable is None:
            return
        if timeout is None:
            await self._durable
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._durable), timeout)
        except TimeoutError:
            raise StoreError(f"the store did not confirm this run's record within {timeout:.3g}s (the run's "
                             "timeout); it may still be written") from None


def run_totals(traces: Sequence[Trace]) -> dict[str, Any]:
    """A finished run's totals from its traces: model calls, tokens and cost (``None`` when any is unknown).

    Outputs collected elsewhere (external traces) count when any of them says what it cost or used (imported
    ones): then one that does not makes the total cost unknown, never smaller."""
    return usage_totals([(t.usage.prompt_tokens, t.usage.completion_tokens, t.cost)
                         for t in traces if t.kind is TraceKind.MODEL],
                        [(t.usage.prompt_tokens, t.usage.completion_tokens, t.cost)
                         for t in traces if t.kind is TraceKind.EXTERNAL])


def usage_totals(calls: Sequence[tuple[int, int, float | None]],
                 given: Sequence[tuple[int, int, float | None]]) -> dict[str, Any]:
    """:func:`run_totals` from each model call's and each external trace's ``(prompt tokens, completion tokens,
    cost)``."""
    paid = [*calls, *given] if any(p or c or cost is not None for p, c, cost in given) else calls
    costs = [cost for _, _, cost in paid]
    return {"calls": len(calls), "prompt_tokens": sum(p for p, _, _ in paid),
            "completion_tokens": sum(c for _, c, _ in paid),
            "cost": None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))}


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc if isinstance(exc, StoreError) else StoreError(str(exc)))


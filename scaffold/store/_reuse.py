"""Answers that need not be sent again: resuming a recorded run, and the response cache.

Both plug into the executor as a *reuse source*: before a request is sent, the executor
asks each source for the request's traces and sends only if none has them.

- :class:`Replay` (resume). A run id that is already in the store is resumed: each call
  whose traces were recorded as finished (status ``ok``) *with the same request* is
  answered from the record; calls that were in flight, failed or never started are sent.
  The seed is the recorded one, so subsets, prompts and per-call seeds are the same as
  in the first attempt.
- :class:`ResponseCache`. Keyed by model, request (messages or prompt), parameters, node
  and sample index: the ``n`` samples of a node are ``n`` different entries and never
  collapse into one. A hit is recorded as a new trace of the new run, with
  ``metadata["cached_from"]`` naming the original and a cost of 0. Off by default, and
  never used for training, which needs fresh samples.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, select

from scaffold._types import Request, Trace, TraceKind
from scaffold.store import _codec as codec
from scaffold.store._schema import CALLS

if TYPE_CHECKING:
    from scaffold.store._store import Store


class Replay:
    """The finished model traces of a run being resumed, handed out in place of new calls."""

    def __init__(self, traces: Mapping[str, Trace]) -> None:
        self.traces = dict(traces)
        self.reused = 0
        """Traces answered from the record so far."""

    async def take(self, run_id: str, node: str, index: int, request: Request,
                   inputs: tuple[str, ...]) -> list[Trace] | None:
        found = []
        for i in range(request.n):
            trace = self.traces.get(f"{run_id}/{node}#{index + i}")
            if trace is None or trace.request is None or trace.inputs != inputs:
                return None
            found.append(trace)
        key = codec.request_key(request)
        if any(codec.request_key(t.request) != key for t in found if t.request is not None):
            return None  # the graph asks something else now (a changed prompt): send it
        self.reused += len(found)
        return [dataclasses.replace(t, request=request) for t in found]

    async def take_trace(self, trace_id: str, request: Request | None, inputs: tuple[str, ...]) -> Trace | None:
        trace = self.traces.get(trace_id)
        if trace is None or trace.inputs != inputs:
            return None
        if request is not None:
            if trace.request is None or codec.request_key(trace.request) != codec.request_key(request):
                return None
            trace = dataclasses.replace(trace, request=request)
        self.reused += 1
        return trace


_CACHED_CALLS = (
    select(CALLS)
    .where(CALLS.c.request_key == bindparam("key"), CALLS.c.node == bindparam("node"),
           CALLS.c.index.in_(bindparam("indices", expanding=True)), CALLS.c.status == "ok",
           CALLS.c.kind == TraceKind.MODEL.value)
    .order_by(CALLS.c.started_at.desc())
)
"""Built once: a statement built per lookup leaves reference cycles (about ten objects) for the collector."""


class ResponseCache:
    """Looks requests up among the store's finished calls (any run) by request key, node and index."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.hits = 0
        self.misses = 0

    async def take(self, run_id: str, node: str, index: int, request: Request,
                   inputs: tuple[str, ...]) -> list[Trace] | None:
        key = codec.request_key(request)
        indices = list(range(index, index + request.n))
        rows = await asyncio.to_thread(self._lookup, key, node, indices)
        if len(rows) < len(indices):
            self.misses += 1
            return None
        self.hits += 1
        return [
            dataclasses.replace(
                rows[i], id=f"{run_id}/{node}#{i}", run_id=run_id, request=request, inputs=inputs, cost=0.0,
                latency=0.0, metadata={**rows[i].metadata, "cached_from": rows[i].id},
            )
            for i in indices
        ]

    async def take_trace(self, trace_id: str, request: Request | None, inputs: tuple[str, ...]) -> Trace | None:
        """Never: an agent's turns and tool calls are not answered from other runs (a tool's world may have
        changed since)."""
        return None

    def _lookup(self, key: str, node: str, indices: Sequence[int]) -> dict[int, Trace]:
        found: dict[int, Trace] = {}
        with self.store.engine.connect() as conn:
            for row in conn.execute(_CACHED_CALLS, {"key": key, "node": node, "indices": list(indices)}):
                mapping = row._mapping
                if mapping["index"] not in found:
                    found[mapping["index"]] = codec.trace_from_row(mapping, (), None)
        return found

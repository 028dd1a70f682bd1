"""A judged vote (``sf.vote(..., equivalence=sf.judge(...))``): answers clustered by a model's judgments.

Answers the run's kind calls equal share a cluster without a call. Each other answer is compared, in order of
first appearance, with one representative of each cluster, largest cluster first, until the judge says they
are the same (or it starts a cluster of its own). A pair is judged once per run (in either order), and a
resumed run takes recorded judgments back instead of asking again. Each judgment is a model trace
``<run>/<vote>#0.<i>`` reading the two answers' traces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scaffold._call import index_seed, node_seed
from scaffold._errors import EmptyInputError, RunError
from scaffold._judge import verdict
from scaffold._kinds.call import template_values
from scaffold._kinds.registry import expands, members, when_ready
from scaffold._nodes import JudgedVoteNode
from scaffold._types import Request, Trace, TraceKind, record_maker

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext

_new_request = record_maker(Request)


@expands(JudgedVoteNode)
def expand_judged_vote(run: RunContext, node: JudgedVoteNode) -> list[Slot]:
    items = members(run, node, node.items)
    out = run.new_slots(1)
    when_ready(run, node, items, out, fire_judged_vote, items, out[0])
    return out


def fire_judged_vote(run: RunContext, node: JudgedVoteNode, items: list[Slot], out: Slot) -> None:
    read = run.ok(items)
    if not read:
        run.node_failed(node, [out], 0, EmptyInputError(f"every member read by {node.name!r} failed"))
        return
    run.start(_vote(run, node, read, out))


class _Judging:
    """One vote's judge calls: their count, the pairs already judged, the requests' shared parts."""

    def __init__(self, run: RunContext, node: JudgedVoteNode) -> None:
        model = run.model(node.alias or "")
        self.run, self.node = run, node
        self.send = run.sender(node.alias or "")
        self.model_name = model.name
        self.params = {**model.params, **run.call_params, **node.params}
        self.values = template_values(run, node)
        self.seed = node_seed(run.seed, f"{node.name}@judge")
        self.calls = 0
        self.judged: dict[frozenset[str], bool] = {}

    async def same(self, first: Trace, second: Trace) -> bool:
        """Whether the judge says the two traces' answers are the same (asked once per pair of answers)."""
        pair = frozenset((first.answer or "", second.answer or ""))
        known = self.judged.get(pair)
        if known is not None:
            return known
        index = self.calls
        self.calls += 1
        values = {**self.values, "first": first.answer, "second": second.answer}
        request = _new_request(messages=(("user", self.node.prompt.render(values)),), params=self.params, n=1,
                               model=self.model_name, seed=index_seed(self.seed, index))
        trace_id, inputs = f"{self.run.run_id}/{self.node.name}#0.{index}", (first.id, second.id)
        trace = await self._recorded(trace_id, request, inputs)
        if trace is None:
            reply = await self.send(request)
            completion = reply.completions[0]
            decided = verdict(completion.text)
            trace = Trace(
                id=trace_id, run_id=self.run.run_id, node=self.node.name, index=0, kind=TraceKind.MODEL,
                model=self.node.alias, request=request, text=completion.text,
                answer="same" if decided else "different", usage=completion.usage, cost=completion.cost,
                latency=reply.latency, started_at=reply.started, inputs=inputs, attempt=reply.attempts,
                metadata={"judge": True, "answers": [first.answer, second.answer], "verdict": decided},
            )
        self.run.record(trace)
        found = self.judged[pair] = trace.answer == "same"
        return found

    async def _recorded(self, trace_id: str, request: Request, inputs: tuple[str, ...]) -> Trace | None:
        for source in self.run.reuse:
            trace = await source.take_trace(trace_id, request, inputs)
            if trace is not None:
                return trace
        return None


async def _vote(run: RunContext, node: JudgedVoteNode, read: list[Trace], out: Slot) -> None:
    if node.method == "embed":
        await _similar_vote(run, node, read, out)
        return
    try:
        judging = _Judging(run, node)
        key = run.answers.key
        clusters: list[tuple[Trace, list[Trace]]] = []  # (representative, members)
        by_key: dict[str, int] = {}
        for trace in read:
            if trace.answer is None:
                continue
            exact = key(trace.answer) or trace.answer
            where = by_key.get(exact)
            if where is None:
                for i in sorted(range(len(clusters)), key=lambda c: -len(clusters[c][1])):  # largest first
                    if node.max_calls is not None and judging.calls >= node.max_calls:
                        break
                    if await judging.same(clusters[i][0], trace):
                        where = i
                        break
                if where is None:
                    where = len(clusters)
                    clusters.append((trace, []))
                by_key[exact] = where
            clusters[where][1].append(trace)
        run.finish(out, _output(run, node, read, clusters, judging.calls))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a judge call that failed (backend, budget, timeout): the vote's failure
        run.node_failed(node, [out], 0, exc)
    finally:
        run.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]


def _output(run: RunContext, node: JudgedVoteNode, read: list[Trace], clusters: list[tuple[Trace, list[Trace]]],
            calls: int) -> Trace:
    order = sorted(range(len(clusters)), key=lambda i: -len(clusters[i][1]))  # stable: first seen wins ties
    sizes = [len(clusters[i][1]) for i in order]
    counts = [[clusters[i][0].answer, float(size), size] for i, size in zip(order, sizes)]
    metadata: dict[str, Any] = {"counts": counts, "voters": len(read), "judge_calls": calls,
                                "share": sizes[0] / sum(sizes) if sizes else 0.0}
    text, answer = "", None
    if order:
        winner = clusters[order[0]]
        text, answer = winner[1][0].text, winner[0].answer
        metadata["winner"] = winner[1][0].id
    return Trace(id=f"{run.run_id}/{node.name}#0", run_id=run.run_id, node=node.name, index=0, kind=TraceKind.RULE,
                 text=text, answer=answer, inputs=tuple(t.id for t in read), started_at=time.time(), metadata=metadata)


async def _similar_vote(run: RunContext, node: JudgedVoteNode, read: list[Trace], out: Slot) -> None:
    """Cluster by the cosine of the distinct answers' embeddings (one call), greedily, largest cluster first."""
    try:
        backend = run.model(node.alias or "").backend
        embed = getattr(backend, "embed", None)
        if embed is None:
            raise RunError(f"node {node.name!r}: the backend of alias {node.alias!r} ({type(backend).__name__}) gives "
                           f"no embeddings; sf.similar needs one with embed(texts), such as an OpenAI-compatible "
                           f"server's")
        key = run.answers.key
        firsts: dict[str, Trace] = {}
        for trace in read:
            if trace.answer is not None:
                firsts.setdefault(key(trace.answer) or trace.answer, trace)
        distinct = list(firsts.values())
        started, t0 = time.time(), time.perf_counter()
        vectors = [_unit(v) for v in await embed([t.answer or "" for t in distinct])] if distinct else []
        if distinct:
            run.record(Trace(
                id=f"{run.run_id}/{node.name}#0.0", run_id=run.run_id, node=node.name, index=0, kind=TraceKind.MODEL,
                model=node.alias, text=f"{len(distinct)} answers embedded", latency=time.perf_counter() - t0,
                started_at=started, inputs=tuple(t.id for t in distinct),
                metadata={"embeddings": len(vectors), "dimensions": len(vectors[0]) if vectors else 0,
                          "threshold": node.threshold}))
        where: dict[str, int] = {}
        clusters: list[tuple[Trace, list[Trace]]] = []
        heads: list[list[float]] = []
        for trace, vector in zip(distinct, vectors):
            chosen = None
            for i in sorted(range(len(clusters)), key=lambda c: -len(clusters[c][1])):
                if sum(a * b for a, b in zip(heads[i], vector)) >= node.threshold:
                    chosen = i
                    break
            if chosen is None:
                chosen = len(clusters)
                clusters.append((trace, []))
                heads.append(vector)
            where[key(trace.answer or "") or (trace.answer or "")] = chosen
        for trace in read:
            if trace.answer is not None:
                clusters[where[key(trace.answer) or trace.answer]][1].append(trace)
        run.finish(out, _output(run, node, read, clusters, 1 if distinct else 0))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        run.node_failed(node, [out], 0, exc)
    finally:
        run.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]


def _unit(vector: Sequence[float]) -> list[float]:
    norm = sum(x * x for x in vector) ** 0.5 or 1.0
    return [x / norm for x in vector]

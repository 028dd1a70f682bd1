"""The dataflow executor: every trace is a slot, every call starts when its own inputs exist.

A run expands the graph into slots (one per trace) and jobs (one per request or
rule evaluation). A job counts the slots it still waits for; when the last one
resolves, it fires. There are no steps or barriers: in RSA, an aggregation of
step t+1 is sent as soon as the k members it drew from step t are done.

The main loop, :meth:`Run.execute` (aliases were bound and inputs checked by ``Graph.run``):
  1) check the sizes only the inputs decide (candidate sets), before anything is sent,
  2) expand the nodes that read nothing and send their calls,
  3) expand the other nodes one by one, yielding to the event loop in between, firing
     every job whose inputs already exist (subsets are drawn from the run's seed),
  4) wait until every slot is resolved, or the first failure the policies do not tolerate,
  5) cancel and record what was in flight, and assemble the result.

Hot-path notes: records are built with generated slot setters (``record_maker``), prompts
hold plain ``(role, content)`` tuples, and a finished call removes itself from the task
set instead of registering a done-callback: each saves CPU or garbage-collector work per
call, which is what decides how close a 64-problem batch gets to its critical path.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from scaffold._answers import Extractor, extract_boxed
from scaffold._budget import Budget
from scaffold._describe import check_run_sizes
from scaffold._errors import (
    BackendError,
    CallError,
    CallTimeout,
    EmptyInputError,
    GraphError,
    InputError,
    ModelAliasError,
    QuorumError,
    RunError,
    RunTimeout,
)
from scaffold._events import CallStarted, RunFinished, RunStarted, Subscriber, TraceFinished
from scaffold._nodes import (
    CallNode,
    ConcatNode,
    GateNode,
    LoopResultNode,
    MapNode,
    Node,
    Quorum,
    RuleNode,
    RuleOutput,
    SelectNode,
    derive_rng,
    external_trace,
)
from scaffold._result import RunResult
from scaffold._types import Completion, Request, Status, Trace, TraceKind, record_maker
from scaffold.backends._model import Model, Reply, resolve_model

if TYPE_CHECKING:
    import random

    from scaffold._graph import Graph

_new_trace = record_maker(Trace)
_new_request = record_maker(Request)
SKIPPED = Trace(id="", run_id="", node="", index=-1, status=Status.SKIPPED)
_GO = Trace(id="", run_id="", node="", index=-1)
_MISSING = Trace(id="", run_id="", node="", index=-1, status=Status.ERROR, error="fewer members than k succeeded")


class Slot:
    """Placeholder for one trace; resolved exactly once."""

    __slots__ = ("trace", "waiters")

    def __init__(self) -> None:
        self.trace: Trace | None = None
        self.waiters: list[_Job] | None = None


class _Job:
    __slots__ = ("missing", "skipped", "outs", "fire", "propagate")

    def __init__(self, outs: list[Slot], fire: Callable[[], None], propagate: bool) -> None:
        self.missing = 0
        self.skipped = False
        self.outs = outs
        self.fire = fire
        self.propagate = propagate


class ReuseSource(Protocol):
    """Something that may answer a call without sending it (see :mod:`scaffold.store._reuse`)."""

    async def take(
        self, run_id: str, node: str, index: int, request: Request, inputs: tuple[str, ...]
    ) -> list[Trace] | None:
        """The call's traces (ids ``{run_id}/{node}#{index + i}``), or ``None`` to send it."""
        ...


def wrap_error(exc: BaseException, what: str = "") -> RunError:
    """A :class:`RunError` whose message names the original error and whose cause is it."""
    error = RunError(f"{what + ': ' if what else ''}{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def call_seed(run_seed: int, node: str, index: int) -> int:
    """The seed a request gets: a pure function of the run seed, the node name and the index.

    Hashed rather than counted up, so that engines deriving choice ``i``'s seed as ``seed + i``
    (vLLM) never give two requests the same samples.
    """
    return zlib.crc32(f"{run_seed}/{node}#{index}".encode()) & 0x7FFFFFFF


def format_candidates(traces: Sequence[Trace]) -> str:
    """Default rendering of a candidate set inside an aggregation prompt."""
    return "\n\n".join([f"Candidate {i}:\n{t.text}" for i, t in enumerate(traces, 1)])


class Run:
    """One execution of a graph on one input (internal; use ``Graph.run``)."""

    def __init__(
        self,
        graph: Graph,
        inputs: Mapping[str, Any],
        models: Mapping[str, Model],
        *,
        run_id: str,
        seed: int,
        subscribers: Sequence[Subscriber] = (),
        call_timeout: float | None = None,
        extract: Extractor = extract_boxed,
        budget: Budget | None = None,
        reuse: Sequence[ReuseSource] = (),
    ) -> None:
        self.graph = graph
        self.reuse = tuple(reuse)
        self.budget = budget
        self.inputs = inputs
        self.models = models
        self.run_id = run_id
        self.seed = seed
        self.subscribers = tuple(subscribers)
        self.call_timeout = call_timeout
        self.extract = extract
        self.slots: list[list[Slot]] = []
        self.gate_tokens: dict[int, Slot] = {}
        self.traces: list[Trace] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures: dict[int, int] = {}
        self.remaining = 0
        self.error: BaseException | None = None
        self.done: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set when the run starts
        self._ready: list[_Job] | None = []
        self._values: dict[int, dict[str, Any]] = {}
        self._params: dict[int, dict[str, Any]] = {}

    # -- expansion helpers used by nodes ------------------------------------------------
    def new_slots(self, count: int) -> list[Slot]:
        self.remaining += count
        return [Slot() for _ in range(count)]

    def rng(self, node: Node) -> random.Random:
        return derive_rng(self.seed, node.name)

    def model(self, alias: str) -> Model:
        return self.models[alias]

    def control_slots(self, node: Node) -> list[Slot]:
        return [self.gate_tokens[node.control.id]] if node.control is not None else []

    def when_ready(
        self, deps: list[Slot], outs: list[Slot], fire: Callable[[], None], *, propagate_skip: bool = True
    ) -> None:
        """Fire ``fire`` once every slot in ``deps`` is resolved; skip ``outs`` instead if any was skipped
        (unless ``propagate_skip`` is false: the job then decides itself, as a loop's result does)."""
        job = _Job(outs, fire, propagate_skip)
        missing = 0
        for slot in deps:
            trace = slot.trace
            if trace is None:
                missing += 1
                if slot.waiters is None:
                    slot.waiters = [job]
                else:
                    slot.waiters.append(job)
            elif trace.status is Status.SKIPPED and propagate_skip:
                job.skipped = True
        job.missing = missing
        if not missing:
            if self._ready is not None:
                self._ready.append(job)
            else:
                self._fire(job)

    def external_slots(self, node: Node, values: Sequence[Any]) -> list[Slot]:
        outs = self.new_slots(len(values))
        extract = getattr(node, "extract", None) or self.extract
        traces = [external_trace(self.run_id, node.name, i, v, extract) for i, v in enumerate(values)]
        for slot, trace in zip(outs, traces):
            self.finish(slot, trace)
        return outs

    # -- resolution ---------------------------------------------------------------------
    def resolve(self, slot: Slot, trace: Trace) -> None:
        slot.trace = trace
        self.remaining -= 1
        waiters = slot.waiters
        if waiters is not None:
            slot.waiters = None
            skip = trace.status is Status.SKIPPED
            for job in waiters:
                if skip and job.propagate:
                    job.skipped = True
                job.missing -= 1
                if not job.missing:
                    self._fire(job)
        if not self.remaining and self.done is not None and self._ready is None and not self.done.done():
            self.done.set_result(None)

    def finish(self, slot: Slot, trace: Trace) -> None:
        """Record ``trace`` (emit it) and resolve ``slot`` with it."""
        self.traces.append(trace)
        if self.subscribers:
            self.emit(TraceFinished(trace))
        self.resolve(slot, trace)

    def _fire(self, job: _Job) -> None:
        if self.error is not None:
            return
        if job.skipped:
            for slot in job.outs:
                self.resolve(slot, SKIPPED)
            return
        try:
            job.fire()
        except Exception as exc:  # user code (score, map fn, until, render...) raised: a typed error
            self.fail(exc if isinstance(exc, RunError) else wrap_error(exc))

    def _fire_ready(self) -> None:
        ready, self._ready = self._ready or [], []
        for job in ready:
            self._fire(job)

    def emit(self, event: Any) -> None:
        """Call every subscriber; one that raises fails the run (a recorder that cannot record must not
        let the run go on as if it had)."""
        for fn in self.subscribers:
            try:
                fn(event)
            except Exception as exc:
                self.fail(wrap_error(exc, f"subscriber {getattr(fn, '__name__', fn)!r} failed"))

    def fail(self, exc: BaseException) -> None:
        if self.error is not None:
            return
        self.error = exc
        if self.done is not None and not self.done.done():
            self.done.set_result(None)
        for task in list(self.tasks):
            task.cancel()

    # -- model calls ----------------------------------------------------------------------
    def _node_values(self, node: CallNode) -> dict[str, Any]:
        values = self._values.get(node.id)
        if values is None:
            values = {}
            for var, (source, value) in node.variables.items():
                if source == "input":
                    if value not in self.inputs:
                        raise InputError(f"node {node.name!r} needs input {value!r}, which the run was not given")
                    values[var] = self.inputs[value]
                else:
                    values[var] = value
            self._values[node.id] = values
        return values

    def _node_params(self, node: CallNode, model: Model) -> dict[str, Any]:
        params = self._params.get(node.id)
        if params is None:
            params = {**model.params, **node.params}
            self._params[node.id] = params
        return params

    def launch_call(self, node: CallNode, model: Model, members: list[Slot], outs: list[Slot], index: int) -> None:
        read = [t for s in members if (t := s.trace) is not None and t.status is Status.OK]
        if members and not read:
            self.node_failed(node, outs, index, EmptyInputError(f"every member read by {node.name!r} failed"))
            return
        values = self._node_values(node)
        if read or node.context:
            values = dict(values)
            if members:
                values["candidates"] = (node.render or format_candidates)(read)
                values["k"] = len(read)
            for key, ctx in node.context.items():
                ctx_traces = [t for s in self.slots[ctx.id] if (t := s.trace) is not None and t.ok]
                if not ctx_traces:
                    self.node_failed(node, outs, index, EmptyInputError(
                        f"every trace of context {key!r} read by {node.name!r} failed"))
                    return
                values[key] = ctx_traces[0].text if ctx.single else format_candidates(ctx_traces)
                read.extend(ctx_traces)
        user = ("user", node.prompt.render(values))  # plain tuples: see Message
        messages = (("system", node.system.render(values)), user) if node.system is not None else (user,)
        request = _new_request(
            messages=messages,
            params=self._node_params(node, model),
            n=len(outs),
            logprobs=node.logprobs,
            model=model.name,
            seed=call_seed(self.seed, node.name, index),
        )
        self.tasks.add(self.loop.create_task(
            self._call(node, model, request, tuple([t.id for t in read]), outs, index)
        ))

    async def _call(
        self, node: CallNode, model: Model, request: Request, inputs: tuple[str, ...], outs: list[Slot], index: int
    ) -> None:
        started, t0 = time.time(), time.perf_counter()
        try:
            try:
                if self.reuse and await self._reused(node, request, inputs, outs, index):
                    return
                if self.subscribers:
                    ids = tuple(f"{self.run_id}/{node.name}#{index + i}" for i in range(len(outs)))
                    self.emit(CallStarted(self.run_id, ids, node.alias or ""))
                if self.budget is not None:
                    reply = await self._within_budget(node, model, request)
                elif self.call_timeout is None:
                    reply = await model.complete(request)
                else:
                    reply = await self._timed(node, model, request)
                completions = reply.completions
                if len(completions) != request.n:
                    raise BackendError(f"backend returned {len(completions)} completions for n={request.n}")
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and not task.cancelling():  # the backend raised it, nobody cancelled us
                    self.node_failed(node, outs, index, BackendError("the backend raised CancelledError"),
                                     request, inputs, started, time.perf_counter() - t0)
                    return
                latency = time.perf_counter() - t0
                for i in range(len(outs)):
                    trace = self._trace(node, request, inputs, index + i, None, started, latency,
                                        Status.CANCELLED, "cancelled")
                    self.traces.append(trace)
                    if self.subscribers:
                        self.emit(TraceFinished(trace))
                raise
            except Exception as exc:
                self.node_failed(node, outs, index, exc, request, inputs, started, time.perf_counter() - t0)
                return
            started, latency, attempt = reply.started, reply.latency, reply.attempts
            try:  # a malformed completion or an extractor that raises is this call's failure
                traces = [self._trace(node, request, inputs, index + i, completion, started, latency, attempt=attempt)
                          for i, completion in enumerate(completions)]
            except Exception as exc:
                self.node_failed(node, outs, index, exc, request, inputs, started, latency)
                return
            for slot, trace in zip(outs, traces):
                self.finish(slot, trace)
        finally:  # cheaper than a done-callback, which costs one more loop turn per call
            self.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _reused(
        self, node: CallNode, request: Request, inputs: tuple[str, ...], outs: list[Slot], index: int
    ) -> bool:
        """Answer the call from a reuse source (a resumed run's record, the response cache) if one has it."""
        for source in self.reuse:
            traces = await source.take(self.run_id, node.name, index, request, inputs)
            if traces is not None and len(traces) == len(outs):
                for slot, trace in zip(outs, traces):
                    self.finish(slot, trace)
                return True
        return False

    async def _timed(self, node: CallNode, model: Model, request: Request) -> Reply:
        try:
            async with asyncio.timeout(self.call_timeout):
                return await model.complete(request)
        except TimeoutError:
            raise CallTimeout(f"call to {node.alias!r} ran past {self.call_timeout}s") from None

    async def _within_budget(self, node: CallNode, model: Model, request: Request) -> Reply:
        budget = self.budget
        assert budget is not None
        booked = budget.book(request)  # raises BudgetExceeded before anything is sent
        reply = None
        try:
            reply = await (model.complete(request) if self.call_timeout is None else self._timed(node, model, request))
            return reply
        finally:
            budget.settle(booked, reply.completions if reply is not None else None)

    def _trace(
        self, node: CallNode, request: Request, inputs: tuple[str, ...], index: int, completion: Completion | None,
        started: float, latency: float, status: Status = Status.OK, error: str | None = None, attempt: int = 1,
    ) -> Trace:
        if completion is None:
            return Trace(
                id=f"{self.run_id}/{node.name}#{index}", run_id=self.run_id, node=node.name, index=index,
                model=node.alias, request=request, inputs=inputs, latency=latency, started_at=started,
                status=status, error=error,
            )
        text = completion.text
        metadata = completion.metadata
        if completion.finish_reason is not None:
            metadata = {**metadata, "finish_reason": completion.finish_reason}
        return _new_trace(
            id=f"{self.run_id}/{node.name}#{index}", run_id=self.run_id, node=node.name, index=index,
            model=node.alias, request=request, text=text, answer=(node.extract or self.extract)(text),
            token_ids=completion.token_ids, logprobs=completion.logprobs, usage=completion.usage,
            cost=completion.cost, latency=latency, started_at=started, inputs=inputs, attempt=attempt,
            metadata=metadata,
        )

    def node_failed(
        self, node: Node, outs: list[Slot], index: int, exc: BaseException, request: Request | None = None,
        inputs: tuple[str, ...] = (), started: float = 0.0, latency: float = 0.0,
    ) -> None:
        """Record failed traces for ``outs`` and apply the node's failure policy."""
        message = f"{type(exc).__name__}: {exc}"
        if getattr(exc, "attempts", 1) > 1:
            message += f" (after {exc.attempts} attempts)"  # type: ignore[attr-defined]
        traces = [
            Trace(id=f"{self.run_id}/{node.name}#{index + i}", run_id=self.run_id, node=node.name, index=index + i,
                  kind=TraceKind.MODEL if isinstance(node, CallNode) else TraceKind.RULE, model=node.alias,
                  request=request, inputs=inputs, latency=latency, started_at=started,
                  status=Status.ERROR, error=message, attempt=getattr(exc, "attempts", 1))
            for i in range(len(outs))
        ]
        policy = node.on_error
        if policy == "raise":
            for trace in traces:
                self.traces.append(trace)
                if self.subscribers:
                    self.emit(TraceFinished(trace))
            if isinstance(exc, RunError) and not isinstance(exc, (BackendError, CallTimeout)):
                exc_out: BaseException = exc
            else:
                exc_out = CallError(f"{node.name}#{index} failed: {message}", traces[0])
                exc_out.__cause__ = exc
            self.fail(exc_out)
            return
        failed = self.failures[node.id] = self.failures.get(node.id, 0) + len(outs)
        for slot, trace in zip(outs, traces):
            self.finish(slot, trace)
        if isinstance(policy, Quorum):
            total = len(self.slots[node.id])
            if total - failed < policy.k:
                self.fail(QuorumError(
                    f"node {node.name!r}: {total - failed} of {total} succeeded, quorum is {policy.k}"))

    # -- rules and set operations -----------------------------------------------------------
    def _ok(self, members: list[Slot]) -> list[Trace]:
        return [t for s in members if (t := s.trace) is not None and t.status is Status.OK]

    def launch_rule(self, node: RuleNode, members: list[Slot], out: Slot, using: list[list[Slot]]) -> None:
        read = self._ok(members)
        if not read:
            self.node_failed(node, [out], 0, EmptyInputError(f"every member read by {node.name!r} failed"))
            return
        extra = [self._ok(slots) for slots in using]
        assert node.fn is not None
        try:
            result = node.fn(read, *extra, inputs=self.inputs) if node.pass_inputs else node.fn(read, *extra)
        except Exception as exc:  # user code in a rule (scorer, weight): recorded as the rule's failure
            self.node_failed(node, [out], 0, exc)
            return
        seen = read + [t for traces in extra for t in traces]
        if inspect.isawaitable(result):
            self.tasks.add(self.loop.create_task(self._await_rule(node, seen, out, result)))
        else:
            self._rule_done(node, seen, out, result)

    async def _await_rule(self, node: RuleNode, read: list[Trace], out: Slot, pending: Any) -> None:
        try:
            result = await pending
        except Exception as exc:
            self.node_failed(node, [out], 0, exc)
            return
        finally:
            self.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]
        self._rule_done(node, read, out, result)

    def _rule_done(self, node: RuleNode, read: list[Trace], out: Slot, result: RuleOutput | str) -> None:
        if isinstance(result, str):
            result = RuleOutput(result, self.extract(result))
        elif not isinstance(result, RuleOutput):
            self.node_failed(node, [out], 0, RunError(
                f"rule {node.name!r} returned {type(result).__name__}; return a RuleOutput or a string"))
            return
        trace = Trace(
            id=f"{self.run_id}/{node.name}#0", run_id=self.run_id, node=node.name, index=0, kind=TraceKind.RULE,
            text=result.text, answer=result.answer, inputs=tuple(t.id for t in read), started_at=time.time(),
            metadata=result.metadata,
        )
        self.finish(out, trace)

    def launch_map(self, node: MapNode, member: Slot, out: Slot, index: int) -> None:
        source = member.trace
        assert source is not None and node.fn is not None
        if not source.ok:
            self.resolve(out, source)
            return
        value = node.fn(source)
        if isinstance(value, RuleOutput):
            text, answer, metadata = value.text, value.answer, value.metadata
        elif isinstance(value, str):
            text, answer, metadata = value, (node.extract or self.extract)(value), {}
        else:
            raise RunError(f"map_traces {node.name!r}: the function returned {type(value).__name__}, not a string")
        self.finish(out, Trace(
            id=f"{self.run_id}/{node.name}#{index}", run_id=self.run_id, node=node.name, index=index,
            kind=TraceKind.RULE, text=text, answer=answer, inputs=(source.id,), started_at=time.time(),
            metadata=metadata,
        ))

    def launch_select(self, node: SelectNode, members: list[Slot], outs: list[Slot], using: list[list[Slot]]) -> None:
        read = self._ok(members)
        if node.choose is not None:
            try:
                chosen = list(node.choose(read, *[self._ok(slots) for slots in using]))
            except Exception as exc:  # user code: the selection fails under the node's policy
                self.node_failed(node, outs, 0, exc)
                return
            allowed = {id(t) for t in read}
            if any(id(t) not in allowed for t in chosen) or len({id(t) for t in chosen}) != len(chosen):
                self.node_failed(node, outs, 0, RunError(
                    f"select {node.name!r}: the function must return distinct members of the set it chooses from"))
                return
            ranked = chosen[: node.k]
        else:
            assert node.score is not None
            ranked = sorted(read, key=node.score, reverse=True)[: node.k]
        for i, slot in enumerate(outs):
            self.resolve(slot, ranked[i] if i < len(ranked) else _MISSING)

    def launch_gate(self, node: GateNode, members: list[Slot], outs: list[Slot], token: Slot) -> None:
        assert node.until is not None
        stop = bool(node.until(self._ok(members)))
        for member, slot in zip(members, outs):
            self.resolve(slot, SKIPPED if stop else member.trace)  # type: ignore[arg-type]
        self.resolve(token, SKIPPED if stop else _GO)

    def launch_loop_result(
        self, node: LoopResultNode, sets: list[list[Slot]], outs: list[Slot], control: list[Slot]
    ) -> None:
        if any(s.trace is SKIPPED for s in control):  # an enclosing loop stopped before this one ran
            for slot in outs:
                self.resolve(slot, SKIPPED)
            return
        chosen = sets[0]
        for slots in sets:
            if slots and all(s.trace is not None and s.trace.status is not Status.SKIPPED for s in slots):
                chosen = slots
        if len(chosen) != len(outs):
            raise RunError(f"loop {node.name!r}: an iteration returned {len(chosen)} traces, its input had {len(outs)}")
        for slot, src in zip(outs, chosen):
            self.resolve(slot, src.trace)  # type: ignore[arg-type]

    def _passed_sets(self) -> dict[str, list[str]]:
        """The members of every set that passes traces through (top_k, select, concat, loop results), by id."""
        return {node.name: _member_ids(self.slots[node.id]) for node in self.graph.nodes
                if isinstance(node, (SelectNode, ConcatNode, LoopResultNode)) and node.id < len(self.slots)}

    async def _expand_and_wait(self) -> None:
        assert self.done is not None
        nodes = self.graph.nodes
        # 2) expand the nodes that read nothing and send their calls at once
        sources = [n for n in nodes if not n.reads and n.control is None]
        for node in sources:
            self.slots[node.id] = node.expand(self)
        self._fire_ready()
        await asyncio.sleep(0)  # let every concurrent run send its first requests before anyone expands more
        # 3) expand the other nodes one at a time, yielding in between: with many concurrent runs the
        #    expansion (subset draws, jobs) overlaps the first calls' latency instead of delaying them
        for node in nodes:
            if node in sources:
                continue
            await asyncio.sleep(0)
            if self.error is not None:
                break
            try:
                self.slots[node.id] = node.expand(self)
            except Exception as exc:  # e.g. a custom selector misbehaving at run time
                self.fail(exc if isinstance(exc, (RunError, GraphError)) else wrap_error(exc))
                break
            self._fire_ready()
        self._ready = None
        if not self.remaining and not self.done.done():
            self.done.set_result(None)
        # 4) wait for every slot, or the first failure that the policies do not tolerate
        await self.done

    # -- the main loop ----------------------------------------------------------------------------
    async def execute(self, timeout: float | None = None) -> RunResult:
        started = time.time()
        # 1) check sizes that only the inputs decide (candidate sets), before anything is sent
        if self.graph.set_inputs:
            check_run_sizes(self.graph, self.inputs)
        if self.subscribers:
            self.emit(RunStarted(self.run_id, self.graph.name, dict(self.inputs), self.seed,
                                 dict(self.graph.params), self.graph.spec()))
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()
        self.slots = [[] for _ in self.graph.nodes]
        status = "ok"
        try:
            if timeout is None:
                await self._expand_and_wait()
            else:
                async with asyncio.timeout(timeout):
                    await self._expand_and_wait()
        except TimeoutError:
            status = "timeout"
            self.fail(RunTimeout(f"run {self.run_id} ran past {timeout}s"))
        except asyncio.CancelledError:
            status = "cancelled"
            self.fail(RunError(f"run {self.run_id} was cancelled"))
        # 5) cancel and record what is still in flight
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        if self.error is not None and status == "ok":
            status = "error"
        result = RunResult(
            run_id=self.run_id, graph=self.graph.name, inputs=self.inputs, seed=self.seed, status=status,
            output=self.graph.collect(self.slots) if self.error is None else None, traces=self.traces,
            error=self.error, started_at=started, finished_at=time.time(), passed=self._passed_sets(),
        )
        if self.subscribers:
            self.emit(RunFinished(result))
            if result.error is None and self.error is not None:  # a subscriber failed on RunFinished
                result.status, result.error = "error", self.error
        if status == "cancelled":
            raise asyncio.CancelledError
        return result


def _member_ids(slots: list[Slot]) -> list[str]:
    return [t.id for s in slots if (t := s.trace) is not None and t.status is Status.OK and t.id]


def bind_models(graph: Graph, models: Mapping[str, Any] | None) -> dict[str, Model]:
    """Check that every alias the graph uses is bound, and wrap bindings as :class:`Model`."""
    models = dict(models or {})
    missing = sorted(graph.aliases - models.keys())
    if missing:
        known = ", ".join(sorted(models)) or "none"
        raise ModelAliasError(
            f"graph {graph.name!r} uses model alias(es) {', '.join(map(repr, missing))} that the run does not bind; "
            f"bound aliases: {known}"
        )
    return {alias: resolve_model(spec, alias) for alias, spec in models.items()}


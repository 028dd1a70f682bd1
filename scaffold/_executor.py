"""The dataflow executor: every trace is a slot, every call starts when its own inputs exist.

A run expands the graph into slots (one per trace) and jobs (one per request or rule
evaluation). A job counts the slots it still waits for; when the last one resolves, it fires.
There are no steps or barriers: in RSA, an aggregation of step t+1 is sent as soon as the k
members it drew from step t are done.

This module is the scheduler only: failure policies and the main loop (slots and jobs are
:mod:`scaffold._jobs`). How each node kind expands and what its jobs do is in
:mod:`scaffold._kinds` (one module per kind); how a model call is sent and recorded is
:mod:`scaffold._call`.

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
Nothing a run builds refers back to it (a job is given the run when it starts), and a finished
run drops its error and the jobs still waiting, so reference counting frees every run,
failed ones included: Python's cyclic collector, which pauses every run in the process,
finds nothing to collect (``tests/test_executor_memory.py``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._answers import Extractor
from scaffold._budget import Budget
from scaffold._call import DeltaSink, ReuseSource, Send, sender, streamed
from scaffold._context import RUN_ID
from scaffold._errors import (
    ArgumentError,
    BackendError,
    CallError,
    CallTimeout,
    GraphError,
    ModelAliasError,
    QuorumError,
    RunError,
    RunTimeout,
)
from scaffold._events import RunFinished, RunStarted, Subscriber, TraceFinished, wanted_by
from scaffold._jobs import FunctionJob, Job, Slot
from scaffold._kinds import expander
from scaffold._nodes import AgentNode, Node, Quorum
from scaffold._result import RunResult
from scaffold._sizes import check_run_sizes
from scaffold._types import Request, Status, Trace, TraceKind
from scaffold.answers import AnswerKind
from scaffold.answers import answer_kind as answer_kind_of
from scaffold.backends._base import provider_of
from scaffold.backends._model import Model, resolve_model

if TYPE_CHECKING:
    from scaffold._graph import Graph

__all__ = ["ReuseSource", "Run", "Slot", "bind_models", "wrap_error"]

SKIPPED = Trace(id="", run_id="", node="", index=-1, status=Status.SKIPPED)
_DEFAULT_CREATE_TASK = asyncio.BaseEventLoop.create_task


def wrap_error(exc: BaseException, what: str = "") -> RunError:
    """A :class:`RunError` whose message names the original error and whose cause is it."""
    error = RunError(f"{what + ': ' if what else ''}{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def derive_rng(seed: int, node: str) -> random.Random:
    """The random source of one node's subset draws: a pure function of the run seed and the node name."""
    return random.Random(f"{seed}:{node}")


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
        extract: Extractor | None = None,
        answer_kind: AnswerKind | str | None = None,
        budget: Budget | None = None,
        reuse: Sequence[ReuseSource] = (),
        on_delta: DeltaSink | None = None,
        stream_nodes: frozenset[str] = frozenset(),
        call_params: Mapping[str, Any] | None = None,
        store: Any = None,
        client_tools: Sequence[Mapping[str, Any]] = (),
        continuation: Sequence[Sequence[Any]] = (),
    ) -> None:
        self.call_params = dict(call_params or {})
        self.store = store
        self.client_tools = tuple(client_tools)
        self.continuation = tuple(tuple(m) for m in continuation)
        output = graph.output
        self.client_node: Node | None = output if isinstance(output, AgentNode) else None
        self.graph = graph
        self.on_delta = on_delta
        self.stream_nodes = stream_nodes if on_delta is not None else frozenset()
        self.reuse = tuple(reuse)
        self.budget = budget
        self.inputs = inputs
        self.models = models
        self.run_id = run_id
        self.seed = seed
        self.subscribers = tuple(subscribers)
        self.listeners = wanted_by(self.subscribers)
        """Each event class and the subscribers that want it (an event nobody wants is not built)."""
        self.call_timeout = call_timeout
        self.answers: AnswerKind = answer_kind_of(answer_kind).bind(inputs)
        """The run's answer kind, bound to its inputs (a multiple-choice kind has the row's options)."""
        self.extract: Extractor = extract if extract is not None else self.answers.extract
        self._node_answers: dict[int, AnswerKind] = {}
        self.slots: list[list[Slot]] = []
        self.gate_tokens: dict[int, Slot] = {}
        self.traces: list[Trace] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures: dict[int, int] = {}
        self.remaining = 0
        self.error: BaseException | None = None
        self.done: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set when the run starts
        self.memo: dict[int, Any] = {}
        """Per-node values a kind computes once per run (a call node's template variables and seed part)."""
        self._senders: dict[str, Send] = {}
        self._ready: list[Job] | None = []
        self._plain_tasks = False

    skipped = SKIPPED
    """The value of a slot whose node did not run (its loop stopped, or a member it reads was skipped)."""

    # -- what node kinds use while they expand and fire ------------------------------------
    def answers_for(self, node: Node) -> AnswerKind:
        """The answer kind of ``node``'s traces: its own (``extract=`` a kind), bound to the run's inputs, else the
        run's."""
        own = getattr(node, "extract", None)
        if not isinstance(own, AnswerKind):
            return self.answers
        bound = self._node_answers.get(node.id)
        if bound is None:
            bound = self._node_answers[node.id] = own.bind(self.inputs)
        return bound

    def extractor(self, node: Node) -> Extractor:
        """How ``node``'s answers are read: its own extractor or kind, else the run's."""
        own = getattr(node, "extract", None)
        if own is None:
            return self.extract
        return self.answers_for(node).extract if isinstance(own, AnswerKind) else own

    def new_slots(self, count: int) -> list[Slot]:
        self.remaining += count
        return [Slot() for _ in range(count)]

    def rng(self, node: Node) -> random.Random:
        return derive_rng(self.seed, node.name)

    def model(self, alias: str) -> Model:
        return self.models[alias]

    def sender(self, alias: str) -> Send:
        """The path a call to ``alias`` takes: the model inside this run's layers (see :mod:`scaffold._call`)."""
        send = self._senders.get(alias)
        if send is None:
            send = self._senders[alias] = sender(self.models[alias], alias, call_timeout=self.call_timeout,
                                                 budget=self.budget)
        return send

    def streams(self, node: Node) -> bool:
        """Whether ``node``'s calls are streamed to ``on_delta``."""
        return node.name in self.stream_nodes

    def stream_sender(self, alias: str, node: Node, index: int) -> Send:
        """The path of one streamed call (choices ``index ..`` of ``node``): :meth:`Model.stream` inside the
        run's layers, its deltas handed to ``on_delta`` with their trace ids."""
        assert self.on_delta is not None
        base = streamed(self.models[alias], self.on_delta, f"{self.run_id}/{node.name}", index)
        return sender(self.models[alias], alias, call_timeout=self.call_timeout, budget=self.budget, base=base)

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as one of this run's tasks (it removes itself from ``tasks`` when it ends)."""
        if self._plain_tasks:  # what loop.create_task does without a task factory, minus a Python call
            self.tasks.add(asyncio.Task(work, loop=self.loop))
        else:
            self.tasks.add(self.loop.create_task(work))

    def ok(self, slots: list[Slot]) -> list[Trace]:
        """The successful traces of ``slots``."""
        return ok_traces(slots)

    def control_slots(self, node: Node) -> list[Slot]:
        return [self.gate_tokens[node.control.id]] if node.control is not None else []

    def when_ready(
        self, node: Node, deps: Sequence[Slot], outs: list[Slot], fire: Callable[..., None],
        args: tuple[Any, ...] = (), *, propagate_skip: bool = True,
    ) -> None:
        """Call ``fire(run, node, *args)`` once every slot in ``deps`` (and the node's loop gate, if any) is
        resolved; skip ``outs`` instead if any was skipped (unless ``propagate_skip`` is false: the job then
        decides itself, as a loop's result does)."""
        self.schedule(FunctionJob(node, outs, fire, args, propagate_skip), deps)

    def schedule(self, job: Job, deps: Sequence[Slot]) -> None:
        """Start ``job`` once every slot in ``deps`` (and its node's loop gate, if any) is resolved."""
        missing = _wait_on(job, deps)
        control = job.node.control
        if control is not None:
            missing += _wait_on(job, (self.gate_tokens[control.id],))
        job.missing = missing
        if not missing:
            if self._ready is not None:
                self._ready.append(job)
            else:
                self._fire(job)

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
        if self.listeners[TraceFinished]:
            self.emit(TraceFinished(trace))
        self.resolve(slot, trace)

    def record(self, trace: Trace) -> None:
        """Record ``trace`` (emit it) without resolving anything: a call cancelled in flight."""
        self.traces.append(trace)
        if self.listeners[TraceFinished]:
            self.emit(TraceFinished(trace))

    def _fire(self, job: Job) -> None:
        if self.error is not None:
            return
        if job.skipped:
            for slot in job.outputs():
                self.resolve(slot, SKIPPED)
            return
        try:
            job.start(self)
        except Exception as exc:  # user code (score, map fn, until, render...) raised: a typed error
            self.fail(exc if isinstance(exc, RunError) else wrap_error(exc))

    def _fire_ready(self) -> None:
        ready, self._ready = self._ready or [], []
        for job in ready:
            self._fire(job)

    def emit(self, event: Any) -> None:
        """Call every subscriber that wants ``event``; one that raises fails the run (a recorder that cannot
        record must not let the run go on as if it had)."""
        for fn in self.listeners[type(event)]:
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
                  kind=TraceKind.MODEL if node.alias is not None else TraceKind.RULE, model=node.alias,
                  request=request, inputs=inputs, latency=latency, started_at=started,
                  status=Status.ERROR, error=message, attempt=getattr(exc, "attempts", 1))
            for i in range(len(outs))
        ]
        policy = node.on_error
        if policy == "raise":
            for trace in traces:
                self.record(trace)
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

    def _passed_sets(self) -> dict[str, list[str]]:
        """The members of every set that passes traces through (top_k, select, concat, loop results), by id."""
        return {node.name: _member_ids(self.slots[node.id]) for node in self.graph.nodes
                if node.passes_through and node.id < len(self.slots)}

    async def _expand_and_wait(self) -> None:
        assert self.done is not None
        nodes = self.graph.nodes
        # 2) expand the nodes that read nothing and send their calls at once
        sources = [n for n in nodes if not n.reads and n.control is None]
        for node in sources:
            self.slots[node.id] = expander(node)(self, node)
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
                self.slots[node.id] = expander(node)(self, node)
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
        token = RUN_ID.set(self.run_id)
        try:
            return await self._execute(timeout)
        finally:
            RUN_ID.reset(token)

    async def _execute(self, timeout: float | None) -> RunResult:
        started = time.time()
        # 1) check sizes that only the inputs decide (candidate sets), before anything is sent
        if self.graph.set_inputs:
            check_run_sizes(self.graph, self.inputs)
        if self.listeners[RunStarted]:
            self.emit(RunStarted(self.run_id, self.graph.name, dict(self.inputs), self.seed,
                                 dict(self.graph.params), self.graph.recorded_spec,
                                 {alias: {"model": model.name, "backend": type(model.backend).__name__,
                                          "provider": provider_of(model.backend)}
                                  for alias, model in self.models.items()}))
        self.loop = asyncio.get_running_loop()
        self._plain_tasks = self.loop.get_task_factory() is None and type(self.loop).create_task is _DEFAULT_CREATE_TASK
        self.done = self.loop.create_future()
        self.slots = [[] for _ in self.graph.nodes]
        status = "ok"
        try:
            if self.error is not None:  # a subscriber refused the run's start (a store that cannot record)
                pass
            elif timeout is None:
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
        if self.listeners[RunFinished]:
            self.emit(RunFinished(result))
            if result.error is None and self.error is not None:  # a subscriber failed on RunFinished
                result.status, result.error = "error", self.error
        self._unlink()
        if status == "cancelled":
            raise asyncio.CancelledError
        return result

    def _unlink(self) -> None:
        """Break what would make a finished run a reference cycle, so reference counting frees it: jobs
        still waiting on unresolved slots (they hold the sets they read), tasks cancelled before they
        started (their error's traceback holds this run), and the error (the same)."""
        if self.remaining:
            for slots in self.slots:
                for slot in slots:
                    slot.waiters = None
        self.tasks.clear()
        self.error = None


def _wait_on(job: Job, deps: Sequence[Slot]) -> int:
    """Register ``job`` with every unresolved slot of ``deps``; how many there were."""
    missing = 0
    for slot in deps:
        trace = slot.trace
        if trace is None:
            missing += 1
            if slot.waiters is None:
                slot.waiters = [job]
            else:
                slot.waiters.append(job)
        elif trace.status is Status.SKIPPED and job.propagate:
            job.skipped = True
    return missing


def ok_traces(slots: Sequence[Slot]) -> list[Trace]:
    """The successful traces of ``slots``."""
    # no walrus in these comprehensions: it would make a cell in the caller's frame on every call
    return [s.trace for s in slots if s.trace is not None and s.trace.status is Status.OK]


def _member_ids(slots: list[Slot]) -> list[str]:
    return [t.id for t in ok_traces(slots) if t.id]


def bind_models(graph: Graph, models: Mapping[str, Any] | None) -> dict[str, Model]:
    """Check that every alias the graph uses is bound, and wrap bindings as :class:`Model`."""
    if models is not None and not isinstance(models, Mapping):
        aliases = sorted(graph.aliases) or ["solver"]
        raise ArgumentError(f"models= maps each model alias to a backend, a Model or a spec string, e.g. "
                            f"models={{{', '.join(repr(a) + ': backend' for a in aliases)}}}; got "
                            f"{type(models).__name__}")
    models = dict(models or {})
    bad = sorted(alias for alias in models if not isinstance(alias, str))
    if bad:
        raise ArgumentError(f"models= is keyed by alias strings ({', '.join(map(repr, sorted(graph.aliases)))}), "
                            f"got {bad[0]!r}")
    missing = sorted(graph.aliases - models.keys())
    if missing:
        known = ", ".join(sorted(models)) or "none"
        raise ModelAliasError(
            f"graph {graph.name!r} uses model alias(es) {', '.join(map(repr, missing))} that the run does not bind; "
            f"bound aliases: {known}"
        )
    return {alias: resolve_model(spec, alias) for alias, spec in models.items()}


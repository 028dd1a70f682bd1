"""``@graph``: a plain Python function that builds a graph, then runs it.

Positional parameters of the function are the run's inputs (template variables
such as ``{problem}``, or candidate sets supplied at run time); keyword-only
parameters are build parameters (``n``, ``k``, ``steps``). Building runs the
function once with symbols for the inputs and validates everything before any
model call. Calling a graph inside another graph inlines it as a sub-graph.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, overload

from scaffold._answers import Extractor
from scaffold._budget import Budget
from scaffold._builder import Builder, Input, building, current_builder, in_build
from scaffold._call import DeltaSink
from scaffold._describe import count_calls, describe, mermaid, spec
from scaffold._errors import ArgumentError, GraphDefinitionError, InputError, RunError
from scaffold._events import Subscriber
from scaffold._executor import ReuseSource, Run, Slot, bind_models
from scaffold._graph_map import LOCAL
from scaffold._nodes import CallNode, InputNode, Node
from scaffold._result import RunResult
from scaffold._runner import MapRequest, Runner
from scaffold._sizes import check_run_sizes
from scaffold._sync import no_running_loop, run_released
from scaffold._tools import Tool
from scaffold._types import Status
from scaffold._values import check_seed, check_value, has_lone_surrogate
from scaffold.answers import AnswerKind
from scaffold.store._default import DEFAULT, resolve_store


def _signature(fn: Callable[..., Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    inputs: list[str] = []
    defaults: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            inputs.append(p.name)
        elif p.kind is p.KEYWORD_ONLY:
            defaults[p.name] = p.default
        else:
            raise GraphDefinitionError(f"graph function {fn.__name__!r} may not take *args or **kwargs")
    return tuple(inputs), defaults


def _check_params(name: str, defaults: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise GraphDefinitionError(
            f"graph {name!r} has no parameter(s) {', '.join(unknown)}; its parameters are: "
            f"{', '.join(defaults) or 'none'}"
        )
    merged = {**defaults, **params}
    missing = [k for k, v in merged.items() if v is inspect.Parameter.empty]
    if missing:
        raise GraphDefinitionError(f"graph {name!r} needs parameter(s) {', '.join(missing)}")
    return merged


class Graph:
    """A built, validated graph: run it, map it over a dataset, describe it.

    Examples:
        >>> import scaffold as sf
        >>> from scaffold.testing import ScriptedBackend
        >>> @sf.graph
        ... def majority(problem, *, n: int = 3):
        ...     return sf.vote(sf.sample("Solve: {problem}", model="solver", n=n))
        >>> g = majority.build(n=5)
        >>> g.run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(lambda r: r"\\boxed{4}")}).answer
        '4'
    """

    def __init__(self, fn: Callable[..., Any], name: str, params: Mapping[str, Any]) -> None:
        self.fn = fn
        self.name = name
        self.inputs, defaults = _signature(fn)
        self.build_parameters: tuple[str, ...] = tuple(defaults)
        """The graph function's keyword-only parameters (given to ``build``)."""
        self.params = _check_params(name, defaults, params)
        builder = Builder(input_names=self.inputs)
        with building(builder):
            self.output = fn(*[Input(i) for i in self.inputs], **self.params)
        self.nodes: tuple[Node, ...] = tuple(builder.nodes)
        if not _contains_node(self.output):
            raise GraphDefinitionError(f"graph {name!r} must return a node (or a dict/list of nodes)")
        self.aliases = frozenset(n.alias for n in self.nodes if n.alias)
        self.set_inputs = frozenset(n.input_name for n in self.nodes if isinstance(n, InputNode))

    # -- inspection -----------------------------------------------------------------------
    def describe(self) -> str:
        """A table of nodes with their model, size and inputs, and the call count per alias."""
        return describe(self)

    def mermaid(self) -> str:
        """A Mermaid flowchart of the graph."""
        return mermaid(self)

    def spec(self) -> dict[str, Any]:
        """The structure as JSON-friendly data."""
        return spec(self)

    @functools.cached_property
    def recorded_spec(self) -> dict[str, Any]:
        """:meth:`spec`, computed once (a built graph does not change): what every run's ``RunStarted`` carries.
        Read it, never change it."""
        return self.spec()

    def count_calls(self, input_sizes: Mapping[str, int] | None = None) -> dict[str, int]:
        """Dry run: model calls per alias (loops with ``until``: at most). No backend is touched."""
        return count_calls(self, input_sizes)

    def as_tool(self, **options: Any) -> Tool:
        """This graph as a tool an agent may call (see :mod:`scaffold._graph_tool`): its inputs are the tool's
        parameters, its output's text the answer. Options: ``name``, ``description``, ``timeout``,
        ``max_in_flight``, ``max_result_chars``, and ``models`` (default: the calling agent's)."""
        from scaffold._graph_tool import GraphTool

        return GraphTool(self, **options)

    def validate(self, models: Mapping[str, Any] | None = None, inputs: Mapping[str, Any] | None = None) -> None:
        """Check that every alias is bound and (if given) that the inputs fit, without calling anything."""
        bind_models(self, models)
        if inputs is not None:
            self._check_inputs(inputs)
            if self.set_inputs:
                check_run_sizes(self, inputs)

    def _check_inputs(self, inputs: Mapping[str, Any]) -> None:
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must be a mapping of input name to value, got {type(inputs).__name__}")
        missing = [i for i in self.inputs if i not in inputs]
        if missing:
            raise InputError(f"graph {self.name!r} needs input(s) {', '.join(map(repr, missing))}; "
                             f"got {', '.join(map(repr, inputs)) or 'none'}")

    @property
    def streamed_node(self) -> str | None:
        """The node whose tokens ``run(on_delta=...)`` streams by default: the output node when it is one model
        call (a rule's output, such as a vote, is known only once it decides)."""
        output = self.output
        return output.name if isinstance(output, CallNode) and output.single else None

    def _stream_nodes(self, names: Iterable[str] | None) -> frozenset[str]:
        if names is None:
            default = self.streamed_node
            return frozenset(() if default is None else (default,))
        chosen = frozenset(names)
        known = {n.name for n in self.nodes if isinstance(n, CallNode)}
        unknown = sorted(chosen - known)
        if unknown:
            raise GraphDefinitionError(f"graph {self.name!r} has no model-call node(s) {', '.join(unknown)} to "
                                       f"stream; its model calls: {', '.join(sorted(known)) or 'none'}")
        return chosen

    def collect(self, slots: list[list[Slot]]) -> Any:
        return _collect(self.output, slots)

    # -- running ----------------------------------------------------------------------------
    async def run(
        self,
        inputs: Mapping[str, Any],
        *,
        models: Mapping[str, Any],
        seed: int | None = None,
        run_id: str | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        subscribers: Sequence[Subscriber] = (),
        extract: Extractor | None = None,
        answer_kind: AnswerKind | str | None = None,
        raise_on_error: bool = True,
        budget: Budget | None = None,
        store: Any = DEFAULT,
        cache: bool = False,
        dataset: str | None = None,
        item: int | None = None,
        on_delta: DeltaSink | None = None,
        stream_nodes: Iterable[str] | None = None,
        call_params: Mapping[str, Any] | None = None,
        resume: bool = True,
        client_tools: Sequence[Mapping[str, Any]] = (),
        continuation: Sequence[Sequence[Any]] = (),
        **unexpected: Any,
    ) -> RunResult:
        """Run the graph once on ``inputs``, recording every call in a store.

        ``models`` binds every alias to a backend or a :class:`~scaffold.Model` (share one
        ``Model`` between runs to share its in-flight limit). ``seed`` fixes every random
        choice (recorded in the result; drawn at random when ``None``). ``timeout`` bounds the
        whole run, ``call_timeout`` each call. ``budget`` (:class:`~scaffold.Budget`) caps the
        tokens or dollars spent: a call that could pass it is refused with ``BudgetExceeded``
        before it is sent. Failures raise :class:`~scaffold._errors.RunError` subclasses after
        every in-flight call was cancelled and recorded, unless ``raise_on_error=False``, which
        returns the failed result instead.

        ``store`` is a :class:`~scaffold.Store`, a URL or path, or ``None`` to record nothing; by
        default ``$SCAFFOLD_STORE``, else ``./scaffold.db``. The run returns once it is written.
        A ``run_id`` already in the store **resumes** that run: calls recorded as finished are
        not sent again (same seed, same subsets, same result); the graph and inputs must be the
        same. ``cache=True`` answers a request from any earlier run's identical request (same
        model, prompt, parameters, node and sample index). ``dataset`` and ``item`` record the
        run as row ``item`` of a named dataset (``map`` sets them).

        ``on_delta(trace_id, delta)`` receives the text of streamed calls as it is generated (a
        :class:`~scaffold.Delta` per piece; the trace with that id is recorded when the call ends):
        the calls of ``stream_nodes`` (node names), by default of the output node when it is a model
        call (:attr:`streamed_node`). A backend that does not stream gives one delta per choice.
        ``call_params`` (``temperature``, ``max_tokens``...) go with every model call of this run, over
        the models' defaults; parameters a node sets itself still win.
        ``answer_kind`` (:mod:`scaffold.answers`: ``"math"``, the default, ``"integer"``, ``"choice"``,
        ``"text"``, ``"json"``, or a kind object) reads every answer of the run (unless a node has its own
        ``extract``), fills prompts' ``{answer_format}`` and is what votes cluster by; a multiple-choice kind
        takes the row's options from a ``choices`` input. ``extract`` (a function of the text) overrides its
        extractor alone. ``resume=False`` skips looking
        ``run_id`` up in the store (for ids known to be new: a server's, which saves a store query per run).

        When the graph's output is an agent (``sf.agent``), ``client_tools`` (OpenAI function specs) are offered to it
        beside its own tools, but run by the caller: a turn that calls one ends the run, its output the turn with
        ``metadata["client_tool_calls"]`` (ids from :func:`~scaffold._agent.client_call_id`). The caller runs them
        and runs again with the same ``run_id`` and ``continuation``: the agent's turns after the question (the
        assistant messages that called tools, then the ``tool`` messages answering them), as message tuples. Recorded
        calls are reused (the whole graph before the agent, with a store), and the agent goes on from the answers.
        """
        if unexpected:
            raise self._unexpected(unexpected, "run")
        if budget is not None and not (callable(getattr(budget, "book", None))
                                       and callable(getattr(budget, "settle", None))):
            raise ArgumentError(f"budget= takes a scaffold.Budget, e.g. sf.Budget(max_tokens=100_000) or "
                                f"sf.Budget(max_cost=5.0); got {type(budget).__name__}")
        self._check_inputs(inputs)
        _check_run_values(inputs, seed, run_id, dataset)
        streaming = self._stream_nodes(stream_nodes) if on_delta is not None else frozenset()
        bound = bind_models(self, models)
        recorder, reuse = None, list[ReuseSource]()
        target = resolve_store(store)
        if target is not None:
            failing = getattr(target, "write_error", None)
            if failing is not None:  # the database cannot be written: refuse before paying for any call
                raise failing
            if run_id is not None and resume:
                prior = await asyncio.to_thread(target.replay_for, run_id, self.name, self.spec(), inputs, seed)
                if prior is not None:
                    reuse.append(prior[0])
                    seed = prior[1]
            if cache:
                reuse.append(target.cache())
            recorder = target.recorder(bound, dataset=dataset, item=item)
            subscribers = (*subscribers, recorder)
        elif cache:
            raise RunError("cache=True needs a store to look answers up in; store=None turns recording off")
        run = Run(
            self, inputs, bound,
            run_id=run_id or uuid.uuid4().hex[:16],
            seed=random.SystemRandom().randrange(2**31) if seed is None else int(seed),
            subscribers=subscribers, call_timeout=call_timeout, extract=extract, answer_kind=answer_kind,
            budget=budget, reuse=reuse,
            on_delta=on_delta, stream_nodes=streaming, call_params=call_params, store=target,
            client_tools=client_tools, continuation=continuation,
        )
        started = time.monotonic()
        result = await run.execute(timeout)
        if recorder is not None:  # within the run's timeout (and at least a second more): a stuck store must
            # not hold the caller forever
            await recorder.wait(None if timeout is None else max(timeout - (time.monotonic() - started), 1.0))
        if result.error is not None and raise_on_error:
            error = result.error
            del result  # the traceback keeps this frame: a local leading back to the error would be a cycle
            try:
                raise error
            finally:
                del error
        return result

    def run_sync(self, inputs: Mapping[str, Any], **kwargs: Any) -> RunResult:
        """:meth:`run` from synchronous code (not from inside a running event loop).

        It runs on a fresh event loop and, before closing it, lets every bound backend
        release what it holds on that loop (HTTP connections, queues).
        """
        no_running_loop("run_sync", "await graph.run(...)")
        kwargs["models"] = bind_models(self, kwargs.get("models"))
        return run_released(self.run(inputs, **kwargs), kwargs["models"])

    def map(
        self,
        rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
        *,
        models: Mapping[str, Any],
        concurrency: int = 16,
        seed: int | None = None,
        progress: bool = False,
        run_id: str | None = None,
        dataset: str | None = None,
        store: Any = DEFAULT,
        items: Sequence[int] | None = None,
        runner: Runner | None = None,
        cluster: Runner | None = None,
        **run_kwargs: Any,
    ) -> AsyncIterator[RunResult]:
        """Run the graph on every row of ``rows``, ``concurrency`` rows at a time.

        ``rows`` may be any iterable or async iterable of input mappings; it is read lazily.
        Results are yielded as they finish (``result.index`` is the row's position) and
        not kept, so memory does not grow with the dataset. A failed row yields a
        result with ``status != "ok"`` instead of stopping the batch. Every run shares
        the same ``Model`` objects, so per-alias limits hold across the whole batch, and
        the same ``budget=`` (a :class:`~scaffold.Budget`), so it caps the whole batch.

        Every run is recorded in ``store`` (see :meth:`run`) as row ``i`` of ``dataset`` when a
        name is given. With ``run_id``, row ``i`` runs as ``{run_id}-{i}``: calling ``map`` again
        with the same ``run_id`` after a crash resumes every row, and rows that had finished
        send nothing. ``items`` gives each row's position explicitly (its run id, seed offset,
        dataset item and ``result.index``), so a caller can run only the rows still missing.

        ``runner`` chooses where the rows run (a :class:`~scaffold.Runner`): this process by default, or,
        with a :class:`~scaffold.cluster.Cluster` (``runner=`` or its spelling ``cluster=``), on Ray workers,
        ``concurrency`` at a time per worker, with every model limit and the budget held across
        the cluster and a dead worker's rows resumed on the others (see :mod:`scaffold.cluster`).
        Every runner numbers the rows the same way (:func:`~scaffold._runner.plan_row`).

        Examples:
            >>> import scaffold as sf
            >>> from scaffold.testing import ScriptedBackend
            >>> @sf.graph
            ... def solve(problem):
            ...     return sf.generate("Solve {problem}", model="m")
            >>> async def main():
            ...     backend = ScriptedBackend(lambda r: "\\\\boxed{1}")
            ...     return [r.answer async for r in solve.map([{"problem": "a"}] * 3, models={"m": backend})]
            >>> asyncio.run(main())
            ['1', '1', '1']
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ArgumentError(f"concurrency= is how many rows run at once, a whole number of at least 1; got "
                                f"{concurrency!r}")
        unknown = {key: value for key, value in run_kwargs.items() if key not in _RUN_PARAMETERS}
        if unknown:
            raise self._unexpected(unknown, "map")
        if runner is not None and cluster is not None:
            raise ValueError("give runner= or cluster= (its other spelling), not both")
        chosen = runner or cluster or LOCAL
        if not isinstance(chosen, Runner):
            raise TypeError(f"runner must have a map(request) method (a scaffold Runner), not a "
                            f"{type(chosen).__name__}")
        return chosen.map(MapRequest(graph=self, rows=rows, models=models, concurrency=concurrency, seed=seed,
                                     progress=progress, run_id=run_id, dataset=dataset, store=store, items=items,
                                     run_kwargs=run_kwargs))

    def map_sync(self, rows: Iterable[Mapping[str, Any]], **kwargs: Any) -> list[RunResult]:
        """:meth:`map` from synchronous code, collecting every result in the rows' order."""
        no_running_loop("map_sync", "async for result in graph.map(...)")

        kwargs["models"] = bound = bind_models(self, kwargs.get("models"))

        async def collect() -> list[RunResult]:
            return sorted([r async for r in self.map(rows, **kwargs)], key=lambda r: r.index or 0)

        return run_released(collect(), bound)

    def _unexpected(self, given: Mapping[str, Any], method: str) -> ArgumentError:
        """The error for keyword arguments ``run``/``map`` do not take: a build parameter points to ``.build``."""
        name = next(iter(given))
        if name in self.build_parameters:
            shown = ", ".join(f"{key}={value!r}" for key, value in given.items() if key in self.build_parameters)
            return ArgumentError(f"{name!r} is a build parameter of graph {self.name!r}, not an argument of "
                                 f"{method}(): build the graph with it, {self.name}.build({shown}).{method}(...)")
        return ArgumentError(f"{method}() takes no argument {name!r}; its arguments: "
                             f"{', '.join(sorted(_RUN_PARAMETERS))}")

    # -- as a sub-graph ------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside another graph: inline this graph's nodes (a sub-graph), inputs bound to the arguments."""
        return _inline(self.fn, self.name, self.inputs, self.params, args, kwargs)

    def __repr__(self) -> str:
        return f"<Graph {self.name} nodes={len(self.nodes)} aliases={sorted(self.aliases)}>"


class GraphFunction:
    """What ``@graph`` returns: builds :class:`Graph` objects from a function; runs with default parameters.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def best_of_n(problem, *, n: int = 4):
        ...     return sf.best_of(sf.sample("Solve {problem}", model="m", n=n), scorer=lambda t: len(t.text))
        >>> best_of_n.build(n=2).count_calls()
        {'m': 2}
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.inputs, self.defaults = _signature(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        self._default: Graph | None = None

    def build(self, **params: Any) -> Graph:
        """Build and validate the graph with these parameters (keyword-only arguments of the function)."""
        if not params:
            if self._default is None:
                self._default = Graph(self.fn, self.name, {})
            return self._default
        return Graph(self.fn, self.name, params)

    async def run(self, inputs: Mapping[str, Any], **kwargs: Any) -> RunResult:
        """Build with default parameters and run; see :meth:`Graph.run`."""
        return await self.build().run(inputs, **kwargs)

    def run_sync(self, inputs: Mapping[str, Any], **kwargs: Any) -> RunResult:
        """Build with default parameters and run synchronously."""
        return self.build().run_sync(inputs, **kwargs)

    def map(
        self, rows: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]], **kwargs: Any
    ) -> AsyncIterator[RunResult]:
        """Build with default parameters and map over ``rows``; see :meth:`Graph.map`."""
        return self.build().map(rows, **kwargs)

    def map_sync(self, rows: Iterable[Mapping[str, Any]], **kwargs: Any) -> list[RunResult]:
        """Build with default parameters and :meth:`Graph.map_sync` over ``rows``."""
        return self.build().map_sync(rows, **kwargs)

    def describe(self) -> str:
        return self.build().describe()

    def mermaid(self) -> str:
        return self.build().mermaid()

    def count_calls(self, input_sizes: Mapping[str, int] | None = None) -> dict[str, int]:
        return self.build().count_calls(input_sizes)

    def as_tool(self, **options: Any) -> Tool:
        """Build with default parameters and make it a tool; see :meth:`Graph.as_tool`."""
        return self.build().as_tool(**options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside another graph: inline as a sub-graph (keyword-only arguments are build parameters)."""
        if not in_build():
            raise GraphDefinitionError(
                f"{self.name}() can only be called inside another @sf.graph; use {self.name}.run(...) or "
                f"{self.name}.build(...) to run it"
            )
        params = {k: v for k, v in kwargs.items() if k in self.defaults}
        inputs = {k: v for k, v in kwargs.items() if k not in self.defaults}
        return _inline(self.fn, self.name, self.inputs, _check_params(self.name, self.defaults, params),
                       args, inputs)


@overload
def graph(fn: Callable[..., Any], *, name: str | None = None) -> GraphFunction: ...


@overload
def graph(fn: None = None, *, name: str | None = None) -> Callable[[Callable[..., Any]], GraphFunction]: ...


def graph(
    fn: Callable[..., Any] | None = None, *, name: str | None = None
) -> GraphFunction | Callable[[Callable[..., Any]], GraphFunction]:
    """Decorator turning a function of primitives into a graph (``@sf.graph`` or ``@sf.graph(name="rsa")``).

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def self_consistency(problem, *, n: int = 8):
        ...     return sf.vote(sf.sample("Solve: {problem}", model="solver", n=n))
        >>> self_consistency.build(n=4).count_calls()
        {'solver': 4}
    """
    if fn is None:
        return lambda f: GraphFunction(f, name)
    return GraphFunction(fn, name)


_RUN_PARAMETERS = frozenset(name for name in inspect.signature(Graph.run).parameters
                           if name not in ("self", "inputs", "unexpected"))
"""The keyword arguments :meth:`Graph.run` takes (``map`` passes them on to every run)."""

MAX_SUBGRAPH_DEPTH = 64
"""How deep sub-graphs may nest: deeper is a sub-graph that calls itself without end."""


def _inline(
    fn: Callable[..., Any], name: str, input_names: tuple[str, ...], params: Mapping[str, Any],
    args: tuple[Any, ...], kwargs: Mapping[str, Any],
) -> Any:
    builder = current_builder(name)
    if len(args) > len(input_names):
        raise GraphDefinitionError(f"sub-graph {name!r} takes {len(input_names)} input(s), got {len(args)}")
    bindings = dict(zip(input_names, args))
    for key, value in kwargs.items():
        if key not in input_names:
            raise GraphDefinitionError(f"sub-graph {name!r} has no input {key!r}; inputs: {', '.join(input_names)}")
        if key in bindings:
            raise GraphDefinitionError(f"sub-graph {name!r} got input {key!r} twice")
        bindings[key] = value
    missing = [i for i in input_names if i not in bindings]
    if missing:
        raise GraphDefinitionError(f"sub-graph {name!r} needs input(s) {', '.join(missing)}")
    prefix = builder.unique_name(name)
    if len(builder.scopes) >= MAX_SUBGRAPH_DEPTH:
        chain = " -> ".join(scope.prefix for scope in builder.scopes[-6:])
        raise GraphDefinitionError(f"sub-graph {name!r} is nested {MAX_SUBGRAPH_DEPTH} deep ({chain} -> ...): it "
                                   f"calls itself without end; give the recursion a parameter that stops it")
    with builder.scope(prefix.rsplit("/", 1)[-1], bindings):
        return fn(*[bindings[i] for i in input_names], **params)


def _contains_node(value: Any) -> bool:
    if isinstance(value, Node):
        return True
    if isinstance(value, Mapping):
        return any(_contains_node(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains_node(v) for v in value)
    return False


def _collect(value: Any, slots: list[list[Slot]]) -> Any:
    if isinstance(value, Node):
        # successful traces only: failed (dropped) and skipped ones are in RunResult.traces
        traces = [s.trace for s in slots[value.id] if s.trace is not None and s.trace.status is Status.OK]
        if value.single:
            return traces[0] if traces else None
        return traces
    if isinstance(value, Mapping):
        return {k: _collect(v, slots) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_collect(v, slots) for v in value)
    if isinstance(value, list):
        return [_collect(v, slots) for v in value]
    return value


def _check_run_values(inputs: Mapping[str, Any], seed: Any, run_id: Any, dataset: Any = None) -> None:
    """Refuse, before the run starts, what no store or model API can take as given: a seed beyond 64 bits,
    a run id, dataset name or input text that is not valid Unicode, inputs nested deeper than the store records."""
    if dataset is not None and (not isinstance(dataset, str) or "\x00" in dataset or has_lone_surrogate(dataset)):
        raise InputError("dataset must be a name without NUL characters or lone surrogates")
    if seed is not None:
        problem = check_seed(seed)
        if problem is not None:
            raise InputError(problem)
    if run_id is not None:
        if not isinstance(run_id, str) or not run_id:
            raise InputError(f"run_id must be a non-empty string, not {run_id!r}")
        if "\x00" in run_id or has_lone_surrogate(run_id):
            raise InputError("run_id holds a NUL character or a lone surrogate; use printable text")
    for name, value in inputs.items():
        problem = check_value(value, f"inputs.{name}")
        if problem is not None:
            raise InputError(problem)

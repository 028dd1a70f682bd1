"""One served model: a topology built and bound once, and how a request becomes its runs.

:class:`ServedGraph` holds what every request shares — the models (so their in-flight limits and
pacing hold across concurrent requests), the default build, a small cache of builds for requests that
set their own parameters — and nothing a request may change: per-request parameters, sampling fields,
timeout and budget live in that request's :class:`Plan`, never in shared state.
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaffold._errors import (
    AuthenticationError,
    CatalogueError,
    GraphError,
    InputError,
    MissingDependencyError,
    ModelSpecError,
    ResumeError,
    StoreError,
)
from scaffold._values import INT64, check_value
from scaffold.catalogue import bind_specs, build, topologies, topology_aliases
from scaffold.serve._config import BudgetSettings, ConfigError, ServedModelConfig
from scaffold.serve._errors import ApiError
from scaffold.serve._wire import ChatMessage, ChatRequest, CompletionRequest

if TYPE_CHECKING:
    from scaffold._budget import Budget
    from scaffold._call import DeltaSink
    from scaffold._events import Subscriber
    from scaffold._graph import Graph
    from scaffold._result import RunResult
    from scaffold.backends._model import Model

__all__ = ["Plan", "ServedGraph", "bind_served"]

REQUEST_INPUTS = ("problem", "system", "history", "messages", "tools")
"""Graph inputs a request can fill: the last user message, the system message, the earlier turns (as a
transcript), every message (as a list of ``{"role", "content"}``), and the request's tools."""

_BUILDS_KEPT = 32


@dataclass
class Plan:
    """What one request runs: the graph, its inputs, and this request's own limits."""

    graph: Graph
    inputs: dict[str, Any]
    n: int
    seed: int | None
    timeout: float | None
    budget: BudgetSettings | None
    call_params: dict[str, Any]
    progress: str | None
    """``"reasoning"``, ``"comments"`` or ``None``."""
    run_ids: list[str] = field(default_factory=list)
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    """The request's tools, offered to the graph's output agent (the client runs them)."""
    continuation: list[tuple[Any, ...]] = field(default_factory=list)
    """The agent's turns the client sent back: its tool calls and the client's answers."""
    resume: bool = False
    """The run ids name earlier runs of this conversation (a client's answer to its tools): resume them."""

    def new_budget(self) -> Budget | None:
        """A fresh :class:`~scaffold.Budget` shared by this request's runs, or ``None``."""
        if self.budget is None or (self.budget.tokens is None and self.budget.dollars is None):
            return None
        from scaffold._budget import Budget

        return Budget(max_tokens=self.budget.tokens, max_cost=self.budget.dollars)


class ServedGraph:
    """A topology served under one model name (see :class:`~scaffold.serve.ServedModelConfig`)."""

    def __init__(self, name: str, config: ServedModelConfig, models: Mapping[str, Model], *,
                 prompts: str, model_dir: Any = None, store: Any = None) -> None:
        self.name = name
        self.config = config
        self.models = dict(models)
        self.prompts = prompts
        self.model_dir = model_dir
        self.store = store
        self.graph = self._build({})
        unknown = sorted(set(self.graph.inputs) - set(REQUEST_INPUTS))
        if unknown or "problem" not in self.graph.inputs:
            raise ConfigError(f"served model {name!r}: the graph's inputs must be `problem` and any of "
                              f"{', '.join(REQUEST_INPUTS[1:])}; it takes {', '.join(self.graph.inputs)}")
        from scaffold._nodes import AgentNode, Node

        self.agent = self.graph.output if isinstance(self.graph.output, AgentNode) else None
        """The graph's output node when it is an agent: a request's tools are offered to it."""
        if config.tools and "tools" not in self.graph.inputs and self.agent is None:
            raise ConfigError(f"served model {name!r}: `tools = true` needs a graph with a `tools` input or an "
                              f"agent as its output")

        if not isinstance(self.graph.output, Node):
            raise ConfigError(f"served model {name!r}: the graph must return one node (its text is the answer)")
        self._builds: OrderedDict[tuple[tuple[str, str], ...], Graph] = OrderedDict()
        self._calls: dict[int, tuple[Graph, int]] = {}
        self.allowed_params = self._allowed_params()
        calls = sum(self.graph.count_calls().values())
        if calls > config.max_calls:
            raise ConfigError(f"served model {name!r}: its graph makes up to {calls} model calls per request, more "
                              f"than max_calls ({config.max_calls}); raise max_calls (--max-calls) or shrink the graph")

    # -- building -------------------------------------------------------------------------------
    def _build(self, overrides: Mapping[str, Any]) -> Graph:
        params = {**self.config.params, **overrides}  # a renamed parameter: one `warning:` line, at start-up only
        graph: Graph = build(self.config.topology, params, warn=None if overrides else _warning_line,
                             prompts=self.prompts, model_dir=self.model_dir)
        missing = sorted(graph.aliases - self.models.keys())
        if missing:
            raise GraphError(f"the graph uses model alias(es) {', '.join(missing)} that {self.name!r} does not bind; "
                             f"bound: {', '.join(sorted(self.models))}")
        return graph

    def _allowed_params(self) -> list[str]:
        defaults = topologies().topology(self.config.topology).defaults
        self.configured = {**defaults, **self.graph.params}
        """Every build parameter's value as served (the config's, as the graph took it, else the topology's)."""
        choice = self.config.request_params
        if choice is True:
            allowed = [k for k, v in self.configured.items() if isinstance(v, (int, float, bool))]
        elif choice is False:
            allowed = []
        else:
            unknown = sorted(set(choice) - set(defaults))
            if unknown:
                raise ConfigError(f"served model {self.name!r}: `request_params` names unknown parameter(s) "
                                  f"{', '.join(unknown)}; the topology's: {', '.join(defaults)}")
            allowed = list(choice)
        for key in self.config.max_params:
            if key not in allowed or not _is_int(self.configured.get(key)):
                raise ConfigError(f"served model {self.name!r}: `max_params.{key}` names no integer parameter a "
                                  f"request may set; those are: "
                                  f"{', '.join(k for k in allowed if _is_int(self.configured.get(k))) or 'none'}")
        return allowed

    def _check_params(self, params: Mapping[str, Any]) -> None:
        """A request's parameters: allowed, of their served type (no coercion), integers not above their bound."""
        refused = sorted(set(params) - set(self.allowed_params))
        if refused:
            allowed = ", ".join(self.allowed_params) or "none"
            raise ApiError(400, f"model {self.name!r} does not take parameter(s) {', '.join(refused)} per request; "
                                f"it takes: {allowed}", param="scaffold.params")
        for key, value in params.items():
            served = self.configured.get(key)
            where = f"scaffold.params.{key}"
            if _is_int(served) and not _is_int(value) or isinstance(served, bool) and not isinstance(value, bool) \
                    or isinstance(served, float) and not (_is_int(value) or isinstance(value, float)):
                raise ApiError(400, f"{where} must be {_kind(served)}, like its served value {served!r}; "
                                    f"got {value!r}", param=where)
            if isinstance(value, float) and not math.isfinite(value):
                raise ApiError(400, f"{where} must be a finite number", param=where)
            if _is_int(served):
                bound = self.config.max_params.get(key, served)
                if value > bound:
                    how = ("its `max_params` bound" if key in self.config.max_params else
                           "its served value (a request may lower it; the server's `max_params` may allow more)")
                    raise ApiError(400, f"{where}={value} is more than model {self.name!r} allows: {bound}, {how}",
                                   param=where)

    def _calls_of(self, graph: Graph) -> int:
        """Model calls one run of ``graph`` (a served build) can make, counted once per build."""
        found = self._calls.get(id(graph))
        if found is None or found[0] is not graph:
            found = self._calls[id(graph)] = (graph, sum(graph.count_calls().values()))
            if len(self._calls) > 2 * _BUILDS_KEPT:
                self._calls.pop(next(iter(self._calls)))
        return found[1]

    def graph_for(self, params: Mapping[str, Any]) -> Graph:
        """The graph built with a request's parameters (cached; a bad one is an :class:`ApiError` 400)."""
        if not params:
            return self.graph
        self._check_params(params)
        key = tuple(sorted((k, repr(v)) for k, v in params.items()))
        graph = self._builds.get(key)
        if graph is not None:
            self._builds.move_to_end(key)
            return graph
        try:
            graph = self._build(params)
        except GraphError as exc:
            raise ApiError(400, str(exc).splitlines()[0], param="scaffold.params") from None
        self._builds[key] = graph
        if len(self._builds) > _BUILDS_KEPT:
            self._builds.popitem(last=False)
        return graph

    # -- requests -------------------------------------------------------------------------------
    def plan(self, body: ChatRequest | CompletionRequest) -> Plan:
        """Check a request against this model and turn it into a :class:`Plan` (every mistake: a 400)."""
        config = self.config
        unsupported = body.unsupported()
        if isinstance(body, ChatRequest) and body.tools and not config.tools:
            raise ApiError(400, f"model {self.name!r} does not take tools (its graph does not declare them)",
                           param="tools", code="tools_not_supported")
        if unsupported:
            raise ApiError(400, f"unsupported field(s): {', '.join(unsupported)}", param=unsupported[0])
        if body.n > config.max_n:
            raise ApiError(400, f"n={body.n} is more than model {self.name!r} allows ({config.max_n})", param="n")
        for where, value in (("tools", getattr(body, "tools", None)), ("scaffold.params", body.scaffold.params)):
            problem = check_value(value, where) if value else None
            if problem is not None:
                raise ApiError(400, problem, param=where)
        call_params, refused = body.sampling(config.sampling)
        if refused:
            allowed = ", ".join(config.sampling) or "none"
            raise ApiError(400, f"model {self.name!r} does not pass {', '.join(refused)} to its model calls; "
                                f"it passes: {allowed}", param=refused[0])
        options = body.scaffold
        graph = self.graph_for(options.params)
        calls = self._calls_of(graph) * body.n
        if calls > config.max_calls:
            raise ApiError(400, f"this request could make up to {calls} model calls; model {self.name!r} "
                                f"allows {config.max_calls} per request (lower n or scaffold.params)",
                           param="scaffold.params" if options.params else "n")
        inputs, continuation = self._inputs(graph, body)
        client_tools = list(getattr(body, "tools", None) or []) if self.agent is not None else []
        self._check_client_tools(client_tools)
        run_ids, resume = self._run_ids(body.n, continuation)
        seed = options.seed if options.seed is not None else body.seed
        if seed is not None and seed + body.n - 1 > INT64[1]:
            raise ApiError(400, f"seed={seed}: with n={body.n} the runs' seeds (seed + i) pass 2**63 - 1",
                           param="scaffold.seed" if options.seed is not None else "seed")
        progress = options.progress if options.progress is not None else config.progress
        mode = None if progress is False else ("comments" if progress == "comments" else "reasoning")
        return Plan(graph=graph, inputs=inputs, n=body.n, seed=seed, timeout=self._timeout(options.timeout),
                    budget=self._budget(options.budget), call_params=call_params, progress=mode,
                    run_ids=run_ids, client_tools=client_tools, continuation=continuation, resume=resume)

    def _check_client_tools(self, tools: list[dict[str, Any]]) -> None:
        assert self.agent is not None or not tools
        names = []
        for i, spec in enumerate(tools):
            function = spec.get("function") if spec.get("type") == "function" else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise ApiError(400, f"tools[{i}] must be {{type: function, function: {{name, parameters}}}}",
                               param=f"tools[{i}]")
            names.append(function["name"])
        ours = set(self.agent.tool_names()) if self.agent is not None else set()
        clash = sorted(ours & set(names))
        if clash or len(set(names)) != len(names):
            why = f"the server's own tools are named {', '.join(clash)}" if clash else "two tools share a name"
            raise ApiError(400, f"tools: {why}", param="tools")

    def _run_ids(self, n: int, continuation: list[tuple[Any, ...]]) -> tuple[list[str], bool]:
        """New run ids; or, for a client's answers to its tools, the run their call ids name (resumed)."""
        from scaffold._agent import run_of_client_call

        named = {run_of_client_call(str(m[2].get("tool_call_id", ""))) for m in continuation
                 if m[0] == "tool" and len(m) > 2}
        named.discard(None)
        if len(named) > 1:
            raise ApiError(400, "the tool messages answer calls of different conversations", param="messages")
        if named:
            if n != 1:
                raise ApiError(400, "a conversation's tool answers continue one run: n must be 1", param="n")
            return [str(named.pop())], self.store is not None
        return [uuid.uuid4().hex[:16] for _ in range(n)], False

    def _inputs(self, graph: Graph, body: ChatRequest | CompletionRequest) \
            -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
        if isinstance(body, CompletionRequest):
            try:
                problem = body.prompt_text()
            except ValueError as exc:
                raise ApiError(400, str(exc), param="prompt") from None
            messages: list[ChatMessage] = [ChatMessage(role="user", content=problem)]
        else:
            messages = list(body.messages)
        try:
            texts = [(m.role, m.text()) for m in messages]
        except ValueError as exc:
            raise ApiError(400, str(exc), param="messages") from None
        last = max(i for i, (role, _) in enumerate(texts) if role == "user")
        continuation: list[tuple[Any, ...]] = []
        if self.agent is not None and last < len(texts) - 1:
            continuation = _continuation(messages[last + 1:], texts[last + 1:])
            texts = texts[: last + 1]
        problem = texts[last][1]
        if not problem.strip():
            raise ApiError(400, "the last user message is empty", param="messages")
        system = "\n\n".join(text for role, text in texts if role in ("system", "developer"))
        turns = [(role, text) for i, (role, text) in enumerate(texts)
                 if i != last and role not in ("system", "developer")]
        history = "\n".join(f"{role}: {text}" for role, text in turns)
        inputs: dict[str, Any] = {"problem": problem}
        takes = set(graph.inputs)
        if "system" in takes:
            inputs["system"] = system
        if "history" in takes:
            inputs["history"] = history
        if "messages" in takes:
            inputs["messages"] = [{"role": role, "content": text} for role, text in texts]
        if "tools" in takes:
            inputs["tools"] = list(getattr(body, "tools", None) or [])
        unused = [what for what, value, name in (("a system message", system, "system"),
                                                 ("earlier turns", history, "history"))
                  if value and name not in takes and "messages" not in takes]
        if unused:
            if self.config.context == "refuse":
                raise ApiError(400, f"model {self.name!r} reads only the last user message; the request has "
                                    f"{' and '.join(unused)}", param="messages")
            if self.config.context == "fold":
                parts = [f"system: {system}"] if system and "system" not in takes else []
                if history and "history" not in takes:
                    parts.append(history)
                inputs["problem"] = "\n".join(parts) + f"\nuser: {problem}"
        return inputs, continuation

    def _timeout(self, asked: float | None) -> float | None:
        config = self.config
        if asked is None:
            return config.timeout
        if config.max_timeout is not None and asked > config.max_timeout:
            raise ApiError(400, f"scaffold.timeout={asked} is more than model {self.name!r} allows "
                                f"({config.max_timeout})", param="scaffold.timeout")
        if config.max_timeout is None and config.timeout is not None and asked > config.timeout:
            raise ApiError(400, f"scaffold.timeout={asked} is more than model {self.name!r} allows "
                                f"({config.timeout})", param="scaffold.timeout")
        return asked

    def _budget(self, asked: Any) -> BudgetSettings | None:
        config = self.config
        if asked is None:
            return config.budget
        cap = config.max_budget or config.budget
        for key in ("tokens", "dollars"):
            value, limit = getattr(asked, key), getattr(cap, key) if cap is not None else None
            if value is not None and limit is not None and value > limit:
                raise ApiError(400, f"scaffold.budget.{key}={value} is more than model {self.name!r} allows "
                                    f"({limit})", param=f"scaffold.budget.{key}")
        base = config.budget
        return BudgetSettings(tokens=asked.tokens if asked.tokens is not None else (base.tokens if base else None),
                              dollars=asked.dollars if asked.dollars is not None else (base.dollars if base else None))

    async def run(self, plan: Plan, choice: int, *, budget: Budget | None, on_delta: DeltaSink | None = None,
                  subscribers: Sequence[Subscriber] = ()) -> RunResult:
        """Run choice ``choice`` of ``plan`` (recorded in the store); failures are in the result, those of the
        store (a refused record, a database that cannot be written) and of the inputs included."""
        seed = None if plan.seed is None else plan.seed + choice
        started = time.time()
        try:
            return await plan.graph.run(
                plan.inputs, models=self.models, seed=seed, run_id=plan.run_ids[choice], timeout=plan.timeout,
                subscribers=subscribers, raise_on_error=False, budget=budget, store=self.store, on_delta=on_delta,
                call_params=plan.call_params or None, resume=plan.resume, client_tools=plan.client_tools,
                continuation=plan.continuation)
        except ResumeError as exc:
            raise ApiError(400, f"the conversation before the tool calls is not the one that made them: {exc}",
                           param="messages") from None
        except (StoreError, InputError, GraphError) as exc:
            from scaffold._result import RunResult

            return RunResult(run_id=plan.run_ids[choice], graph=plan.graph.name, inputs=plan.inputs, seed=seed or 0,
                             status="error", output=None, error=exc, started_at=started, finished_at=time.time())


def _continuation(messages: Sequence[ChatMessage], texts: Sequence[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """The messages after the last user one, as an agent's continuation: assistant turns that called tools, each
    followed by a ``tool`` message per call (a 400 for anything else)."""
    from scaffold._messages import message_from_dict

    out: list[tuple[Any, ...]] = []
    pending: set[str] = set()
    for i, (message, (role, text)) in enumerate(zip(messages, texts)):
        where = f"messages[-{len(messages) - i}]"
        if role == "assistant" and message.tool_calls:
            if pending:
                raise ApiError(400, f"{where}: the tool calls before it are not all answered ({', '.join(pending)})",
                               param="messages")
            data = {"role": "assistant", "tool_calls": message.tool_calls}
            made = message_from_dict(data, text)
            pending = {str(call.get("id")) for call in message.tool_calls if isinstance(call, dict)}
            if len(pending) != len(message.tool_calls):
                raise ApiError(400, f"{where}: every tool call needs an id", param="messages")
            out.append(made)
        elif role == "tool":
            call_id = message.tool_call_id or ""
            if call_id not in pending:
                raise ApiError(400, f"{where}: a tool message answers no pending call ({call_id!r})", param="messages")
            pending.discard(call_id)
            out.append(message_from_dict({"role": "tool", "tool_call_id": call_id}, text))
        else:
            raise ApiError(400, f"{where}: after the last user message an agent takes only its tool calls and their "
                                f"answers, not a {role!r} message", param="messages")
    if pending:
        raise ApiError(400, f"the last tool calls are not all answered ({', '.join(sorted(pending))})",
                       param="messages")
    return out


def bind_served(name: str, config: ServedModelConfig, shared: Mapping[str, Model], made: dict[str, Any], *,
                defaults: Mapping[str | None, str] | None = None, api_base: str | None = None,
                store: Any = None) -> ServedGraph:
    """Bind ``config``'s aliases (``[models]`` names, specs, tables; ``defaults`` from the command line) and
    build its :class:`ServedGraph`. ``made`` caches models by spec across served graphs (one limit per spec)."""
    from scaffold.backends._entry import ModelEntry
    from scaffold.backends._load import model_from_config

    aliases = served_aliases(name, config)
    unknown = sorted(set(config.models) - set(aliases))
    if unknown:
        raise ConfigError(f"served model {name!r}: the topology has no model alias {', '.join(unknown)}; "
                          f"its aliases: {', '.join(aliases)}")
    models: dict[str, Model] = {}
    specs: dict[str, str] = {}
    for alias in aliases:
        entry = config.models.get(alias)
        if isinstance(entry, ModelEntry):
            models[alias] = model_from_config(alias, entry)
        elif isinstance(entry, str) and entry in shared:
            models[alias] = shared[entry]
        else:
            fallback = dict(defaults or {})
            specs[alias] = entry if entry is not None else fallback.get(alias, fallback.get(None, "pocket"))
    pocket_dir = None
    pocket = not models and bool(specs)
    if specs:
        try:
            chosen: dict[str | None, str] = {alias: spec for alias, spec in specs.items()}
            bound = bind_specs(sorted(specs), chosen, api_base=api_base, temperature=None, max_tokens=None)
        except (ModelSpecError, AuthenticationError, MissingDependencyError) as exc:
            raise ConfigError(f"served model {name!r}: {_message(exc)}") from None
        for alias, spec in bound.specs.items():
            models[alias] = made.setdefault(spec, bound.models[alias])
        pocket_dir = bound.pocket_dir
        pocket = pocket and bound.pocket
    prompts = config.prompts or ("pocket" if pocket else "generic")
    try:
        return ServedGraph(name, config, models, prompts=prompts, model_dir=pocket_dir, store=store)
    except GraphError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"served model {name!r}: {_message(exc)}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return "a boolean" if isinstance(value, bool) else "an integer" if _is_int(value) else "a number"


def served_aliases(name: str, config: ServedModelConfig) -> list[str]:
    """The model aliases a served model's topology uses (a bad topology or parameter: :class:`ConfigError`)."""
    try:
        return topology_aliases(config.topology, dict(config.params))
    except (GraphError, CatalogueError) as exc:
        raise ConfigError(f"served model {name!r}: {_message(exc)}") from None


def _warning_line(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _message(exc: BaseException) -> str:
    text = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0]

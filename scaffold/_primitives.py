"""The three primitives: ``generate`` (sequential), ``sample`` (parallel), ``aggregate`` (aggregative).

Each adds one node to the graph being built and returns it. Template variables
are checked here, at build time, against the graph's inputs, the ``context``
given to the node, and what the primitive itself provides (``{candidates}``
and ``{k}`` for ``aggregate``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scaffold._answers import Extractor
from scaffold._builder import Builder, Input, current_builder
from scaffold._errors import EmptySetError, GraphDefinitionError, SubsetSizeError, TemplateError
from scaffold._nodes import AgentNode, CallNode, ConstNode, InputNode, Node, OnError, Quorum, make_policy
from scaffold._secrets import SECRET_PARAMS
from scaffold._selectors import AllMembers, Selector, make_selector
from scaffold._template import Template, as_template
from scaffold._tools import Tool, tools_by_name
from scaffold._types import Trace
from scaffold.answers import AnswerKind, as_extractor

AGGREGATE_PROMPT = Template(
    "Problem:\n{problem}\n\n"
    "Below are {k} candidate solutions to the problem. Some of them may be wrong.\n\n"
    "{candidates}\n\n"
    "Review the candidates carefully: check each step, correct the mistakes you find, fill in anything that "
    "is missing, and combine the useful ideas into one complete and correct solution. Do not copy a candidate "
    "without checking it. {answer_format}"
)
"""The default aggregation prompt, the one home of its text (AggLM's idea, in our own words: review, correct, fill
gaps, combine). ``sf.aggregate`` uses it when given no prompt; ``graphs``' topologies use its text as their
``aggregate_prompt`` default (:data:`graphs.prompts.AGGREGATE_PROMPT`)."""

SetLike = Node | Input | Sequence[Any]
"""What may be passed where a set of traces is expected: a node, a graph input, or a list of candidates."""


def as_set(value: SetLike, *, what: str) -> Node:
    """Turn a node, a graph input or a literal list of candidates into a node."""
    builder = current_builder(what)
    if isinstance(value, Node):
        if value.id >= len(builder.nodes) or builder.nodes[value.id] is not value:
            raise GraphDefinitionError(
                f"sf.{what}() got node {value.name!r} from another graph; pass graphs' outputs as sub-graph "
                f"inputs instead of reusing nodes across graphs"
            )
        return value
    if isinstance(value, Input):
        node = builder.input_nodes.get(value.name)
        if node is None:
            node = InputNode(name=builder.unique_name(value.name), size=None, input_name=value.name)
            builder.add(node)
            builder.input_nodes[value.name] = node
        return node
    if isinstance(value, (list, tuple)):
        return candidates(value)
    raise GraphDefinitionError(
        f"sf.{what}() expects a set of traces (a node, a graph input or a list of candidates), "
        f"got {type(value).__name__}"
    )


def candidates(values: Sequence[str | Trace | Mapping[str, Any]], *, name: str = "candidates") -> Node:
    """Candidates known when the graph is built (strings, traces or ``{"text": ...}`` rows) as a set.

    To pass candidates per run instead, read a graph input as a set (see :func:`aggregate`).

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def majority():
        ...     return sf.vote(sf.candidates([r"\\boxed{1}", r"\\boxed{2}", r"\\boxed{1}"]))
        >>> majority.run_sync({}, models={}).answer
        '1'
    """
    builder = current_builder("candidates")
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise GraphDefinitionError("sf.candidates() takes a list of candidates")
    node = ConstNode(name=builder.unique_name(name), size=len(values), values=tuple(values))
    return builder.add(node)


def resolve_variables(
    builder: Builder, templates: Sequence[Template | None], provided: set[str], where: str
) -> dict[str, tuple[str, Any]]:
    """Where each variable of ``templates`` not in ``provided`` comes from (an input, a constant, the answer kind);
    :class:`TemplateError` naming ``where`` for one nothing provides."""
    out: dict[str, tuple[str, Any]] = {}
    for template in templates:
        if template is None:
            continue
        for var in template.variables - provided:
            try:
                out[var] = builder.resolve_var(var)
            except KeyError:
                template.check(builder.available_vars() | provided, where=where)
                raise TemplateError(f"{where}: unknown variable {{{var}}}") from None
    return out


def _check_alias(model: Any, what: str) -> str:
    if not isinstance(model, str) or not model:
        raise GraphDefinitionError(f"sf.{what}(model=...) takes a model alias string such as 'solver', got {model!r}")
    return model


def _check_render(render: object, what: str) -> None:
    """A build error for a ``render`` that is not a function (it would fail only when the node runs)."""
    if render is not None and not callable(render):
        raise GraphDefinitionError(f"sf.{what}(): render must be a function of the candidate traces returning the "
                                   f"text of {{candidates}}, got {type(render).__name__}")


def _call_node(
    what: str,
    *,
    prompt: str | Template,
    model: str,
    items: Node | None,
    selector: Selector | None,
    samples: int,
    system: str | Template | None,
    context: Mapping[str, SetLike] | None,
    params: Mapping[str, Any] | None,
    extract: Extractor | AnswerKind | str | None,
    render: Callable[[Sequence[Trace]], str] | None,
    logprobs: bool,
    name: str | None,
    on_error: OnError,
    single: bool,
    agent: tuple[Sequence[Tool], int, int | None, int | None] | None = None,
) -> Node:
    builder = current_builder(what)
    alias = _check_alias(model, what)
    if samples < 1:
        raise SubsetSizeError(f"sf.{what}(): the number of samples must be at least 1, got {samples}")
    extract = as_extractor(extract, f"sf.{what}()")
    _check_render(render, what)
    prompt_t = as_template(prompt)
    system_t = as_template(system) if system is not None else None
    reserved = {"candidates", "k"} if items is not None else set()
    clash = sorted(reserved & set(context or {}))
    if clash:
        raise GraphDefinitionError(f"sf.{what}(): context may not be named {', '.join(clash)}; "
                                   f"aggregate fills those itself")
    ctx = {key: as_set(value, what=what) for key, value in (context or {}).items()}
    for key, node in ctx.items():
        if node.size == 0:
            raise EmptySetError(f"context {key!r} of sf.{what}() is an empty set")
    provided = set(ctx) | ({"candidates", "k"} if items is not None else set())
    node_name = builder.unique_name(name or what)
    variables = resolve_variables(builder, [prompt_t, system_t], provided, f"prompt of {node_name!r}")
    size: int | None = samples
    if items is not None and selector is not None:
        if items.size == 0:
            raise EmptySetError(f"sf.{what}() node {node_name!r} reads an empty set")
        if items.size is not None:
            selector.check(items.size)
            size = selector.count(items.size) * samples
        else:
            size = None
    secrets = sorted(key for key in (params or {}) if key.lower() in SECRET_PARAMS)
    if secrets:
        raise GraphDefinitionError(
            f"sf.{what}() node {node_name!r}: params {', '.join(secrets)} look like credentials, and node params "
            f"are recorded with every request; give keys to the model binding (sf.Model / the backend) instead"
        )
    policy = make_policy(on_error)
    if isinstance(policy, Quorum) and size is not None and policy.k > size:
        raise SubsetSizeError(f"sf.{what}() node {node_name!r}: quorum {policy.k} is larger than its {size} calls")
    fields: dict[str, Any] = dict(
        name=node_name, size=size, single=single, on_error=policy, alias=alias, prompt=prompt_t,
        system=system_t, items=items, selector=selector or make_selector(None, None, 1), samples=samples,
        context=ctx, variables=variables, params=dict(params or {}), extract=extract, render=render,
        logprobs=logprobs, primitive=what,
    )
    if agent is None:
        return builder.add(CallNode(**fields))
    tools, max_turns, token_budget, context_budget = agent
    if isinstance(tools, (Tool, str, bytes)) or not isinstance(tools, Sequence):
        raise GraphDefinitionError(f"sf.{what}() node {node_name!r}: tools must be a list of sf.tool(...) objects")
    checked = tools_by_name(tools, f"sf.{what}() node {node_name!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise GraphDefinitionError(f"sf.{what}() node {node_name!r}: max_turns must be an integer of at least 1, "
                                   f"got {max_turns!r}")
    if token_budget is not None and (isinstance(token_budget, bool) or not isinstance(token_budget, int)
                                     or token_budget < 1):
        raise GraphDefinitionError(f"sf.{what}() node {node_name!r}: token_budget must be a positive integer")
    if context_budget is not None and (isinstance(context_budget, bool) or not isinstance(context_budget, int)
                                       or context_budget < 1):
        raise GraphDefinitionError(f"sf.{what}() node {node_name!r}: context_budget must be a positive integer")
    return builder.add(AgentNode(**fields, tools=tuple(checked.values()), max_turns=max_turns,
                                 token_budget=token_budget, context_budget=context_budget))


def generate(
    prompt: str | Template,
    *,
    model: str,
    system: str | Template | None = None,
    context: Mapping[str, SetLike] | None = None,
    params: Mapping[str, Any] | None = None,
    extract: Extractor | AnswerKind | str | None = None,
    logprobs: bool = False,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Node:
    """One model call (a chain of thought). Returns a node standing for one trace.

    ``context`` maps extra template variables to earlier nodes: a one-trace node
    renders as its text, a set as a numbered candidate list.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def solve_then_check(problem):
        ...     draft = sf.generate("Solve: {problem}", model="solver")
        ...     return sf.generate("Check this solution to {problem}:\\n{draft}", model="solver",
        ...                        context={"draft": draft})
        >>> solve_then_check.build().count_calls()
        {'solver': 2}
    """
    return _call_node("generate", prompt=prompt, model=model, items=None, selector=None, samples=1, system=system,
                      context=context, params=params, extract=extract, render=None, logprobs=logprobs, name=name,
                      on_error=on_error, single=True)


def sample(
    prompt: str | Template,
    *,
    model: str,
    n: int,
    system: str | Template | None = None,
    context: Mapping[str, SetLike] | None = None,
    params: Mapping[str, Any] | None = None,
    extract: Extractor | AnswerKind | str | None = None,
    logprobs: bool = False,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Node:
    """``n`` independent samples of one prompt (the parallel primitive). Returns a set of ``n`` traces.

    Backends that accept ``n`` get one request; others get ``n`` requests. Each choice is its own trace.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def majority(problem, *, n: int = 8):
        ...     return sf.vote(sf.sample("Solve: {problem}", model="solver", n=n))
        >>> majority.build(n=5).count_calls()
        {'solver': 5}
    """
    if not isinstance(n, int) or n < 1:
        raise SubsetSizeError(f"sf.sample(): n must be an integer of at least 1, got {n!r}")
    return _call_node("sample", prompt=prompt, model=model, items=None, selector=None, samples=n, system=system,
                      context=context, params=params, extract=extract, render=None, logprobs=logprobs, name=name,
                      on_error=on_error, single=False)


def aggregate(
    items: SetLike,
    *,
    model: str,
    prompt: str | Template = AGGREGATE_PROMPT,
    k: int | None = None,
    n: int = 1,
    select: Selector | str | Callable[[int, random.Random], Sequence[Sequence[int]]] | None = None,
    samples: int = 1,
    system: str | Template | None = None,
    context: Mapping[str, SetLike] | None = None,
    params: Mapping[str, Any] | None = None,
    extract: Extractor | AnswerKind | str | None = None,
    render: Callable[[Sequence[Trace]], str] | None = None,
    logprobs: bool = False,
    name: str | None = None,
    on_error: OnError = "raise",
    tools: Sequence[Tool] | None = None,
    max_turns: int = 10,
    token_budget: int | None = None,
    context_budget: int | None = None,
) -> Node:
    """A model reads sets of candidate traces and writes new traces (the aggregative primitive).

    Which sets it reads:

    - default: all members, one call (``n`` calls if ``n > 1``);
    - ``k=4, n=16``: 16 subsets of 4 distinct members, each drawn without replacement (RSA);
    - ``select="partition", k=4``: consecutive groups of 4 (aggregation trees);
    - ``select="each"``: one call per member (self-refinement);
    - ``select=fn``: ``fn(size, rng) -> groups of indices``, or any :class:`~scaffold._selectors.Selector`.

    ``samples`` calls are made per set (SPIRAL's several aggregations of one set).
    The prompt gets ``{candidates}`` (rendered by ``render``) and ``{k}`` (the number read).
    ``items`` may be a graph input, so candidates collected elsewhere (strings or traces) can be
    aggregated without regenerating them. With ``tools``, each aggregation is an agent (see :func:`agent`:
    ``max_turns``, ``token_budget``, ``context_budget``) that may call them before it writes its answer
    (AggAgent's idea: look into the candidates with tools instead of reading them all at once); its tools
    see the candidates it read (:func:`~scaffold.tools.candidate_tools`), so its prompt need not show
    ``{candidates}``.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def rsa_step(problem, *, population: int = 8, k: int = 4):
        ...     pop = sf.sample("Solve: {problem}", model="solver", n=population)
        ...     return sf.aggregate(pop, model="solver", k=k, n=population)
        >>> rsa_step.build().count_calls()
        {'solver': 16}
    """
    node = as_set(items, what="aggregate")
    selector = make_selector(select, k, n)
    single = isinstance(selector, AllMembers) and selector.n == 1 and samples == 1
    shown = as_template(prompt).variables | (as_template(system).variables if system is not None else frozenset())
    if tools is None and "candidates" not in shown:  # the aggregator would never see what it aggregates
        raise GraphDefinitionError(
            f"sf.aggregate({name or 'aggregate'!r}): its prompt never shows the candidates; put {{candidates}} in "
            f"the prompt (or system), or give the aggregator tools that read them (scaffold.tools.candidate_tools)")
    return _call_node("aggregate", prompt=prompt, model=model, items=node, selector=selector, samples=samples,
                      system=system, context=context, params=params, extract=extract, render=render,
                      logprobs=logprobs, name=name, on_error=on_error, single=single,
                      agent=None if tools is None else (tools, max_turns, token_budget, context_budget))


def agent(
    prompt: str | Template,
    *,
    model: str,
    tools: Sequence[Tool] = (),
    n: int = 1,
    max_turns: int = 10,
    token_budget: int | None = None,
    context_budget: int | None = None,
    system: str | Template | None = None,
    context: Mapping[str, SetLike] | None = None,
    params: Mapping[str, Any] | None = None,
    extract: Extractor | AnswerKind | str | None = None,
    logprobs: bool = False,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Node:
    """A tool-using agent (the sequential primitive, many turns): the model is called with ``tools``; each tool
    it asks for is run (several at once when it asks for several) and its result given back, until it answers
    without calling one. ``n`` agents run independently (a set of ``n`` traces, like :func:`sample`).

    Each turn is a recorded model trace reading the turns and tool results before it; each tool call is a
    trace of kind ``tool``. The agent's trace, the one votes and aggregations read, is its last turn. The
    turn ``max_turns`` (or the first after ``token_budget`` tokens were spent, or the first after a turn
    whose conversation, prompt and completion, reached ``context_budget`` tokens) is sent with
    ``tool_choice="none"``: a model that still calls a tool then fails the agent with
    :class:`~scaffold.AgentLimitError` (under ``on_error``). A tool's failure is shown to the model as the
    tool's answer and recorded on its trace; it never fails the run.

    Examples:
        >>> import scaffold as sf
        >>> @sf.tool
        ... def add(a: int, b: int) -> int:
        ...     "Add two integers."
        ...     return a + b
        >>> @sf.graph
        ... def solve(problem):
        ...     return sf.vote(sf.agent("Solve: {problem}", model="solver", tools=[add], n=3, max_turns=4))
        >>> solve.build().count_calls()
        {'solver': 12}
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SubsetSizeError(f"sf.agent(): n must be an integer of at least 1, got {n!r}")
    return _call_node("agent", prompt=prompt, model=model, items=None, selector=None, samples=n, system=system,
                      context=context, params=params, extract=extract, render=None, logprobs=logprobs, name=name,
                      on_error=on_error, single=n == 1, agent=(tools, max_turns, token_budget, context_budget))

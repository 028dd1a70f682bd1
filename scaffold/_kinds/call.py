"""Model calls (``generate``, ``sample``, ``aggregate``): one job per group and batch of samples, fired when
the group's members (and any context sets) exist; the request is then sent down :mod:`scaffold._call`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from scaffold._agent import run_agent
from scaffold._call import call, index_seed, node_seed
from scaffold._errors import EmptyInputError, InputError, SubsetSizeError
from scaffold._jobs import Job, Slot
from scaffold._kinds.registry import expands, members
from scaffold._nodes import AgentNode, CallNode, Quorum
from scaffold._template import format_candidates
from scaffold._types import Request, Status, record_maker

if TYPE_CHECKING:
    from scaffold._call import Send
    from scaffold._run_context import RunContext

_new_request = record_maker(Request)


class CallPlan(NamedTuple):
    """What every request of one call node shares within a run."""

    node: CallNode
    send: Send
    model_name: str | None
    params: dict[str, Any]
    items: list[Slot]
    """The set the node reads (its groups index into it)."""
    outs: list[Slot]
    """The node's slots, every request's choices in order."""
    streamed: bool
    """The node's calls are streamed to the run's ``on_delta``."""


class CallJob(Job):
    """One request: reads ``items[i]`` for ``i`` in ``group``, answers the ``count`` choices from ``index``.

    Its own fields rather than a function job's argument tuple and a list of its slots: there is one
    per model call, alive from the run's start until the call is sent.
    """

    __slots__ = ("plan", "group", "index", "count")

    def __init__(self, plan: CallPlan, group: tuple[int, ...], index: int, count: int) -> None:
        super().__init__(plan.node)
        self.plan = plan
        self.group = group
        self.index = index
        self.count = count

    def outputs(self) -> list[Slot]:
        return self.plan.outs[self.index : self.index + self.count]

    def start(self, run: RunContext) -> None:
        fire_call(run, self)


@expands(CallNode)
def expand_call(run: RunContext, node: CallNode) -> list[Slot]:
    if node.items is None:
        items: list[Slot] = []
        groups: list[tuple[int, ...]] = [()]
    else:
        items = members(run, node, node.items)
        node.selector.check(len(items))
        groups = node.selector.groups(len(items), run.rng(node))
    context = [s for ctx in node.context.values() for s in run.slots[ctx.id]]
    if isinstance(node.on_error, Quorum) and node.on_error.k > len(groups) * node.samples:
        raise SubsetSizeError(
            f"node {node.name!r}: quorum {node.on_error.k} is larger than its {len(groups) * node.samples} calls"
        )
    alias = node.alias or ""
    model = run.model(alias)
    caps = model.backend.capabilities
    batch = min(node.samples, caps.max_n or node.samples) if caps.supports_n and type(node) is CallNode else 1
    outs = run.new_slots(len(groups) * node.samples)
    params = {**model.params, **run.call_params, **node.params} if run.call_params else {**model.params, **node.params}
    if caps.json_schema and "response_format" not in params:  # a JSON answer kind asks for its schema
        wanted = run.answers_for(node).response_format()
        if wanted is not None:
            params["response_format"] = wanted
    plan = CallPlan(node, run.sender(alias), model.name, params, items, outs, run.streams(node))
    index = 0
    for group in groups:
        deps = [items[i] for i in group]
        deps.extend(context)
        for start in range(0, node.samples, batch):
            count = min(batch, node.samples - start)
            run.schedule(CallJob(plan, group, index, count), deps)
            index += count
    return outs


def fire_call(run: RunContext, job: CallJob) -> None:
    """Render the prompt from the group's successful members and start the call."""
    plan, index = job.plan, job.index
    node, items, outs = plan.node, plan.items, job.outputs()
    read = []  # a loop: a comprehension with a walrus would make a cell in this frame on every call
    for i in job.group:
        trace = items[i].trace
        if trace is not None and trace.status is Status.OK:
            read.append(trace)
    if job.group and not read:
        run.node_failed(node, outs, index, EmptyInputError(f"every member read by {node.name!r} failed"))
        return
    read_members = len(read)  # the candidates: what it read before the context traces join them
    values, seed_part = _constants(run, node)
    if read or node.context:
        values = dict(values)
        if job.group:
            values["candidates"] = (node.render or format_candidates)(read)
            values["k"] = len(read)
        for key, ctx in node.context.items():
            ctx_traces = run.ok(run.slots[ctx.id])
            if not ctx_traces:
                run.node_failed(node, outs, index, EmptyInputError(
                    f"every trace of context {key!r} read by {node.name!r} failed"))
                return
            values[key] = ctx_traces[0].text if ctx.single else format_candidates(ctx_traces)
            read.extend(ctx_traces)
    user = ("user", node.prompt.render(values))  # plain tuples: see Message
    messages = (("system", node.system.render(values)), user) if node.system is not None else (user,)
    request = _new_request(
        messages=messages, params=plan.params, n=len(outs), logprobs=node.logprobs, model=plan.model_name,
        seed=index_seed(seed_part, index),
    )
    send = run.stream_sender(node.alias or "", node, index) if plan.streamed else plan.send
    if isinstance(node, AgentNode):
        run.start(run_agent(run, node, send, request, tuple([t.id for t in read]), outs[0], index,
                            candidates=tuple(read[:read_members])))
        return
    run.start(call(run, node, send, request, tuple([t.id for t in read]), outs, index))


def _constants(run: RunContext, node: CallNode) -> tuple[dict[str, Any], int]:
    """The node's template variables from the run's inputs and constants, and the node's part of every
    call seed (both computed once per run)."""
    constants: tuple[dict[str, Any], int] | None = run.memo.get(node.id)
    if constants is None:
        constants = run.memo[node.id] = (template_values(run, node), node_seed(run.seed, node.name))
    return constants


def template_values(run: RunContext, node: Any) -> dict[str, Any]:
    """The values of ``node.variables`` in this run: graph inputs, constants, and ``{answer_format}`` (the node's
    answer kind's instruction)."""
    values = {}
    for var, (source, value) in node.variables.items():
        if source == "input":
            if value not in run.inputs:
                raise InputError(f"node {node.name!r} needs input {value!r}, which the run was not given")
            values[var] = run.inputs[value]
        elif source == "answer_format":
            values[var] = run.answers_for(node).instruction
        else:
            values[var] = value
    return values

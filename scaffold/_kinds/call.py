"""Model calls (``generate``, ``sample``, ``aggregate``): one job per group and batch of samples, fired when
the group's members (and any context sets) exist; the request is then sent down :mod:`scaffold._call`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaffold._call import call, call_seed
from scaffold._errors import EmptyInputError, InputError, SubsetSizeError
from scaffold._kinds.registry import expands, members, when_ready
from scaffold._nodes import CallNode, Quorum
from scaffold._template import format_candidates
from scaffold._types import Request, Status, record_maker

if TYPE_CHECKING:
    from scaffold._call import Send
    from scaffold._executor import Run, Slot

_new_request = record_maker(Request)


@expands(CallNode)
def expand_call(run: Run, node: CallNode) -> list[Slot]:
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
    batch = min(node.samples, caps.max_n or node.samples) if caps.supports_n else 1
    send = run.sender(alias)
    params = {**model.params, **node.params}
    outs = run.new_slots(len(groups) * node.samples)
    index = 0
    for group in groups:
        group_slots = [items[i] for i in group]
        for start in range(0, node.samples, batch):
            count = min(batch, node.samples - start)
            slots = outs[index : index + count]
            when_ready(run, node, group_slots + context, slots, fire_call, send, model.name, params, group_slots,
                       slots, index)
            index += count
    return outs


def fire_call(run: Run, node: CallNode, send: Send, model_name: str | None, params: dict[str, Any],
              group: list[Slot], outs: list[Slot], index: int) -> None:
    """Render the prompt from the group's successful members and start the call."""
    read = [t for s in group if (t := s.trace) is not None and t.status is Status.OK]
    if group and not read:
        run.node_failed(node, outs, index, EmptyInputError(f"every member read by {node.name!r} failed"))
        return
    values = _values(run, node)
    if read or node.context:
        values = dict(values)
        if group:
            values["candidates"] = (node.render or format_candidates)(read)
            values["k"] = len(read)
        for key, ctx in node.context.items():
            ctx_traces = [t for s in run.slots[ctx.id] if (t := s.trace) is not None and t.ok]
            if not ctx_traces:
                run.node_failed(node, outs, index, EmptyInputError(
                    f"every trace of context {key!r} read by {node.name!r} failed"))
                return
            values[key] = ctx_traces[0].text if ctx.single else format_candidates(ctx_traces)
            read.extend(ctx_traces)
    user = ("user", node.prompt.render(values))  # plain tuples: see Message
    messages = (("system", node.system.render(values)), user) if node.system is not None else (user,)
    request = _new_request(
        messages=messages, params=params, n=len(outs), logprobs=node.logprobs, model=model_name,
        seed=call_seed(run.seed, node.name, index),
    )
    run.start(call(run, node, send, request, tuple([t.id for t in read]), outs, index))


def _values(run: Run, node: CallNode) -> dict[str, Any]:
    """The node's template variables from the run's inputs and constants (computed once per run)."""
    values = run.memo.get(node.id)
    if values is None:
        values = {}
        for var, (source, value) in node.variables.items():
            if source == "input":
                if value not in run.inputs:
                    raise InputError(f"node {node.name!r} needs input {value!r}, which the run was not given")
                values[var] = run.inputs[value]
            else:
                values[var] = value
        run.memo[node.id] = values
    return values

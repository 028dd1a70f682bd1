"""Candidates from outside the graph: a set given in the run's inputs (``Input``) or fixed at build time
(``candidates``). They become external traces at once; nothing is sent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._answers import Extractor
from scaffold._errors import InputError
from scaffold._kinds.registry import expands
from scaffold._nodes import ConstNode, InputNode, Node
from scaffold._types import Trace, TraceKind, Usage

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext


@expands(InputNode)
def expand_input(run: RunContext, node: InputNode) -> list[Slot]:
    try:
        values = run.inputs[node.input_name]
    except KeyError:
        raise InputError(f"the graph reads candidates from input {node.input_name!r}, which is missing") from None
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InputError(f"input {node.input_name!r} must be a list of candidates, got {type(values).__name__}")
    return external_slots(run, node, values)


@expands(ConstNode)
def expand_const(run: RunContext, node: ConstNode) -> list[Slot]:
    return external_slots(run, node, node.values)


def external_slots(run: RunContext, node: Node, values: Sequence[Any]) -> list[Slot]:
    """One resolved slot per value, each holding its external trace."""
    outs = run.new_slots(len(values))
    extract = run.extractor(node)
    traces = [external_trace(run.run_id, node.name, i, v, extract) for i, v in enumerate(values)]
    for slot, trace in zip(outs, traces):
        run.finish(slot, trace)
    return outs


def external_trace(run_id: str, node: str, index: int, value: Any, extract: Extractor) -> Trace:
    """Turn a user-supplied candidate (string, Trace or mapping) into an external trace. A mapping's ``text``,
    ``answer``, ``model``, ``prompt_tokens``, ``completion_tokens``, ``cost`` and ``logprobs`` are the trace's own;
    its other keys (``reasoning``, a score...) its metadata."""
    tid = f"{run_id}/{node}#{index}"
    if isinstance(value, Trace):
        return Trace(
            id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL, model=value.model,
            text=value.text, answer=value.answer if value.answer is not None else extract(value.text),
            usage=value.usage, cost=value.cost, metadata={"source_id": value.id, **value.metadata},
        )
    if isinstance(value, str):
        return Trace(id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL,
                     text=value, answer=extract(value))
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        extra = {k: v for k, v in value.items() if k not in _TRACE_FIELDS}
        answer = value.get("answer")
        logprobs = value.get("logprobs")
        cost = value.get("cost")
        return Trace(id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL,
                     model=value.get("model"), text=value["text"],
                     answer=str(answer) if answer is not None else extract(value["text"]),
                     usage=Usage(_count(value, "prompt_tokens", index), _count(value, "completion_tokens", index)),
                     cost=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
                     logprobs=tuple(float(v) for v in logprobs) if isinstance(logprobs, Sequence) else None,
                     metadata=extra)
    raise InputError(
        f"candidate {index} of {node!r} is {type(value).__name__}; give a string, a Trace, "
        f"or a mapping with a 'text' key"
    )


_TRACE_FIELDS = ("text", "answer", "model", "prompt_tokens", "completion_tokens", "cost", "logprobs")
"""Keys of a mapping candidate that become the trace's own fields (the rest go to its metadata)."""


def _count(value: Mapping[str, Any], key: str, index: int) -> int:
    found = value.get(key, 0)
    if found is None:
        return 0
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        raise InputError(f"candidate {index}: {key} must be a count of tokens (an integer of 0 or more), "
                         f"got {found!r}")
    return found

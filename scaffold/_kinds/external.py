"""Candidates from outside the graph: a set given in the run's inputs (``Input``) or fixed at build time
(``candidates``). They become external traces at once; nothing is sent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scaffold._errors import InputError
from scaffold._external import external_trace
from scaffold._kinds.registry import expands
from scaffold._nodes import ConstNode, InputNode, Node

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

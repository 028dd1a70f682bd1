"""Set sizes before a run: each node's static size, and the checks only a run's inputs can decide."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._errors import EmptySetError, InputError, SubsetSizeError
from scaffold._nodes import CallNode, InputNode, Quorum, RuleNode, SelectNode
from scaffold._types import Trace

if TYPE_CHECKING:
    from scaffold._graph import Graph


def infer_sizes(graph: Graph, input_sizes: Mapping[str, int] | None = None) -> dict[int, int | None]:
    """Static size of every node (``None`` where unknown), given the sizes of candidate sets supplied at run time."""
    sizes: dict[int, int | None] = {}
    given = dict(input_sizes or {})
    for node in graph.nodes:
        sizes[node.id] = node.size_given(sizes, given)
    return sizes


def check_run_sizes(graph: Graph, inputs: Mapping[str, Any]) -> None:
    """Validate what only the inputs decide (candidate set sizes) before a run sends anything."""
    given: dict[str, int] = {}
    for node in graph.nodes:
        if isinstance(node, InputNode):
            values = inputs.get(node.input_name)
            if values is None:
                raise InputError(f"the graph reads candidates from input {node.input_name!r}, which is missing")
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise InputError(
                    f"input {node.input_name!r} must be a list of candidates, got {type(values).__name__}"
                )
            for i, value in enumerate(values):
                if not (isinstance(value, (str, Trace)) or (isinstance(value, Mapping)
                                                            and isinstance(value.get("text"), str))):
                    raise InputError(f"candidate {i} of input {node.input_name!r} is {type(value).__name__}; "
                                     f"give a string, a Trace, or a mapping with a 'text' key")
            given[node.input_name] = len(values)
    sizes = infer_sizes(graph, given)
    for node in graph.nodes:
        reads = [sizes[r.id] for r in node.reads]
        if isinstance(node, (RuleNode, SelectNode)) or (isinstance(node, CallNode) and node.items is not None):
            if reads[0] == 0:
                raise EmptySetError(f"node {node.name!r} reads an empty set")
        if isinstance(node, CallNode) and node.items is not None and reads[0] is not None:
            node.selector.check(reads[0])
        size = sizes[node.id]
        if isinstance(node.on_error, Quorum) and size is not None and node.on_error.k > size:
            raise SubsetSizeError(f"node {node.name!r}: quorum {node.on_error.k} is larger than its {size} calls")
        if isinstance(node, SelectNode) and reads[0] is not None and node.k > reads[0]:
            raise SubsetSizeError(f"top_k {node.name!r}: k={node.k} is larger than its set (n={reads[0]})")

"""Looking at a built graph without running it: text description, Mermaid, structure, call counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._errors import EmptySetError, GraphDefinitionError, InputError, SubsetSizeError
from scaffold._nodes import (
    CallNode,
    ConcatNode,
    ConstNode,
    GateNode,
    InputNode,
    LoopResultNode,
    MapNode,
    Node,
    Quorum,
    RuleNode,
    SelectNode,
)
from scaffold._template import Template
from scaffold._types import Trace

if TYPE_CHECKING:
    from scaffold._graph import Graph


def infer_sizes(graph: Graph, input_sizes: Mapping[str, int] | None = None) -> dict[int, int | None]:
    """Static size of every node, given the sizes of candidate sets supplied at run time."""
    sizes: dict[int, int | None] = {}
    given = dict(input_sizes or {})
    for node in graph.nodes:
        size: int | None
        if isinstance(node, InputNode):
            size = given.get(node.input_name)
        elif isinstance(node, ConstNode):
            size = len(node.values)
        elif isinstance(node, CallNode):
            groups = node.groups_for(sizes[node.items.id] if node.items is not None else None)
            size = None if groups is None else groups * node.samples
        elif isinstance(node, RuleNode):
            size = 1
        elif isinstance(node, SelectNode):
            size = node.k
        elif isinstance(node, (MapNode, GateNode)):
            assert node.items is not None
            size = sizes[node.items.id]
        elif isinstance(node, ConcatNode):
            parts = [sizes[p.id] for p in node.parts]
            size = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
        elif isinstance(node, LoopResultNode):
            size = sizes[node.candidates[0].id]
        else:
            size = node.size
        sizes[node.id] = size
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


def count_calls(graph: Graph, input_sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """Model calls (choices) per alias; loops with ``until`` count every iteration (an upper bound)."""
    sizes = infer_sizes(graph, input_sizes)
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if isinstance(node, CallNode):
            try:
                calls = node.calls(sizes)
            except GraphDefinitionError:
                names = sorted(n.input_name for n in graph.nodes if isinstance(n, InputNode))
                raise GraphDefinitionError(
                    f"node {node.name!r} reads candidates supplied at run time; pass input_sizes, e.g. "
                    f"count_calls(input_sizes={{{', '.join(repr(n) + ': 8' for n in names)}}})"
                ) from None
            assert node.alias is not None
            counts[node.alias] = counts.get(node.alias, 0) + calls
    return counts


def stable_value(value: Any) -> Any:
    """A build parameter as JSON data that is the same in every process (no memory addresses).

    Functions are named by module and qualified name, templates by their text, sequences and
    mappings element by element; other objects by ``repr``.

    Example:
        >>> import math
        >>> stable_value((1, "a", math.sqrt)), stable_value({"k": None})
        ([1, 'a', 'math.sqrt'], {'k': None})
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Template):
        return value.text
    if isinstance(value, Mapping):
        return {str(k): stable_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stable_value(v) for v in value]
    name = getattr(value, "__qualname__", None)
    if callable(value) and isinstance(name, str):
        return f"{getattr(value, '__module__', None) or '?'}.{name}"
    return repr(value)


def spec(graph: Graph) -> dict[str, Any]:
    """The graph's structure as JSON-friendly data (recorded with every run)."""
    return {
        "name": graph.name,
        "inputs": list(graph.inputs),
        "params": {k: stable_value(v) for k, v in graph.params.items()},
        "nodes": [
            {
                "name": n.name,
                "kind": n.kind,
                "alias": n.alias,
                "size": n.size,
                "reads": [r.name for r in n.reads],
                "control": n.control.name if n.control is not None else None,
            }
            for n in graph.nodes
        ],
        "output": _output_names(graph.output),
    }


def _output_names(value: Any) -> Any:
    if isinstance(value, Node):
        return value.name
    if isinstance(value, Mapping):
        return {k: _output_names(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_output_names(v) for v in value]
    return None


def describe(graph: Graph) -> str:
    """A table of the nodes: name, what it is, model alias, size and what it reads."""
    rows = [("node", "kind", "model", "size", "reads")]
    for n in graph.nodes:
        reads = ", ".join(r.name for r in n.reads)
        if n.control is not None:
            reads += f" (if {n.control.name} continues)"
        rows.append((n.name, n.label(), n.alias or "", "?" if n.size is None else str(n.size), reads))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"graph {graph.name}({', '.join(graph.inputs)})"
             + (f" with {', '.join(f'{k}={v!r}' for k, v in graph.params.items())}" if graph.params else "")]
    for row in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
    try:
        counts = count_calls(graph)
        total = sum(counts.values())
        bound = " (at most: loops may stop early)" if any(isinstance(n, GateNode) for n in graph.nodes) else ""
        lines.append(f"calls: {total}{bound} — " + ", ".join(f"{a}: {c}" for a, c in sorted(counts.items())))
    except GraphDefinitionError:
        lines.append("calls: depend on the sizes of candidate sets given at run time")
    return "\n".join(lines).rstrip()


def mermaid(graph: Graph) -> str:
    """The graph as a Mermaid flowchart (paste into any Markdown that renders Mermaid)."""
    lines = ["flowchart TD"]
    for n in graph.nodes:
        detail = n.label() + (f" · {n.alias}" if n.alias else "") + (f" · ×{n.size}" if n.size else "")
        text = f"{n.name}<br/>{detail}".replace('"', "'")
        shape = ('(["', '"])') if isinstance(n, (InputNode, ConstNode)) else (
            ('{{"', '"}}') if isinstance(n, GateNode) else ('["', '"]'))
        lines.append(f"    n{n.id}{shape[0]}{text}{shape[1]}")
    for n in graph.nodes:
        for r in n.reads:
            lines.append(f"    n{r.id} --> n{n.id}")
        if n.control is not None and n.control not in n.reads:
            lines.append(f"    n{n.control.id} -.-> n{n.id}")
    return "\n".join(lines)

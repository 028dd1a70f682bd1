"""Looking at a built graph without running it: text description, Mermaid, structure, call counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scaffold._errors import GraphDefinitionError
from scaffold._json import to_json
from scaffold._nodes import (
    AgentNode,
    ConstNode,
    GateNode,
    InputNode,
    Node,
)
from scaffold._sizes import infer_sizes

if TYPE_CHECKING:
    from scaffold._graph import Graph


def count_calls(graph: Graph, input_sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """Model calls (choices) per alias; loops with ``until`` count every iteration (an upper bound)."""
    sizes = infer_sizes(graph, input_sizes)
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.alias is not None:  # call nodes, agents and judged votes
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


def spec(graph: Graph) -> dict[str, Any]:
    """The graph's structure as JSON-friendly data (recorded with every run)."""
    return {
        "name": graph.name,
        "inputs": list(graph.inputs),
        "params": {k: to_json(v, stable=True) for k, v in graph.params.items()},
        "nodes": [
            {
                "name": n.name,
                "kind": n.kind,
                "alias": n.alias,
                "size": n.size,
                "reads": [r.name for r in n.reads],
                "control": n.control.name if n.control is not None else None,
                **_agent_spec(n),
            }
            for n in graph.nodes
        ],
        "output": _output_names(graph.output),
    }


def _agent_spec(node: Node) -> dict[str, Any]:
    """An agent's tools and limits (a node without tools adds nothing, so older specs stay as they were)."""
    if not isinstance(node, AgentNode):
        return {}
    return {"tools": node.tool_names(), "max_turns": node.max_turns, "token_budget": node.token_budget,
            "context_budget": node.context_budget}


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

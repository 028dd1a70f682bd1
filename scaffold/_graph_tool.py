"""A graph as a tool: an agent decides to spend a whole graph (sample three models and vote, say) on a question.

The tool's parameters are the graph's inputs (text); calling it runs the graph as a run of its own
on the agent's models (or the ones given), recorded in the agent's store under a run id made from the
tool call's trace id, so a resumed agent resumes the sub-run too instead of paying for it again. The
tool's answer is the output trace's text (several traces: numbered); the tool trace's
``metadata["run_id"]`` names the sub-run.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scaffold._errors import GraphDefinitionError, ToolFailed
from scaffold._template import format_candidates
from scaffold._tools import DEFAULT_MAX_RESULT_CHARS, Tool, current_tool_call, parse_docstring
from scaffold._types import Trace

if TYPE_CHECKING:
    from scaffold._graph import Graph

__all__ = ["GraphTool"]


class GraphTool(Tool):
    """A :class:`~scaffold._graph.Graph` called as a tool (made by ``sf.tool(graph)`` or ``graph.as_tool()``)."""

    def __init__(self, graph: Graph, *, name: str | None = None, description: str | None = None,
                 timeout: float | None = None, max_in_flight: int | None = None,
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS, models: Mapping[str, Any] | None = None) -> None:
        summary, arg_docs = parse_docstring(inspect.getdoc(graph.fn) or "")
        if graph.set_inputs:
            raise GraphDefinitionError(f"graph {graph.name!r} reads {', '.join(sorted(graph.set_inputs))} as a set of "
                                       f"candidates; a tool's arguments are text")
        parameters = {
            "type": "object",
            "properties": {i: {"type": "string", **({"description": arg_docs[i]} if i in arg_docs else {})}
                           for i in graph.inputs},
            "required": list(graph.inputs),
            "additionalProperties": False,
        }
        super().__init__(name or graph.name, description if description is not None else summary or graph.name,
                         parameters, timeout=timeout, max_in_flight=max_in_flight, max_result_chars=max_result_chars)
        self.graph = graph
        self.models = dict(models) if models is not None else None

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        from scaffold._errors import ToolArgumentsError

        missing = [i for i in self.graph.inputs if i not in arguments]
        extra = [k for k in arguments if k not in self.graph.inputs]
        if missing or extra:
            raise ToolArgumentsError(f"{self.name}: takes {', '.join(self.graph.inputs) or 'no arguments'}"
                                     + (f"; missing {', '.join(missing)}" if missing else "")
                                     + (f"; unknown {', '.join(extra)}" if extra else ""))
        bad = [k for k, v in arguments.items() if not isinstance(v, (str, int, float))]
        if bad:
            raise ToolArgumentsError(f"{self.name}: {', '.join(bad)} must be text")
        return {k: str(v) for k, v in arguments.items()}

    def recorded(self) -> Mapping[str, Any] | None:
        """The sub-run's id, when called inside an agent."""
        context = current_tool_call()
        return None if context is None else {"run_id": _sub_run_id(context.trace_id)}

    async def invoke(self, arguments: dict[str, Any]) -> str:
        context = current_tool_call()
        models = self.models if self.models is not None else (context.models if context is not None else None)
        if models is None:
            raise ToolFailed(f"{self.name}: a graph tool called outside an agent needs models=", "ModelAliasError")
        models = {alias: model for alias, model in models.items() if alias in self.graph.aliases}
        run_id = _sub_run_id(context.trace_id) if context is not None else None
        store = context.store if context is not None else None
        result = await self.graph.run(arguments, models=models, run_id=run_id, store=store)
        return _output_text(result.output)


def _sub_run_id(trace_id: str) -> str:
    return trace_id.replace("/", ".").replace("#", ".")


def _output_text(output: Any) -> str:
    if isinstance(output, Trace):
        return output.text
    if isinstance(output, (list, tuple)) and all(isinstance(t, Trace) for t in output):
        return format_candidates([t for t in output if t.ok])
    if isinstance(output, Mapping):
        return "\n\n".join(f"{key}:\n{_output_text(value)}" for key, value in output.items())
    return str(output)

"""Tools that let an aggregating agent read its candidates a piece at a time instead of all at once.

After AggAgent: a tool-using aggregator (``sf.aggregate(items, tools=candidate_tools(), ...)``) whose
prompt does not inline the candidates lists them, opens the ones it needs (a solution's end, a range
of lines), searches them for a string, and cites the ones its answer relies on. The tools read
:attr:`~scaffold._tools.ToolContext.candidates`, the traces the agent read, so one set of tools
serves every aggregation of a graph.

Candidates are numbered from 1, as ``{candidates}`` numbers them in an aggregation prompt. A number
out of range is a :class:`~scaffold.ToolArgumentsError`; a call outside an aggregating agent (a plain
``sf.agent``, or no agent) a :class:`~scaffold.ToolError`. As every tool's failure, both are shown to
the model as the tool's answer and recorded on its ``tool`` trace. ``cite`` records the numbers it was
given, and the cited candidates' trace ids, in its trace's metadata (``cited``, ``cited_ids``).

Examples:
    >>> [t.name for t in candidate_tools()]
    ['list_candidates', 'get_solution', 'get_segment', 'search_candidates', 'cite']
    >>> import asyncio
    >>> outcome = asyncio.run(candidate_tools()[0].call("{}"))  # outside an aggregating agent
    >>> type(outcome.error).__name__, outcome.text.endswith("this call has none")
    ('ToolError', True)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scaffold._errors import ToolArgumentsError, ToolError
from scaffold._tools import FunctionTool, Tool, ToolOutcome, current_tool_call, tool

if TYPE_CHECKING:
    from scaffold._types import Trace

__all__ = ["CiteTool", "candidate_tools"]

SOLUTION_LINES = 5
"""How many last lines of a candidate ``get_solution`` shows."""


def candidate_tools(*, max_chars: int = 2000) -> list[Tool]:
    """The five candidate tools; ``max_chars`` caps what one call of ``get_solution``, ``get_segment`` or
    ``search_candidates`` shows (the rest is cut, with a note saying so).

    Examples:
        >>> tools = candidate_tools(max_chars=500)
        >>> tools[2].spec()["function"]["parameters"]["required"]
        ['index', 'start', 'end']
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")

    def list_candidates() -> str:
        """List the candidates: one line each with its number, its final answer and its length."""
        traces = _candidates("list_candidates")
        lines = [f"{len(traces)} candidates (number: final answer (length))"]
        lines += [f"{i}: {_answer(t)} ({len(t.text)} chars)" for i, t in enumerate(traces, 1)]
        return "\n".join(lines)

    def get_solution(index: int) -> str:
        """Show one candidate's final answer and the last lines of its solution.

        Args:
            index: The candidate's number (from 1).
        """
        trace = _candidate("get_solution", index)
        lines = trace.text.splitlines()
        tail = "\n".join(lines[-SOLUTION_LINES:])
        shown = f"Candidate {index}: final answer {_answer(trace)}; its last {min(len(lines), SOLUTION_LINES)} " \
                f"of {len(lines)} lines:\n"
        return shown + _cut(tail, max_chars, from_end=True)

    def get_segment(index: int, start: int, end: int) -> str:
        """Show lines ``start`` to ``end`` (from 1, both included) of one candidate's solution.

        Args:
            index: The candidate's number (from 1).
            start: The first line to show (from 1).
            end: The last line to show (included).
        """
        trace = _candidate("get_segment", index)
        if start < 1 or end < start:
            raise ToolArgumentsError(f"get_segment: lines {start} to {end}: give 1 <= start <= end")
        lines = trace.text.splitlines()
        if start > len(lines):
            raise ToolArgumentsError(f"get_segment: candidate {index} has {len(lines)} lines, start={start}")
        numbered = [f"{n}| {line}" for n, line in enumerate(lines[start - 1:end], start)]
        return _cut("\n".join(numbered), max_chars)

    def search_candidates(query: str) -> str:
        """Find the candidates whose solution contains a string (case-insensitive), with the lines that do.

        Args:
            query: The text to look for.
        """
        traces = _candidates("search_candidates")
        needle = query.strip().lower()
        if not needle:
            raise ToolArgumentsError("search_candidates: the query is empty")
        hits = [(i, n, line) for i, t in enumerate(traces, 1)
                for n, line in enumerate(t.text.splitlines(), 1) if needle in line.lower()]
        found = sorted({i for i, _, _ in hits})
        head = f"{len(found)} of {len(traces)} candidates contain {query.strip()!r}"
        if not hits:
            return head
        lines = [f"{head}: {', '.join(map(str, found))}"] + [f"{i}:{n}| {line}" for i, n, line in hits]
        return _cut("\n".join(lines), max_chars)

    def cite(indices: list[int]) -> str:
        """Cite the candidates your answer relies on (call it before you answer).

        Args:
            indices: The numbers (from 1) of the candidates you rely on.
        """
        traces = _candidates("cite")
        for index in indices:
            _check_index("cite", index, len(traces))
        cited = sorted(set(indices))
        return f"cited {len(cited)} of {len(traces)} candidates: {', '.join(map(str, cited))}"

    # they read memory only: no worker thread
    return [tool(list_candidates, blocking=False), tool(get_solution, blocking=False),
            tool(get_segment, blocking=False), tool(search_candidates, blocking=False), CiteTool(cite, blocking=False)]


class CiteTool(FunctionTool):
    """``cite``: its trace's metadata records the numbers it cited (``cited``) and their trace ids
    (``cited_ids``), so a reader of the run finds the candidates an answer relies on without parsing text.

    (:meth:`~scaffold.Tool.recorded` takes no arguments, so it cannot say what one call cited: the
    outcome of each call gets them here instead.)
    """

    async def call(self, arguments: str | Mapping[str, Any]) -> ToolOutcome:
        outcome = await super().call(arguments)
        if not outcome.ok:
            return outcome
        indices = sorted(set(self.validate(_as_mapping(arguments))["indices"]))
        context = current_tool_call()
        traces = context.candidates if context is not None else ()
        extra = {"cited": indices, "cited_ids": [traces[i - 1].id for i in indices]}
        return dataclasses.replace(outcome, metadata={**(outcome.metadata or {}), **extra})


def _as_mapping(arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    return dict(arguments) if isinstance(arguments, Mapping) else json.loads(arguments.strip() or "{}")


def _candidates(name: str) -> Sequence[Trace]:
    context = current_tool_call()
    if context is None or not context.candidates:
        raise ToolError(f"{name} reads the candidates of an aggregating agent (sf.aggregate(..., tools=...)); "
                        f"this call has none")
    return context.candidates


def _check_index(name: str, index: int, count: int) -> None:
    if not 1 <= index <= count:
        raise ToolArgumentsError(f"{name}: there is no candidate {index}; the candidates are 1 to {count}")


def _candidate(name: str, index: int) -> Trace:
    traces = _candidates(name)
    _check_index(name, index, len(traces))
    return traces[index - 1]


def _answer(trace: Trace) -> str:
    return trace.answer if trace.answer is not None else "(none)"


def _cut(text: str, max_chars: int, *, from_end: bool = False) -> str:
    """``text``, or ``max_chars`` of it (its start, or its end) with a note of what was cut.

    Examples:
        >>> _cut("abcdef", 3)
        'abc\\n[cut: 6 characters, the first 3 shown]'
    """
    if len(text) <= max_chars:
        return text
    if from_end:
        return f"[cut: {len(text)} characters, the last {max_chars} shown]\n" + text[-max_chars:]
    return text[:max_chars] + f"\n[cut: {len(text)} characters, the first {max_chars} shown]"

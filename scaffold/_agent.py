"""The agent loop: model turns and tool calls until the model answers, recorded turn by turn and resumable.

One agent (one trace of an :class:`~scaffold._nodes.AgentNode`) with id ``B = {run}/{node}#{i}``
records:

- each turn that called tools as a model trace ``B.t`` (``metadata["turn"] = t``, its calls in
  ``metadata["tool_calls"]``), reading the agent's inputs and every turn and tool result before it;
- each tool call of turn ``t`` as a ``tool`` trace ``B.t.j`` reading that turn, with the call's
  arguments, result (its text), typed error and latency;
- the last turn (the answer) as ``B`` itself: the agent's trace, the one sets and votes read.

Resume: a turn whose trace was recorded for the same request (same conversation, tools and
parameters) and inputs is not sent again, and a tool call recorded with the same arguments is not
run again (a failed call included: its error was the model's answer), so a resumed agent walks its
recorded turns and pays only from where it stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scaffold._call import answered, index_seed, node_seed, unanswered
from scaffold._errors import AgentLimitError, BackendError, UnknownToolError
from scaffold._messages import assistant_message, call_from_dict, tool_calls_of, tool_message
from scaffold._tools import Tool, ToolContext, ToolOutcome, reset_tool_call, set_tool_call
from scaffold._types import Request, Status, ToolCall, Trace, TraceKind

if TYPE_CHECKING:
    from scaffold._call import Send
    from scaffold._jobs import Slot
    from scaffold._nodes import AgentNode
    from scaffold._run_context import RunContext

__all__ = ["client_call_id", "client_turns", "last_turn_reason", "run_agent", "run_of_client_call",
           "tool_calls_of_trace"]


def tool_calls_of_trace(trace: Trace) -> tuple[ToolCall, ...]:
    """The tool calls a model trace asked for (recorded in its metadata)."""
    calls = trace.metadata.get("tool_calls") if trace.metadata else None
    if not calls:
        return ()
    return tuple(call_from_dict(call, i) for i, call in enumerate(calls))


async def run_agent(run: RunContext, node: AgentNode, send: Send, first: Request, inputs: tuple[str, ...],
                    out: Slot, index: int, *, candidates: tuple[Trace, ...] = ()) -> None:
    """Run agent ``index`` of ``node`` from its first request; resolve ``out`` with its answer (or its failure).

    ``candidates`` are the traces an aggregating agent read (its tools see them in their
    :class:`~scaffold._tools.ToolContext`)."""
    base = f"{run.run_id}/{node.name}#{index}"
    tools = {t.name: t for t in node.tools}
    client = run.client_node is node
    client_specs = tuple(run.client_tools) if client else ()
    client_names = {_spec_name(spec) for spec in client_specs}
    specs = tuple(t.spec() for t in node.tools) + client_specs
    given = client_turns(run.continuation) if client else []
    messages = list(first.messages)
    lineage = list(inputs)
    spent = context = 0
    request = first
    try:
        for turn in range(node.max_turns):
            why = last_turn_reason(node, turn, spent, context)
            last = why is not None
            seed = first.seed if turn == 0 else index_seed(node_seed(run.seed, f"{node.name}@{turn}"), index)
            request = dataclasses.replace(
                first, messages=tuple(messages), n=1, seed=seed, tools=specs,
                tool_choice="none" if last and specs else first.tool_choice)
            trace: Trace | None
            if turn < len(given):
                trace = await _given_turn(run, node, request, tuple(lineage), base, turn, given[turn][0],
                                          client_names)
                if not tool_calls_of_trace(trace):  # nothing of the client's left in it: the model's turn
                    trace = await _turn(run, node, send, request, tuple(lineage), base, turn, index, out)
            else:
                trace = await _turn(run, node, send, request, tuple(lineage), base, turn, index, out)
            if trace is None:
                return  # failed, and recorded as the agent's trace
            context = trace.usage.total_tokens
            spent += context
            calls = tool_calls_of_trace(trace)
            if not calls:
                run.finish(out, trace)
                return
            if last:
                run.record(trace)
                run.node_failed(node, [out], index, AgentLimitError(
                    f"{node.name}#{index} still called {', '.join(c.name for c in calls)} on its last turn "
                    f"({why}, turn {turn + 1}, {spent} tokens)"), request, (*lineage, trace.id))
                return
            ours = [(j, call) for j, call in enumerate(calls) if call.name not in client_names]
            theirs = [(j, call) for j, call in enumerate(calls) if call.name in client_names]
            answers = given[turn][1] if turn < len(given) else {}
            served = {j: client_call_id(run.run_id, index, turn, j) for j, _ in theirs}
            waiting = any(served[j] not in answers and call.id not in answers for j, call in theirs)
            if not waiting:  # recorded before its tool calls, which read it
                run.record(trace)
            results = dict(zip([j for j, _ in ours], await _tool_calls(run, node, tools, ours, trace.id, candidates)))
            if waiting:  # the client runs its tools: the run ends here, its output this turn
                asked = [dataclasses.replace(call, id=served[j]).as_dict() for j, call in theirs]
                run.finish(out, dataclasses.replace(trace, metadata={**trace.metadata, "client_tool_calls": asked}))
                return
            for j, call in theirs:
                answer = answers.get(served[j], answers.get(call.id, ""))
                results[j] = _client_result(run, node, trace.id, j, call, answer)
            messages.append(assistant_message(trace.text, calls))
            lineage.append(trace.id)
            for j, call in enumerate(calls):
                messages.append(tool_message(call.id, call.name, results[j].text))
                lineage.append(results[j].id)
    except asyncio.CancelledError:
        if out.trace is None:
            run.record(unanswered(run, node, request, tuple(lineage), index, time.time(), 0.0))
        raise
    finally:
        run.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]


def last_turn_reason(node: AgentNode, turn: int, spent: int, context: int) -> str | None:
    """Why turn ``turn`` (from 0) is the agent's last, sent with ``tool_choice="none"``; ``None`` when it is not.

    ``spent`` is the tokens of every turn before it, ``context`` the size of the turn before it (its prompt and
    completion tokens: the conversation so far).
    """
    if turn == node.max_turns - 1:
        return f"max_turns={node.max_turns}"
    if node.token_budget is not None and spent >= node.token_budget:
        return f"its token budget of {node.token_budget}"
    if node.context_budget is not None and context >= node.context_budget:
        return f"its context budget of {node.context_budget}: the conversation reached {context} tokens"
    return None


def client_call_id(run_id: str, index: int, turn: int, position: int) -> str:
    """The id a client sees for a call of its own tool (call ``position`` of turn ``turn`` of agent ``index``):
    it names the run, so the client's answer finds the run to resume.

    Examples:
        >>> client_call_id("0123456789abcdef", 0, 1, 2)
        'call_0123456789abcdef_0_1_2'
        >>> run_of_client_call("call_0123456789abcdef_0_1_2")
        '0123456789abcdef'
    """
    return f"call_{run_id}_{index}_{turn}_{position}"


_CLIENT_ID = re.compile(r"^call_([0-9A-Za-z-]{1,64})_\d+_\d+_\d+$")


def run_of_client_call(call_id: str) -> str | None:
    """The run id a :func:`client_call_id` names, ``None`` for any other id."""
    match = _CLIENT_ID.match(call_id)
    return match.group(1) if match else None


def client_turns(continuation: Sequence[Sequence[Any]]) -> list[tuple[tuple[Any, ...], dict[str, str]]]:
    """A conversation's turns after its last user message: each assistant turn that called tools, with the
    answers (by call id) of the tool messages that follow it."""
    turns: list[tuple[tuple[Any, ...], dict[str, str]]] = []
    for message in continuation:
        if message[0] == "assistant" and tool_calls_of(message):
            turns.append((tuple(message), {}))
        elif message[0] == "tool" and turns and len(message) > 2:
            turns[-1][1][str(message[2].get("tool_call_id", ""))] = message[1]
    return turns


def _spec_name(spec: Any) -> str:
    function = spec.get("function", spec) if isinstance(spec, dict) else {}
    return str(function.get("name", ""))


async def _given_turn(run: RunContext, node: AgentNode, request: Request, inputs: tuple[str, ...], base: str,
                      turn: int, message: tuple[Any, ...], client_names: set[str]) -> Trace:
    """A turn the client sent back (the assistant message that called its tools): the recorded turn when it is the
    same one, else the client's message as the turn's record (no model call). A client's message may only call the
    client's own tools: a call of one of the agent's tools in it is dropped (and named in ``metadata["dropped"]``),
    so no request can make the server run its tools with arguments the model never wrote."""
    calls = tool_calls_of(message)
    if run.reuse:
        recorded = await _recorded(run, f"{base}.{turn}", request, inputs)
        if recorded is not None:
            mine = {(c.name, _canonical(c.arguments)) for c in tool_calls_of_trace(recorded)}
            if {(c.name, _canonical(c.arguments)) for c in calls} <= mine:
                return recorded
    kept = [call for call in calls if call.name in client_names]
    metadata: dict[str, Any] = {"turn": turn, "tool_calls": [call.as_dict() for call in kept], "from_client": True}
    if len(kept) < len(calls):
        metadata["dropped"] = [call.name for call in calls if call.name not in client_names]
    return Trace(
        id=f"{base}.{turn}", run_id=run.run_id, node=node.name, index=_agent_index(base), model=node.alias,
        request=request, text=message[1] or "", inputs=inputs, started_at=time.time(), cost=0.0, metadata=metadata,
    )


def _agent_index(trace_id: str) -> int:
    """The agent's index in its node, from the id of one of its traces (``.../node#i.t.j``)."""
    return int(trace_id.rsplit("#", 1)[1].split(".")[0])


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def _client_result(run: RunContext, node: AgentNode, turn_id: str, position: int, call: ToolCall, text: str) -> Trace:
    trace = Trace(
        id=f"{turn_id}.{position}", run_id=run.run_id, node=node.name, index=_agent_index(turn_id),
        kind=TraceKind.TOOL, text=text, started_at=time.time(), inputs=(turn_id,),
        metadata={"tool": call.name, "arguments": call.arguments, "call_id": call.id, "client": True},
    )
    run.record(trace)
    return trace


async def _turn(run: RunContext, node: AgentNode, send: Send, request: Request, inputs: tuple[str, ...], base: str,
                turn: int, index: int, out: Slot) -> Trace | None:
    """One model turn: from the record when it is there, else sent; ``None`` when it failed (recorded)."""
    if run.reuse:
        for trace_id in (f"{base}.{turn}", base):
            recorded = await _recorded(run, trace_id, request, inputs)
            if recorded is not None and recorded.metadata.get("turn", 0) == turn:
                return recorded
    started, t0 = time.time(), time.perf_counter()
    try:
        reply = await send(request)
        if len(reply.completions) != 1:
            raise BackendError(f"backend returned {len(reply.completions)} completions for n=1")
        completion = reply.completions[0]
        trace = answered(run, node, request, inputs, index, completion, reply.started, reply.latency, reply.attempts)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        run.node_failed(node, [out], index, exc, request, inputs, started, time.perf_counter() - t0)
        return None
    metadata: dict[str, Any] = {**trace.metadata, "turn": turn}
    if completion.tool_calls:
        metadata["tool_calls"] = [call.as_dict() for call in completion.tool_calls]
        return dataclasses.replace(trace, id=f"{base}.{turn}", answer=None, metadata=metadata)
    return dataclasses.replace(trace, metadata=metadata)


async def _recorded(run: RunContext, trace_id: str, request: Request | None, inputs: tuple[str, ...]) -> Trace | None:
    for source in run.reuse:
        trace = await source.take_trace(trace_id, request, inputs)
        if trace is not None:
            return trace
    return None


async def _tool_calls(run: RunContext, node: AgentNode, tools: dict[str, Tool],
                      calls: Sequence[tuple[int, ToolCall]], turn_id: str,
                      candidates: tuple[Trace, ...] = ()) -> list[Trace]:
    """Run one turn's tool calls (``(position, call)`` pairs; at once when there are several) and record a trace
    for each."""
    if len(calls) == 1:
        return [await _tool_call(run, node, tools, calls[0][1], turn_id, calls[0][0], candidates)]
    return list(await asyncio.gather(*[_tool_call(run, node, tools, call, turn_id, j, candidates)
                                       for j, call in calls]))


async def _tool_call(run: RunContext, node: AgentNode, tools: dict[str, Tool], call: ToolCall, turn_id: str,
                     position: int, candidates: tuple[Trace, ...] = ()) -> Trace:
    trace_id = f"{turn_id}.{position}"
    if run.reuse:
        recorded = await _recorded(run, trace_id, None, (turn_id,))
        if recorded is not None and recorded.metadata.get("arguments") == call.arguments \
                and recorded.metadata.get("tool") == call.name:
            run.record(recorded)
            return recorded
    started = time.time()
    chosen = tools.get(call.name)
    if chosen is None:
        known = ", ".join(tools) or "none"
        error = UnknownToolError(f"no tool is named {call.name!r}; the tools are: {known}")
        outcome = ToolOutcome(f"UnknownToolError: {error}", error)
    else:
        token = set_tool_call(ToolContext(run.run_id, trace_id, run.models, run.store, candidates))
        try:
            outcome = await chosen.call(call.arguments)
        finally:
            reset_tool_call(token)
    metadata: dict[str, Any] = {"tool": call.name, "arguments": call.arguments, "call_id": call.id}
    if outcome.metadata:
        metadata.update(outcome.metadata)
    trace = Trace(
        id=trace_id, run_id=run.run_id, node=node.name, index=_agent_index(trace_id),
        kind=TraceKind.TOOL, text=outcome.text, latency=outcome.latency, started_at=started, inputs=(turn_id,),
        status=Status.OK if outcome.error is None else Status.ERROR,
        error=None if outcome.error is None else f"{type(outcome.error).__name__}: {outcome.error}",
        metadata=metadata,
    )
    run.record(trace)
    return trace

"""Response bodies: a request's runs in OpenAI's shapes, with exact usage and the ``scaffold`` extension.

``usage`` sums prompt and completion tokens over every model call of every run the request made (all
its internal calls, not just the last). The ``scaffold`` object adds the run ids (``scaffold runs show
ID`` reads each back), the number of calls, the cost in dollars (``null`` when any call's price is
unknown) and tokens per node.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scaffold import _openai_wire as wire
from scaffold._types import Trace, TraceKind

if TYPE_CHECKING:
    from scaffold._result import RunResult

__all__ = ["accounting", "chat_body", "chunk", "completion_body", "final_trace", "headers"]


def final_trace(result: RunResult) -> Trace | None:
    """The trace whose text answers: the output when it is one trace, else the first successful one."""
    output = result.output
    if isinstance(output, Trace):
        return output
    if isinstance(output, (list, tuple)):
        return next((t for t in output if isinstance(t, Trace)), None)
    return None


def finish_reason(trace: Trace) -> str:
    if client_calls(trace):
        return "tool_calls"
    reason = trace.metadata.get("finish_reason") if trace.metadata else None
    return reason if reason in ("stop", "length", "content_filter") else "stop"


def client_calls(trace: Trace) -> list[dict[str, Any]] | None:
    """The client's tools an agent's turn called, in OpenAI's format (the run waits for their answers)."""
    calls = trace.metadata.get("client_tool_calls") if trace.metadata else None
    return list(calls) if calls else None


def accounting(results: Sequence[RunResult]) -> tuple[dict[str, int], dict[str, Any]]:
    """``usage`` and the ``scaffold`` extension of a request's runs."""
    prompt = completion = calls = 0
    costs: list[float | None] = []
    nodes: dict[str, dict[str, int]] = {}
    for result in results:
        for trace in result.traces:
            if trace.kind is not TraceKind.MODEL:
                continue
            calls += 1
            prompt += trace.usage.prompt_tokens
            completion += trace.usage.completion_tokens
            costs.append(trace.cost)
            node = nodes.setdefault(trace.node, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
            node["calls"] += 1
            node["prompt_tokens"] += trace.usage.prompt_tokens
            node["completion_tokens"] += trace.usage.completion_tokens
    cost = None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))
    usage = wire.usage(prompt, completion)
    extension = {"run_ids": [r.run_id for r in results], "calls": calls, "cost": cost, "nodes": nodes,
                 "answers": [r.answer for r in results]}
    return usage, extension


def headers(run_ids: Sequence[str], cost: float | None | str = "unknown") -> dict[str, str]:
    """``x-scaffold-run-id`` (comma-separated for ``n > 1``) and, once known, ``x-scaffold-cost``."""
    out = {"x-scaffold-run-id": ",".join(run_ids)}
    if cost != "unknown":
        out["x-scaffold-cost"] = "unknown" if cost is None else f"{cost:.6f}"
    return out


def body(chat: bool, model: str, results: Sequence[RunResult], traces: Sequence[Trace]) -> dict[str, Any]:
    """The JSON answer of a chat (``chat``) or text completion request whose choices are ``traces``."""
    usage, extension = accounting(results)
    return {
        "id": wire.response_id(chat, results[0].run_id), "object": wire.object_name(chat),
        "created": int(time.time()), "model": model, "system_fingerprint": None,
        "choices": [wire.choice(chat, i, trace.text, finish_reason(trace),
                                tool_calls=client_calls(trace) if chat else None) for i, trace in enumerate(traces)],
        "usage": usage, "scaffold": extension,
    }


def chat_body(model: str, results: Sequence[RunResult], traces: Sequence[Trace]) -> dict[str, Any]:
    return body(True, model, results, traces)


def completion_body(model: str, results: Sequence[RunResult], traces: Sequence[Trace]) -> dict[str, Any]:
    return body(False, model, results, traces)


def chunk(chat: bool, response_id: str, model: str, created: int, choice: int | None, *, content: str | None = None,
          role: bool = False, reasoning: str | None = None, finish: str | None = None,
          tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One streamed chunk (``choice=None``: the usage chunk, with no choices)."""
    base: dict[str, Any] = {"id": response_id, "object": wire.object_name(chat, chunk=True), "created": created,
                            "model": model, "system_fingerprint": None}
    if choice is None:
        return {**base, "choices": []}
    return {**base, "choices": [wire.chunk_choice(chat, choice, content=content, role=role, reasoning=reasoning,
                                                  finish=finish, tool_calls=tool_calls)]}

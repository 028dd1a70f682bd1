"""Candidates given from outside a graph (strings, traces or mappings) as external traces: what the ``Input`` and
``candidates`` nodes make at run time and what an import records (a leaf, so the store can make them too).

Examples:
    >>> t = external_trace("r", "outputs", 0, {"text": "so 4", "answer": "4", "model": "m", "reasoning": "..."},
    ...                    lambda text: None)
    >>> t.id, t.answer, t.model, dict(t.metadata)
    ('r/outputs#0', '4', 'm', {'reasoning': '...'})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._answers import Extractor
from scaffold._errors import InputError
from scaffold._types import Trace, TraceKind, Usage, record_maker

__all__ = ["external_trace"]

_new_trace = record_maker(Trace)  # twice as fast as Trace(...): an import makes one per output
_new_usage = record_maker(Usage)


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
        extra = {k: v for k, v in value.items() if k not in TRACE_FIELDS}
        answer = value.get("answer")
        logprobs = value.get("logprobs")
        cost = value.get("cost")
        return _new_trace(id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL,
                          model=value.get("model"), text=value["text"],
                          answer=str(answer) if answer is not None else extract(value["text"]),
                          usage=_new_usage(prompt_tokens=_count(value, "prompt_tokens", index),
                                           completion_tokens=_count(value, "completion_tokens", index)),
                          cost=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
                          logprobs=tuple(float(v) for v in logprobs) if isinstance(logprobs, Sequence) else None,
                          metadata=extra)
    raise InputError(
        f"candidate {index} of {node!r} is {type(value).__name__}; give a string, a Trace, "
        f"or a mapping with a 'text' key"
    )


TRACE_FIELDS = ("text", "answer", "model", "prompt_tokens", "completion_tokens", "cost", "logprobs")
"""Keys of a mapping candidate that become the trace's own fields (the rest go to its metadata)."""


def _count(value: Mapping[str, Any], key: str, index: int) -> int:
    found = value.get(key, 0)
    if found is None:
        return 0
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        raise InputError(f"candidate {index}: {key} must be a count of tokens (an integer of 0 or more), "
                         f"got {found!r}")
    return found

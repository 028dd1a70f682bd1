"""Conversions between core records and store rows.

Everything here is pure: no database access, so the writer thread can convert a batch
before it opens a transaction, and tests can check round trips without a database.
"""

from __future__ import annotations

import hashlib
import json
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._json import to_json
from scaffold._secrets import SECRET_PARAMS
from scaffold._types import Request, Status, Trace, TraceKind, Usage

_LITTLE = sys.byteorder == "little"


def pack_ints(values: Sequence[int] | None) -> bytes | None:
    """Token ids as little-endian int32 bytes (``None`` stays ``None``)."""
    if values is None:
        return None
    packed = array("i", values)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        packed.byteswap()
    return packed.tobytes()


def unpack_ints(data: bytes | None) -> tuple[int, ...] | None:
    if data is None:
        return None
    values = array("i")
    values.frombytes(data)
    if not _LITTLE:  # pragma: no cover
        values.byteswap()
    return tuple(values)


def pack_floats(values: Sequence[float] | None) -> bytes | None:
    """Logprobs as little-endian float64 bytes: exact, so importance weights can be recomputed."""
    if values is None:
        return None
    packed = array("d", values)
    if not _LITTLE:  # pragma: no cover
        packed.byteswap()
    return packed.tobytes()


def unpack_floats(data: bytes | None) -> tuple[float, ...] | None:
    if data is None:
        return None
    values = array("d")
    values.frombytes(data)
    if not _LITTLE:  # pragma: no cover
        values.byteswap()
    return tuple(values)


def public_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Sampling parameters without credentials (a last guard: ``Model`` already moves them to the backend)."""
    return {k: to_json(v) for k, v in params.items() if k.lower() not in SECRET_PARAMS}


def request_key(request: Request) -> str:
    """A stable hash of what decides a request's answer distribution, the seed excluded.

    Two calls with the same key asked the same model the same thing with the same parameters;
    the response cache adds the node and the sample's index so that ``n`` samples never
    collapse into one.
    """
    return request_values(request)[0]


def request_values(request: Request) -> tuple[str, str | None, str, str | None, str, bool]:
    """The ``requests`` row of a request, key first, JSON columns already serialised.

    The key hashes the same serialised text that is stored, so it costs one pass over the prompt.
    """
    messages = encode_messages(request.messages)
    if request.tools or request.tool_choice is not None:
        params = _encode_sorted(request_params(request))
    else:
        params = _encode_sorted(public_params(request.params)) if request.params else "{}"
    body = "\x00".join((request.model or "", messages, request.prompt or "", params, "1" if request.logprobs else "0"))
    return (hashlib.blake2b(body.encode(), digest_size=16).hexdigest(), request.model, messages, request.prompt,
            params, request.logprobs)


def request_params(request: Request) -> dict[str, Any]:
    """The ``params`` column of a request: its sampling parameters, and its ``tools`` and ``tool_choice`` when it
    offers tools (so a request without tools is stored, and keyed, as before tools existed)."""
    params = public_params(request.params)
    if request.tools:
        params["tools"] = to_json(list(request.tools))
    if request.tool_choice is not None:
        params["tool_choice"] = to_json(request.tool_choice)
    return params


_encode = json.JSONEncoder(allow_nan=False).encode  # to_json already made every NaN None: JSON's own text only
_encode_sorted = json.JSONEncoder(sort_keys=True, default=repr, allow_nan=False).encode
_LONG = 1 << 18
"""Characters of one message's text encoded in one call: the JSON encoder holds the GIL throughout a call, so a
long prompt is encoded in slices and the event loop's thread is not kept waiting (~1 ms a slice)."""


def encode_messages(messages: Sequence[Sequence[Any]]) -> str:
    """``json.dumps`` of the messages as lists (ASCII, the same text), long texts encoded slice by slice.

    Examples:
        >>> encode_messages([("user", "a" * 300_000 + "\u00e9")]) == json.dumps([["user", "a" * 300_000 + "\u00e9"]])
        True
    """
    if sum(len(message[1] or "") for message in messages) < _LONG:
        return _encode([_message_list(m) for m in messages])
    return "[" + ", ".join("[" + ", ".join(_string(part) if isinstance(part, str) else _encode(to_json(part))
                                           for part in message) + "]" for message in messages) + "]"


def _message_list(message: Sequence[Any]) -> list[Any]:
    return list(message) if len(message) == 2 else [message[0], message[1], to_json(message[2])]


def dumps(value: Any) -> str:
    """``json.dumps(value)``, with long texts encoded slice by slice (the store's JSON columns are written with
    it: a run whose inputs hold a long prompt does not keep other threads waiting while it is recorded).

    Examples:
        >>> dumps({"problem": "x" * 300_000, "n": [1, None]}) == json.dumps({"problem": "x" * 300_000, "n": [1, None]})
        True
    """
    if not _has_long_text(value, 0):
        return json.dumps(value)
    return _dumps_sliced(value)


def _has_long_text(value: Any, depth: int) -> bool:
    """Whether ``value`` holds a text of :data:`_LONG` characters or more within 4 levels (where a run's inputs
    keep their texts: a problem, candidates, messages); a plain loop, since it runs for every JSON value."""
    kind = type(value)
    if kind is str:
        return len(value) >= _LONG
    if depth > 3:
        return False
    if kind is dict:
        values: Any = value.values()
    elif kind is list or kind is tuple:
        values = value
    else:
        return False
    for item in values:
        kind = type(item)
        if kind is str:
            if len(item) >= _LONG:
                return True
        elif (kind is dict or kind is list or kind is tuple) and _has_long_text(item, depth + 1):
            return True
    return False


def _dumps_sliced(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_quote(str(k))}: {_dumps_sliced(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_dumps_sliced(v) for v in value) + "]"
    return json.dumps(value)


def _string(text: str) -> str:
    if len(text) < _LONG:
        return _quote(text)
    return '"' + "".join(_quote(text[i:i + _LONG])[1:-1] for i in range(0, len(text), _LONG)) + '"'


_quote = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


REQUEST_COLUMNS = ("key", "model", "messages", "prompt", "params", "logprobs")
CALL_COLUMNS = (
    "id", "run_id", "node", "index", "kind", "alias", "model", "backend", "request_key", "n", "seed", "text",
    "answer", "token_ids", "logprobs", "prompt_tokens", "completion_tokens", "cost", "latency", "started_at",
    "attempts", "status", "error", "finish_reason", "metadata",
)
EDGE_COLUMNS = ("call_id", "position", "input_id")


def call_values(trace: Trace, key: str | None, backend: str | None) -> tuple[Any, ...]:
    """The ``calls`` row of a trace, in :data:`CALL_COLUMNS` order, JSON already serialised."""
    request = trace.request
    metadata = trace.metadata
    finish_reason = None
    if metadata and "finish_reason" in metadata:
        metadata = dict(metadata)
        finish_reason = metadata.pop("finish_reason")
    meta_json = json_text(metadata)
    usage = trace.usage
    return (
        trace.id, trace.run_id, trace.node, trace.index, trace.kind.value, trace.model,
        request.model if request is not None else None, backend, key, request.n if request is not None else 1,
        request.seed if request is not None else None, trace.text, trace.answer, pack_ints(trace.token_ids),
        pack_floats(trace.logprobs), usage.prompt_tokens, usage.completion_tokens, trace.cost, trace.latency,
        trace.started_at, trace.attempt, trace.status.value, trace.error,
        str(finish_reason) if finish_reason is not None else None, meta_json,
    )


def json_text(metadata: Mapping[str, Any] | None) -> str:
    """A trace's metadata as its column holds it: JSON text, ``"{}"`` when empty."""
    return _encode(to_json(metadata)) if metadata else "{}"


def edge_values(trace: Trace) -> list[tuple[str, int, str]]:
    call_id = trace.id
    return [(call_id, i, source) for i, source in enumerate(trace.inputs)]


def request_from_row(row: Mapping[Any, Any] | None, seed: int | None, n: int) -> Request | None:
    if row is None:
        return None
    params = dict(row["params"] or {})
    tools = params.pop("tools", None) or ()
    tool_choice = params.pop("tool_choice", None)
    return Request(
        messages=tuple((m[0], m[1]) if len(m) < 3 else (m[0], m[1], m[2]) for m in row["messages"] or ()),
        prompt=row["prompt"], params=params, n=n, logprobs=bool(row["logprobs"]), model=row["model"], seed=seed,
        tools=tuple(tools), tool_choice=tool_choice,
    )


def trace_from_row(row: Mapping[Any, Any], inputs: Sequence[str], request: Request | None) -> Trace:
    """Rebuild a :class:`Trace` from its ``calls`` row, its lineage and its request."""
    metadata = dict(row["metadata"] or {})
    if row["finish_reason"] is not None:
        metadata["finish_reason"] = row["finish_reason"]
    return Trace(
        id=row["id"], run_id=row["run_id"], node=row["node"], index=row["index"], kind=TraceKind(row["kind"]),
        model=row["alias"], request=request, text=row["text"], answer=row["answer"],
        token_ids=unpack_ints(row["token_ids"]), logprobs=unpack_floats(row["logprobs"]),
        usage=Usage(row["prompt_tokens"] or 0, row["completion_tokens"] or 0), cost=row["cost"],
        latency=row["latency"] or 0.0, started_at=row["started_at"] or 0.0, inputs=tuple(inputs),
        status=Status(row["status"]), error=row["error"], attempt=row["attempts"] or 1, metadata=metadata,
    )


def output_ids(output: Any) -> Any:
    """A run's output with each trace replaced by its id (a trace, a list, or a dict of them)."""
    if isinstance(output, Trace):
        return output.id
    if isinstance(output, Mapping):
        return {str(k): output_ids(v) for k, v in output.items()}
    if isinstance(output, (list, tuple)):
        return [output_ids(v) for v in output]
    return to_json(output)

"""A request body, read as a server on the open network must: bounded, then parsed and validated in one step.

In order, each failure a 4xx in OpenAI's error shape, never a 500:

1. ``Content-Type`` must be ``application/json`` (parameters such as ``charset`` allowed), else 415. A page
   on another origin cannot send that type without a CORS preflight, which this server never grants, so
   no page can start a run on a keyless server running on the user's machine.
2. A declared ``Content-Length`` above ``max_body_bytes`` is a 413 before anything is read; the body is
   then read piece by piece (the event loop serves other requests in between), 413 as soon as it passes
   ``max_body_bytes``, 408 if it has not all arrived within ``read_timeout`` (answered by scaffold's uvicorn
   protocol, :mod:`scaffold.serve._http`, when it serves the app; by the app otherwise). Both close the
   connection.
3. The JSON's size: more than ``max_json_values`` values is a 413 before parsing. Counting the separators
   and brackets bounds it from above for free; only a body over the bound is counted exactly (strings
   skipped), in slices that yield to the event loop. This bounds how long one parse can hold the loop.
4. pydantic parses and validates the bytes strictly (no ``"3"`` for 3): invalid JSON, nesting deeper than
   its parser's limit, ``\\u`` escapes that are lone surrogates, NaN and infinities are 400s naming the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from scaffold.serve._errors import ApiError
from scaffold.serve._http import HttpLimits

__all__ = ["read_json"]

Model = TypeVar("Model", bound=BaseModel)

_CLOSE = {"connection": "close"}
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[,{\[]')
"""A JSON string (skipped whole) or a character that adds a value: a separator or an opening bracket."""
_SLICE = 4096
"""Tokens counted between two yields to the event loop."""
_NO_DEADLINE = contextlib.nullcontext()
_LARGE = 1 << 18
"""Bodies this large yield to the event loop once parsed."""


async def read_json(request: Any, model: type[Model], limits: HttpLimits) -> Model:
    """``request``'s body validated as ``model``; every mistake an :class:`ApiError` (see the module docstring)."""
    content_type = request.headers.get("content-type") or ""
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise ApiError(415, "the body must be JSON, sent with `Content-Type: application/json`"
                            + (f" (got {content_type[:60]!r})" if content_type else " (no Content-Type was sent)"),
                       code="unsupported_media_type", redact=False)
    body, bound = await _read(request, limits)
    if bound > limits.max_json_values and await _values_over(body, limits.max_json_values):
        raise ApiError(413, f"the body holds more than {limits.max_json_values} JSON values",
                       code="body_too_large", headers=_CLOSE, redact=False)
    try:
        parsed = model.model_validate_json(body, strict=True)
    except ValidationError as exc:
        raise _invalid(exc) from None
    if len(body) > _LARGE:  # let what waited during the parse (a /health, other requests' I/O) run first
        await asyncio.sleep(0)
    return parsed


async def _read(request: Any, limits: HttpLimits) -> tuple[bytes, int]:
    """The body, and an upper bound on its JSON values (counted piece by piece as it arrives)."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "the Content-Length header is not a number", headers=_CLOSE, redact=False)
        if int(declared) > limits.max_body_bytes:
            raise _too_large(limits)
    chunks: list[bytes] = []
    size, bound = 0, 1
    extensions = request.scope.get("extensions") or {}
    # served through scaffold's uvicorn protocol, the deadline is the protocol's (no timer per request)
    deadline = None if "scaffold.read_timeout" in extensions else limits.read_timeout
    try:
        async with asyncio.timeout(deadline) if deadline is not None else _NO_DEADLINE:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise _too_large(limits)
                chunks.append(chunk)
                bound += _values_bound(chunk)
    except TimeoutError:
        raise ApiError(408, f"the body did not arrive within {limits.read_timeout:g} seconds", code="timeout",
                       headers=_CLOSE, redact=False) from None
    except ClientDisconnect:
        raise ApiError(499, "the client closed the request", headers=_CLOSE, redact=False) from None
    return b"".join(chunks), bound


def _too_large(limits: HttpLimits) -> ApiError:
    return ApiError(413, f"the body is larger than {limits.max_body_bytes} bytes", code="body_too_large",
                    headers=_CLOSE, redact=False)


def _values_bound(piece: bytes) -> int:
    """An upper bound on the values ``piece`` of a body adds: every value but the first follows a separator or
    opens a container (separators inside strings are counted too, which only loosens the bound)."""
    return piece.count(b",") + piece.count(b"{") + piece.count(b"[")


async def _values_over(body: bytes, limit: int) -> bool:
    """Whether ``body`` holds more than ``limit`` values, counting outside strings; yields every few
    thousand tokens so that a large body does not hold the event loop."""
    count, position, steps = 1, 0, 0
    search = _TOKEN.search
    while True:
        found = search(body, position)
        if found is None:
            return False
        if body[found.start()] != 0x22:  # not a string: a separator or an opening bracket
            count += 1
            if count > limit:
                return True
        position = found.end()
        steps += 1
        if steps % _SLICE == 0:
            await asyncio.sleep(0)


def _invalid(exc: ValidationError) -> ApiError:
    from scaffold._validation import describe_errors, error_field

    errors = exc.errors()
    first = errors[0] if errors else {"type": "", "msg": str(exc)}
    if first["type"] == "json_invalid":
        reason = str(first.get("msg", "")).removeprefix("Invalid JSON: ")
        if "hex escape" in reason or "surrogate" in reason:
            reason += " (a \\u escape must not be half of a surrogate pair: that is not valid Unicode)"
        return ApiError(400, f"the body is not valid JSON: {reason}", redact=False)
    if first["type"] == "model_type" and not first.get("loc"):
        return ApiError(400, "the body must be a JSON object", redact=False)
    param = error_field(first) if errors else None
    return ApiError(400, describe_errors(errors), param=param or None)

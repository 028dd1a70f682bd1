"""What an OpenAI-compatible server's failures mean, as typed :class:`~scaffold._errors.BackendError` s.

Two sources: an HTTP answer with an error status (:func:`error_for_status`, which reads OpenAI's
``{"error": {"message", "code"}}`` body and vLLM's ``{"object": "error", "message"}`` alike), and
the transport (:func:`transport_error`: refused or dropped connections, a body cut short, a
timeout). Which are retried:

======================================  =========================  =========
what happened                           error                      retried
======================================  =========================  =========
429                                     RateLimitError             yes, after ``Retry-After``
5xx, 409, a malformed or cut-off body   ServerError                yes
refused, reset or dropped connection    ConnectionFailed           yes
408, or no answer within ``timeout``    RequestTimeout             yes
401, 403                                AuthenticationError        no
other 4xx                               BadRequestError            no
a prompt past the context window        ContextLengthError         no
======================================  =========================  =========

Messages are redacted by the caller (the backend knows its keys).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scaffold._errors import (
    AuthenticationError,
    BackendError,
    BadRequestError,
    ConnectionFailed,
    ContextLengthError,
    RateLimitError,
    RequestTimeout,
    ServerError,
)
from scaffold.backends._retry import retry_after_from_headers

__all__ = ["error_for_status", "error_message", "is_context_error", "transport_error"]

_CONTEXT_SIGNS = ("context length", "context window", "maximum context", "context_length_exceeded",
                  "too many tokens", "prompt is too long")


def error_message(body: bytes | str | Mapping[str, Any] | None) -> tuple[str, str | None]:
    """``(message, code)`` of an error body: OpenAI's ``{"error": {...}}``, vLLM's flat form, or the raw text."""
    payload: Any = body
    if isinstance(body, (bytes, str)):
        try:
            payload = json.loads(body)
        except ValueError:
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
            return text.strip()[:500], None
    if isinstance(payload, Mapping):
        inner = payload.get("error", payload)
        if isinstance(inner, Mapping):
            code = inner.get("code")
            message = inner.get("message") or inner.get("detail") or json.dumps(inner)[:500]
            return str(message), None if code is None else str(code)
        return str(inner)[:500], None
    return str(payload)[:500], None


def is_context_error(message: str, code: str | None) -> bool:
    """Whether a refusal says the prompt does not fit the model's context."""
    text = f"{code or ''} {message}".lower()
    return any(sign in text for sign in _CONTEXT_SIGNS)


def error_for_status(status: int, headers: Mapping[str, str], body: bytes, where: str) -> BackendError:
    """The error for an HTTP answer with status ``status`` (>= 400); ``where`` starts the message (the model)."""
    message, code = error_message(body)
    detail = f"{where}: HTTP {status}: {message}"
    if status == 429:
        return RateLimitError(detail, status_code=429, retry_after=retry_after_from_headers(headers))
    if status in (401, 403):
        return AuthenticationError(detail, status_code=status)
    if status == 408:
        return RequestTimeout(detail, status_code=status)
    if 400 <= status < 500 and status != 409:
        if is_context_error(message, code):
            return ContextLengthError(detail, status_code=status)
        return BadRequestError(detail, status_code=status)
    return ServerError(detail, status_code=status, retry_after=retry_after_from_headers(headers))


def transport_error(exc: BaseException, where: str) -> BackendError:
    """The error for a failure below HTTP (aiohttp's exceptions, timeouts, OS errors)."""
    import aiohttp

    name = type(exc).__name__
    detail = f"{where}: {name}: {exc}" if str(exc) else f"{where}: {name}"
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError is one too
        return RequestTimeout(f"{detail} (no answer within the backend's timeout)")
    if isinstance(exc, aiohttp.ClientPayloadError):  # the headers came, the body was cut short
        return ServerError(f"{detail} (the answer was cut off)")
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed status line or headers
        return ServerError(detail, status_code=exc.status or None)
    if isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError, OSError)):
        return ConnectionFailed(detail)
    if isinstance(exc, ValueError):  # a body that is not JSON
        return ServerError(f"{where}: the answer is not valid JSON: {exc}")
    return ServerError(detail)

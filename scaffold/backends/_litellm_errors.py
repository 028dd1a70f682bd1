"""litellm's exceptions as typed :class:`~scaffold._errors.BackendError` subclasses that say whether to retry.

:class:`~scaffold.backends.Model` retries rate limits, timeouts, dropped connections and 5xx answers
(waiting as long as a ``Retry-After`` header asks) and never retries authentication or validation
errors; this module decides which is which from litellm's exception classes, the HTTP status and,
where litellm reports a connection failure as a 500, the message.
"""

from __future__ import annotations

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

_CONNECTION_SIGNS = ("cannot connect to host", "connection refused", "server disconnected", "connection reset",
                     "remoteprotocolerror", "connecterror", "connection closed")


def typed_error(litellm: Any, exc: BaseException, detail: str) -> BackendError:
    """The :class:`BackendError` for ``exc`` raised by ``litellm``, with the (already redacted) message ``detail``."""
    if isinstance(exc, BackendError):
        return exc
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextLengthError(detail, status_code=status)
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        return RateLimitError(detail, status_code=429, retry_after=retry_after(exc))
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)) or status in (401, 403):
        return AuthenticationError(detail, status_code=status)
    if isinstance(exc, litellm.Timeout):
        return RequestTimeout(detail, status_code=status)
    if isinstance(exc, (litellm.BadRequestError, litellm.NotFoundError, litellm.UnprocessableEntityError)):
        if "context length" in detail.lower() or "context window" in detail.lower():
            return ContextLengthError(detail, status_code=status)
        return BadRequestError(detail, status_code=status)
    if status is not None and 400 <= status < 500 and status not in (408, 409):
        return BadRequestError(detail, status_code=status)
    lowered = detail.lower()
    if any(sign in lowered for sign in _CONNECTION_SIGNS):  # litellm reports these as 500s too
        return ConnectionFailed(detail, status_code=status)
    if isinstance(exc, litellm.APIConnectionError) and (status is None or status >= 500):
        if "json" in lowered or "decode" in lowered or "expecting value" in lowered:
            return ServerError(detail, status_code=status)  # a malformed body
        return ConnectionFailed(detail, status_code=status)
    return ServerError(detail, status_code=status, retry_after=retry_after(exc))


def retry_after(exc: BaseException) -> float | None:
    """Seconds a provider asked to wait, from the ``retry-after-ms`` or ``retry-after`` headers of an error."""
    for source in (getattr(exc, "litellm_response_headers", None), getattr(exc, "headers", None),
                   getattr(getattr(exc, "response", None), "headers", None)):
        if source:
            return retry_after_from_headers(source)
    return None

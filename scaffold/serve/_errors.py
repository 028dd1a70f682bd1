"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the right status.

=====  ==========================  ====================================================================
 400   ``invalid_request_error``   a malformed body, an unknown field or parameter, a budget too small,
                                   a ``Host`` the server does not answer for
 401   ``authentication_error``    a missing or wrong API key
 404   ``not_found_error``         an unknown model (``code: model_not_found``) or path
 408   ``invalid_request_error``   the body did not arrive within ``read_timeout``
 413   ``invalid_request_error``   the body is larger than ``max_body_bytes`` or holds more than ``max_json_values``
 415   ``invalid_request_error``   the body is not ``application/json``
 429   ``rate_limit_error``        the server's own queue is full (``Retry-After`` says when to retry)
 502   ``upstream_error``          a model the graph calls failed after its retries
 503   ``server_error``            the store cannot be written now (``Retry-After``), or the server is draining
 504   ``timeout_error``           the request ran past its timeout, or an upstream call timed out
 500   ``server_error``            a bug of ours, or a record the store refused: never for a client's mistake
=====  ==========================  ====================================================================

Messages pass through the secret redactor: a provider's error that quotes a key never reaches a client.
"""

from __future__ import annotations

from typing import Any

from scaffold._errors import (
    BadRequestError,
    BudgetExceeded,
    CallError,
    CallTimeout,
    ContextLengthError,
    GraphError,
    InputError,
    RecordError,
    RequestTimeout,
    RunError,
    RunTimeout,
    StoreError,
)
from scaffold._openai_wire import ERROR_TYPES, error_body

__all__ = ["ApiError", "from_run_error"]


class ApiError(Exception):
    """An error answered to the client as OpenAI does.

    Examples:
        >>> ApiError(404, "no model 'x'", code="model_not_found", param="model").body()["error"]["type"]
        'not_found_error'
    """

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None, redact: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}
        self.redact = redact
        """Pass the message through the secret redactor (``False`` only for the server's own fixed texts)."""

    def body(self) -> dict[str, Any]:
        from scaffold._secrets import environment_secrets, redact

        message = redact(self.message, environment_secrets()) if self.redact else self.message
        return error_body(message, ERROR_TYPES.get(self.status, "server_error"), param=self.param, code=self.code)


def from_run_error(exc: BaseException) -> ApiError:
    """The answer to a run that failed with ``exc``: whose fault it was decides the status."""
    cause = _root(exc)
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(cause, RecordError):
        return ApiError(500, f"the store refused this request's record: {line}", code="store_refused")
    if isinstance(cause, StoreError):
        return ApiError(503, f"the store cannot record requests now; retry shortly ({line})", code="store_unavailable",
                        headers={"retry-after": "1"})
    if isinstance(cause, ContextLengthError):
        return ApiError(400, line, code="context_length_exceeded")
    if isinstance(exc, BudgetExceeded) or isinstance(cause, BudgetExceeded):
        return ApiError(400, f"{line} (raise scaffold.budget, up to the server's max_budget, or ask for less)",
                        code="budget_exceeded", param="scaffold.budget")
    if isinstance(exc, RunTimeout):
        return ApiError(504, line, code="timeout")
    if isinstance(cause, (RequestTimeout, CallTimeout)):
        return ApiError(504, line, code="upstream_timeout")
    if isinstance(cause, BadRequestError):  # the upstream model refused what the graph sent it
        return ApiError(502, line, code="upstream_bad_request")
    if isinstance(exc, (GraphError, InputError)):
        return ApiError(400, line)
    if isinstance(exc, (CallError, RunError)):
        return ApiError(502, line, code="upstream_error")
    return ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error")


def _root(exc: BaseException) -> BaseException:
    """The innermost cause (a CallError's backend error, a RunError's original)."""
    seen = 0
    while exc.__cause__ is not None and seen < 8:
        exc, seen = exc.__cause__, seen + 1
    return exc

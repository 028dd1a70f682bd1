"""OpenAI's wire format, in one place: the shapes of answers, streamed chunks, errors and server-sent events.

``scaffold serve`` answers in these shapes (:mod:`scaffold.serve`), and so does the fake
OpenAI-compatible server of the tests (:mod:`scaffold.testing`), so the client side of every backend is
tested against the bytes the server sends. Standard library only.

Examples:
    >>> choice(True, 0, "4", "stop")
    {'index': 0, 'message': {'role': 'assistant', 'content': '4'}, 'logprobs': None, 'finish_reason': 'stop'}
    >>> sse({"a": 1})
    b'data: {"a":1}\\n\\n'
"""

from __future__ import annotations

import json
import math
from typing import Any

DONE = b"data: [DONE]\n\n"
"""The event that ends a stream."""

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
               415: "invalid_request_error", 431: "invalid_request_error", 429: "rate_limit_error",
               502: "upstream_error", 503: "server_error", 504: "timeout_error", 500: "server_error"}
"""The ``type`` of an error by its HTTP status (``server_error`` for any other)."""


def sse(payload: Any) -> bytes:
    """One server-sent event whose data is ``payload`` as compact JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def response_id(chat: bool, suffix: str) -> str:
    """``chatcmpl-SUFFIX`` for a chat answer, ``cmpl-SUFFIX`` for a text completion."""
    return f"{'chatcmpl' if chat else 'cmpl'}-{suffix}"


def object_name(chat: bool, *, chunk: bool = False) -> str:
    """The ``object`` of an answer: ``chat.completion`` (``.chunk`` when streamed) or ``text_completion``.

    Examples:
        >>> object_name(True, chunk=True), object_name(False, chunk=True)
        ('chat.completion.chunk', 'text_completion')
    """
    if not chat:
        return "text_completion"
    return "chat.completion.chunk" if chunk else "chat.completion"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The ``usage`` object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def choice(chat: bool, index: int, text: str, finish: str, *, logprobs: Any = None,
           tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One choice of an answer: a chat ``message`` (with its ``tool_calls``, if any) or a completion's ``text``."""
    body: dict[str, Any] = {"index": index}
    if chat:
        body["message"] = {"role": "assistant", "content": text}
        if tool_calls:
            body["message"]["tool_calls"] = tool_calls
            if not text:
                body["message"]["content"] = None
    else:
        body["text"] = text
    body.update(logprobs=logprobs, finish_reason=finish)
    return body


def chunk_choice(chat: bool, index: int, *, content: str | None = None, role: bool = False,
                 reasoning: str | None = None, finish: str | None = None, logprobs: Any = None,
                 tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One choice of a streamed chunk: a chat ``delta`` (``role``, ``content``, ``reasoning_content`` as given) or a
    completion's ``text`` (``""`` when it carries none).

    Examples:
        >>> chunk_choice(True, 1, content="a", role=True)
        {'index': 1, 'delta': {'role': 'assistant', 'content': 'a'}, 'logprobs': None, 'finish_reason': None}
    """
    body: dict[str, Any] = {"index": index}
    if chat:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if content is not None:
            delta["content"] = content
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
        if tool_calls is not None:
            delta["tool_calls"] = tool_calls
        body["delta"] = delta
    else:
        body["text"] = content or ""
    body.update(logprobs=logprobs, finish_reason=finish)
    return body


def error_body(message: str, kind: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def retry_after(seconds: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds, rounded up (what litellm parses), and the exact ``retry-after-ms`` (what
    the ``openai`` client prefers).

    Examples:
        >>> retry_after(0.25)
        {'Retry-After': '1', 'retry-after-ms': '250'}
    """
    return {"Retry-After": str(max(1, math.ceil(seconds))), "retry-after-ms": str(math.ceil(seconds * 1000))}

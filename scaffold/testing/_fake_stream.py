"""Streamed answers (``stream: true``) as :class:`~scaffold.testing.OpenAIServer` sends them: server-sent events.

:func:`stream_chunks` lays out the chunks of one answer the way OpenAI and vLLM do: per choice a
first chunk with the assistant role (chat), then one chunk per token — choices interleaved,
each chunk carrying its choice ``index``, the token's logprob when asked, and vLLM's per-chunk
``token_ids`` with ``return_token_ids`` — then a chunk with the finish reason, and, with
``stream_options: {"include_usage": true}``, a last chunk with no choices and the whole usage.
Events are framed by :func:`scaffold._openai_wire.sse`; the stream ends with ``data: [DONE]``. Standard library
only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaffold import _openai_wire as wire
from scaffold.testing._fake_answers import (
    PolicyReply,
    ServerRequest,
    choice_tokens,
    fake_logprob,
    fake_token_id,
    fake_tokenize,
    reply_parts,
)

__all__ = ["StreamedAnswer", "stream_chunks"]


@dataclass(frozen=True, slots=True)
class StreamedAnswer:
    """The chunks of one streamed answer, and what they add up to."""

    id: str
    """The ``id`` every chunk carries."""
    chunks: tuple[dict[str, Any], ...]
    """The events' payloads, in order."""
    token_chunks: tuple[bool, ...]
    """Whether each chunk carries a token (what ``Fault.truncated(tokens=...)`` counts)."""
    choices: int
    """How many choices the answer has."""


def stream_chunks(request: ServerRequest, texts: Sequence[PolicyReply]) -> StreamedAnswer:
    """The chunks answering ``request`` (streamed) whose choices say ``texts`` before ``stop`` and ``max_tokens``.

    Examples:
        >>> answer = stream_chunks(ServerRequest("chat", "m", messages=(("user", "hi"),), n=2), ["a b", "c"])
        >>> [(chunk["choices"][0]["index"], chunk["choices"][0]["delta"]["content"])
        ...  for chunk, token in zip(answer.chunks, answer.token_chunks) if token]
        [(0, 'a'), (1, 'c'), (0, ' '), (0, 'b')]
    """
    chat = request.endpoint == "chat"
    body = request.body
    identifier = wire.response_id(chat, uuid.uuid4().hex)
    header: dict[str, Any] = {"id": identifier, "object": wire.object_name(chat, chunk=True),
                              "created": int(time.time()), "model": request.model}
    options = body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage"))
    if include_usage:
        header["usage"] = None
    replies = [reply_parts(reply) for reply in texts]
    laid_out = [choice_tokens(request, text) for text, _ in replies]
    chunks: list[tuple[dict[str, Any], bool]] = []

    def add(index: int, piece: dict[str, Any], token: bool) -> None:
        chunks.append(({**header, "choices": [{**wire.chunk_choice(chat, index), **piece}]}, token))

    if chat:
        for index in range(len(texts)):
            add(index, wire.chunk_choice(chat, index, role=True, content=""), False)
    longest = max((len(tokens) for tokens, _ in laid_out), default=0)
    for position in range(longest):
        for index, (tokens, _) in enumerate(laid_out):
            if position < len(tokens):
                add(index, _token_piece(request, tokens, position), True)
    for index, (_, calls) in enumerate(replies):
        for position, call in enumerate(calls if chat else ()):  # each call in two pieces: id and name first
            half = len(call.arguments) // 2
            first = {"index": position, "id": call.id, "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments[:half]}}
            add(index, wire.chunk_choice(chat, index, tool_calls=[first]), False)
            rest = {"index": position, "function": {"arguments": call.arguments[half:]}}
            add(index, wire.chunk_choice(chat, index, tool_calls=[rest]), False)
    for index, (_, finish) in enumerate(laid_out):
        add(index, wire.chunk_choice(chat, index, finish="tool_calls" if replies[index][1] else finish), False)
    if include_usage:
        prompt_tokens = len(fake_tokenize(request.prompt_text))
        completion_tokens = sum(len(tokens) for tokens, _ in laid_out)
        chunks.append(({**header, "choices": [], "usage": wire.usage(prompt_tokens, completion_tokens)}, False))
    if body.get("return_token_ids") and chunks:
        first = chunks[0][0]
        first["prompt_token_ids"] = [fake_token_id(token) for token in fake_tokenize(request.prompt_text)]
    return StreamedAnswer(identifier, tuple(c for c, _ in chunks), tuple(t for _, t in chunks), len(texts))


def _token_piece(request: ServerRequest, tokens: tuple[str, ...], position: int) -> dict[str, Any]:
    """The choice part of the chunk carrying token ``position``: its text, logprob and id as asked."""
    token = tokens[position]
    logprob = fake_logprob(token, position)
    wanted = request.body.get("logprobs")
    piece: dict[str, Any]
    if request.endpoint == "chat":
        piece = {"delta": {"content": token}}
        if wanted:
            entry = {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}
            piece["logprobs"] = {"content": [entry]}
    else:
        piece = {"text": token}
        if wanted is not None and wanted is not False:
            offset = sum(len(t) for t in tokens[:position])
            piece["logprobs"] = {"tokens": [token], "token_logprobs": [logprob], "top_logprobs": [{token: logprob}],
                                 "text_offset": [offset]}
    if request.body.get("return_token_ids"):
        piece["token_ids"] = [fake_token_id(token)]
    return piece

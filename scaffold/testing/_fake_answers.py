"""The fake server's requests and answers: what :class:`~scaffold.testing._server.OpenAIServer` reads and says.

Parses chat and completion request bodies into :class:`ServerRequest`, builds the JSON answers
(choices, usage, logprobs, vLLM's token ids) and error responses in the shapes of
:mod:`scaffold._openai_wire` (the one home of the wire format, which ``scaffold serve`` speaks too),
and holds the fake tokenizer that counts tokens and makes ids and logprobs (see the server's module docstring for
where it departs from the real services). Standard library only.
"""

from __future__ import annotations

import json
import re
import time
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scaffold import Completion, ToolCall
from scaffold import _openai_wire as wire
from scaffold._messages import message_from_dict
from scaffold.testing._http import HTTPResponse

__all__ = [
    "Refusal",
    "ServerRequest",
    "check_api_key",
    "check_context",
    "choice_tokens",
    "completion_body",
    "error_response",
    "fake_logprob",
    "fake_token_id",
    "fake_tokenize",
    "json_response",
    "parse_request",
    "rate_limited_response",
    "reply_parts",
]

_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
_VOCABULARY = 50_000


def fake_tokenize(text: str) -> tuple[str, ...]:
    """Split ``text`` into the server's tokens: words, single punctuation marks and whitespace runs.

    The tokens concatenate back to ``text`` exactly.

    Examples:
        >>> fake_tokenize(r"so \\boxed{4}.")
        ('so', ' ', '\\\\', 'boxed', '{', '4', '}', '.')
    """
    return tuple(_TOKEN.findall(text))


def fake_token_id(token: str) -> int:
    """The stable id of one fake token: ``crc32(token) % 50000``."""
    return zlib.crc32(token.encode()) % _VOCABULARY


def fake_logprob(token: str, position: int) -> float:
    """The deterministic logprob of ``token`` sampled at ``position`` of a choice, in ``[-5, -0.001]``."""
    return -(zlib.crc32(f"{position}\0{token}".encode()) % 5000 + 1) / 1000


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """One completion request as the server understood it, for one choice.

    Examples:
        >>> ServerRequest(endpoint="chat", model="m", messages=(("user", "2+2?"),)).prompt_text
        'user: 2+2?\\n'
    """

    endpoint: Literal["chat", "completions"]
    """Which endpoint was called."""
    model: str
    """The ``model`` field of the request."""
    messages: tuple[tuple[Any, ...], ...] = ()
    """Chat messages as ``(role, content)`` pairs (text parts joined), with a third item for tool calls and tool
    results (see :mod:`scaffold._messages`); empty for completions."""
    prompt: str | None = None
    """The completion prompt; ``None`` for chat."""
    n: int = 1
    """How many choices the request asks for."""
    choice: int = 0
    """Index of the choice being produced (0 when the request is seen as a whole)."""
    body: Mapping[str, Any] = field(default_factory=dict)
    """The full JSON body."""
    seed: int | None = None
    """The ``seed`` field, if an integer was sent."""

    @property
    def last_content(self) -> str:
        """The content of the last message (the prompt itself for completions)."""
        return self.messages[-1][1] if self.messages else (self.prompt or "")

    @property
    def tools(self) -> list[Any]:
        """The ``tools`` the request offers (OpenAI's function specs); empty without any."""
        tools = self.body.get("tools")
        return list(tools) if isinstance(tools, list) else []

    @property
    def prompt_text(self) -> str:
        """The text whose fake tokens are the prompt tokens (chat: one ``"role: content\\n"`` line per message)."""
        if self.prompt is not None:
            return self.prompt
        return "".join(f"{m[0]}: {m[1]}\n" for m in self.messages)


# -- errors ---------------------------------------------------------------------------------------


def json_response(status: int, payload: Any, headers: tuple[tuple[str, str], ...] = ()) -> HTTPResponse:
    """An answer whose body is ``payload`` as JSON."""
    return HTTPResponse(status, json.dumps(payload).encode(), headers)


def error_response(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    *,
    code: str | None = None,
    param: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> HTTPResponse:
    """An OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}``."""
    return json_response(status, wire.error_body(message, kind, param=param, code=code), headers)


def rate_limited_response(seconds: float, message: str) -> HTTPResponse:
    """429 with ``Retry-After`` (whole seconds, rounded up) and ``retry-after-ms`` headers."""
    headers = tuple(wire.retry_after(seconds).items())
    return error_response(429, message, "rate_limit_error", code="rate_limit_exceeded", headers=headers)


class Refusal(Exception):
    """Raised while handling a request to answer it with ``response`` at once."""

    def __init__(self, response: HTTPResponse) -> None:
        super().__init__(response.status)
        self.response = response


# -- requests -------------------------------------------------------------------------------------


def parse_request(endpoint: str, body: bytes, default_model: str) -> ServerRequest:
    """The request a JSON body asks for; a 400 refusal when it cannot be served."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise Refusal(error_response(400, "We could not parse the JSON body of your request.", code="invalid_json"))
    tools = payload.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(_is_function(t) for t in tools)):
        raise Refusal(error_response(400, "tools must be a list of {type: function, function: {name, ...}}",
                                     param="tools"))
    if payload.get("stream") not in (None, False, True):
        raise Refusal(error_response(400, f"stream must be a boolean, got {payload['stream']!r}", param="stream"))
    options = payload.get("stream_options")
    if options is not None and (not payload.get("stream") or not isinstance(options, dict)):
        message = "stream_options is only allowed with stream: true, as an object"
        raise Refusal(error_response(400, message, param="stream_options"))
    n = 1 if payload.get("n") is None else payload["n"]
    if not isinstance(n, int) or n < 1:
        raise Refusal(error_response(400, f"n must be a positive integer, got {n!r}", param="n"))
    max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise Refusal(error_response(400, f"max_tokens must be a positive integer, got {max_tokens!r}"))
    seed = payload.get("seed")
    seed = seed if isinstance(seed, int) else None
    model = str(payload.get("model") or default_model)
    if endpoint == "completions":
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise Refusal(error_response(400, "prompt must be one string", param="prompt"))
        return ServerRequest("completions", model, prompt=prompt, n=n, body=payload, seed=seed)
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise Refusal(error_response(400, "messages must be a non-empty list of objects", param="messages"))
    pairs = tuple(message_from_dict(m, _content_text(m.get("content"))) for m in messages)
    return ServerRequest("chat", model, messages=pairs, n=n, body=payload, seed=seed)


def _is_function(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return tool.get("type") == "function" and isinstance(function, dict) and isinstance(function.get("name"), str)


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def check_api_key(headers: Mapping[str, str], api_key: str | None) -> None:
    """Refuse (401) a request without ``Authorization: Bearer <api_key>``; any request when ``api_key`` is ``None``."""
    if api_key is None:
        return
    authorization = headers.get("authorization", "")
    if not authorization.startswith("Bearer "):
        message = "You didn't provide an API key. Send it in an Authorization: Bearer header."
        raise Refusal(error_response(401, message, code="invalid_api_key"))
    if authorization.removeprefix("Bearer ").strip() != api_key:
        raise Refusal(error_response(401, "Incorrect API key provided.", code="invalid_api_key"))


def check_context(request: ServerRequest, max_context: int | None) -> None:
    """Refuse (400 ``context_length_exceeded``) a prompt of more than ``max_context`` fake tokens."""
    prompt_tokens = len(fake_tokenize(request.prompt_text))
    if max_context is not None and prompt_tokens > max_context:
        message = (
            f"This model's maximum context length is {max_context} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages."
        )
        raise Refusal(error_response(400, message, code="context_length_exceeded", param="messages"))


# -- answers --------------------------------------------------------------------------------------


PolicyReply = str | Completion
"""What a policy says for one choice: its text, or a :class:`~scaffold.Completion` whose ``tool_calls`` the
choice asks for (its ``text`` said first)."""


def reply_parts(reply: PolicyReply) -> tuple[str, tuple[ToolCall, ...]]:
    """A policy's reply as its text and its tool calls."""
    if isinstance(reply, Completion):
        return reply.text, tuple(reply.tool_calls)
    return reply, ()


def completion_body(request: ServerRequest, texts: Sequence[PolicyReply]) -> dict[str, Any]:
    """The JSON answer to ``request`` whose choices say ``texts`` before ``stop`` and ``max_tokens`` apply (a
    reply with tool calls finishes with ``"tool_calls"``)."""
    prompt_ids = [fake_token_id(token) for token in fake_tokenize(request.prompt_text)]
    with_ids = bool(request.body.get("return_token_ids"))
    choices = []
    completion_tokens = 0
    for index, reply in enumerate(texts):
        text, calls = reply_parts(reply)
        tokens, finish = choice_tokens(request, text)
        completion_tokens += len(tokens) + sum(len(fake_tokenize(c.name + c.arguments)) for c in calls)
        choice = _choice(request, index, tokens, "tool_calls" if calls else finish, with_ids)
        if calls and request.endpoint == "chat":
            choice["message"]["tool_calls"] = [call.as_dict() for call in calls]
            if not tokens:
                choice["message"]["content"] = None
        choices.append(choice)
    chat = request.endpoint == "chat"
    answer: dict[str, Any] = {
        "id": wire.response_id(chat, uuid.uuid4().hex),
        "object": wire.object_name(chat),
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": wire.usage(len(prompt_ids), completion_tokens),
    }
    if with_ids:
        answer["prompt_token_ids"] = prompt_ids
    return answer


def choice_tokens(request: ServerRequest, text: str) -> tuple[tuple[str, ...], str]:
    """The tokens of a choice whose policy text is ``text``, after ``stop`` and ``max_tokens``, and its finish reason.

    Examples:
        >>> choice_tokens(ServerRequest("chat", "m", body={"max_tokens": 2}), "so the answer")
        (('so', ' '), 'length')
    """
    body = request.body
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else list(stops)
    cuts = [position for position in (text.find(stop) for stop in stops if stop) if position >= 0]
    tokens = fake_tokenize(text[: min(cuts)] if cuts else text)
    if max_tokens is not None and len(tokens) > max_tokens:
        return tokens[:max_tokens], "length"
    return tokens, "stop"


def _choice(request: ServerRequest, index: int, tokens: tuple[str, ...], finish: str, with_ids: bool) -> dict[str, Any]:
    text = "".join(tokens)
    logprobs = [fake_logprob(token, position) for position, token in enumerate(tokens)]
    wanted = request.body.get("logprobs")
    chat = request.endpoint == "chat"
    choice = wire.choice(chat, index, text, finish)
    if chat:
        if wanted:
            content = [
                {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}
                for token, logprob in zip(tokens, logprobs)
            ]
            choice["logprobs"] = {"content": content}
    else:
        if wanted is not None and wanted is not False:
            offsets = [0]
            for token in tokens[:-1]:
                offsets.append(offsets[-1] + len(token))
            choice["logprobs"] = {
                "tokens": list(tokens),
                "token_logprobs": logprobs,
                "top_logprobs": [{token: logprob} for token, logprob in zip(tokens, logprobs)],
                "text_offset": offsets[: len(tokens)],
            }
    if with_ids:
        choice["token_ids"] = [fake_token_id(token) for token in tokens]
    return choice


EMBEDDING_SIZE = 64
"""Dimensions of the test server's fake embeddings."""


def fake_embedding(text: str) -> list[float]:
    """A deterministic unit vector for ``text``: its lower-case words hashed into :data:`EMBEDDING_SIZE` buckets, so
    texts with the same words (in any order, case or punctuation) have the same vector and shared words raise the
    cosine. Not a semantic embedding: paraphrases with other words are far apart.

    Examples:
        >>> fake_embedding("Paris, France") == fake_embedding("france paris")
        True
    """
    vector = [0.0] * EMBEDDING_SIZE
    for word in re.findall(r"\w+", text.lower()):
        vector[zlib.crc32(word.encode()) % EMBEDDING_SIZE] += 1.0
    norm = sum(x * x for x in vector) ** 0.5 or 1.0
    return [x / norm for x in vector]


def embeddings_answer(body: bytes, model_name: str) -> dict[str, Any]:
    """The answer of ``POST /v1/embeddings`` (:func:`fake_embedding` per input); a malformed body is a 400."""
    try:
        data = json.loads(body)
        given = data["input"]
    except (ValueError, KeyError, TypeError):
        raise Refusal(error_response(400, "the body needs an `input` (a string or a list of strings)")) from None
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise Refusal(error_response(400, "`input` must be a string or a list of strings"))
    tokens = sum(len(re.findall(r"\w+|[^\w\s]", t)) for t in texts)
    return {"object": "list", "model": data.get("model") or model_name,
            "data": [{"object": "embedding", "index": i, "embedding": fake_embedding(t)} for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

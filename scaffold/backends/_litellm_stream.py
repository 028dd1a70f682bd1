"""Streaming through litellm (``stream=True``): :meth:`LiteLLMBackend.stream <scaffold.backends.LiteLLMBackend.stream>`.

The request is the one ``complete`` sends, with ``stream=True`` and ``stream_options={"include_usage":
true}``; each chunk's choices become :class:`~scaffold._types.Delta` records (vLLM's per-chunk
``token_ids`` and chat logprobs included, as litellm passes them on), and the end of the stream a
:class:`~scaffold._types.Finished` with completions built as ``complete`` builds them. litellm drops
logprobs from streamed text completions, so those come back without logprobs. Cost: the prices
given to the backend, else litellm's per-token price for the model, else unknown; cached prompt tokens
the provider reports are recorded and charged at its cache price (:meth:`LiteLLMBackend.cache_token_price`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from scaffold._errors import BackendError
from scaffold._types import Finished, Request, StreamItem
from scaffold.backends._choices import cached_prompt_tokens, completions_from
from scaffold.backends._litellm_errors import typed_error
from scaffold.backends._streaming import StreamAssembler

if TYPE_CHECKING:
    from scaffold.backends._litellm import LiteLLMBackend

__all__ = ["stream_litellm"]


async def stream_litellm(backend: LiteLLMBackend, request: Request, import_litellm: Callable[[], Any]) \
        -> AsyncIterator[StreamItem]:
    """Stream ``request`` through ``backend``'s litellm model: deltas, then one ``Finished``. ``import_litellm``
    imports litellm (quietly: :func:`scaffold.backends._litellm.import_litellm`)."""
    litellm = import_litellm()
    kwargs = backend._kwargs(request)
    kwargs.update(stream=True, stream_options={"include_usage": True})
    parts, usage, model = StreamAssembler(request.n), None, None
    error: BackendError | None = None
    response: Any = None
    try:
        response = await backend._send(litellm, request, kwargs)
        async for chunk in response:
            model = getattr(chunk, "model", None) or model
            usage = getattr(chunk, "usage", None) or usage
            for choice in getattr(chunk, "choices", None) or ():
                delta = parts.add(*_chunk_choice(choice))
                calls = getattr(getattr(choice, "delta", None), "tool_calls", None)
                if calls:
                    parts.add_tool_calls(int(getattr(choice, "index", 0) or 0), calls)
                if delta is not None:
                    yield delta
    except Exception as exc:
        detail = f"{backend.model_name}: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
        error = typed_error(litellm, exc, backend._redact(detail))
    finally:
        close = getattr(response, "aclose", None)
        if close is not None:  # a stream left early must give its connection back
            try:
                await close()
            except Exception:
                pass
    if error is not None:  # raised outside the handler: the original may quote the key, so no __context__
        raise error
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0) if usage else parts.completion_tokens()
    prices = backend.token_prices() if usage else None
    completions = completions_from(parts.choices(), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                   model=model or backend.model_name, prices=prices, logprobs=request.logprobs,
                                   cached_tokens=cached_prompt_tokens(usage) if usage else 0,
                                   cache_price=backend.cache_token_price() if prices else None)
    yield Finished(tuple(completions))


def _chunk_choice(choice: Any) -> tuple[int, str | None, Any, Any, str | None]:
    """``(index, text, token_ids, logprobs, finish_reason)`` of one streamed litellm choice."""
    delta = getattr(choice, "delta", None)
    text = getattr(delta, "content", None) if delta is not None else getattr(choice, "text", None)
    ids = getattr(choice, "token_ids", None)
    for holder in (choice, delta):
        fields = getattr(holder, "provider_specific_fields", None)
        if ids is None and isinstance(fields, dict):
            ids = fields.get("token_ids")
    logprobs = None
    raw = getattr(choice, "logprobs", None)
    content = raw.get("content") if isinstance(raw, dict) else getattr(raw, "content", None)
    if content is not None:
        logprobs = [float(e["logprob"] if isinstance(e, dict) else e.logprob) for e in content]
    return int(getattr(choice, "index", 0) or 0), text, ids, logprobs, getattr(choice, "finish_reason", None)

"""The backend protocol and the capabilities a backend declares.

A backend turns one :class:`~scaffold._types.Request` into a list of
:class:`~scaffold._types.Completion` (one per choice, ``request.n`` of them).
What it can do is declared in :class:`Capabilities`, never guessed from a model name.

A backend that declares ``streams`` also has ``stream(request)``: an async iterator of
:class:`~scaffold._types.Delta` (pieces of text, each tagged with its choice) ending with one
:class:`~scaffold._types.Finished` that carries the same completions ``complete`` would give.
:func:`stream_completions` gives that shape for any backend (one delta per choice otherwise).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from scaffold._types import Completion, Delta, Finished, Request, StreamItem


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports."""

    supports_n: bool = False
    """One request may ask for ``n`` choices; sibling samples then go out as one request."""
    max_n: int | None = None
    """Largest ``n`` per request (``None``: no limit)."""
    returns_token_ids: bool = False
    """Completions carry exact token ids and sampling logprobs when asked."""
    trainable: bool = False
    """The weights can be updated in place (local models used as a policy)."""
    streams: bool = False
    """``stream(request)`` yields text as it is generated (see :class:`StreamingBackend`)."""
    json_schema: bool = False
    """Takes an OpenAI ``response_format`` (a JSON schema): a JSON answer kind sends one with every call."""


@runtime_checkable
class Backend(Protocol):
    """Anything with ``capabilities`` and an async ``complete(request)``.

    Examples:
        >>> class Echo:
        ...     capabilities = Capabilities()
        ...     async def complete(self, request):
        ...         return [Completion(text=request.last_content)] * request.n
        >>> isinstance(Echo(), Backend)
        True
    """

    capabilities: Capabilities

    async def complete(self, request: Request) -> Sequence[Completion]:
        """Answer ``request`` with exactly ``request.n`` completions, or raise ``BackendError``."""
        ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A :class:`Backend` that also streams: ``stream(request)`` is an async iterator of stream items.

    It yields :class:`~scaffold._types.Delta` records as text arrives (choices interleaved, each
    tagged with its index) and ends with one :class:`~scaffold._types.Finished` holding the
    ``request.n`` completions ``complete`` would return; failures raise ``BackendError`` as
    ``complete`` does. Stopping early (``aclose()``, or leaving the ``async for``) abandons the call.
    """

    def stream(self, request: Request) -> AsyncIterator[StreamItem]:
        """Stream the answer to ``request``: deltas, then one ``Finished``."""
        ...


def provider_of(backend: Any) -> str:
    """What a backend's calls report as ``gen_ai.provider.name``: its ``provider`` attribute when it declares one,
    else its class name without ``Backend``, lower-cased.

    Examples:
        >>> class EchoBackend:
        ...     pass
        >>> provider_of(EchoBackend())
        'echo'
    """
    declared = getattr(backend, "provider", None)
    if isinstance(declared, str) and declared:
        return declared
    return provider_of_class(type(backend).__name__)


def provider_of_class(name: str) -> str:
    """The provider of a backend known only by its class name (a run recorded before providers were kept)."""
    return (name.removesuffix("Backend") or name).lower()


async def stream_completions(backend: Backend, request: Request) -> AsyncIterator[StreamItem]:
    """Stream ``request`` from any backend: its own ``stream`` when it declares ``streams``, else
    ``complete`` seen as one delta per choice (the whole text) followed by ``Finished``.

    Examples:
        >>> import asyncio
        >>> from scaffold.testing import ScriptedBackend
        >>> async def main():
        ...     return [item async for item in stream_completions(ScriptedBackend(lambda r: "4"), Request(n=2))]
        >>> [type(item).__name__ for item in asyncio.run(main())]
        ['Delta', 'Delta', 'Finished']
    """
    if backend.capabilities.streams and isinstance(backend, StreamingBackend):
        items = backend.stream(request)
        try:
            async for item in items:
                yield item
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:  # stopped early: end the backend's call now, not when it is collected
                await aclose()
        return
    completions = tuple(await backend.complete(request))
    for index, completion in enumerate(completions):
        yield Delta(index, completion.text, completion.token_ids, completion.logprobs)
    yield Finished(completions)

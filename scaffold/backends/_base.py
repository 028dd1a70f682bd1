"""The backend protocol and the capabilities a backend declares.

A backend turns one :class:`~scaffold._types.Request` into a list of
:class:`~scaffold._types.Completion` (one per choice, ``request.n`` of them).
What it can do is declared in :class:`Capabilities`, never guessed from a model name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from scaffold._types import Completion, Request


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


@runtime_checkable
class Backend(Protocol):
    """Anything with ``capabilities`` and an async ``complete(request)``.

    Example:
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

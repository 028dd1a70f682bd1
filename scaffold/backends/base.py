"""The backend protocol and :class:`Model`, the binding of a backend to an alias.

A backend turns one :class:`~scaffold.types.Request` into a list of
:class:`~scaffold.types.Completion` (one per choice, ``request.n`` of them).
What it can do is declared in :class:`Capabilities`, never guessed from a model name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from scaffold.errors import ModelAliasError
from scaffold.limits import InFlightLimit
from scaffold.types import Completion, Request


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


@dataclass(eq=False)
class Model:
    """A backend bound to a model alias, with its defaults and its in-flight limit.

    The limit lives on this object, so every run (and every node of every run)
    given the same ``Model`` shares one budget.

    Example:
        >>> from scaffold.testing import ScriptedBackend
        >>> solver = Model(ScriptedBackend(lambda r: "\\\\boxed{4}"), max_in_flight=8)
        >>> solver.limit.limit
        8
    """

    backend: Backend
    """What answers the requests."""
    name: str | None = None
    """Concrete model name sent as ``Request.model``."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Default sampling parameters; a node's ``params`` override them."""
    max_in_flight: int | None = None
    """Most requests in flight at once across all runs using this object (``None``: unlimited)."""
    limit: InFlightLimit | None = field(init=False, default=None)
    """The shared limiter (built from ``max_in_flight``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.backend, Backend):
            raise ModelAliasError(
                f"{self.backend!r} is not a backend: it needs a `capabilities` attribute and an async `complete`"
            )
        if self.max_in_flight is not None:
            self.limit = InFlightLimit(self.max_in_flight)


def resolve_model(spec: Model | Backend | Any, alias: str) -> Model:
    """Turn what a user bound to ``alias`` into a :class:`Model`."""
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, Backend):
        return Model(spec)
    if isinstance(spec, str):
        raise ModelAliasError(
            f"model alias {alias!r} is bound to the string {spec!r}; bind a Backend or Model "
            f"(API model names are resolved by the litellm backend)"
        )
    raise ModelAliasError(f"model alias {alias!r} is bound to {spec!r}, which is not a Backend or Model")

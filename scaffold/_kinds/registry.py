"""Which function expands which node kind, and the few steps every kind's expansion shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from scaffold._errors import EmptySetError, GraphDefinitionError
from scaffold._nodes import Node

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext

Expander = Callable[["RunContext", Any], list["Slot"]]
"""``expand(run, node) -> slots``: creates the node's slots and the jobs that will resolve them."""
E = TypeVar("E", bound=Expander)

_EXPANDERS: dict[type[Node], Expander] = {}


def expands(*kinds: type[Node]) -> Callable[[E], E]:
    """Register the decorated function as the expansion of nodes of ``kinds`` (and their subclasses)."""

    def register(function: E) -> E:
        for kind in kinds:
            _EXPANDERS[kind] = function
        return function

    return register


def expander(node: Node) -> Expander:
    """The expansion registered for ``node``'s class (or the nearest base class that has one)."""
    for cls in type(node).__mro__:
        function = _EXPANDERS.get(cls)
        if function is not None:
            return function
    raise GraphDefinitionError(f"node {node.name!r}: no expansion is registered for {type(node).__name__}")


def members(run: RunContext, node: Node, items: Node | None, *, nonempty: bool = True) -> list[Slot]:
    """The slots of the set ``node`` reads; an empty set is an :class:`EmptySetError` where it must not be."""
    assert items is not None
    slots = run.slots[items.id]
    if nonempty and not slots:
        raise EmptySetError(f"node {node.name!r} reads an empty set")
    return slots


def when_ready(run: RunContext, node: Node, deps: Sequence[Slot], outs: list[Slot], fire: Callable[..., None],
               *args: Any, propagate_skip: bool = True) -> None:
    """Schedule ``fire(run, node, *args)`` for when ``deps`` (and the node's loop gate, if any) are resolved."""
    run.when_ready(node, deps, outs, fire, args, propagate_skip=propagate_skip)

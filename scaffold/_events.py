"""Events a run emits, for recorders (the trajectory store) and progress displays.

Subscribers are plain callables ``fn(event) -> None`` passed to ``run(..., subscribers=[fn])``.
They are called synchronously on the event loop, so they must be quick: a
recorder queues the event and writes in batches elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaffold._types import Trace

if TYPE_CHECKING:
    from scaffold._result import RunResult


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run was validated and expanded; no call has been sent yet."""

    run_id: str
    graph: str
    inputs: Mapping[str, Any]
    seed: int
    params: Mapping[str, Any]
    """The graph's build parameters (``n``, ``k``, ``steps``...)."""
    spec: Mapping[str, Any]
    """The graph's structure (:meth:`Graph.spec`)."""
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Alias -> ``{"model": the concrete model's name, "backend": its backend's class name}``."""


@dataclass(frozen=True, slots=True)
class CallStarted:
    """A request is about to be sent (after waiting for its in-flight limit)."""

    run_id: str
    trace_ids: tuple[str, ...]
    """The ids the traces of this request will get (one per choice)."""
    model: str


@dataclass(frozen=True, slots=True)
class TraceFinished:
    """A trace is final: finished, failed or cancelled (external inputs and rule outputs too)."""

    trace: Trace


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended, successfully or not."""

    result: RunResult


Event = RunStarted | CallStarted | TraceFinished | RunFinished
Subscriber = Callable[[Event], None]
"""A function called with every event of a run. One that sets an ``events`` attribute (a collection of event
classes: ``fn.events = (TraceFinished,)``) gets only those; an event no subscriber wants is not even built."""
EVENTS = (RunStarted, CallStarted, TraceFinished, RunFinished)


def wanted_by(subscribers: tuple[Subscriber, ...]) -> dict[type, tuple[Subscriber, ...]]:
    """Each event class, and the subscribers that get it (their ``events``, by default all).

    Examples:
        >>> def calls(event): pass
        >>> calls.events = (TraceFinished,)
        >>> {cls.__name__: len(fns) for cls, fns in wanted_by((calls, print)).items()}
        {'RunStarted': 1, 'CallStarted': 1, 'TraceFinished': 2, 'RunFinished': 1}
    """
    return {cls: tuple(fn for fn in subscribers if cls in getattr(fn, "events", EVENTS)) for cls in EVENTS}

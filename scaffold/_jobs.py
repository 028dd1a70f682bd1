"""What the scheduler waits on and fires: one slot per trace, and jobs waiting on slots.

A job counts the slots it still waits for (``missing``); when the last one resolves, the run
starts it (:meth:`Job.start`), or resolves its outputs as skipped if one of them was skipped.
Jobs hold no reference to their run (they are given it when they start), so a run that ends
with jobs still waiting leaves no reference cycle behind.

A kind that schedules many jobs of one shape (a call node: one per request) defines its own
:class:`Job` subclass with exactly the fields it needs, instead of a :class:`FunctionJob` and
its argument tuple: fewer objects per call for the garbage collector to count and traverse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaffold._nodes import Node
    from scaffold._run_context import RunContext
    from scaffold._types import Trace

__all__ = ["FunctionJob", "Job", "Slot"]


class Slot:
    """Placeholder for one trace; resolved exactly once."""

    __slots__ = ("trace", "waiters")

    def __init__(self) -> None:
        self.trace: Trace | None = None
        self.waiters: list[Job] | None = None


class Job:
    """Work of ``node`` that starts once ``missing`` slots are resolved.

    ``skipped`` is set when a slot it waits on resolved as skipped and ``propagate`` is true: the
    run then resolves :meth:`outputs` as skipped instead of starting it.
    """

    __slots__ = ("missing", "skipped", "node", "propagate")

    def __init__(self, node: Node, propagate: bool = True) -> None:
        self.missing = 0
        self.skipped = False
        self.node = node
        self.propagate = propagate

    def outputs(self) -> Sequence[Slot]:
        """The slots this job resolves."""
        raise NotImplementedError

    def start(self, run: RunContext) -> None:
        """Do the work (on the event loop; a call is started as a task)."""
        raise NotImplementedError


class FunctionJob(Job):
    """``fire(run, node, *args)``, resolving ``outs``: what :func:`scaffold._kinds.registry.when_ready` schedules."""

    __slots__ = ("outs", "fire", "args")

    def __init__(self, node: Node, outs: list[Slot], fire: Callable[..., None], args: tuple[Any, ...],
                 propagate: bool = True) -> None:
        super().__init__(node, propagate)
        self.outs = outs
        self.fire = fire
        self.args = args

    def outputs(self) -> Sequence[Slot]:
        return self.outs

    def start(self, run: RunContext) -> None:
        self.fire(run, self.node, *self.args)

"""What a node kind sees of the run it works in: :class:`RunContext`, the narrow view kinds are typed against.

Node kinds (:mod:`scaffold._kinds`), the call path (:mod:`scaffold._call`) and jobs (:mod:`scaffold._jobs`)
depend on this protocol, not on the executor: the executor's ``Run`` is one implementation. A kind
expands its node into slots, schedules work on them and resolves them with traces; it reads the
run's identity, inputs and settings, and reaches models only through the run's send paths (so
limits, retries, budgets, timeouts and reuse apply). Everything else of the executor (its task
accounting, its failure state, its event loop) stays private to it.

mypy checks that the executor's ``Run`` is one wherever the executor hands itself to a job.

Examples:
    >>> from scaffold._executor import Run
    >>> [name for name in ("new_slots", "finish", "node_failed", "sender") if not hasattr(Run, name)]
    []
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from scaffold._answers import Extractor
    from scaffold._call import ReuseSource, Send
    from scaffold._events import Subscriber
    from scaffold._jobs import Job, Slot
    from scaffold._nodes import Node
    from scaffold._types import Request, Trace
    from scaffold.answers import AnswerKind
    from scaffold.backends._model import Model


class RunContext(Protocol):
    """The run as a node kind uses it while it expands and fires (see the module docstring)."""

    # -- identity, inputs and settings ----------------------------------------------------------------
    run_id: str
    seed: int
    inputs: Mapping[str, Any]
    extract: Extractor
    """How answers are read from text (``\\boxed{}`` by default)."""
    answers: AnswerKind
    """The run's answer kind, bound to its inputs (math by default): its extractor is :attr:`extract` unless the
    run was given one, and a vote without an equivalence of its own clusters by it."""
    call_params: dict[str, Any]
    """Sampling parameters every call of the run gets (a served request's, say)."""
    reuse: tuple[ReuseSource, ...]
    """Where recorded answers are looked up before a call is sent (resume, replay, cache)."""
    models: Mapping[str, Model]
    """The run's models by alias (a graph called as a tool runs on them)."""
    store: Any
    """The store the run records to, ``None`` when it records nothing (a graph called as a tool records there)."""
    client_node: Node | None
    """The graph's output node when it is an agent: the one the caller's own tools are offered to."""
    client_tools: tuple[Mapping[str, Any], ...]
    """Tools the caller runs itself (a served request's ``tools``), offered to :attr:`client_node`."""
    continuation: tuple[tuple[Any, ...], ...]
    """The caller's turns after its question: :attr:`client_node`'s tool calls and the caller's answers to them."""

    @property
    def listeners(self) -> Mapping[type, Sequence[Subscriber]]:
        """Each event class and the subscribers that want it (an event nobody wants is not built)."""
        ...

    # -- the run's slots and per-node state ------------------------------------------------------------
    slots: list[list[Slot]]
    """Each node's output slots, by node id."""
    gate_tokens: dict[int, Slot]
    """Each loop gate's current token, by gate node id."""
    memo: dict[int, Any]
    """Per-node values a kind computes once per run."""
    tasks: set[asyncio.Task[None]]
    skipped: Trace
    """The value of a slot whose node did not run."""

    # -- models -----------------------------------------------------------------------------------------
    def model(self, alias: str) -> Model: ...

    def sender(self, alias: str) -> Send: ...

    def streams(self, node: Node) -> bool: ...

    def stream_sender(self, alias: str, node: Node, index: int) -> Send: ...

    def rng(self, node: Node) -> random.Random: ...

    def answers_for(self, node: Node) -> AnswerKind:
        """The answer kind of ``node``'s traces (its own, bound to the run's inputs, else the run's)."""
        ...

    def extractor(self, node: Node) -> Extractor:
        """How ``node``'s answers are read (its extractor or kind, else the run's)."""
        ...

    # -- scheduling and resolving -----------------------------------------------------------------------
    def new_slots(self, count: int) -> list[Slot]: ...

    def control_slots(self, node: Node) -> list[Slot]: ...

    def ok(self, slots: list[Slot]) -> list[Trace]: ...

    def start(self, work: Coroutine[Any, Any, None]) -> None: ...

    def when_ready(self, node: Node, deps: Sequence[Slot], outs: list[Slot], fire: Callable[..., None],
                   args: tuple[Any, ...] = (), *, propagate_skip: bool = True) -> None: ...

    def schedule(self, job: Job, deps: Sequence[Slot]) -> None: ...

    def resolve(self, slot: Slot, trace: Trace) -> None: ...

    def finish(self, slot: Slot, trace: Trace) -> None: ...

    def record(self, trace: Trace) -> None: ...

    def emit(self, event: Any) -> None: ...

    def node_failed(self, node: Node, outs: list[Slot], index: int, exc: BaseException,
                    request: Request | None = None, inputs: tuple[str, ...] = (), started: float = 0.0,
                    latency: float = 0.0) -> None: ...

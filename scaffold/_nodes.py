"""Graph nodes: symbolic at build time, expanded into per-trace slots when a run starts.

Each node knows its static ``size`` (``None`` when it depends on run-time inputs),
the nodes it reads, and how to expand itself into slots and jobs on a run.
The scheduling itself (when a job fires, how a call is sent) is in ``executor``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from scaffold._answers import Extractor
from scaffold._errors import EmptySetError, GraphDefinitionError, InputError, SubsetSizeError
from scaffold._selectors import AllMembers, Selector
from scaffold._template import Template
from scaffold._types import Trace, TraceKind

if TYPE_CHECKING:
    from scaffold._executor import Run, Slot


@dataclass(frozen=True)
class Quorum:
    """Failure policy: failed members are recorded and dropped, but at least ``k`` must succeed.

    Example:
        >>> Quorum(3).k
        3
    """

    k: int

    def __post_init__(self) -> None:
        if self.k < 1:
            raise SubsetSizeError(f"a quorum must be at least 1, got {self.k}")


OnError = str | Quorum | int
"""``"raise"`` (fail fast, the default), ``"drop"`` (record and drop failed members), or a quorum."""


def make_policy(on_error: OnError) -> str | Quorum:
    if isinstance(on_error, bool):
        raise GraphDefinitionError(f"on_error={on_error!r} is not a policy")
    if isinstance(on_error, int):
        return Quorum(on_error)
    if isinstance(on_error, Quorum) or on_error in ("raise", "drop"):
        return on_error
    raise GraphDefinitionError(f"on_error={on_error!r}: use 'raise', 'drop', or Quorum(k)")


@dataclass(frozen=True, slots=True)
class RuleOutput:
    """What a rule aggregator returns: the new trace's text, answer and metadata."""

    text: str
    answer: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Node:
    """A symbolic set of traces in a graph."""

    name: str
    size: int | None
    """Static number of traces, ``None`` when only the run's inputs decide it."""
    single: bool = False
    """The node stands for one trace: its output is a ``Trace``, not a list."""
    on_error: str | Quorum = "raise"
    id: int = field(default=-1, init=False)
    control: GateNode | None = field(default=None, init=False)
    """The loop gate that decides whether this node runs (nodes inside a loop with ``until``)."""

    kind = "node"
    alias: str | None = None

    @property
    def reads(self) -> tuple[Node, ...]:
        """Nodes this one reads (its data dependencies)."""
        return ()

    def calls(self, sizes: Mapping[int, int | None]) -> int:
        """Model calls (choices) this node makes, given the sizes of the nodes before it."""
        return 0

    def label(self) -> str:
        return self.kind

    def expand(self, run: Run) -> list[Slot]:
        raise NotImplementedError


def external_trace(run_id: str, node: str, index: int, value: Any, extract: Extractor) -> Trace:
    """Turn a user-supplied candidate (string, Trace or mapping) into an external trace."""
    tid = f"{run_id}/{node}#{index}"
    if isinstance(value, Trace):
        return Trace(
            id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL, model=value.model,
            text=value.text, answer=value.answer if value.answer is not None else extract(value.text),
            usage=value.usage, cost=value.cost, metadata={"source_id": value.id, **value.metadata},
        )
    if isinstance(value, str):
        return Trace(id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL,
                     text=value, answer=extract(value))
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        extra = {k: v for k, v in value.items() if k not in ("text", "answer", "model")}
        answer = value.get("answer")
        return Trace(id=tid, run_id=run_id, node=node, index=index, kind=TraceKind.EXTERNAL,
                     model=value.get("model"), text=value["text"],
                     answer=str(answer) if answer is not None else extract(value["text"]), metadata=extra)
    raise InputError(
        f"candidate {index} of {node!r} is {type(value).__name__}; give a string, a Trace, "
        f"or a mapping with a 'text' key"
    )


@dataclass(eq=False)
class InputNode(Node):
    """Candidates supplied when the run starts: ``run({"candidates": [...]})``."""

    input_name: str = ""
    kind = "input"

    def expand(self, run: Run) -> list[Slot]:
        try:
            values = run.inputs[self.input_name]
        except KeyError:
            raise InputError(f"the graph reads candidates from input {self.input_name!r}, which is missing") from None
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise InputError(f"input {self.input_name!r} must be a list of candidates, got {type(values).__name__}")
        return run.external_slots(self, values)


@dataclass(eq=False)
class ConstNode(Node):
    """Candidates fixed when the graph is built: ``sf.candidates([...])``."""

    values: tuple[Any, ...] = ()
    kind = "candidates"

    def expand(self, run: Run) -> list[Slot]:
        return run.external_slots(self, self.values)


@dataclass(eq=False)
class CallNode(Node):
    """Model calls: ``generate`` (one), ``sample`` (n), ``aggregate`` (one per selected group)."""

    alias: str | None = None
    prompt: Template = field(default_factory=lambda: Template(""))
    system: Template | None = None
    items: Node | None = None
    selector: Selector = field(default_factory=AllMembers)
    samples: int = 1
    context: Mapping[str, Node] = field(default_factory=dict)
    variables: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    """Template variable → ``("input", name)`` or ``("const", value)``."""
    params: Mapping[str, Any] = field(default_factory=dict)
    extract: Extractor | None = None
    render: Callable[[Sequence[Trace]], str] | None = None
    logprobs: bool = False
    primitive: str = "generate"

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.primitive

    @property
    def reads(self) -> tuple[Node, ...]:
        return ((self.items,) if self.items is not None else ()) + tuple(self.context.values())

    def groups_for(self, size: int | None) -> int | None:
        if self.items is None:
            return 1
        if size is None:
            return self.selector.count(0) if isinstance(self.selector, AllMembers) else None
        return self.selector.count(size)

    def calls(self, sizes: Mapping[int, int | None]) -> int:
        groups = self.groups_for(sizes[self.items.id] if self.items is not None else None)
        if groups is None:
            raise GraphDefinitionError(f"node {self.name!r} reads a set whose size is only known at run time")
        return groups * self.samples

    def label(self) -> str:
        if self.items is None:
            return f"{self.primitive} ×{self.samples}" if self.samples > 1 else self.primitive
        describe = getattr(self.selector, "describe", None)
        groups = describe() if callable(describe) else type(self.selector).__name__
        return f"{self.primitive} over {groups}" + (f", {self.samples} samples each" if self.samples > 1 else "")

    def expand(self, run: Run) -> list[Slot]:
        if self.items is None:
            members: list[Slot] = []
            groups: list[tuple[int, ...]] = [()]
        else:
            members = run.slots[self.items.id]
            check_set(self, len(members))
            self.selector.check(len(members))
            groups = self.selector.groups(len(members), run.rng(self))
        context = [s for node in self.context.values() for s in run.slots[node.id]]
        control = run.control_slots(self)
        if isinstance(self.on_error, Quorum) and self.on_error.k > len(groups) * self.samples:
            raise SubsetSizeError(
                f"node {self.name!r}: quorum {self.on_error.k} is larger than its {len(groups) * self.samples} calls"
            )
        model = run.model(self.alias or "")
        caps = model.backend.capabilities
        batch = min(self.samples, caps.max_n or self.samples) if caps.supports_n else 1
        outs = run.new_slots(len(groups) * self.samples)
        index = 0
        for group in groups:
            member_slots = [members[i] for i in group]
            deps = member_slots + context + control
            for start in range(0, self.samples, batch):
                count = min(batch, self.samples - start)
                slots = outs[index : index + count]
                run.when_ready(deps, slots, partial(run.launch_call, self, model, member_slots, slots, index))
                index += count
        return outs


@dataclass(eq=False)
class SetNode(Node):
    """A node computed from one set (``items``): rules, maps, selections, loop gates."""

    items: Node | None = None

    @property
    def reads(self) -> tuple[Node, ...]:
        return (self.items,) if self.items is not None else ()


def check_set(node: Node, size: int) -> None:
    if size == 0:
        raise EmptySetError(f"node {node.name!r} reads an empty set")


@dataclass(eq=False)
class RuleNode(SetNode):
    """A rule aggregation: a function of the whole set, one new trace (vote, best-of, weighted vote).

    ``using`` are further sets the function reads (e.g. a judge's verdicts on the members); it is
    called as ``fn(members, *using)``, each argument the successful traces of its set.
    """

    fn: Callable[..., Any] | None = None
    rule: str = "rule"
    using: tuple[Node, ...] = ()
    pass_inputs: bool = False
    """Call ``fn(members, *using, inputs=<the run's inputs>)``."""

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.rule

    @property
    def reads(self) -> tuple[Node, ...]:
        return (self.items, *self.using) if self.items is not None else self.using

    def expand(self, run: Run) -> list[Slot]:
        assert self.items is not None
        members = run.slots[self.items.id]
        check_set(self, len(members))
        using = [run.slots[node.id] for node in self.using]
        out = run.new_slots(1)
        deps = members + [slot for slots in using for slot in slots] + run.control_slots(self)
        run.when_ready(deps, out, partial(run.launch_rule, self, members, out[0], using))
        return out


@dataclass(eq=False)
class MapNode(SetNode):
    """A function applied to each member on its own; each result is a new trace reading that member."""

    fn: Callable[[Trace], Any] | None = None
    extract: Extractor | None = None
    kind = "map"

    def expand(self, run: Run) -> list[Slot]:
        assert self.items is not None
        members = run.slots[self.items.id]
        control = run.control_slots(self)
        outs = run.new_slots(len(members))
        for i, (member, out) in enumerate(zip(members, outs)):
            run.when_ready([member, *control], [out], partial(run.launch_map, self, member, out, i))
        return outs


@dataclass(eq=False)
class SelectNode(SetNode):
    """``top_k`` / ``select``: k members chosen by a score or a function; the chosen traces pass through unchanged.

    With ``choose``, ``choose(members, *using)`` returns the chosen members, best first (``using``
    as for :class:`RuleNode`); otherwise the ``k`` members with the highest ``score``.
    """

    k: int = 1
    score: Callable[[Trace], float] | None = None
    choose: Callable[..., Sequence[Trace]] | None = None
    using: tuple[Node, ...] = ()

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "top_k" if self.choose is None else "select"

    @property
    def reads(self) -> tuple[Node, ...]:
        return (self.items, *self.using) if self.items is not None else self.using

    def expand(self, run: Run) -> list[Slot]:
        assert self.items is not None
        members = run.slots[self.items.id]
        check_set(self, len(members))
        if self.k > len(members):
            raise SubsetSizeError(f"{self.kind} {self.name!r}: k={self.k} is larger than its set (n={len(members)})")
        using = [run.slots[node.id] for node in self.using]
        outs = run.new_slots(self.k)
        deps = members + [slot for slots in using for slot in slots] + run.control_slots(self)
        run.when_ready(deps, outs, partial(run.launch_select, self, members, outs, using))
        return outs


@dataclass(eq=False)
class ConcatNode(Node):
    """Several sets joined in order; no new traces."""

    parts: tuple[Node, ...] = ()
    kind = "concat"

    @property
    def reads(self) -> tuple[Node, ...]:
        return self.parts

    def expand(self, run: Run) -> list[Slot]:
        return [slot for part in self.parts for slot in run.slots[part.id]]


@dataclass(eq=False)
class GateNode(SetNode):
    """Before a loop iteration: stops the loop (skipping everything the iteration would run) when ``until`` holds."""

    until: Callable[[list[Trace]], bool] | None = None
    kind = "until"

    def expand(self, run: Run) -> list[Slot]:
        assert self.items is not None
        members = run.slots[self.items.id]
        outs = run.new_slots(len(members))
        token = run.new_slots(1)[0]
        run.gate_tokens[self.id] = token
        run.when_ready(members + run.control_slots(self), outs + [token],
                       partial(run.launch_gate, self, members, outs, token))
        return outs


@dataclass(eq=False)
class LoopResultNode(Node):
    """A loop's output: the last iteration that ran (its input if none ran)."""

    candidates: tuple[Node, ...] = ()
    kind = "loop_result"

    @property
    def reads(self) -> tuple[Node, ...]:
        return self.candidates

    def expand(self, run: Run) -> list[Slot]:
        sets = [run.slots[c.id] for c in self.candidates]
        outs = run.new_slots(len(sets[0]))
        control = run.control_slots(self)
        deps = [s for slots in sets for s in slots] + control
        # later iterations are skipped when the loop stops: that must not skip the loop's result
        run.when_ready(deps, outs, partial(run.launch_loop_result, self, sets, outs, control), propagate_skip=False)
        return outs


def derive_rng(seed: int, node: str) -> random.Random:
    return random.Random(f"{seed}:{node}")

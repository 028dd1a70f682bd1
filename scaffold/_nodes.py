"""Graph nodes as build-time data: what each node reads, how many traces it stands for, how many calls it makes.

Nothing here knows about runs. How a node kind expands into slots and fires when a run starts
lives with the kind, one module each, in :mod:`scaffold._kinds`; the scheduler that fires jobs is
:mod:`scaffold._executor`, and the model-call path is :mod:`scaffold._call`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from scaffold._answers import Extractor
from scaffold._errors import GraphDefinitionError, SubsetSizeError
from scaffold._selectors import AllMembers, Selector
from scaffold._template import Template
from scaffold._types import Trace


@dataclass(frozen=True)
class Quorum:
    """Failure policy: failed members are recorded and dropped, but at least ``k`` must succeed.

    Examples:
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
    passes_through: ClassVar[bool] = False
    """The node's traces are members of the sets it reads, passed on unchanged (a run records their ids)."""

    @property
    def reads(self) -> tuple[Node, ...]:
        """Nodes this one reads (its data dependencies)."""
        return ()

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        """The number of traces, given the sizes of the nodes before it and of the candidate-set inputs."""
        return self.size

    def calls(self, sizes: Mapping[int, int | None]) -> int:
        """Model calls (choices) this node makes, given the sizes of the nodes before it."""
        return 0

    def label(self) -> str:
        return self.kind


@dataclass(eq=False)
class InputNode(Node):
    """Candidates supplied when the run starts: ``run({"candidates": [...]})``."""

    input_name: str = ""
    kind = "input"

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        return inputs.get(self.input_name)


@dataclass(eq=False)
class ConstNode(Node):
    """Candidates fixed when the graph is built: ``sf.candidates([...])``."""

    values: tuple[Any, ...] = ()
    kind = "candidates"

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        return len(self.values)


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

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        groups = self.groups_for(sizes[self.items.id] if self.items is not None else None)
        return None if groups is None else groups * self.samples

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


@dataclass(eq=False)
class AgentNode(CallNode):
    """A tool loop per trace (``sf.agent``, ``sf.aggregate(tools=...)``): model turns and tool calls until the
    model answers without calling a tool, or ``max_turns``, or a budget (tokens, context); its trace is the last turn.

    ``tools`` are :class:`~scaffold._tools.Tool` objects (duck-typed here: a name and a ``spec()``)."""

    tools: tuple[Any, ...] = ()
    max_turns: int = 10
    token_budget: int | None = None
    """Tokens (prompt and completion, all turns) after which the next turn is the last: it may not call tools."""
    context_budget: int | None = None
    """Tokens of one turn's conversation (its prompt and completion) after which the next turn is the last."""

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "agent" if self.primitive == "agent" else f"{self.primitive} (agent)"

    def calls(self, sizes: Mapping[int, int | None]) -> int:
        """At most ``max_turns`` model calls per trace."""
        return super().calls(sizes) * self.max_turns

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def label(self) -> str:
        tools = ", ".join(self.tool_names()) or "no tools"
        return f"{super().label()} with {tools}, at most {self.max_turns} turns"


@dataclass(eq=False)
class SetNode(Node):
    """A node computed from one set (``items``): rules, maps, selections, loop gates."""

    items: Node | None = None

    @property
    def reads(self) -> tuple[Node, ...]:
        return (self.items,) if self.items is not None else ()

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        assert self.items is not None
        return sizes[self.items.id]


@dataclass(eq=False)
class JudgedVoteNode(SetNode):
    """A vote whose clusters a model judges (``sf.vote(..., equivalence=sf.judge(...))``; see
    :mod:`scaffold._judge`): one output trace, and a model trace per pair judged."""

    prompt: Template = field(default_factory=lambda: Template(""))
    params: Mapping[str, Any] = field(default_factory=dict)
    variables: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    """Template variable -> ``("input", name)`` or ``("const", value)``, as a call node's."""
    max_calls: int | None = None
    method: str = "judge"
    """``"judge"``: a model judges pairs; ``"embed"``: answers cluster by the cosine of their embeddings."""
    threshold: float = 0.9
    """The cosine at which two answers are the same (``method="embed"``)."""
    kind = "judged_vote"

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        return 1

    def calls(self, sizes: Mapping[int, int | None]) -> int:
        """At most one call per pair of members (fewer in practice: one per cluster a new answer is compared
        with), and at most ``max_calls``."""
        if self.method == "embed":
            return 1  # one call embeds every distinct answer
        members = sizes[self.items.id] if self.items is not None else None
        if members is None:
            raise GraphDefinitionError(f"node {self.name!r} reads a set whose size is only known at run time")
        worst = members * (members - 1) // 2
        return worst if self.max_calls is None else min(worst, self.max_calls)


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
    pass_answers: bool = False
    """Call ``fn(members, *using, answers=<the run's answer kind>)`` (a vote without its own equivalence)."""

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.rule

    @property
    def reads(self) -> tuple[Node, ...]:
        return (self.items, *self.using) if self.items is not None else self.using

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        return 1


@dataclass(eq=False)
class MapNode(SetNode):
    """A function applied to each member on its own; each result is a new trace reading that member."""

    fn: Callable[[Trace], Any] | None = None
    extract: Extractor | None = None
    kind = "map"


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

    passes_through = True

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        return self.k


@dataclass(eq=False)
class ConcatNode(Node):
    """Several sets joined in order; no new traces."""

    parts: tuple[Node, ...] = ()
    kind = "concat"

    @property
    def reads(self) -> tuple[Node, ...]:
        return self.parts

    passes_through = True

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        parts = [sizes[p.id] for p in self.parts]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


@dataclass(eq=False)
class GateNode(SetNode):
    """Before a loop iteration: stops the loop (skipping everything the iteration would run) when ``until`` holds."""

    until: Callable[[list[Trace]], bool] | None = None
    kind = "until"


@dataclass(eq=False)
class LoopResultNode(Node):
    """A loop's output: the last iteration that ran (its input if none ran)."""

    candidates: tuple[Node, ...] = ()
    kind = "loop_result"

    @property
    def reads(self) -> tuple[Node, ...]:
        return self.candidates

    passes_through = True

    def size_given(self, sizes: Mapping[int, int | None], inputs: Mapping[str, int]) -> int | None:
        return sizes[self.candidates[0].id]

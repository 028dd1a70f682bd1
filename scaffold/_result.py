"""What a run returns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scaffold._types import Trace, TraceKind, Usage


@dataclass
class RunResult:
    """The outcome of one run: its output, every trace it produced, and how it ended.

    Examples:
        >>> r = RunResult(run_id="r1", graph="g", inputs={}, seed=0, status="ok", output=None)
        >>> r.ok
        True
    """

    run_id: str
    graph: str
    inputs: Mapping[str, Any]
    seed: int
    status: str
    """``"ok"``, ``"error"``, ``"timeout"`` or ``"cancelled"``."""
    output: Any
    """The graph's return value with nodes replaced by traces (a ``Trace``, a list, or a dict of them)."""
    traces: list[Trace] = field(default_factory=list)
    """Every trace of the run in the order it finished (external, model and rule traces)."""
    error: BaseException | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    index: int | None = None
    """Position of the input row in ``Graph.map``'s dataset."""
    passed: Mapping[str, list[str]] = field(default_factory=dict)
    """Trace ids of the sets that pass traces through without making new ones (``top_k``, ``select``,
    ``concat``, loop results), by node name: what :meth:`node` returns for those nodes."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def answer(self) -> str | None:
        """The extracted answer of the output, when the output is a single trace."""
        return self.output.answer if isinstance(self.output, Trace) else None

    @property
    def wall_time(self) -> float:
        return self.finished_at - self.started_at

    def node(self, name: str) -> list[Trace]:
        """Traces produced by the node called ``name``, ordered by index.

        For a node that passes traces through (``top_k``, ``select``, ``concat``, a loop's
        result), the members of its set, in the set's order.
        """
        if name in self.passed:
            by_id = {t.id: t for t in self.traces}
            return [by_id[i] for i in self.passed[name] if i in by_id]
        return sorted((t for t in self.traces if t.node == name), key=lambda t: t.index)

    def calls_by_model(self) -> dict[str, int]:
        """Number of model traces per alias."""
        return dict(Counter(t.model for t in self.traces if t.kind is TraceKind.MODEL and t.model))

    @property
    def usage(self) -> Usage:
        """Total tokens over the run's model traces."""
        prompt = sum(t.usage.prompt_tokens for t in self.traces if t.kind is TraceKind.MODEL)
        completion = sum(t.usage.completion_tokens for t in self.traces if t.kind is TraceKind.MODEL)
        return Usage(prompt, completion)

    @property
    def cost(self) -> float | None:
        """Total dollar cost, ``None`` if any model call's price is unknown."""
        costs = [t.cost for t in self.traces if t.kind is TraceKind.MODEL]
        return None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))

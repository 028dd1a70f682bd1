"""Where a training's rollouts run: the :class:`RolloutSource` protocol and the local source.

:func:`~trainers.loop.train_online` is one loop over a rollout source. Each step it submits the
step's problems (and, with a lag, those of the next steps), collects the step's results in row
order, and after the update asks the source to bring its engines up to date. The local source
(:class:`LocalRollouts`) runs the graph in this process with ``Graph.map``; the Ray source
(:class:`trainers.distributed.RayRollouts`, made by ``RolloutCluster``) runs it on Ray workers.

Every source numbers a step's rows as ``Graph.map`` does (:func:`scaffold.plan_row`): row ``i`` of
step ``s`` runs as ``{run_name}-{s}-{i}`` with seed ``rollout_seed(config, s) + i``, recorded as
item ``i`` of ``config.dataset``, so a rollout is the same run wherever it was sampled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import scaffold as sf
from scaffold._sync import release_backends

if TYPE_CHECKING:
    from trainers.loop import LoopConfig
    from trainers.types import RolloutPolicy


@dataclass
class Collected:
    """One step's rollouts: the results in row order, the seconds they took, and the source's own figures."""

    results: list[sf.RunResult]
    rollout_s: float
    extra: dict[str, Any] = field(default_factory=dict)
    """Figures the step's metrics get besides the loop's own (``rollout_wait_s``, ``rollout_versions``...)."""


@runtime_checkable
class RolloutSource(Protocol):
    """Where a training's rollouts run (see the module docstring).

    Examples:
        >>> isinstance(LocalRollouts(), RolloutSource)
        True
    """

    max_lag: int
    """How many steps ahead of the update rollouts may be queued (0: each step samples with the newest weights)."""
    update_in_thread: bool
    """Whether the loop runs the update in a thread, so that the source's results keep arriving meanwhile."""

    async def start(self, policy: RolloutPolicy, graph: sf.Graph, config: LoopConfig, store: Any) -> None:
        """Get ready to sample with ``policy``'s current weights (a resumed policy's included)."""
        ...

    def submit(self, step: int, problems: Sequence[Mapping[str, Any]], run_id: str, seed: int) -> None:
        """Queue step ``step``'s rows: row ``i`` runs as ``{run_id}-{i}`` with seed ``seed + i``."""
        ...

    async def collect(self, step: int) -> Collected:
        """Every result of step ``step``, in row order (raises what stopped the rollouts)."""
        ...

    async def refresh(self, policy: RolloutPolicy) -> dict[str, Any]:
        """After an update: bring the engines to ``policy``'s new weights; returns figures for the step's metrics."""
        ...

    async def close(self) -> None:
        """Stop whatever the source started."""
        ...


class LocalRollouts:
    """Rollouts in this process: ``Graph.map`` with the policy as every model alias.

    ``engine`` is the rollout backend (default: ``policy.backend()``, which shares the live weights;
    a separate engine such as a :class:`~scaffold.VLLMBackend` is refreshed after every update).

    Examples:
        >>> LocalRollouts().max_lag
        0
    """

    max_lag = 0
    update_in_thread = False

    def __init__(self, engine: sf.Backend | None = None) -> None:
        self.engine = engine
        self.pending: dict[int, tuple[list[dict[str, Any]], str, int]] = {}
        self.graph: sf.Graph | None = None
        self.models: dict[str, sf.Model] = {}
        self.store: Any = None
        self.config: LoopConfig | None = None

    async def start(self, policy: RolloutPolicy, graph: sf.Graph, config: LoopConfig, store: Any) -> None:
        if self.engine is None:
            self.engine = policy.backend()
        model = sf.Model(self.engine, params=dict(config.sampling))
        self.graph, self.models, self.store, self.config = graph, {a: model for a in graph.aliases}, store, config
        if policy.steps_done:  # a resumed policy's weights (and version) reach a separate engine first
            policy.refresh(self.engine)

    def submit(self, step: int, problems: Sequence[Mapping[str, Any]], run_id: str, seed: int) -> None:
        self.pending[step] = ([{"problem": row["problem"]} for row in problems], run_id, seed)

    async def collect(self, step: int) -> Collected:
        assert self.graph is not None and self.config is not None, "start() first"
        problems, run_id, seed = self.pending.pop(step)
        started = time.perf_counter()
        results = [r async for r in self.graph.map(problems, models=self.models, concurrency=self.config.concurrency,
                                                   seed=seed, store=self.store, dataset=self.config.dataset,
                                                   run_id=run_id)]
        results.sort(key=lambda r: r.index or 0)
        return Collected(results, time.perf_counter() - started)

    async def refresh(self, policy: RolloutPolicy) -> dict[str, Any]:
        assert self.engine is not None, "start() first"
        policy.refresh(self.engine)
        return {}

    async def close(self) -> None:
        self.pending.clear()
        await release_backends(self.models)  # the backends let go of this event loop's connections

"""Which credited traces a step trains on, once credit is assigned: mixed-correctness sets, runs with signal.

Both are filters *after* credit, so they never change a baseline: a set's aggregations are centred, and
its search traces credited, with every rollout of the run, whichever traces are kept afterwards.

- :func:`mixed_sets` keeps an aggregation only when the candidates it read were neither all right nor all
  wrong (GenSelect-RL's mixed-correctness filter, ``LoopConfig(mixed_sets_only=True)``). With a uniform
  set there is nothing to select: the aggregation learns to copy the majority, not to tell right from wrong.
- :func:`has_signal` tells whether a run's credited traces carry any gradient at all (DAPO's dynamic
  sampling, ``LoopConfig(dynamic_sampling=N)``, rolls fresh problems out in place of runs without it).

Departures: GenSelect-RL filters candidate sets before sampling the selection; here the set's aggregations
were already sampled (they shape the set advantages of the search traces), and only their update is dropped.
A set counts as mixed when its rewarded candidates got at least two different rewards, so with graded
rewards "mixed" means "not all equal".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainers.episodes import external_inputs
from trainers.types import Credited

ZERO_ADVANTAGE = 1e-12
"""An advantage within this of 0 carries no signal (:func:`has_signal`)."""


def is_mixed(candidates: Sequence[str], rewards: Mapping[str, float]) -> bool:
    """Whether the rewarded ``candidates`` (trace ids) got at least two different rewards.

    Candidates without a reward (rule traces, external inputs) do not count; a set with fewer than two
    rewarded candidates is not mixed.

    Examples:
        >>> is_mixed(["a", "b", "c"], {"a": 1.0, "b": 0.0}), is_mixed(["a", "b"], {"a": 1.0, "b": 1.0})
        (True, False)
    """
    return len({rewards[c] for c in candidates if c in rewards}) >= 2


def mixed_sets(items: Sequence[Credited], rewards: Mapping[str, float]) -> tuple[list[Credited], int]:
    """Drop the credited aggregations (role ``"aggregate"``) whose candidate set is uniform; other roles pass.

    An aggregation's candidate set is its external inputs (:func:`~trainers.episodes.external_inputs`: an
    aggregating agent's own turns and tool results are not candidates) that have a reward in ``rewards``
    (trace id → reward; trace ids are unique across runs, so the rewards of several runs can be merged).
    Returns the kept items in their order and how many aggregations were dropped.

    Examples:
        >>> from scaffold._types import Trace
        >>> def agg(i, inputs): return Credited(Trace(id=f"r/a#{i}", run_id="r", node="a", index=i, inputs=inputs),
        ...                                     0.5, role="aggregate")
        >>> kept, dropped = mixed_sets([agg(0, ("r/s#0", "r/s#1")), agg(1, ("r/s#1", "r/s#2"))],
        ...                            {"r/s#0": 1.0, "r/s#1": 0.0, "r/s#2": 0.0})
        >>> [c.trace.id for c in kept], dropped
        (['r/a#0'], 1)
    """
    kept = [c for c in items if c.role != "aggregate" or is_mixed(external_inputs(c.trace), rewards)]
    return kept, len(items) - len(kept)


def has_signal(items: Sequence[Credited]) -> bool:
    """Whether some credited trace has a non-zero advantage (beyond :data:`ZERO_ADVANTAGE`).

    A run whose credited traces all have advantage 0 (every sample of every group rewarded the same)
    adds nothing to the policy gradient.

    Examples:
        >>> from scaffold._types import Trace
        >>> t = Trace(id="r/s#0", run_id="r", node="s", index=0)
        >>> has_signal([Credited(t, 0.0), Credited(t, 1e-15)]), has_signal([Credited(t, -0.25)])
        (False, True)
    """
    return any(abs(c.advantage) > ZERO_ADVANTAGE for c in items)

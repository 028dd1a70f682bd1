"""The training recipes compared by the SPIRAL experiment: a rollout graph and how its traces are credited.

Every recipe samples problems with the current policy, rewards each model trace by its own
answer, credits and updates (see :mod:`trainers.loop`); they differ in what a rollout is and
which traces get a gradient:

- ``grpo``: ``samples`` solutions of the problem, each credited by its reward against the
  group's mean (GRPO). Nothing is aggregated, so nothing aggregates in training.
- ``aggregator_only``: the AggLM recipe: ``samples`` solutions split into sets of ``set_size``,
  each set aggregated ``aggregations`` times; only aggregations are trained, those of every
  hard set (majority wrong) and half the easy ones, each against the others of its set.
- ``spiral``: two-level set-RL: ``samples`` search solutions, ``sets`` distinct subsets of
  ``set_size``, ``aggregations`` per set (8 + 4 x 4 = 24 rollouts by default, the paper's);
  search traces are credited by the mean advantage of the sets they joined, aggregations
  against their set (:func:`trainers.credit.spiral`).
- ``spiral_rsa``: the rollout is Recursive Self-Aggregation itself (population ``samples``,
  subsets of ``set_size``, ``rsa_steps`` steps: 8 + 2 x 8 = 24 calls), credited with the
  multi-level SPIRAL rule through its recorded lineage.
- ``spiral_search_only`` / ``spiral_aggregate_only`` (:data:`ABLATIONS`): ``spiral`` with only its
  search or only its aggregation traces trained: where do SPIRAL's updates go?

Aggregations are sampled at ``aggregate_temperature`` (``None``: the loop's temperature), so
that the aggregations of one set can disagree and their set-relative advantages are not all 0.
``sets=None`` aggregates every one of the C(samples, set_size) subsets (Poly-EPO's 70 of 8 choose 4).

Three options the field uses go into ``loop_options`` when they are not their defaults (see
:class:`~trainers.LoopConfig`): ``scale_by_std`` (GRPO's division by the group's std; off, after Dr.
GRPO), ``mixed_sets_only`` (GenSelect-RL's mixed-correctness sets) and ``dynamic_sampling`` (DAPO's
refill rounds). Per-role learning rates belong to the policy: ``PolicyConfig(role_lr={"aggregate": 3})``.

Examples:
    >>> r = recipe("spiral")
    >>> r.graph.count_calls(), r.loop_options["scheme"]
    ({'solver': 24}, 'spiral')
    >>> r = recipe("spiral", sets=None, aggregations=1, dynamic_sampling=2)
    >>> r.graph.count_calls(), r.loop_options
    ({'solver': 78}, {'scheme': 'spiral', 'dynamic_sampling': 2})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import graphs
import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT, SOLVE_PROMPT

METHODS = ("grpo", "aggregator_only", "spiral", "spiral_rsa")
"""The recipes, by name."""
ABLATIONS = ("spiral_search_only", "spiral_aggregate_only")
"""``spiral`` with only one role trained (the other role's traces still roll out and set the credit)."""


@dataclass(frozen=True)
class Recipe:
    """A recipe's rollout graph and the :class:`~trainers.LoopConfig` fields that credit it."""

    name: str
    graph: sf.Graph
    loop_options: dict[str, Any]
    """``scheme``, for the aggregator-only recipe ``roles`` and ``easy_fraction``, and the options given that are
    not their defaults (``scale_by_std``, ``mixed_sets_only``, ``dynamic_sampling``)."""


def recipe(
    name: str,
    *,
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    aggregate_temperature: float | None = None,
    samples: int = 8,
    set_size: int = 4,
    sets: int | None = 4,
    aggregations: int = 4,
    rsa_steps: int = 2,
    scale_by_std: bool = False,
    mixed_sets_only: bool = False,
    dynamic_sampling: int = 0,
    max_tokens: int | None = None,
    equivalence: sf.Equivalence | None = None,
    render: Callable[[Sequence[sf.Trace]], str] | None = None,
) -> Recipe:
    """The recipe ``name`` (one of :data:`METHODS`; ``"agglm"`` is the aggregator-only one) with these sizes.

    ``sets`` (``spiral`` and its ablations): distinct subsets per problem, ``None`` for every one of them.
    ``scale_by_std``, ``mixed_sets_only`` and ``dynamic_sampling`` are :class:`~trainers.LoopConfig`'s options,
    passed on in ``loop_options``. ``max_tokens`` is every first sample's (candidate's) token budget, ``None``
    for the loop's sampling parameters (a task whose candidates must fit a budget sets it; aggregations keep
    the loop's). ``equivalence`` is the graphs' final vote's (``None``: mathematical equivalence; the vote is not
    trained, but it runs every rollout, so a task with non-numeric answers passes its own). ``render`` shows the
    candidates in every aggregation prompt (``None``: :func:`scaffold.format_candidates`; the parts task passes
    :meth:`~scaffold.pocket.PartsTask.show_candidates`). Raises ``ValueError`` for an unknown name.
    """
    temperature = {"aggregate_temperature": aggregate_temperature}
    prompts = {"prompt": prompt, "aggregate_prompt": aggregate_prompt, "max_tokens": max_tokens,
               "equivalence": equivalence, "render": render}
    given = {"scale_by_std": scale_by_std, "mixed_sets_only": mixed_sets_only, "dynamic_sampling": dynamic_sampling}
    options = {key: value for key, value in given.items() if value}
    if name == "grpo":
        return Recipe(name, graphs.grpo_group.build(n=samples, prompt=prompt, max_tokens=max_tokens,
                                                       equivalence=equivalence),
                      {"scheme": "grpo", **options})
    if name in ("aggregator_only", "agglm"):
        graph = graphs.agglm_data.build(n=samples, k=set_size, aggregations=aggregations, **prompts, **temperature)
        return Recipe("aggregator_only", graph, {"scheme": "grpo", "roles": ("aggregate",), "easy_fraction": 0.5,
                                                 **options})
    if name in ("spiral", *ABLATIONS):
        graph = graphs.spiral.build(n=samples, sets=sets, k=set_size, aggregations=aggregations, **prompts,
                                    **temperature)
        roles = {"spiral_search_only": {"roles": ("search",)}, "spiral_aggregate_only": {"roles": ("aggregate",)}}
        return Recipe(name, graph, {"scheme": "spiral", **roles.get(name, {}), **options})
    if name == "spiral_rsa":
        graph = graphs.rsa.build(n=samples, k=set_size, steps=rsa_steps, logprobs=True, **prompts, **temperature)
        return Recipe(name, graph, {"scheme": "spiral", **options})
    raise ValueError(f"unknown recipe {name!r}; choose from {', '.join((*METHODS, *ABLATIONS))}")

"""Training topologies: GRPO's sample groups, SPIRAL's search-then-aggregate rollouts, the AggLM data recipe.

Parameter names are scaffold's, not each paper's: ``n`` is always the number of first samples
and ``k`` the size of a set an aggregation reads (``sf.aggregate(k=...)``); each paper's letter
is given next to them below.

**GRPO** (Shao et al. 2024): ``n`` (the paper's G, the group size) solutions of the problem (node
``samples``), each credited by its own reward against the group's mean; the output is their vote
(for evaluation).

**SPIRAL** (set-RL): for a problem, ``n`` (the paper's N1) candidates are sampled (node ``search``);
``sets`` (the paper's K) *distinct* subsets of ``k`` (the paper's n — beware, the letters swap)
candidates are drawn uniformly without replacement; each set is aggregated ``aggregations`` (N2)
times (node ``aggregate``). The paper uses 24 rollouts per problem on two levels; the defaults (8
search samples, 4 sets of 4, 4 aggregations per set: 8 + 16 = 24) follow that. ``sets=None`` takes
every one of the C(n, k) subsets, as Poly-EPO trains on all 70 subsets of 8 choose 4 (at most
:data:`MAX_ALL_SETS` of them). The trainer
(:func:`trainers.credit.assign_credit` with ``scheme="spiral"``) credits each search trace by the
mean advantage of the sets it joined and each aggregation by its reward against its set's group. The
output is an equivalence-clustered vote over the aggregations (for evaluation; it is not trained).
Every model call asks for logprobs, which the update's importance weights need.

**AggLM data** (Zhao et al. 2025): ``n`` samples per problem (node ``samples``), split into
consecutive sets of ``k`` (the paper's m), each aggregated ``aggregations`` times (node
``aggregate``). Which sets are trained on — every *hard* set (its majority answer is wrong) and
a share of the easy ones — is decided after rewards are known (:func:`trainers.credit.agglm_select`).

Departures: SPIRAL draws sets per problem from the run's seed; the paper's exact sampler is not
public. AggLM's candidates come from the policy being trained here (the paper draws them from a
fixed solver); bind ``model`` and ``aggregator`` to different aliases for that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT, SOLVE_PROMPT

MAX_ALL_SETS = 1000
"""``spiral(sets=None)`` aggregates every subset only while there are at most this many (each is ``aggregations``
calls per problem)."""


@sf.graph(name="grpo_group")
def grpo_group(problem: str, *, n: int = 8, model: str = "solver", prompt: str = SOLVE_PROMPT,
               max_tokens: int | None = None, equivalence: sf.Equivalence | None = None) -> Any:
    """A group of ``n`` solutions with their logprobs, then a vote (for evaluation).

    ``max_tokens`` is each solution's token budget (``None``: the model's); ``equivalence`` is the vote's
    (``None``: :func:`scaffold.equivalent`, mathematical equivalence).

    Examples:
        >>> from graphs import grpo_group
        >>> grpo_group.build(n=6).count_calls()
        {'solver': 6}
    """
    return sf.vote(sf.sample(prompt, model=model, n=n, logprobs=True, name="samples", params=_budget(max_tokens)),
                   name="vote", equivalence=equivalence or sf.equivalent)


@sf.graph(name="spiral")
def spiral(
    problem: str,
    *,
    n: int = 8,
    sets: int | None = 4,
    k: int = 4,
    aggregations: int = 4,
    model: str = "solver",
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    aggregate_temperature: float | None = None,
    max_tokens: int | None = None,
    equivalence: sf.Equivalence | None = None,
    render: Callable[[Sequence[sf.Trace]], str] | None = None,
) -> Any:
    """``n`` search samples, ``sets`` distinct ``k``-subsets, ``aggregations`` per subset, then a vote (for evaluation).

    ``sets=None`` aggregates every one of the C(``n``, ``k``) subsets, each once, in a random order
    (``sf.RandomSubsets`` asked for all of them draws each exactly once). ``ValueError`` when ``sets``
    exceeds C(n, k), or when ``None`` would mean more than :data:`MAX_ALL_SETS` subsets.
    ``aggregate_temperature`` samples the aggregations at their own temperature (``None``: the
    model's), so that a set's N2 aggregations can disagree and their set-relative credit is not 0.
    ``max_tokens`` is each search sample's token budget (``None``: the model's). ``equivalence`` is the final
    vote's (``None``: :func:`scaffold.equivalent`); a task whose answers are not numbers passes its own, both to
    vote right and because mathematical equivalence is slow on long non-numeric answers. ``render`` shows the
    candidates in the aggregation prompt's ``{candidates}`` (``None``: :func:`scaffold.format_candidates`).

    Examples:
        >>> from graphs import spiral
        >>> spiral.build().count_calls()  # 8 + 4 sets x 4 aggregations: the paper's 24 rollouts
        {'solver': 24}
        >>> spiral.build(sets=None, aggregations=1).count_calls()  # 8 + all 70 subsets of 8 choose 4
        {'solver': 78}
    """
    subsets = sf.RandomSubsets(k, _set_count(n, k, sets), distinct=True)
    candidates = sf.sample(prompt, model=model, n=n, logprobs=True, name="search", params=_budget(max_tokens))
    aggregated = sf.aggregate(candidates, model=model, select=subsets, samples=aggregations,
                              prompt=aggregate_prompt, logprobs=True, name="aggregate",
                              params=_temperature(aggregate_temperature), render=render)
    return sf.vote(aggregated, name="vote", equivalence=equivalence or sf.equivalent)


@sf.graph(name="agglm_data")
def agglm_data(
    problem: str,
    *,
    n: int = 16,
    k: int = 4,
    aggregations: int = 1,
    model: str = "solver",
    aggregator: str = "solver",
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    aggregate_temperature: float | None = None,
    max_tokens: int | None = None,
    equivalence: sf.Equivalence | None = None,
    render: Callable[[Sequence[sf.Trace]], str] | None = None,
) -> Any:
    """``n`` samples split into consecutive sets of ``k``, each aggregated; hard/easy selection happens at credit time.

    ``equivalence`` and ``render`` are as in :func:`spiral`.

    Examples:
        >>> from graphs import agglm_data
        >>> agglm_data.build(n=12, k=4, aggregations=2).count_calls()
        {'solver': 18}
    """
    drafts = sf.sample(prompt, model=model, n=n, logprobs=True, name="samples", params=_budget(max_tokens))
    aggregated = sf.aggregate(drafts, model=aggregator, select=sf.Partition(k, drop_remainder=True),
                              samples=aggregations, prompt=aggregate_prompt, logprobs=True, name="aggregate",
                              params=_temperature(aggregate_temperature), render=render)
    return sf.vote(aggregated, name="vote", equivalence=equivalence or sf.equivalent)


def _budget(max_tokens: int | None) -> dict[str, int] | None:
    return None if max_tokens is None else {"max_tokens": int(max_tokens)}


def _set_count(n: int, k: int, sets: int | None) -> int:
    """How many distinct ``k``-subsets of ``n`` candidates SPIRAL aggregates (``sets=None``: all of them)."""
    available = math.comb(n, k) if 1 <= k <= n else 0
    if sets is None:
        if available > MAX_ALL_SETS:
            raise ValueError(f"sets=None means every {k}-subset of {n} candidates: {available} of them, more than "
                             f"{MAX_ALL_SETS}; give a number of sets")
        return max(available, 1)  # k > n: RandomSubsets names the impossible size
    if sets > available >= 1:
        raise ValueError(f"sets={sets} distinct {k}-subsets cannot be drawn from {n} candidates: there are "
                         f"C({n}, {k}) = {available}")
    return sets


def _temperature(value: float | None) -> dict[str, float] | None:
    return None if value is None else {"temperature": float(value)}

"""Recursive Self-Aggregation (Venkatraman et al. 2025, "Recursive Self-Aggregation Unlocks Deep Thinking
in Large Language Models").

Parameters, with the paper's letters: ``n`` (N) is the population size, ``k`` (K) the subset size,
``steps`` (T) the number of aggregation steps. A population of N solutions is sampled; at each of
T steps, N aggregation calls each read a subset of K *distinct* members of the previous
population, drawn uniformly at random, and write one new solution; the N outputs are the next
population. ``k=1`` is self-refinement. Paper defaults: N=16, K=4, T=10. The paper
reports the final population's accuracy (mean over members, or a majority vote over it); here
``final_vote=True`` (the default) ends with an equivalence-clustered vote, ``False`` returns the
last population itself. Every step is a named node — ``step0`` (the samples) … ``step{T}`` — so
:func:`population_by_step` can plot accuracy by step.

Departures: subsets are drawn independently per call from the run's seed (the paper does the
same, without saying whether subsets of one step may repeat; here they may).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT, SOLVE_PROMPT


@sf.graph(name="rsa")
def rsa(
    problem: str,
    *,
    n: int = 16,
    k: int = 4,
    steps: int = 10,
    final_vote: bool = True,
    model: str = "solver",
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    logprobs: bool = False,
    aggregate_temperature: float | None = None,
    max_tokens: int | None = None,
    equivalence: sf.Equivalence | None = None,
    render: Callable[[Sequence[sf.Trace]], str] | None = None,
) -> Any:
    """N samples, then T steps of N aggregations over random K-subsets; optionally a final vote.

    ``logprobs=True`` records every call's token logprobs (what training on RSA rollouts needs);
    ``aggregate_temperature`` samples the aggregations at their own temperature (``None``: the model's);
    ``max_tokens`` is each first sample's token budget (``None``: the model's); ``equivalence`` is the final
    vote's (``None``: :func:`scaffold.equivalent`, mathematical equivalence); ``render`` shows the candidates in
    ``{candidates}`` (``None``: :func:`scaffold.format_candidates`, each one's whole text).

    Examples:
        >>> from graphs import rsa
        >>> rsa.build().count_calls()  # the paper's N=16, K=4, T=10
        {'solver': 176}
    """
    first = None if max_tokens is None else {"max_tokens": int(max_tokens)}
    pop = sf.sample(prompt, model=model, n=n, name="step0", logprobs=logprobs, params=first)
    params = None if aggregate_temperature is None else {"temperature": float(aggregate_temperature)}
    for step in range(1, steps + 1):
        pop = sf.aggregate(pop, model=model, k=k, n=n, prompt=aggregate_prompt, name=f"step{step}",
                           logprobs=logprobs, params=params, render=render)
    return sf.vote(pop, name="vote", equivalence=equivalence or sf.equivalent) if final_vote else pop


def population_by_step(result: sf.RunResult, prefix: str = "step") -> list[list[sf.Trace]]:
    """The population at each step of a run (``step0``, ``step1``, ...), for accuracy-by-step plots.

    Works for any topology that names its steps ``{prefix}{t}`` (RSA, evolve).

    Examples:
        >>> from scaffold.testing import ScriptedBackend
        >>> from graphs import rsa
        >>> run = rsa.build(n=4, k=2, steps=2).run_sync(
        ...     {"problem": "1+1"}, models={"solver": ScriptedBackend(lambda r: "\\\\boxed{2}")}, store=None)
        >>> [len(p) for p in population_by_step(run)]
        [4, 4, 4]
    """
    out: list[list[sf.Trace]] = []
    step = 0
    while True:
        traces = result.node(f"{prefix}{step}")
        if not traces:
            return out
        out.append(list(traces))
        step += 1

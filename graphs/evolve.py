"""Population evolution, in the spirit of Mind Evolution (Lee et al. 2025, "Evolving Deeper LLM Thinking")
and AlphaEvolve (Novikov et al. 2025).

Parameters, with the letters of RSA (Venkatraman et al. 2025), which this is without ``fitness``:
``n`` (N) is the population size, ``k`` (K) the number of parents of a child, ``generations``
(T) the number of generations. A population of N solutions is sampled (``step0``); for each of
T generations, every child is written by the model reading K *distinct* members of the
previous population, drawn uniformly at random, with the evolution prompt (recombine what is
right, fix what is wrong, try another idea where all are stuck); the children are the next
population (``step1`` … ``step{generations}``, so :func:`graphs.population_by_step` plots them).
The answer is an equivalence-clustered vote over the last population. Neither paper names
these sizes with letters.

Departures: both papers select parents by a fitness signal (Mind Evolution's evaluator of
candidate plans, AlphaEvolve's automatic scorers) and run islands; here there is none by default,
which makes this RSA with an evolution prompt. Passing ``fitness`` (a function trace -> float,
e.g. a checker or a verifier's score in ``trace.metadata``) adds elitist survival: each
generation keeps the best N of parents and children, and ``step{g}`` is then that selection
(the children are node ``children{g}``). No islands, no migration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import scaffold as sf
from graphs.checks import whole_numbers
from graphs.prompts import EVOLVE_PROMPT, SOLVE_PROMPT


@sf.graph(name="evolve")
def evolve(
    problem: str,
    *,
    n: int = 8,
    generations: int = 4,
    k: int = 2,
    model: str = "solver",
    fitness: Callable[[sf.Trace], float] | None = None,
    prompt: str = SOLVE_PROMPT,
    evolve_prompt: str = EVOLVE_PROMPT,
) -> Any:
    """A sampled population, ``generations`` rounds of children from random parent sets, then a vote.

    Examples:
        >>> from graphs import evolve
        >>> evolve.build().count_calls()  # 8 samples, then 4 generations of 8 children
        {'solver': 40}
    """
    whole_numbers("evolve", n=n, generations=generations, k=k)
    if k > n:
        raise sf.SubsetSizeError(f"evolve(): k={k} parents is more than the population (n={n})")
    if fitness is not None and not callable(fitness):
        raise sf.GraphDefinitionError("evolve(fitness=...) takes a function trace -> float")
    pop = sf.sample(prompt, model=model, n=n, name="step0")
    for generation in range(1, generations + 1):
        children = sf.aggregate(pop, model=model, k=k, n=n, prompt=evolve_prompt,
                                name=f"step{generation}" if fitness is None else f"children{generation}")
        if fitness is None:
            pop = children
        else:
            pop = sf.top_k(sf.concat(pop, children, name=f"pool{generation}"), n, score=fitness,
                           name=f"step{generation}")
    return sf.vote(pop, name="vote")

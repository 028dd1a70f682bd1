"""A recursive aggregation tree: a tree-structured generalisation of AggLM-style aggregation (Zhao et al.
2025, "The Majority is not always right: RL training for solution aggregation").

Parameters: ``n`` (N) is the number of leaves, ``k`` (K) the branching factor (the size of a
group, as AggLM's m is the size of the set its aggregator reads). N solutions are sampled
(``level0``); they are partitioned into consecutive groups of K (optionally shuffled first, from
the run's seed) and each group is aggregated by one call into a new solution (``level1``); the
groups' outputs are partitioned and aggregated again, level by level, until one solution
remains — the root, which is the answer. The number of levels is known when the graph is built:
``ceil(log_K(N))``, each level having ``ceil(previous / K)`` nodes; a last group may be smaller
than K.

This is not one paper's method: it is the plain hierarchical version of the one-call aggregator
(each internal node of the tree is an AggLM call over its children), the shape used when more
candidates exist than one aggregation prompt holds or than an aggregator was trained to read.
Departure from a flat AggLM: no call ever reads more than K candidates, so a minority
answer must survive its own group to reach the root.
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT, SOLVE_PROMPT


def tree_sizes(n: int, k: int) -> list[int]:
    """The number of traces at each level of a tree with ``n`` leaves and branching ``k``, root (1) last.

    Examples:
        >>> tree_sizes(16, 4), tree_sizes(10, 3)
        ([16, 4, 1], [10, 4, 2, 1])
    """
    sizes = [n]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // k))
    return sizes


@sf.graph(name="aggregation_tree")
def aggregation_tree(
    problem: str,
    *,
    n: int = 16,
    k: int = 4,
    model: str = "solver",
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    shuffle: bool = False,
) -> Any:
    """``n`` samples (leaves), aggregated in groups of ``k`` level by level (``level0`` …) up to one root.

    Examples:
        >>> from graphs import aggregation_tree
        >>> aggregation_tree.build().count_calls()  # 16 leaves, 4 groups, 1 root
        {'solver': 21}
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise sf.SubsetSizeError(f"aggregation_tree(): k (the branching) must be an integer of at least 2, got {k!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise sf.SubsetSizeError(f"aggregation_tree(): n (the leaves) must be an integer of at least 2, got {n!r}")
    sizes = tree_sizes(n, k)
    level = sf.sample(prompt, model=model, n=n, name="level0")
    for depth in range(1, len(sizes) - 1):
        level = sf.aggregate(level, model=model, select=sf.Partition(k, shuffle=shuffle),
                             prompt=aggregate_prompt, name=f"level{depth}")
    # the root reads every member of the last level in one call (in order), so the output is one trace
    return sf.aggregate(level, model=model, prompt=aggregate_prompt, name=f"level{len(sizes) - 1}")

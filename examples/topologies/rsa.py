"""Recursive Self-Aggregation (Venkatraman et al. 2025) on the pocket model or any litellm model.

Prints accuracy, tokens, calls and wall time, then the population's accuracy at each step. ``--population``
and ``--subset-size`` are the topology's ``n`` (N) and ``k`` (K).

Usage: python examples/topologies/rsa.py [--population 8] [--subset-size 4] [--steps 3] [common options]
"""

from __future__ import annotations

import common

import graphs


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--subset-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    run = common.setup(args)
    graph = graphs.rsa.build(n=args.population, k=args.subset_size, steps=args.steps, **run.prompts)
    results = common.evaluate("rsa", graph, run)
    common.print_steps(results, run, "step")


if __name__ == "__main__":
    main()

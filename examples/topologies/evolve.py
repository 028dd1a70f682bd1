"""Population evolution (Mind Evolution-style, without a fitness function) on the pocket model or any litellm model.

Prints accuracy, tokens, calls and wall time, then the population's accuracy at each generation.
Each child reads ``--parents`` members (the topology's ``k``); the default is 4 because the pocket model was trained to
aggregate exactly 4 candidates (the topology's own default is 2).

Usage: python examples/topologies/evolve.py [--population 8] [--generations 3] [--parents 4] [common options]
"""

from __future__ import annotations

import common

import graphs


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--generations", type=int, default=3)
    p.add_argument("--parents", type=int, default=4)
    args = p.parse_args()
    run = common.setup(args)
    prompts = ({"prompt": run.prompts["prompt"], "evolve_prompt": run.prompts["aggregate_prompt"]}
               if run.pocket else {})
    graph = graphs.evolve.build(n=args.population, generations=args.generations, k=args.parents, **prompts)
    results = common.evaluate("evolve", graph, run)
    common.print_steps(results, run, "generation")


if __name__ == "__main__":
    main()

"""Pairwise ranking (OpenDeepThink-style; Bradley & Terry 1952) on the pocket model or any litellm model.

The pocket model cannot name a winner, but it can aggregate: shown two candidates with the
aggregation prompt it was trained on, it writes its own solution, and the candidate whose answer
agrees with it wins the comparison (:func:`graphs.agreement_verdict`); refinements use the same
prompt over the elites. With ``--model`` the model judges with the default comparison prompt.
Prints the table row, then the population's mean accuracy at each generation.

The example's defaults are smaller than the topology's own (3 generations, 4 comparisons per member)
so that it runs in a few minutes on two CPU cores.

Usage: python examples/topologies/pairwise_ranking.py [--population 8] [--generations 2] [--elites 4]
       [--comparisons 2] [common options]
"""

from __future__ import annotations

from typing import Any

import common

import graphs


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--generations", type=int, default=2)
    p.add_argument("--elites", type=int, default=4)
    p.add_argument("--comparisons", type=int, default=2, help="comparisons per member and generation")
    args = p.parse_args()
    run = common.setup(args)
    params: dict[str, Any] = {"n": args.population, "generations": args.generations,
                              "elites": args.elites, "comparisons_per_member": args.comparisons}
    if run.pocket:
        params |= {"prompt": run.prompts["prompt"], "compare_prompt": run.prompts["aggregate_prompt"],
                   "refine_prompt": run.prompts["aggregate_prompt"], "verdict": graphs.agreement_verdict}
    results = common.evaluate("pairwise_ranking", graphs.pairwise_ranking.build(**params), run)
    by_generation = [graphs.population_by_generation(r) for r in results]
    for g in range(args.generations):
        mean = sum(common.accuracy(pops[g], run.rows[r.index or 0]["answer"])
                   for pops, r in zip(by_generation, results)) / len(results)
        print(f"generation {g}: mean accuracy of the population {mean:.2f}")


if __name__ == "__main__":
    main()

"""Mixture-of-Agents (Wang et al. 2024) on the pocket model or any litellm model.

Every proposer alias and the aggregator are bound to the one model (so this is Self-MoA-like
unless you bind other models). Prints accuracy, tokens, calls and wall time, then each layer's
mean accuracy. On the pocket model the default is 4 proposers, since it was trained to
aggregate exactly 4 candidates (the paper: 6).

Usage: python examples/topologies/mixture_of_agents.py [--proposers 4] [--layers 3] [common options]
"""

from __future__ import annotations

import common

import graphs


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--proposers", type=int, default=4, help="proposers per layer (the paper: 6)")
    p.add_argument("--layers", type=int, default=3, help="layers, the final aggregator's included (the paper: 3)")
    args = p.parse_args()
    run = common.setup(args)
    aliases = tuple(f"proposer{i}" for i in range(1, args.proposers + 1))
    prompts = {"prompt": run.prompts["prompt"], "moa_prompt": run.prompts["aggregate_prompt"]} if run.pocket else {}
    graph = graphs.mixture_of_agents.build(proposers=aliases, layers=args.layers, **prompts)
    results = common.evaluate("mixture_of_agents", graph, run)
    for layer in range(1, args.layers):
        mean = sum(common.accuracy([t for alias in aliases for t in r.node(f"layer{layer}_{alias}")],
                                   run.rows[r.index or 0]["answer"]) for r in results) / len(results)
        print(f"layer {layer}: mean accuracy of the proposers {mean:.2f}")


if __name__ == "__main__":
    main()

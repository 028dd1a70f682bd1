"""A recursive aggregation tree on the pocket model or any litellm model.

``--leaves`` (the topology's ``n``) are sampled, then aggregated in groups of ``--branching`` (``k``) level by
level up to one root. Prints accuracy, tokens, calls and wall time, then each level's mean accuracy. The
default branching is 4 because the pocket model was trained to aggregate exactly 4 candidates.

Usage: python examples/topologies/aggregation_tree.py [--leaves 16] [--branching 4] [--shuffle] [common options]
"""

from __future__ import annotations

import common

import graphs
from graphs.tree import tree_sizes


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--leaves", type=int, default=16)
    p.add_argument("--branching", type=int, default=4)
    p.add_argument("--shuffle", action="store_true", help="shuffle each level before grouping it")
    args = p.parse_args()
    run = common.setup(args)
    graph = graphs.aggregation_tree.build(n=args.leaves, k=args.branching, shuffle=args.shuffle, **run.prompts)
    results = common.evaluate("aggregation_tree", graph, run)
    for level in range(len(tree_sizes(args.leaves, args.branching))):
        mean = sum(common.accuracy(r.node(f"level{level}"), run.rows[r.index or 0]["answer"])
                   for r in results) / len(results)
        print(f"level {level}: mean accuracy {mean:.2f}")


if __name__ == "__main__":
    main()

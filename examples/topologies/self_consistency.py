"""Self-consistency (Wang et al. 2022): n samples, equivalence-clustered majority vote.

Usage: python examples/topologies/self_consistency.py [--n 8] [common options]
"""

from __future__ import annotations

import common

import graphs


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=8, help="samples per problem (the paper: 40)")
    args = p.parse_args()
    run = common.setup(args)
    prompts = {"prompt": run.prompts["prompt"]} if run.pocket else {}
    common.evaluate("self_consistency", graphs.self_consistency.build(n=args.n, **prompts), run)


if __name__ == "__main__":
    main()

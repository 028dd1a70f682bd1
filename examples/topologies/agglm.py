"""AggLM (Zhao et al. 2025) and SSA (Qi et al. 2025) on the pocket model or any litellm model.

Both sample candidates and hand them all to one aggregator call: AggLM's aggregator writes a
new solution, SSA's gives a short final answer. The solver and the aggregator are the one model.
Prints a row for each, and the majority vote over AggLM's own candidates for comparison. The
default is 4 candidates because the pocket model was trained to aggregate exactly 4 (the paper: 8).

Usage: python examples/topologies/agglm.py [--candidates 4] [common options]
"""

from __future__ import annotations

import common

import graphs
import scaffold as sf


def majority(traces: list[sf.Trace]) -> str | None:
    """The most common answer among ``traces`` (equivalence-clustered), ``None`` if none has one."""
    clusters = sf.cluster_answers(traces)
    return clusters[0][0] if clusters else None


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--candidates", type=int, default=4, help="candidates per aggregation (the paper: 8)")
    args = p.parse_args()
    run = common.setup(args)
    solve = {"prompt": run.prompts["prompt"]} if run.pocket else {}
    aggregate = run.prompts["aggregate_prompt"] if run.pocket else None
    agglm = graphs.agglm.build(n=args.candidates, **solve, **({"aggregate_prompt": aggregate} if aggregate else {}))
    ssa = graphs.ssa.build(n=args.candidates, **solve, **({"summary_prompt": aggregate} if aggregate else {}))
    results = common.evaluate("agglm", agglm, run)
    common.evaluate("ssa", ssa, run)
    voted = sum(sf.equivalent(majority(r.node("candidates")), run.rows[r.index or 0]["answer"]) for r in results)
    print(f"majority vote over agglm's candidates: accuracy {voted / len(results):.2f}")


if __name__ == "__main__":
    main()

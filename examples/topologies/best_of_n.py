"""Best-of-N and weighted majority (Cobbe et al. 2021; Lightman et al. 2023) on the pocket model or any litellm model.

On the pocket model the scores come from a process verifier, :meth:`scaffold.pocket.PocketTask.check_steps`
(the share of a solution's lines that are arithmetically consistent; no reference answer), so
no judge is called; with ``--model`` the same model judges every sample with the default judge
prompt. Prints the table row, then the mean accuracy of the samples and how often any sample
was right (the ceiling of any selection).

Usage: python examples/topologies/best_of_n.py [--n 8] [--weighted] [common options]
"""

from __future__ import annotations

from typing import Any

import common

import graphs
import scaffold as sf
from scaffold.pocket import PocketTask, pocket_model, pocket_task


def steps_verifier(task: PocketTask) -> Any:
    """``verifier(problem, trace)``: the pocket step check, 0 for a problem that is not a pocket problem."""

    def verify(problem: str, trace: sf.Trace) -> float:
        try:
            return task.check_steps(problem, trace.text)
        except ValueError:
            return 0.0

    return verify


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--n", type=int, default=8, help="samples per problem")
    p.add_argument("--weighted", action="store_true", help="weighted majority instead of best-of-N")
    args = p.parse_args()
    run = common.setup(args)
    topology = graphs.weighted_majority if args.weighted else graphs.best_of_n
    params: dict[str, Any] = {"n": args.n}
    if run.pocket:
        task = pocket_task(args.pocket_dir or pocket_model()) if args.model is None else PocketTask()
        params |= {"prompt": run.prompts["prompt"], "verifier": steps_verifier(task)}
    name = "weighted_majority" if args.weighted else "best_of_n"
    results = common.evaluate(name, topology.build(**params), run)
    answers = [run.rows[r.index or 0]["answer"] for r in results]
    samples = [r.node("samples") for r in results]
    mean = sum(common.accuracy(s, a) for s, a in zip(samples, answers)) / len(results)
    oracle = sum(common.accuracy(s, a) > 0 for s, a in zip(samples, answers)) / len(results)
    print(f"samples: mean accuracy {mean:.2f}, some sample right {oracle:.2f}")


if __name__ == "__main__":
    main()

"""Topologies benchmark: every ready-made topology on the same pocket problems at comparable budgets.

Runs each topology of ``graphs/`` over the same held-out pocket problems (100 by default) on the
pocket model (in-process transformers backend, temperature 1, at most 96 new tokens, seed 0),
each sized to about 5–22 model calls per problem, and prints accuracy, tokens (prompt +
completion), model calls and wall time per topology. The pocket model only knows its two
prompts, so every aggregation-style prompt is its aggregation prompt and every aggregation reads
4 candidates (it was trained aggregating 4: with 8 it writes no answer, and 12 do not fit its
1,024-character context). Best-of-N and weighted majority score with the pocket step verifier
(no reference answer); pairwise ranking uses the model itself as judge (the candidate that
agrees with its aggregation of the pair wins). Single-sample accuracy (pass@1) is the baseline.

The last line is one JSON object: ``bench`` ("topologies"), ``problems``, and ``results``, a
mapping from topology name to ``{"accuracy", "tokens", "calls", "wall_s", "failed_runs"}`` (a failed
run, e.g. a prompt past the model's context, counts as wrong).

Usage: python benchmarks/topologies.py [--quick] [--problems N] [--pocket-dir DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import graphs
import scaffold as sf
from scaffold.pocket import pocket_model, pocket_task

SIZES: dict[str, tuple[str, dict[str, str]]] = {
    "single_sample": ("single_sample", {}),
    "self_consistency": ("self_consistency", {"n": "16"}),
    "best_of_n": ("best_of_n", {"n": "16"}),
    "weighted_majority": ("weighted_majority", {"n": "16"}),
    "rsa": ("rsa", {"n": "8", "k": "4", "steps": "1"}),
    "rsa_t3": ("rsa", {"n": "4", "k": "4", "steps": "3"}),
    "evolve": ("evolve", {"n": "8", "generations": "1", "k": "4"}),
    "mixture_of_agents": ("mixture_of_agents", {"proposers": "solver,solver,solver,solver", "layers": "4",
                                                "aggregator": "solver"}),
    "self_moa": ("self_moa", {"n": "4"}),
    "agglm": ("agglm", {"n": "4", "aggregator": "solver"}),
    "ssa": ("ssa", {"n": "4", "aggregator": "solver"}),
    "aggregation_tree": ("aggregation_tree", {"n": "16", "k": "4"}),
    "pairwise_ranking": ("pairwise_ranking", {"n": "6", "generations": "2", "elites": "2",
                                              "comparisons_per_member": "2", "judge": "solver"}),
}
"""Benchmark entry -> (topology, parameters as ``scaffold eval -p`` takes them): comparable budgets."""


def topologies(model_dir: Path) -> dict[str, sf.Graph]:
    """Every topology, sized to comparable budgets, with the pocket model's prompts (``graphs.build_topology``)."""
    return {name: graphs.build_topology(topology, params, prompts="pocket", model_dir=model_dir)
            for name, (topology, params) in SIZES.items()}


async def measure(graph: sf.Graph, rows: list[dict[str, str]], model: sf.Model) -> dict[str, float]:
    start = time.perf_counter()
    inputs = [{"problem": row["problem"]} for row in rows]
    results = [r async for r in graph.map(inputs, models={"solver": model}, concurrency=32, seed=0, store=None)]
    wall = time.perf_counter() - start
    right = sum(sf.equivalent(r.answer, rows[r.index or 0]["answer"]) for r in results)
    return {
        "accuracy": round(right / len(rows), 4),
        "tokens": sum(r.usage.total_tokens for r in results),
        "calls": sum(sum(r.calls_by_model().values()) for r in results),
        "wall_s": round(wall, 2),
        "failed_runs": sum(not r.ok for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 problems instead of 100")
    parser.add_argument("--problems", type=int)
    parser.add_argument("--pocket-dir", type=Path, help="a pocket model directory instead of the cached default")
    parser.add_argument("--only", nargs="*", help="run only these topologies")
    args = parser.parse_args()

    path = args.pocket_dir or pocket_model()
    task = pocket_task(path)
    rows = task.problems(args.problems or (20 if args.quick else 100), seed=0, split="test")
    model = sf.Model(sf.TransformersBackend(path, max_batch_size=64), name=f"pocket:{path.name}",
                     params={"temperature": 1.0, "max_tokens": 96})
    chosen = {name: g for name, g in topologies(path).items() if not args.only or name in args.only}
    print(f"{len(rows)} held-out pocket problems ({task.name}), temperature 1, seed 0")
    print(f"{'topology':<20} {'accuracy':>8} {'tokens/problem':>14} {'calls/problem':>13} {'wall s':>7} failed")
    results: dict[str, dict[str, float]] = {}
    for name, graph in chosen.items():
        figures = asyncio.run(measure(graph, rows, model))
        results[name] = figures
        print(f"{name:<20} {figures['accuracy']:>8.2f} {figures['tokens'] / len(rows):>14,.0f} "
              f"{figures['calls'] / len(rows):>13.1f} {figures['wall_s']:>7.1f} {figures['failed_runs']:>6}",
              flush=True)
    print(json.dumps({"bench": "topologies", "problems": len(rows), "model": f"pocket:{path.name}",
                      "results": results}))


if __name__ == "__main__":
    main()

"""Quickstart: majority vote and Recursive Self-Aggregation over a simulated model.

Runs with no model, key or download: a scripted backend plays a noisy solver that
answers arithmetic problems correctly 60% of the time and makes different mistakes
otherwise, and an aggregator that follows the majority of the candidates it reads.
It prints accuracy, calls and wall time per topology, and the graph itself.

    python examples/quickstart.py [--problems 40] [--population 8] [--subset 4] [--steps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import time
from collections import Counter

import scaffold as sf
from scaffold.testing import ScriptedBackend

SOLVE = "Solve the problem. Put the final answer in \\boxed{}.\n\nProblem: {problem}"


@sf.graph
def majority(problem, *, n: int = 8):
    """Self-consistency: n samples, majority vote over equivalent answers."""
    return sf.vote(sf.sample(SOLVE, model="solver", n=n))


@sf.graph
def rsa(problem, *, n: int = 8, k: int = 4, steps: int = 3):
    """Recursive Self-Aggregation: each step aggregates random k-subsets of the previous population of n."""
    pop = sf.sample(SOLVE, model="solver", n=n)
    for _ in range(steps):
        pop = sf.aggregate(pop, model="solver", k=k, n=n)
    return sf.vote(pop)


def problem_set(count: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(2, 9)
        rows.append({"problem": f"({a} + {b}) * {c}", "answer": str((a + b) * c)})
    return rows


def noisy_solver(accuracy: float) -> ScriptedBackend:
    """A fake model: solves with probability ``accuracy``, else makes an off-by-some slip;
    when aggregating, it writes the answer most candidates agree on (ties: a fresh attempt)."""

    def reply(request: sf.Request) -> str:
        rng = random.Random(request.seed)
        prompt = request.last_content
        expr = re.search(r"\((\d+) \+ (\d+)\) \* (\d+)", prompt)
        assert expr is not None
        a, b, c = map(int, expr.groups())
        truth = (a + b) * c
        if "candidate solutions" in prompt:
            answers = Counter(re.findall(r"\\boxed\{(-?\d+)\}", prompt.split("Candidate 1:", 1)[1]))
            (top, votes), *rest = answers.most_common()
            if not rest or votes > rest[0][1]:
                return f"Most candidates agree after checking: \\boxed{{{top}}}"
        answer = truth if rng.random() < accuracy else truth + rng.choice([-10, -1, 1, 10, c])
        return f"({a} + {b}) * {c} = {a + b} * {c} = \\boxed{{{answer}}}"

    return ScriptedBackend(reply, delay=lambda r: random.Random(r.seed).uniform(0.001, 0.01))


async def evaluate(graph: sf.Graph, rows: list[dict[str, str]], solver: sf.Model) -> tuple[float, int, float]:
    start = time.perf_counter()
    correct = calls = 0
    async for result in graph.map(rows, models={"solver": solver}, concurrency=16, seed=0):
        correct += sf.equivalent(result.answer, rows[result.index or 0]["answer"])
        calls += sum(result.calls_by_model().values())
    return correct / len(rows), calls, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--subset", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accuracy", type=float, default=0.6, help="single-sample accuracy of the fake solver")
    args = parser.parse_args()

    rows = problem_set(args.problems)
    solver = sf.Model(noisy_solver(args.accuracy), max_in_flight=32)
    graphs = {
        "single sample": majority.build(n=1),
        f"majority@{args.population}": majority.build(n=args.population),
        f"RSA N={args.population} K={args.subset} T={args.steps}": rsa.build(n=args.population, k=args.subset,
                                                                              steps=args.steps),
    }
    print(graphs[list(graphs)[-1]].describe(), "\n")
    print(f"{'topology':<24} {'accuracy':>8} {'calls':>7} {'wall s':>7}")
    for name, graph in graphs.items():
        accuracy, calls, wall = asyncio.run(evaluate(graph, rows, solver))
        print(f"{name:<24} {accuracy:>8.2f} {calls:>7} {wall:>7.2f}")
    print(f"\nmost requests in flight at once: {solver.limit.peak if solver.limit else 'unlimited'}")
    where = sf.store.default_target()
    if where is not None:
        print(f"every call was recorded in {where}: browse it with `scaffold runs list` and `scaffold runs show RUN`")


if __name__ == "__main__":
    main()

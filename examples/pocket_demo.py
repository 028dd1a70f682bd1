"""The README's first command: majority vote and Recursive Self-Aggregation on a local model, recorded.

Builds (first time, a few minutes) or loads the pocket model, a tiny character-level Qwen2 trained
from scratch on multi-step integer arithmetic, then runs three topologies over held-out problems on
the in-process transformers backend:

  - single sample (pass@1),
  - majority vote over N samples,
  - Recursive Self-Aggregation (population N, subsets of K, T steps, then a vote),

records every call in the local SQLite store (``./scaffold.db`` unless ``$SCAFFOLD_STORE`` says
otherwise), prints accuracy, tokens, calls and wall time per topology, and plots accuracy per
aggregation step (``out/pocket_demo.png``).

``--model`` runs the same graphs on any other model: a litellm name (``openai/gpt-4o-mini``, with
its key in the environment), or a vLLM server (``hosted_vllm/NAME`` with ``--api-base``).

Usage: python examples/pocket_demo.py [--problems 100] [--population 8] [--subset 4] [--steps 3]
       [--model NAME] [--api-base URL] [--plot PATH] [--pocket-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import scaffold as sf
from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketTask, pocket_model

GENERIC_SOLVE = "Solve the problem. Put the final answer in \\boxed{{}}.\n\n{problem}"


def graphs(population: int, subset: int, steps: int, pocket: bool) -> dict[str, sf.Graph]:
    """The three topologies, with the prompts the pocket model was trained on (or generic ones)."""
    solve = SOLVE_PROMPT if pocket else GENERIC_SOLVE
    aggregate_prompt = AGGREGATE_PROMPT if pocket else sf.AGGREGATE_PROMPT

    @sf.graph(name="single_sample")
    def single(problem: str) -> Any:
        return sf.generate(solve, model="solver")

    @sf.graph(name="majority")
    def majority(problem: str, *, n: int = population) -> Any:
        return sf.vote(sf.sample(solve, model="solver", n=n))

    @sf.graph(name="rsa")
    def rsa(problem: str, *, n: int = population, k: int = subset, t: int = steps) -> Any:
        pop = sf.sample(solve, model="solver", n=n)
        for _ in range(t):
            pop = sf.aggregate(pop, model="solver", k=k, n=n, prompt=aggregate_prompt)
        return sf.vote(pop)

    return {
        "single sample": single.build(),
        f"majority@{population}": majority.build(),
        f"RSA N={population} K={subset} T={steps}": rsa.build(),
    }


def step_accuracy(results: Sequence[sf.RunResult], rows: Sequence[dict[str, str]], steps: int) -> list[float]:
    """Mean accuracy of the population at each step (0 = the initial samples) over all problems."""
    names = ["sample"] + ["aggregate" if t == 1 else f"aggregate_{t}" for t in range(1, steps + 1)]
    accuracy = []
    for name in names:
        correct = total = 0
        for result in results:
            truth = rows[result.index or 0]["answer"]
            for trace in result.node(name):
                total += 1
                correct += sf.equivalent(trace.answer, truth)
        accuracy.append(correct / total if total else 0.0)
    return accuracy


async def evaluate(graph: sf.Graph, rows: list[dict[str, str]], solver: sf.Model) -> tuple[list[sf.RunResult], float]:
    start = time.perf_counter()
    inputs = [{"problem": row["problem"]} for row in rows]
    results = [r async for r in graph.map(inputs, models={"solver": solver}, concurrency=32, seed=0,
                                          dataset="pocket-demo", progress=True)]
    return sorted(results, key=lambda r: r.index or 0), time.perf_counter() - start


def plot(path: Path, per_step: list[float], majority: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(len(per_step)), per_step, marker="o", label="RSA population (mean accuracy per trace)")
    ax.axhline(majority, color="gray", linestyle="--", label="majority vote over the initial samples")
    ax.set_xlabel("aggregation step")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.set_xticks(range(len(per_step)))
    ax.legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--subset", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", help="a litellm model name instead of the pocket model")
    parser.add_argument("--api-base", help="the server of --model (e.g. a vLLM server's http://host:8000/v1)")
    parser.add_argument("--plot", type=Path, default=Path("out/pocket_demo.png"))
    parser.add_argument("--pocket-dir", type=Path, help="a pocket model directory to use instead of the cached one")
    args = parser.parse_args()

    pocket = args.model is None
    if pocket:
        path = args.pocket_dir or pocket_model()
        backend: Any = sf.TransformersBackend(path, max_batch_size=64)
        solver = sf.Model(backend, name=f"pocket:{path.name}", params={"temperature": 1.0})
    else:
        extra = {"api_base": args.api_base} if args.api_base else {}
        solver = sf.Model(sf.LiteLLMBackend(args.model, **extra), params={"temperature": 1.0}, max_in_flight=32)
    rows = PocketTask().problems(args.problems, seed=0, split="test")

    print(f"{'topology':<24} {'accuracy':>8} {'tokens':>9} {'calls':>6} {'wall s':>7}")
    majority_accuracy, per_step = 0.0, []
    for name, graph in graphs(args.population, args.subset, args.steps, pocket).items():
        results, wall = asyncio.run(evaluate(graph, rows, solver))
        accuracy = sum(sf.equivalent(r.answer, rows[r.index or 0]["answer"]) for r in results) / len(rows)
        tokens = sum(r.usage.total_tokens for r in results)
        calls = sum(sum(r.calls_by_model().values()) for r in results)
        print(f"{name:<24} {accuracy:>8.2f} {tokens:>9,} {calls:>6} {wall:>7.1f}")
        if name.startswith("majority"):
            majority_accuracy = accuracy
        if name.startswith("RSA"):
            per_step = step_accuracy(results, rows, args.steps)
    print("RSA accuracy per step:", " ".join(f"{a:.2f}" for a in per_step))
    plot(args.plot, per_step, majority_accuracy, f"{args.model or 'pocket model'}, {len(rows)} problems")
    where = sf.store.default_target()
    print(f"\nplot: {args.plot}")
    if where is not None:
        print(f"every call is recorded in {where}: `scaffold runs list`, `scaffold runs show RUN`")
    print("\nthe same on your API model:   python examples/pocket_demo.py --model openai/gpt-4o-mini  "
          "(OPENAI_API_KEY set)")
    print("the same on a vLLM server:     python -m vllm.entrypoints.openai.api_server --model PATH &  then\n"
          "                               python examples/pocket_demo.py --model hosted_vllm/PATH "
          "--api-base http://127.0.0.1:8000/v1")


if __name__ == "__main__":
    main()

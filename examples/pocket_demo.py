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
its key in the environment), or a vLLM server (``hosted_vllm/NAME`` with ``--api-base``, through the
native OpenAI-compatible backend; add ``--prompts pocket`` when it serves the pocket model).

Usage: python examples/pocket_demo.py [--problems 100] [--population 8] [--subset 4] [--steps 2]
       [--model NAME] [--api-base URL] [--prompts pocket|generic] [--plot PATH] [--pocket-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import scaffold as sf
from scaffold._rules import cluster_answers
from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketTask, pocket_model, pocket_task

GENERIC_SOLVE = "Solve the problem. Put the final answer in \\boxed{}.\n\n{problem}"


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


def step_accuracy(results: Sequence[sf.RunResult], rows: Sequence[dict[str, str]],
                  steps: int) -> tuple[list[float], list[float]]:
    """Per step (0 = the initial samples): mean accuracy of the population's traces, and of its majority vote."""
    names = ["sample"] + ["aggregate" if t == 1 else f"aggregate_{t}" for t in range(1, steps + 1)]
    mean, voted = [], []
    for name in names:
        correct = total = votes_right = 0
        for result in results:
            truth = rows[result.index or 0]["answer"]
            population = result.node(name)
            total += len(population)
            correct += sum(sf.equivalent(trace.answer, truth) for trace in population)
            clusters = cluster_answers(population)
            votes_right += bool(clusters) and sf.equivalent(clusters[0][0], truth)
        mean.append(correct / total if total else 0.0)
        voted.append(votes_right / len(results) if results else 0.0)
    return mean, voted


async def evaluate(graph: sf.Graph, rows: list[dict[str, str]], solver: sf.Model) -> tuple[list[sf.RunResult], float]:
    start = time.perf_counter()
    inputs = [{"problem": row["problem"]} for row in rows]
    results = [r async for r in graph.map(inputs, models={"solver": solver}, concurrency=32, seed=0,
                                          dataset="pocket-demo", progress=True)]
    return sorted(results, key=lambda r: r.index or 0), time.perf_counter() - start


def plot(path: Path, mean: list[float], voted: list[float], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(len(voted)), voted, marker="o", label="majority vote of the population")
    ax.plot(range(len(mean)), mean, marker="s", label="one trace of the population (mean)")
    ax.set_xlabel("aggregation step (0: the initial samples)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.set_xticks(range(len(mean)))
    ax.legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--subset", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="RSA steps (2: the RSA of examples/train_spiral_sums.py)")
    parser.add_argument("--model", help="a model name (litellm's, or a server's with --api-base) instead of pocket")
    parser.add_argument("--api-base", help="the server of --model (e.g. a vLLM server's http://host:8000/v1)")
    parser.add_argument("--prompts", choices=["pocket", "generic"],
                        help="the pocket model's trained prompts, or generic ones (default: pocket without --model, "
                             "generic with it; a served pocket model needs --prompts pocket)")
    parser.add_argument("--plot", type=Path, default=Path("out/pocket_demo.png"))
    parser.add_argument("--pocket-dir", type=Path, help="a pocket model directory to use instead of the cached one")
    args = parser.parse_args()

    pocket_prompts = (args.prompts or ("generic" if args.model else "pocket")) == "pocket"
    path = args.pocket_dir or (pocket_model() if args.model is None else None)
    if args.model is None:
        backend: Any = sf.TransformersBackend(path, max_batch_size=64)
        solver = sf.Model(backend, name=f"pocket:{path.name}", params={"temperature": 1.0})
    else:
        extra = {"api_base": args.api_base} if args.api_base else {}  # a server: the native OpenAI-compatible backend
        solver = sf.Model(sf.backends.backend_from_spec(args.model, **extra), params={"temperature": 1.0},
                          max_in_flight=32)
    task = pocket_task(path) if path is not None else PocketTask()  # the task the model was trained on
    rows = task.problems(args.problems, seed=0, split="test")

    print(f"{'topology':<24} {'accuracy':>8} {'tokens':>9} {'calls':>6} {'wall s':>7}")
    mean: list[float] = []
    voted: list[float] = []
    for name, graph in graphs(args.population, args.subset, args.steps, pocket_prompts).items():
        results, wall = asyncio.run(evaluate(graph, rows, solver))
        accuracy = sum(sf.equivalent(r.answer, rows[r.index or 0]["answer"]) for r in results) / len(rows)
        tokens = sum(r.usage.total_tokens for r in results)
        calls = sum(sum(r.calls_by_model().values()) for r in results)
        print(f"{name:<24} {accuracy:>8.2f} {tokens:>9,} {calls:>6} {wall:>7.1f}")
        if name.startswith("RSA"):
            mean, voted = step_accuracy(results, rows, args.steps)
    print("\nRSA per step (0 = the initial samples):")
    print("  majority vote of the population:", " ".join(f"{a:.2f}" for a in voted))
    print("  one trace of the population:    ", " ".join(f"{a:.2f}" for a in mean))
    title = f"RSA N={args.population} K={args.subset}, {args.model or 'pocket model'}, {len(rows)} problems"
    plot(args.plot, mean, voted, title)
    where = sf.store.default_target()
    print(f"\nplot: {args.plot}")
    if where is not None:
        print(f"every call is recorded in {where}: `scaffold runs list`, `scaffold runs show RUN`")
    print("\nthe same on your API model:   python examples/pocket_demo.py --model openai/gpt-4o-mini  "
          "(OPENAI_API_KEY set)")
    served = path or "PATH"
    print(f"the same on a vLLM server:     vllm serve {served} --served-model-name pocket &  then\n"
          "                               python examples/pocket_demo.py --model hosted_vllm/pocket --prompts pocket "
          "--api-base http://127.0.0.1:8000/v1")

if __name__ == "__main__":
    main()

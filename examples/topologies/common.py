"""What every topology example shares: arguments, the model, the problems, the evaluation table.

By default the examples run on the pocket model (built or loaded from the cache; no key, no
GPU) over held-out pocket problems, with the prompts it was trained on. ``--model`` runs them on
any litellm model (``openai/gpt-4o-mini`` with ``OPENAI_API_KEY`` set) or a model on an
OpenAI-compatible server (``hosted_vllm/NAME``, or any name with ``--api-base``: the native
``sf.OpenAIBackend``) with the topologies' default prompts; ``--data`` takes problems by name (a set that
ships with scaffold: ``math500``, ``gsm8k``; see ``scaffold data list``) or from a JSONL file with ``problem``
and ``answer`` fields (``sf.load_problems`` resolves it). Every alias of a
topology (solver, judge, aggregator, proposers) is bound to that one model unless the example
says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: `graphs` imports as a package

import scaffold as sf  # noqa: E402


def parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments every topology example takes."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problems", type=int, default=20, help="how many problems (default 20)")
    p.add_argument("--model", help="a model name (litellm's, or a server's with --api-base) instead of pocket")
    p.add_argument("--api-base", help="the server of --model (an OpenAI-compatible URL)")
    p.add_argument("--prompts", choices=["pocket", "generic"],
                   help="the pocket model's prompts or the topology's own (default: pocket without --model)")
    p.add_argument("--pocket-dir", type=Path, help="a pocket model directory instead of the cached one")
    p.add_argument("--data", metavar="NAME|PATH",
                   help="problems: a set shipped with scaffold (math500, gsm8k) or a JSONL file of problem/answer rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=16, help="problems run at once")
    p.add_argument("--temperature", type=float, default=1.0)
    return p


@dataclass
class Setup:
    """The model, the prompts and the problems an example runs on."""

    model: sf.Model
    rows: list[dict[str, str]]
    pocket: bool
    """Whether the pocket model's prompts are in use."""
    prompts: dict[str, str] = field(default_factory=dict)
    """Prompt build parameters for the pocket model (``prompt``, ``aggregate_prompt``); empty otherwise."""
    seed: int = 0
    concurrency: int = 16

    def models(self, graph: sf.Graph) -> dict[str, sf.Model]:
        """Every alias the graph uses, bound to the one model."""
        return {alias: self.model for alias in graph.count_calls()}


def setup(args: argparse.Namespace) -> Setup:
    """Bind the model and load the problems the arguments ask for."""
    from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketTask, pocket_model, pocket_task

    params = {"temperature": args.temperature}
    path = args.pocket_dir or (pocket_model() if args.model is None else None)
    if args.model is None:
        assert path is not None
        model = sf.Model(sf.TransformersBackend(path, max_batch_size=64), name=f"pocket:{path.name}", params=params)
    else:
        extra = {"api_base": args.api_base} if args.api_base else {}  # a server: the native OpenAI-compatible backend
        model = sf.Model(sf.backends.backend_from_spec(args.model, **extra), params=params, max_in_flight=32)
    pocket = (args.prompts or ("generic" if args.model else "pocket")) == "pocket"
    if args.data is not None:
        rows = sf.load_problems(args.data, limit=args.problems)
    else:
        task = pocket_task(path) if path is not None else PocketTask()
        rows = task.problems(args.problems, seed=args.seed, split="test")
    prompts = {"prompt": SOLVE_PROMPT, "aggregate_prompt": AGGREGATE_PROMPT} if pocket else {}
    return Setup(model=model, rows=rows, pocket=pocket, prompts=prompts, seed=args.seed,
                 concurrency=args.concurrency)


def evaluate(name: str, graph: sf.Graph, run: Setup) -> list[sf.RunResult]:
    """Run ``graph`` over the problems, print one table row (accuracy, tokens, calls, wall), return the results."""

    async def go() -> list[sf.RunResult]:
        inputs = [{"problem": row["problem"]} for row in run.rows]
        results = [r async for r in graph.map(inputs, models=run.models(graph), concurrency=run.concurrency,
                                              seed=run.seed, dataset=f"example-{name}")]
        return sorted(results, key=lambda r: r.index or 0)

    start = time.perf_counter()
    results = asyncio.run(go())
    wall = time.perf_counter() - start
    right = sum(sf.equivalent(r.answer, run.rows[r.index or 0]["answer"]) for r in results)
    tokens = sum(r.usage.total_tokens for r in results)
    calls = sum(sum(r.calls_by_model().values()) for r in results)
    print(f"{'topology':<28} {'accuracy':>8} {'tokens':>10} {'calls':>6} {'wall s':>7}")
    print(f"{name:<28} {right / len(results):>8.2f} {tokens:>10,} {calls:>6} {wall:>7.1f}")
    return results


def print_steps(results: list[sf.RunResult], run: Setup, label: str = "step") -> None:
    """The mean accuracy of the population at each step (``step0``, ``step1``... nodes), over all problems."""
    import graphs

    by_step = [graphs.population_by_step(r) for r in results]
    for step in range(min(len(pops) for pops in by_step)):
        mean = sum(accuracy(pops[step], run.rows[r.index or 0]["answer"])
                   for pops, r in zip(by_step, results)) / len(results)
        print(f"{label} {step}: mean accuracy of the population {mean:.2f}")


def accuracy(traces: list[sf.Trace], answer: str) -> float:
    """Share of traces whose answer is equivalent to ``answer``."""
    return sum(sf.equivalent(t.answer, answer) for t in traces) / len(traces) if traces else 0.0


__all__ = ["Setup", "accuracy", "evaluate", "parser", "print_steps", "setup", "Any"]

"""The SPIRAL experiment on the pocket model: GRPO vs aggregator-only (AggLM) vs SPIRAL at equal sampled tokens.

Each method starts from the same pocket model and trains (full fine-tuning, AdamW) on its own
rollouts of training problems until its rollouts have sampled the same number of completion
tokens:

  - ``grpo``: groups of single samples, each credited by its reward against its group (GRPO);
  - ``aggregator_only``: the AggLM recipe: samples split into sets of 4, each set aggregated
    several times; only the aggregations of hard sets (majority wrong) and half the easy ones
    are trained, credited against the other aggregations of their set;
  - ``spiral``: 8 search samples, 4 distinct sets of 4, 4 aggregations per set (24 rollouts),
    credited end to end with SPIRAL's set advantages.

Before and after, on the same held-out problems: ``pass1`` (one sample at temperature 1),
``maj4`` (majority of 4 samples), ``agg4`` (the model aggregating those 4, greedily) and ``rsa``
(Recursive Self-Aggregation N=8, K=4, T=2, final vote). Prints a table, writes a plot of
before/after per method (``--plot``) and a JSONL log per method, and ends with one JSON line:
``{"bench": "train_spiral", "results": {method: {"before": {...}, "after": {...}, "sampled_tokens": n}}}``.

``--quick`` runs a reduced version (fewer held-out problems, a smaller budget) in under 10 minutes
on 2 cores. On a GPU, ``--device cuda --engine vllm`` trains on the GPU and rolls out with an
in-process vLLM engine refreshed with the new weights after every update
(``examples/gpu/train_spiral_gpu.sh`` is the prepared run).

Usage: python examples/train_spiral.py [--quick] [--budget TOKENS] [--eval-problems N] [--lr LR]
       [--pocket-dir DIR] [--out DIR] [--methods grpo aggregator_only spiral]
       [--device cpu|cuda] [--engine transformers|vllm]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import graphs  # noqa: E402
import scaffold as sf  # noqa: E402
from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, evaluate_pocket, pocket_model, pocket_task  # noqa: E402
from trainers.loop import LoopConfig, train_online  # noqa: E402
from trainers.policy import Policy, PolicyConfig  # noqa: E402

METHODS = ("grpo", "aggregator_only", "spiral")


def method(name: str, budget: int, problems_per_step: int, seed: int, log: Path) -> tuple[sf.Graph, LoopConfig]:
    """The rollout graph and loop settings of one method."""
    prompts = {"prompt": SOLVE_PROMPT}
    common: dict[str, Any] = dict(steps=10_000, token_budget=budget, problems_per_step=problems_per_step,
                                  seed=seed, log_path=str(log), sampling={"temperature": 1.0, "max_tokens": 80},
                                  dataset="pocket-train")
    if name == "grpo":
        return graphs.grpo_group.build(samples=8, **prompts), LoopConfig(scheme="grpo", **common)
    if name == "aggregator_only":
        graph = graphs.agglm_data.build(samples=8, set_size=4, aggregations=4, aggregate_prompt=AGGREGATE_PROMPT,
                                        **prompts)
        return graph, LoopConfig(scheme="grpo", roles=("aggregate",), easy_fraction=0.5, **common)
    if name == "spiral":
        graph = graphs.spiral.build(search=8, sets=4, set_size=4, aggregations=4, aggregate_prompt=AGGREGATE_PROMPT,
                                    **prompts)
        return graph, LoopConfig(scheme="spiral", **common)
    raise SystemExit(f"unknown method {name!r}; choose from {', '.join(METHODS)}")


def evaluate(model: Any, tokenizer: Any, rows: list[dict[str, str]], seed: int) -> dict[str, float]:
    """pass@1, majority@4, prompted aggregation@4 and RSA accuracy of a (live) model on held-out rows."""
    figures = evaluate_pocket(model, rows, samples=4, k=4, seed=seed, tokenizer=tokenizer)
    backend = sf.TransformersBackend(model, tokenizer, max_new_tokens=80)
    try:
        rsa = graphs.rsa.build(population=8, subset_size=4, steps=2, prompt=SOLVE_PROMPT,
                               aggregate_prompt=AGGREGATE_PROMPT)
        results = rsa.map_sync([{"problem": r["problem"]} for r in rows], models={"solver": backend},
                               store=None, seed=seed, concurrency=32)
    finally:
        backend.close()
    rsa_accuracy = sum(sf.equivalent(r.answer, rows[r.index or 0]["answer"]) for r in results) / len(rows)
    return {"pass1": figures["pass1"], "maj4": figures["maj4"], "agg4": figures["agg4"], "rsa": rsa_accuracy}


def plot(path: Path, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["pass1", "maj4", "agg4", "rsa"]
    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.5), sharey=True, squeeze=False)
    for ax, (name, row) in zip(axes[0], results.items()):
        xs = range(len(metrics))
        ax.bar([x - 0.2 for x in xs], [row["before"][m] for m in metrics], width=0.4, label="before")
        ax.bar([x + 0.2 for x in xs], [row["after"][m] for m in metrics], width=0.4, label="after")
        ax.set_xticks(list(xs), metrics)
        ax.set_title(f"{name} ({row['sampled_tokens']:,} sampled tokens)")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("held-out accuracy")
    axes[0][0].legend(loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a reduced run: under 10 minutes on 2 cores")
    parser.add_argument("--budget", type=int, help="sampled completion tokens per method")
    parser.add_argument("--eval-problems", type=int)
    parser.add_argument("--problems-per-step", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pocket-dir", type=Path, help="a pocket model directory instead of the cached default")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--out", type=Path, default=Path("out/train_spiral"))
    parser.add_argument("--device", default="cpu", help="where the policy trains (cuda on a GPU)")
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                        help="rollouts: the policy's live weights in transformers, or a refreshed vLLM engine")
    args = parser.parse_args()

    budget = args.budget or (100_000 if args.quick else 400_000)
    eval_problems = args.eval_problems or (40 if args.quick else 100)
    base = args.pocket_dir or pocket_model()
    task = pocket_task(base)
    held_out = task.problems(eval_problems, seed=args.seed, split="test")
    train_rows = task.problems(2000, seed=args.seed + 1, split="train")
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    start_policy = Policy(base, PolicyConfig(lr=args.lr, seed=args.seed, device=args.device))
    before = evaluate(start_policy.model, start_policy.tokenizer, held_out, args.seed)
    print("before: " + "  ".join(f"{k} {v:.3f}" for k, v in before.items()), flush=True)
    results: dict[str, Any] = {}
    engine: Any = None
    for name in args.methods:
        graph, config = method(name, budget, args.problems_per_step, args.seed, args.out / f"{name}.jsonl")
        (args.out / f"{name}.jsonl").unlink(missing_ok=True)
        policy = Policy(base, PolicyConfig(lr=args.lr, seed=args.seed, device=args.device))
        if args.engine == "vllm":
            engine = engine or sf.VLLMBackend(base, max_model_len=1024)  # one engine per process
            policy.refresh(engine)  # back to the starting weights for this method
        history = train_online(policy, graph, train_rows, config, store=None, progress=False, engine=engine)
        sampled = int(history[-1].extra["sampled_tokens"]) if history else 0
        after = evaluate(policy.model, policy.tokenizer, held_out, args.seed)
        results[name] = {"before": before, "after": after, "sampled_tokens": sampled, "steps": len(history)}
        print(f"{name}: {len(history)} steps, {sampled:,} sampled tokens; after: "
              + "  ".join(f"{k} {v:.3f}" for k, v in after.items()), flush=True)

    print(f"\n{'method':<16} {'steps':>5} {'tokens':>8}  " + "  ".join(f"{m:>13}" for m in before))
    for name, row in results.items():
        cells = "  ".join(f"{row['before'][m]:.2f} → {row['after'][m]:.2f}".rjust(13) for m in before)
        print(f"{name:<16} {row['steps']:>5} {row['sampled_tokens']:>8,}  {cells}")
    plot(args.out / "train_spiral.png", results)
    print(f"plot: {args.out / 'train_spiral.png'}; logs: {args.out}/*.jsonl; {time.perf_counter() - started:.0f} s")
    print(json.dumps({"bench": "train_spiral", "quick": args.quick, "budget": budget,
                      "eval_problems": eval_problems, "results": results}))


if __name__ == "__main__":
    main()

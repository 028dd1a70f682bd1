"""Distributed training benchmark: rollout throughput and step time on 1 and 2 Ray rollout workers against the
local loop, and the time to sync new weights to the engines (full and LoRA).

Protocol (one run, one machine, a local Ray cluster this script starts):

- **model and recipe**: the pocket model (the default build; ``--quick``: the quick one), found in or built
  into ``$SCAFFOLD_CACHE``; the SPIRAL recipe (8 search samples, 4 sets of 4, 4 aggregations each: 24
  calls a problem) at temperature 1, at most 64 new tokens a call, ``--problems`` problems a step,
  ``--steps`` steps, seed 0, full fine-tuning at lr 1e-5, lag 0, rollouts not recorded (``store=None``).
- **the three trainings**: the local loop (rollouts in this process on ``policy.backend()``), then the
  distributed loop with 1 and with 2 rollout workers (one CPU each, transformers engines), each from a
  fresh policy. Every configuration runs the same steps on the same problems.
- **rollout_tokens_per_s_X**: completion tokens sampled in a step / the seconds its rollouts took
  (local: the ``map`` call; distributed: from queueing the step's problems to its last result),
  summed over the steps after the first (the first warms the engines up and is left out).
- **step_s_X**: median wall time of those steps, rollouts, rewards, update and weight sync included
  (Ray's start and the workers' start are not in any step).
- **sync_ms_full**: median time to send a full weight update to the 2 workers and have both copy it into
  their engines (``ray.put`` once, each worker acknowledges); **sync_ms_lora**: the same in a short extra
  training of a LoRA policy (rank 8 on every linear layer), where only the adapter travels and each
  worker merges it. ``sync_bytes_full`` / ``sync_bytes_lora`` are the sizes sent.

With 2 cores, the trainer and two workers share them: the figures show the coordination cost on a
small machine, not the speed-up of a cluster where each worker brings its own cores or GPU. The
last line is one JSON object with the keys the issue names.

Usage: python benchmarks/distributed_training.py [--quick] [--steps 4] [--problems 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster of our own: no token under the home directory

from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketConfig, pocket_model, pocket_task  # noqa: E402
from trainers.distributed import RolloutCluster  # noqa: E402
from trainers.loop import LoopConfig, train_online  # noqa: E402
from trainers.policy import LoraSettings, Policy, PolicyConfig  # noqa: E402
from trainers.recipes import recipe  # noqa: E402
from trainers.types import StepMetrics  # noqa: E402

SAMPLING = {"temperature": 1.0, "max_tokens": 64}


def train(model_dir: Path, rows: list[dict[str, str]], steps: int, problems: int, *, workers: int | None,
          lora: bool = False) -> dict[str, Any]:
    """One training; per step: sampled tokens, rollout seconds, wall seconds, sync seconds and bytes."""
    chosen = recipe("spiral", prompt=SOLVE_PROMPT, aggregate_prompt=AGGREGATE_PROMPT)
    policy = Policy(model_dir, PolicyConfig(lr=1e-5, seed=0, lora=LoraSettings() if lora else None))
    config = LoopConfig(steps=steps, problems_per_step=problems, seed=0, sampling=SAMPLING, **chosen.loop_options)
    marks: list[float] = []
    metrics: list[StepMetrics] = []

    def on_step(step: StepMetrics) -> None:
        marks.append(time.perf_counter())
        metrics.append(step)

    cluster = None if workers is None else RolloutCluster(workers=workers, num_cpus=1)
    started = time.perf_counter()
    train_online(policy, chosen.graph, rows, config, store=None, progress=False, on_step=on_step, cluster=cluster)
    walls = [b - a for a, b in zip([started, *marks], marks)]
    sampled = [m.extra["sampled_tokens"] for m in metrics]
    per_step = [b - a for a, b in zip([0, *sampled], sampled)]
    return {"tokens": per_step, "rollout_s": [m.extra["rollout_s"] for m in metrics], "wall_s": walls,
            "sync_s": [m.extra.get("sync_s") for m in metrics], "sync_bytes": metrics[-1].extra.get("sync_bytes")}


def summary(run: dict[str, Any]) -> tuple[float, float]:
    """Tokens/s of the rollouts and median step seconds, over the steps after the first."""
    tokens, seconds, walls = run["tokens"][1:], run["rollout_s"][1:], run["wall_s"][1:]
    return sum(tokens) / sum(seconds), statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick pocket model, 2 steps of 4 problems")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--problems", type=int, default=None)
    args = parser.parse_args()
    steps = args.steps or (2 if args.quick else 4)
    problems = args.problems or (4 if args.quick else 8)
    import ray

    model_dir = pocket_model(config=PocketConfig.quick() if args.quick else PocketConfig(), progress=False)
    rows = pocket_task(model_dir).problems(steps * problems, seed=3, split="train")
    print(f"pocket model {model_dir}; SPIRAL (24 calls a problem), {problems} problems a step, {steps} steps, "
          f"{os.cpu_count()} cores")
    ray.init(num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}})
    try:
        runs = {"local": train(model_dir, rows, steps, problems, workers=None),
                "w1": train(model_dir, rows, steps, problems, workers=1),
                "w2": train(model_dir, rows, steps, problems, workers=2)}
        lora = train(model_dir, rows, 2, problems, workers=2, lora=True)
    finally:
        ray.shutdown()
    figures: dict[str, Any] = {"bench": "distributed_training"}
    for name, run in runs.items():
        tokens_per_s, step_s = summary(run)
        figures[f"rollout_tokens_per_s_{name}"] = round(tokens_per_s, 1)
        figures[f"step_s_{name}"] = round(step_s, 3)
        print(f"  {name:>5}: rollouts {tokens_per_s:8.1f} tokens/s, step {step_s:6.2f} s "
              f"(steps {', '.join(f'{w:.2f}' for w in run['wall_s'])} s)")
    figures["sync_ms_full"] = round(1000 * statistics.median(runs["w2"]["sync_s"]), 2)
    figures["sync_ms_lora"] = round(1000 * statistics.median(lora["sync_s"]), 2)
    figures["sync_bytes_full"], figures["sync_bytes_lora"] = runs["w2"]["sync_bytes"], lora["sync_bytes"]
    print(f"  weight sync to 2 workers: full {figures['sync_ms_full']} ms ({figures['sync_bytes_full']:,} bytes), "
          f"LoRA {figures['sync_ms_lora']} ms ({figures['sync_bytes_lora']:,} bytes)")
    figures.update(steps=steps, problems=problems, cores=os.cpu_count())
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""The SPIRAL experiment: does set-RL on recorded graphs make the *graph* better than GRPO on single samples?

Protocol (written before the runs it describes; nothing below was tuned on held-out problems):

- **Base model**: the pocket model (``scaffold.pocket``, default config, seed 0) as built on the
  machine that runs this; its build figures are reported under ``regime``.
- **Problems**: training rows are 4,000 train-split problems (seed 1); learning rates are chosen on
  100 validation-split problems (seed 1); results are measured on 200 test-split problems
  (seed 0), read only after every model is trained. The three splits never share a problem.
- **Methods** (:mod:`trainers.recipes`), all full fine-tuning from the same weights (AdamW, gradient
  norm clipped at 1, PPO clip 0.2, token-normalised loss, no KL penalty but the KL to the start
  measured), 16 problems per step, solutions sampled at temperature 1 and training aggregations at
  ``--aggregate-temperature`` (1.0):
  ``grpo`` (8 samples per problem, GRPO), ``aggregator_only`` (the AggLM recipe: 8 samples, 2 sets
  of 4, 4 aggregations per set, hard sets and half the easy ones trained), ``spiral`` (8 search
  samples, 4 distinct sets of 4, 4 aggregations per set: 24 rollouts, two-level SPIRAL credit) and
  ``spiral_rsa`` (rollouts are RSA runs N=8 K=4 T=2: 24 calls, multi-level SPIRAL credit).
- **Two budgets from one run per method and seed**: *equal sampled tokens*, the weights after the
  first step at which the rollouts have sampled ``--budget`` (210,000) completion tokens; *equal
  optimiser steps*, the weights after ``--equal-steps`` (9) steps, the steps ``spiral`` takes to
  sample that budget. A run goes on until both are reached; the two checkpoints are copies of its
  weights, so neither budget costs another run.
- **Learning rate**: per method, the best of ``--lrs`` (3e-5, 1e-4, 3e-4) by RSA accuracy on the
  validation problems at the equal-token checkpoint of the first seed (ties: agg@4, then the
  smaller rate). The runs of that seed are the sweep's own runs; the other seeds train at the
  chosen rate.
- **Seeds**: 0, 1, 2 (the seed orders the training problems and seeds every sampled choice). Every
  seed is reported.
- **Metrics** on the held-out problems, each model sampled with the same evaluation seed: 8
  solutions per problem at temperature 1 give ``pass1``, ``pass8``, ``maj4`` (each half of the 8,
  averaged) and ``maj8``; ``agg4`` is the model aggregating those same two groups of 4 greedily;
  ``rsa`` is Recursive Self-Aggregation (N=8, K=4, T=2, temperature 1, final vote) from those same
  8 samples. 95% intervals: a two-level bootstrap over seeds and problems
  (:func:`scaffold.evaluation.seeds_bootstrap_ci`); differences between methods are paired by
  seed and problem.
- **Per step** (logs in ``--out``, one JSONL per method and seed): per role, the share of traces
  with advantage 0, mean |advantage|, token entropy, KL to the start and the share of traces with an
  answer (format drift).
- **Targets**: ``spiral`` and ``spiral_rsa`` under RSA beat ``grpo`` under RSA by >= 0.05 at equal
  tokens; the trained aggregator beats the same model's vote, ``agg4 >= maj4 + 0.05``.

An interrupted experiment resumes: each finished run (its step metrics and both checkpoints) and
each evaluation is saved in ``--out`` and reused when the script is started again with the same
plan (``--fresh`` retrains everything).

``--quick`` (under 10 minutes on 2 cores) runs one seed, no sweep (each method at the rate the
full run chose, :data:`QUICK_LRS`), a smaller budget and 100 held-out problems, and prints its
intervals too (over problems only). On a GPU, ``--device cuda --engine vllm`` trains on the GPU and
rolls out with an in-process vLLM engine refreshed after every update
(``examples/gpu/train_spiral_gpu.sh``). ``--workers N`` rolls out on N Ray workers instead, each with
its own engine (``--gpu-share`` of a GPU for each vLLM replica) that gets the new weights after every
update (``trainers.distributed``; ``examples/gpu/train_spiral_distributed.sh``); at lag 0 the results
are those of the single-process run.

Ends with one JSON line: ``bench``, ``results`` / ``results_equal_steps`` (method → ``before`` /
``after`` → metric → mean over seeds), ``ci95`` / ``ci95_equal_steps`` (the same shape, half-widths),
``differences`` / ``differences_equal_steps`` (paired, with intervals: ``rsa_minus_grpo_rsa``,
``agg4_minus_maj4``, ``rsa_minus_start_rsa``), ``seeds``, ``budget_tokens``, ``equal_steps``, ``steps``
(method → mean steps at equal tokens), ``lr`` (method → rate), ``sweep`` (method → rate →
validation figures; ``start`` the base model's), ``zero_advantage`` (method → role → mean share),
``roles`` (method → role → :func:`role_stats`),
``regime`` and ``seconds``.

Usage: python examples/train_spiral_sums.py [--quick] [--seeds 0 1 2] [--lrs 1e-4 3e-4 1e-3] [--budget TOKENS]
       [--equal-steps N] [--methods ...] [--pocket-dir DIR] [--out DIR] [--fresh] [--device cpu|cuda] [--engine ...]
       [--workers N] [--gpu-share FRACTION]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_spiral_report import Run, differences, means, plot, role_stats, summarise, table  # noqa: E402

import scaffold as sf  # noqa: E402
from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, load_report, pocket_model, pocket_task  # noqa: E402
from scaffold.pocket._evaluate import score_pocket  # noqa: E402
from trainers.distributed import RolloutCluster  # noqa: E402
from trainers.loop import LoopConfig, train_online  # noqa: E402
from trainers.policy import Policy, PolicyConfig  # noqa: E402
from trainers.recipes import ABLATIONS, METHODS, recipe  # noqa: E402
from trainers.types import StepMetrics  # noqa: E402

LRS = (3e-5, 1e-4, 3e-4)
"""The learning-rate sweep of the full run."""
QUICK_LRS = {"grpo": 1e-4, "aggregator_only": 3e-5, "spiral": 3e-5, "spiral_rsa": 3e-5}
"""The rates ``--quick`` trains at (what the full run's sweep chose)."""
EVAL_SEED = 1234
"""Every model is evaluated with this sampling seed (common random numbers make paired differences sharper)."""


@dataclass
class Plan:
    """What one invocation runs."""

    methods: list[str]
    seeds: list[int]
    lrs: dict[str, list[float]]
    budget: int
    equal_steps: int
    problems_per_step: int
    eval_problems: int
    validation_problems: int
    aggregate_temperature: float
    micro_batch_size: int
    device: str
    engine: str
    out: Path
    eval_split: str = "test"
    resume: bool = True
    workers: int = 0
    """Rollout workers on Ray (0: rollouts in this process)."""
    gpu_share: float = 0.0
    """GPU fraction of each worker's vLLM replica."""

    def cluster(self) -> RolloutCluster | None:
        """Where the rollouts run: ``None`` (this process) or ``workers`` Ray workers with their own engines."""
        if not self.workers:
            return None
        options: dict[str, Any] = {"max_model_len": 1024} if self.engine == "vllm" else {}
        if self.engine == "vllm" and self.gpu_share:
            options["engine_kwargs"] = {"gpu_memory_utilization": round(0.9 * self.gpu_share, 3)}
        return RolloutCluster(workers=self.workers, engine=self.engine, engine_options=options,
                              num_gpus=self.gpu_share if self.engine == "vllm" else 0.0)

    def key(self, base: Path, **more: Any) -> dict[str, Any]:
        """What a saved result depends on: a result saved under another key is recomputed, never reused."""
        fields = ("budget", "equal_steps", "problems_per_step", "eval_problems", "validation_problems",
                  "aggregate_temperature", "micro_batch_size", "device", "engine", "eval_split", "workers")
        return {"base": str(base.resolve()), "eval_seed": EVAL_SEED, **{f: getattr(self, f) for f in fields}, **more}


def train_run(base: Path, method: str, seed: int, lr: float, rows: list[dict[str, str]], plan: Plan,
              engine: Any) -> Run:
    """Train one method from the base weights until both budgets are reached, keeping weights at each.

    A finished run is saved to ``--out`` (``NAME.run.pt``: its step metrics and both checkpoints), so an
    interrupted experiment started again with the same plan resumes after its last finished run.
    """
    import torch

    name = f"{method}-seed{seed}-lr{lr:g}"
    saved, key = plan.out / f"{name}.run.pt", plan.key(base, method=method, seed=seed, lr=lr)
    if plan.resume and saved.exists():
        state = torch.load(saved, weights_only=False)
        if state.get("key") == key:
            print(f"    {name}: reusing the finished run saved in {saved}", flush=True)
            return Run(method, seed, lr, [StepMetrics(**m) for m in state["history"]], dict(state["at"]))
    chosen = recipe(method, prompt=SOLVE_PROMPT, aggregate_prompt=AGGREGATE_PROMPT,
                    aggregate_temperature=plan.aggregate_temperature)
    log = plan.out / f"{name}.jsonl"
    log.unlink(missing_ok=True)
    config = LoopConfig(steps=100_000, problems_per_step=plan.problems_per_step, seed=seed, log_path=str(log),
                        sampling={"temperature": 1.0, "max_tokens": 80}, dataset="pocket-train",
                        **chosen.loop_options)
    policy = Policy(base, PolicyConfig(lr=lr, seed=seed, device=plan.device, measure_kl=True, measure_kl_every=4,
                                       micro_batch_size=plan.micro_batch_size))
    if engine is not None:
        policy.refresh(engine)  # back to the starting weights
    run = Run(method, seed, lr, [])

    def keep(metrics: StepMetrics) -> None:
        reached = [budget for budget, due in (("tokens", metrics.extra["sampled_tokens"] >= plan.budget),
                                              ("steps", metrics.step == plan.equal_steps))
                   if due and budget not in run.at]
        if reached:  # one copy of the weights, shared by both budgets when they fall on the same step
            weights = {k: v.detach().cpu().clone() for k, v in policy.model.state_dict().items()}
            run.at.update({budget: (metrics.step, weights) for budget in reached})
        roles = metrics.extra["roles"]
        shown = "  ".join(f"{role[:3]} 0-adv {r['zero_advantage']:.2f} H {r['entropy']:.3f} KL {r['kl'] or 0:.4f}"
                          for role, r in roles.items())
        print(f"    {method} s{seed} lr {lr:g} step {metrics.step:3d}  tokens {metrics.extra['sampled_tokens']:>7,}  "
              f"reward {metrics.reward_mean or 0:.3f}  {shown}", flush=True)

    run.history = train_online(policy, chosen.graph, rows, config, store=None, progress=False, engine=engine,
                               on_step=keep, until=lambda history: len(run.at) == 2, cluster=plan.cluster())
    state = {"key": key, "history": [dataclasses.asdict(m) for m in run.history], "at": run.at}
    write_atomically(saved, lambda tmp: torch.save(state, tmp))
    return run


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """``write`` to a scratch file beside ``path``, then rename it over ``path``: a kill leaves the old or the new."""
    scratch = path.with_suffix(".partial")
    write(scratch)
    os.replace(scratch, path)


def cached(path: Path, key: dict[str, Any], plan: Plan, compute: Callable[[], Any]) -> Any:
    """``compute()``, saved as JSON at ``path`` under ``key`` and reused while the key is the same."""
    if plan.resume and path.exists():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved["value"]
    value = compute()
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps({"key": key, "value": value})))
    return value


def evaluate(policy: Policy, weights: dict[str, Any] | None, rows: list[dict[str, str]]) -> dict[str, list[float]]:
    """Per-problem held-out scores of ``weights`` (``None``: the policy's current ones)."""
    if weights is not None:
        policy.model.load_state_dict(weights)
    return score_pocket(policy.model, rows, samples=8, k=4, rsa_steps=2, seed=EVAL_SEED,
                        tokenizer=policy.tokenizer).scores


def mean_scores(policy: Policy, weights: dict[str, Any] | None, rows: list[dict[str, str]]) -> dict[str, float]:
    return means(evaluate(policy, weights, rows))


def choose_lr(method: str, candidates: dict[float, dict[str, float]]) -> float:
    """The pre-registered rule: best validation RSA, then agg@4, then the smaller rate."""
    return min(candidates, key=lambda lr: (-candidates[lr]["rsa"], -candidates[lr]["agg4"], lr))


def parse() -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, no sweep, a smaller budget: under 10 minutes")
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--lrs", type=float, nargs="+", help="the sweep (one rate: no sweep)")
    parser.add_argument("--budget", type=int, help="sampled completion tokens per method (equal-token budget)")
    parser.add_argument("--equal-steps", type=int, help="optimiser steps per method (equal-step budget)")
    parser.add_argument("--problems-per-step", type=int, default=16)
    parser.add_argument("--eval-problems", type=int)
    parser.add_argument("--validation-problems", type=int, default=100)
    parser.add_argument("--eval-split", choices=["test", "validation"], default="test",
                        help="where results are measured: pilots and tuning use validation, never test")
    parser.add_argument("--aggregate-temperature", type=float, default=1.0)
    parser.add_argument("--micro-batch-size", type=int, default=64)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=[*METHODS, *ABLATIONS],
                        help="the recipes to compare (the role ablations of spiral are not run by default)")
    parser.add_argument("--pocket-dir", type=Path, help="a pocket model directory instead of the cached default")
    parser.add_argument("--out", type=Path, default=Path("out/train_spiral"))
    parser.add_argument("--plot", action="store_true", help="also write train_spiral.png to --out")
    parser.add_argument("--fresh", action="store_true",
                        help="retrain everything (default: reuse the runs and scores a same-plan run saved in --out)")
    parser.add_argument("--device", default="cpu", help="where the policy trains (cuda on a GPU)")
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                        help="rollouts: the policy's live weights in transformers, or a refreshed vLLM engine")
    parser.add_argument("--workers", type=int, default=0, help="roll out on this many Ray workers (0: here)")
    parser.add_argument("--gpu-share", type=float, default=0.0, help="GPU fraction of each worker's vLLM replica")
    args = parser.parse_args()
    quick = args.quick
    lrs = ({m: [QUICK_LRS.get(m, QUICK_LRS["spiral"])] for m in (*METHODS, *ABLATIONS)} if quick and not args.lrs
           else {m: list(args.lrs or LRS) for m in (*METHODS, *ABLATIONS)})
    plan = Plan(methods=args.methods, seeds=args.seeds or ([0] if quick else [0, 1, 2]), lrs=lrs,
                budget=args.budget or (84_000 if quick else 210_000),
                equal_steps=args.equal_steps or (4 if quick else 9), problems_per_step=args.problems_per_step,
                eval_problems=args.eval_problems or (100 if quick else 200),
                validation_problems=args.validation_problems, aggregate_temperature=args.aggregate_temperature,
                micro_batch_size=args.micro_batch_size, device=args.device, engine=args.engine, out=args.out,
                eval_split=args.eval_split, resume=not args.fresh, workers=args.workers, gpu_share=args.gpu_share)
    return args, plan


def main() -> None:
    args, plan = parse()
    started = time.perf_counter()
    base = args.pocket_dir or pocket_model()
    report = load_report(base)
    task = pocket_task(base)
    held_out = task.problems(plan.eval_problems, seed=0, split=args.eval_split)
    validation = task.problems(plan.validation_problems, seed=1, split="validation")
    train_rows = task.problems(4000, seed=1, split="train")
    plan.out.mkdir(parents=True, exist_ok=True)
    print(f"base: {base}  (pocket pass1 {report['pass1']:.3f}, maj4 {report['maj4']:.3f}, agg4 {report['agg4']:.3f})")
    print(f"plan: methods {plan.methods}, seeds {plan.seeds}, budget {plan.budget:,} tokens / "
          f"{plan.equal_steps} steps, {plan.problems_per_step} problems per step, aggregation temperature "
          f"{plan.aggregate_temperature}", flush=True)

    start = Policy(base, PolicyConfig(seed=0, device=plan.device))
    clock = time.perf_counter()
    before = cached(plan.out / "start.held_out.json", plan.key(base), plan, lambda: evaluate(start, None, held_out))
    print("start (held-out): " + "  ".join(f"{m} {v:.3f}" for m, v in means(before).items())
          + f"  ({time.perf_counter() - clock:.0f} s to evaluate)", flush=True)
    engine = sf.VLLMBackend(base, max_model_len=1024) if plan.engine == "vllm" and not plan.workers else None

    runs: list[Run] = []
    chosen: dict[str, float] = {}
    sweep: dict[str, dict[str, dict[str, float]]] = {}
    if any(len(plan.lrs[m]) > 1 for m in plan.methods):
        sweep["start"] = {"-": cached(plan.out / "start.validation.json", plan.key(base), plan,
                                      partial(mean_scores, start, None, validation))}
        print("start (validation): " + "  ".join(f"{m} {v:.3f}" for m, v in sweep["start"]["-"].items()), flush=True)
    for method in plan.methods:
        # 1) the learning rate, on validation problems, at the equal-token budget of the first seed
        candidates: dict[float, dict[str, float]] = {}
        tried: dict[float, Run] = {}
        for lr in plan.lrs[method]:
            run = train_run(base, method, plan.seeds[0], lr, train_rows, plan, engine)
            tried[lr] = run
            if len(plan.lrs[method]) > 1:
                candidates[lr] = cached(plan.out / f"{method}-seed{run.seed}-lr{lr:g}.validation.json",
                                        plan.key(base, method=method, seed=run.seed, lr=lr), plan,
                                        partial(mean_scores, start, run.at["tokens"][1], validation))
                print(f"  sweep {method} lr {lr:g}: validation " + "  ".join(
                    f"{m} {v:.3f}" for m, v in candidates[lr].items()), flush=True)
        chosen[method] = choose_lr(method, candidates) if candidates else plan.lrs[method][0]
        sweep[method] = {f"{lr:g}": figures for lr, figures in candidates.items()}
        runs.append(tried[chosen[method]])
        # 2) the other seeds at that rate
        for seed in plan.seeds[1:]:
            runs.append(train_run(base, method, seed, chosen[method], train_rows, plan, engine))
        # 3) held-out scores at both budgets
        for run in (r for r in runs if r.method == method):
            for budget, (step, weights) in run.at.items():
                same = [b for b, (s, _) in run.at.items() if s == step and b in run.scores]
                run.scores[budget] = run.scores[same[0]] if same else cached(
                    plan.out / f"{method}-seed{run.seed}-lr{run.lr:g}.{budget}.held_out.json",
                    plan.key(base, method=method, seed=run.seed, lr=run.lr, step=step), plan,
                    partial(evaluate, start, weights, held_out))
            print(f"  {method} seed {run.seed} (lr {run.lr:g}): equal tokens step {run.at['tokens'][0]}: " + "  ".join(
                f"{m} {v:.3f}" for m, v in means(run.scores["tokens"]).items()), flush=True)

    results, ci = summarise(runs, before, "tokens")
    results_steps, ci_steps = summarise(runs, before, "steps")
    steps = {m: sum(r.at["tokens"][0] for r in runs if r.method == m) / len(plan.seeds) for m in plan.methods}
    print()
    print(table(f"equal sampled tokens ({plan.budget:,}), mean ± 95% half-width over {len(plan.seeds)} seed(s) x "
                f"{plan.eval_problems} held-out problems", results, ci, steps))
    print()
    print(table(f"equal optimiser steps ({plan.equal_steps})", results_steps, ci_steps,
                {m: plan.equal_steps for m in plan.methods}))
    diff, diff_steps = differences(runs, "tokens", before), differences(runs, "steps", before)
    for title, shown in (("equal tokens", diff), ("equal steps", diff_steps)):
        print(f"\npaired differences at {title}, mean [95% interval] over seeds and problems:")
        for name, by_method in shown.items():
            for method, d in by_method.items():
                print(f"  {name:<20} {method:<22} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    roles = {m: role_stats([r for r in runs if r.method == m]) for m in plan.methods}
    zero = {m: {role: v["zero_advantage"] for role, v in by_role.items()} for m, by_role in roles.items()}
    print("\nper role, over steps and seeds: zero-advantage share, mean |advantage|, token entropy, KL to the start "
          "at the last step, lowest answered share:")
    for method, by_role in roles.items():
        for role, v in by_role.items():
            print(f"  {method:<22} {role:<9} 0-adv {v['zero_advantage']:.2f}  |adv| {v['advantage_abs_mean']:.3f}  "
                  f"H {v['entropy']:.3f}  KL {v.get('kl_end', 0.0):.4f}  answered >= {v.get('answered_min', 0.0):.2f}")
    if args.plot:
        plot(plan.out / "train_spiral.png", results, ci)
    seconds = time.perf_counter() - started
    print(f"logs: {plan.out}/*.jsonl; {seconds:.0f} s")
    print(json.dumps({
        "bench": "train_spiral", "quick": args.quick, "results": results, "results_equal_steps": results_steps,
        "ci95": ci, "ci95_equal_steps": ci_steps, "differences": diff,
        "differences_equal_steps": diff_steps, "seeds": plan.seeds,
        "budget_tokens": plan.budget, "equal_steps": plan.equal_steps, "steps": steps, "lr": chosen,
        "sweep": sweep, "zero_advantage": zero, "roles": roles, "eval_problems": plan.eval_problems,
        "regime": {k: report[k] for k in ("pass1", "pass8", "maj4", "agg4", "build_seconds")},
        "seconds": round(seconds),
    }))


if __name__ == "__main__":
    main()

"""Set-RL measured where sets matter: SPIRAL against GRPO on the parts task, at the paper's compute parity.

Protocol (written before the runs it describes; nothing below is tuned on held-out problems):

- **Task and base model.** The parts task (:class:`scaffold.pocket.PartsTask`): a problem has labelled parts,
  a candidate works one of them under a token budget that fits one part, an aggregation copies the parts its
  candidates give and works at most one they lack. The base model is the default parts build
  (:func:`scaffold.pocket.parts_model`, seed 0) made on the machine that runs this; its figures are reported.
  Why this task: on the sums task a wrong trace is a right one plus a slip, so a set's value is a function of
  how many of its members are right and set credit for a candidate is a noisier GRPO; here how useful a
  candidate is depends on which parts the rest of its set covers.
- **Positive control, before any training.** On ``--control-problems`` (500) validation problems, 8 samples
  each of the base model and four sets of 4 per problem (its two halves and two random subsets: 2,000 sets),
  each aggregated once at temperature 1. Set success is fitted on the number of right members (one indicator
  per count), then with coverage (parts the right members cover) and diversity (parts the members chose)
  added (:func:`trainers.set_signal.set_signal`): the likelihood-ratio test and the gain in 5-fold held-out
  log-loss. If the features explain nothing beyond the count, the task is changed before any method runs.
- **Methods** (:mod:`trainers.recipes`), all full fine-tuning from the base weights with one shared learning
  rate ``--lr`` (1e-4: the rate the sums experiment's sweep chose for GRPO; no sweep here, so no method gets a
  rate tuned for it), AdamW, gradient norm clipped at 1, PPO clip 0.2, token-normalised loss, no KL penalty
  (the KL to the start is measured), candidates at temperature 1 within the task's solving budget and
  aggregations at temperature 1 within its aggregation budget. Every method sees the same problems in the same
  order (the seed orders them) and samples **24 rollouts per problem**, ``--problems-per-step`` problems per
  step, for ``--steps`` steps:
  ``grpo`` (24 samples, GRPO on each candidate's own reward), ``aggregator_only`` (8 samples, 2 sets of 4,
  8 aggregations each; only the aggregations are trained, the AggLM mix), ``spiral`` (8 search samples, 4
  distinct sets of 4, 4 aggregations each, two-level SPIRAL credit) and ``spiral_rsa`` (RSA N=8 K=4 T=2 as
  the rollout, multi-level SPIRAL credit). A secondary arm, ``grpo8``, samples 8 per problem at equal steps.
  A candidate's reward is whether the part it works is right; an aggregation's whether the whole tuple is.
- **Seeds** 0, 1, 2 (the seed orders the training problems and seeds every sampled choice); every seed is
  reported.
- **Evaluation** on ``--eval-problems`` held-out test problems, every model with the same evaluation seed
  (:func:`scaffold.pocket.score_parts`): 32 candidates per problem at temperature 1 give ``pass1`` (a
  candidate's part right), ``pass8`` and ``pass32`` (``m`` candidates cover every part rightly: an oracle
  aggregator's reach), ``entropy_search`` (the candidates' token entropy) and the part-choice entropy;
  ``maj4`` (a per-part vote) and ``agg4`` (the model aggregating, greedily) on the two halves of the first 8;
  RSA (N=8, K=4, T=2, temperature 1) from those 8: ``rsa_pop``, the mean accuracy of the final population
  (the paper's figure), and ``rsa_vote``, its vote. 95% intervals: two-level bootstrap over seeds and
  problems (:func:`scaffold.evaluation.seeds_bootstrap_ci`); differences between methods are paired by seed
  and problem. Besides the final weights, each method is evaluated at **matched KL**: the step at which its
  KL to the start first reaches the smallest final KL of any method (mean over seeds).
- **Per step** (``examples/results/train_spiral/METHOD-sSEED.jsonl``): reward, per role the zero-advantage
  share, mean |advantage|, token entropy and KL, the parts the search (or single) traces chose, their part
  entropy, and the within-set diversity (distinct answers among each aggregation's candidates).
- **Targets** (on the default build, at compute parity): ``spiral`` under RSA ≥ ``grpo`` under RSA + 0.05
  (population accuracy, paired over seeds and problems); ``spiral``'s pass@32 not below ``grpo``'s (the
  lower bound of the paired difference's 95% interval above −0.02); the token entropy of ``spiral``'s search
  traces at the end above that of ``grpo``'s samples.
- **Budget and power.** See :data:`POWER` (measured costs and the calculation that sized the run).

Everything small a run produces lands in ``--results`` (default ``examples/results/train_spiral``): the
control, per-step logs, per-problem held-out scores and the summary, as JSON, so an interrupted experiment
resumes from what landed; weights and checkpoints go to ``--out`` (never committed). Started again, the script
reuses every finished piece whose plan is the same and resumes an unfinished run from its last checkpoint;
``--max-minutes`` stops it cleanly after the piece running at that time, so a long run goes in chunks.

``--quick`` (under 10 minutes on 2 cores) runs every method for one seed on a small plan and prints its
intervals (over problems only). On a GPU, ``--device cuda --engine vllm`` trains on the GPU and rolls out with
an in-process vLLM engine refreshed after every update (``examples/gpu/train_spiral_gpu.sh`` runs the full plan
with more problems per step).

Ends with one JSON line: ``bench`` (``"train_spiral"``), ``task``, ``positive_control`` (``sets``,
``loglik_gain``, ``p_value``, ``features``...), ``results`` (method → ``before`` / ``after`` → metric → mean
over seeds), ``ci95`` (the same shape, half-widths), ``matched_kl`` (method → metric → mean at matched KL),
``differences`` (paired, with intervals), ``seeds``, ``steps``, ``rollouts_per_problem``, ``lr``,
``kl_final`` (method → mean final KL), ``regime`` and ``seconds``.

``--control-only`` runs the positive control alone and ends with a JSON line of ``bench``, ``task``,
``positive_control``, ``regime`` and ``seconds``.

Usage: python examples/train_spiral.py [--quick] [--seeds 0 1 2] [--steps N] [--methods ...] [--max-minutes M]
       [--control-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaffold._answers import extract_boxed  # noqa: E402
from scaffold.evaluation import seeds_bootstrap_ci  # noqa: E402
from scaffold.pocket import PARTS_AGGREGATE_PROMPT, PARTS_SOLVE_PROMPT, PartsTask, parts_model  # noqa: E402
from scaffold.pocket._parts_eval import score_parts  # noqa: E402
from trainers.loop import LoopConfig, train_online  # noqa: E402
from trainers.policy import Policy, PolicyConfig  # noqa: E402
from trainers.recipes import Recipe, recipe  # noqa: E402
from trainers.set_signal import set_signal  # noqa: E402
from trainers.types import StepMetrics  # noqa: E402

METHODS = ("grpo", "grpo8", "aggregator_only", "spiral", "spiral_rsa")
"""The methods, by their keys in the results."""
ROLLOUTS = {"grpo": 24, "grpo8": 8, "aggregator_only": 24, "spiral": 24, "spiral_rsa": 24}
"""Rollouts (model calls) per problem of each method."""
METRICS = ("pass1", "pass8", "pass32", "maj4", "agg4", "rsa_pop", "rsa_vote", "entropy_search")
"""The held-out figures of every method, in table order."""
EXTRA = ("part_entropy", "distinct8", "cover4")
"""Held-out figures reported besides (not part of the benchmark keys)."""
EVAL_SEED = 1234
"""Every model is evaluated with this sampling seed (common random numbers make paired differences sharper)."""
POWER = """Measured costs and the sizing they give.

On the current build (``PARTS_FORMAT`` 3; a 2-core AMD EPYC, the default parts build of seed 0), from the
first runs of seed 0, seconds a step (mean of 100 steps): grpo 4.55, grpo8 1.56, aggregator_only 7.0, spiral
8.2, spiral_rsa 7.8; an evaluation on 500 problems about 4.5 minutes, the positive
control about 2 minutes. A seed of all five methods is then about 48 minutes of training and 23 of
evaluation, and the full plan about 3.6 hours with the matched-KL evaluations: in chunks over sessions.
Measured on seed 0, the per-problem paired difference in rsa_pop has a standard deviation of 0.12 to 0.15
(grpo against the start and against grpo8), not the 0.35 assumed below: 500 problems give a standard error of
about 0.007 per seed from problems alone, so the spread between seeds decides the power, as below.

On the earlier build (``PARTS_FORMAT`` 2; 2-core Intel Xeon, the default parts build of seed 0):

Step cost, 8 problems a step, 24 rollouts a problem (3 steps of each method, seconds a step):
grpo 4.0, grpo8 1.4, aggregator_only 11.1, spiral 13.2, spiral_rsa 12.8. A step with aggregations costs
about three times a GRPO step for about the same sampled tokens: half of it is the update, whose forward and
backward passes read the aggregations' 500-token prompts, half the rollouts. (A first measurement gave
aggregator_only 31.8, spiral 29.7 and spiral_rsa 18.9: the graphs' final vote, not trained, compared the
tuples by mathematical equivalence, 80% of a step; the recipes now vote with the task's own equivalence,
``PartsTask.same``.) The positive control (2,000 sets) takes 93 s.

The full plan (5 methods x 3 seeds x 100 steps) is then 100 x 42.5 s x 3 = 3.5 hours of training, plus 16
evaluations on 500 problems and the matched-KL evaluations of runs whose matched step is not their last. On
2 cores it runs in chunks (``--max-minutes``) over several sessions; ``examples/gpu/train_spiral_gpu.sh``
runs it on one GPU.

Power of the primary comparison (RSA population accuracy, spiral - grpo, paired over seeds and problems):
at the start, rsa_pop was 0.094 (on 8 test problems only); taking a per-problem paired difference's standard
deviation as about 0.35 (an assumption, checked on the first seed), 1,500 problem-seed pairs give a standard
error of 0.009 from problems alone. What decides
the power is the spread between training seeds, not yet measured: with 3 seeds, a target difference of
0.05 is detected (two standard errors) only if the between-seed standard deviation of the difference is
below about 0.035. It is estimated from seed 0 and 1; if it is larger, more seeds are added before any
conclusion, and the write-up says so.
"""


@dataclass
class Plan:
    """What one invocation runs; ``key()`` is what a saved piece depends on."""

    methods: list[str]
    seeds: list[int]
    steps: int
    problems_per_step: int
    lr: float
    eval_problems: int
    eval_samples: int
    control_problems: int
    results: Path
    out: Path
    snapshot_every: int = 10
    device: str = "cpu"
    engine: str = "transformers"
    resume: bool = True
    deadline: float = math.inf

    def key(self, base: Path, **more: Any) -> dict[str, Any]:
        fields = ("steps", "problems_per_step", "lr", "eval_problems", "eval_samples")
        return {"base": _fingerprint(base), "eval_seed": EVAL_SEED, **{f: getattr(self, f) for f in fields}, **more}

    def out_of_time(self) -> bool:
        return time.time() > self.deadline


@dataclass
class RunLog:
    """One training run: its per-step records and where its weights are."""

    method: str
    seed: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    scores: dict[str, list[float]] = field(default_factory=dict)
    matched: dict[str, list[float]] = field(default_factory=dict)


def method_recipe(method: str, task: PartsTask) -> Recipe:
    """The recipe of a method on the parts task: 24 rollouts per problem (8 for ``grpo8``)."""
    prompts: dict[str, Any] = {"prompt": PARTS_SOLVE_PROMPT, "aggregate_prompt": PARTS_AGGREGATE_PROMPT,
                               "aggregate_temperature": 1.0, "max_tokens": task.solve_budget(),
                               "equivalence": task.same, "render": task.show_candidates}
    if method in ("grpo", "grpo8"):
        return recipe("grpo", samples=ROLLOUTS[method], **prompts)
    if method == "aggregator_only":
        return recipe("aggregator_only", samples=8, set_size=4, aggregations=8, **prompts)
    if method == "spiral":
        return recipe("spiral", samples=8, sets=4, set_size=4, aggregations=4, **prompts)
    if method == "spiral_rsa":
        return recipe("spiral_rsa", samples=8, set_size=4, rsa_steps=2, **prompts)
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


class Watch:
    """The task's reward, noting what the step's rollouts chose: the parts of candidates, the sets aggregated."""

    def __init__(self, task: PartsTask) -> None:
        self.task = task
        self.answers: dict[str, str | None] = {}
        self.candidates: list[str | None] = []
        self.sets: list[tuple[str, ...]] = []

    def reward(self, trace: Any, reference: str) -> float:
        self.answers[trace.id] = trace.answer
        if trace.inputs:
            self.sets.append(tuple(trace.inputs))
        else:
            self.candidates.append(trace.answer)
        return self.task.reward(trace, reference)

    def take(self) -> dict[str, Any]:
        """The step's part shares of candidates (traces with no inputs), their part entropy (bits), and the mean
        distinct answers among an aggregation's candidates; then forget the step."""
        chosen = Counter(self.task.part_of(a) for a in self.candidates)
        total = max(len(self.candidates), 1)
        shares = {label: chosen.get(label, 0) / total for label in self.task.labels}
        entropy = -sum(v * math.log2(v) for v in shares.values() if v > 0)
        diversity = [len({self.task.vote_key(self.answers.get(i)) for i in s}) for s in self.sets]
        out = {"part_shares": {k: round(v, 4) for k, v in shares.items()}, "part_entropy": round(entropy, 4),
               "set_diversity": round(sum(diversity) / len(diversity), 4) if diversity else None}
        self.answers, self.candidates, self.sets = {}, [], []
        return out


def train_run(base: Path, method: str, seed: int, rows: list[dict[str, str]], plan: Plan, task: PartsTask,
              engine: Any = None) -> RunLog:
    """Train one method from the base weights for ``plan.steps`` steps, resuming from the last checkpoint.

    The per-step records go to ``results/NAME.jsonl`` (truncated to the checkpoint on resume), snapshots of the
    weights every ``snapshot_every`` steps and the checkpoint to ``out/NAME/``.
    """
    import torch

    name = f"{method}-s{seed}"
    work, log = plan.out / name, plan.results / f"{name}.jsonl"
    key = plan.key(base, method=method, seed=seed)
    done = plan.results / f"{name}.done.json"
    if plan.resume and done.exists() and json.loads(done.read_text()).get("key") == key:
        return RunLog(method, seed, _read_jsonl(log))
    checkpoint = work / "checkpoint"
    meta = work / "key.json"
    resumable = (plan.resume and (checkpoint / "policy.json").exists() and meta.exists()
                 and json.loads(meta.read_text()) == key)
    work.mkdir(parents=True, exist_ok=True)
    if resumable:
        policy = Policy.resume(checkpoint)
        print(f"    {name}: resuming after step {policy.steps_done}", flush=True)
    else:
        policy = Policy(base, PolicyConfig(lr=plan.lr, seed=seed, measure_kl=True, measure_kl_every=4,
                                           micro_batch_size=64, device=plan.device))
        meta.write_text(json.dumps(key))
    if engine is not None:
        policy.refresh(engine)  # the engine samples with this run's weights from its first step
    records = _read_jsonl(log)[: policy.steps_done]
    _write_jsonl(log, records)
    chosen = method_recipe(method, task)
    watch = Watch(task)
    config = LoopConfig(steps=plan.steps, problems_per_step=plan.problems_per_step, seed=seed,
                        log_path=str(work / "metrics.jsonl"), checkpoint_dir=str(checkpoint),
                        checkpoint_every=plan.snapshot_every, dataset="parts-train",
                        sampling={"temperature": 1.0, "max_tokens": task.aggregate_budget()},
                        run_name=f"{name}-{key['base'][:8]}", **chosen.loop_options)
    started = time.perf_counter()

    def keep(metrics: StepMetrics) -> None:
        roles = {role: {k: r.get(k) for k in ("zero_advantage", "advantage_abs_mean", "entropy", "kl", "answered")}
                 for role, r in metrics.extra["roles"].items()}
        record = {"step": metrics.step, "reward": metrics.reward_mean, "kl": metrics.kl,
                  "sampled_tokens": metrics.extra["sampled_tokens"], "roles": roles, **watch.take(),
                  "seconds": round(time.perf_counter() - started, 1)}
        with log.open("a") as out:
            out.write(json.dumps(record) + "\n")
        if metrics.step % plan.snapshot_every == 0:
            torch.save({k: v.detach().cpu().clone() for k, v in policy.model.state_dict().items()},
                       work / f"snapshot-{metrics.step}.pt")
        shown = "  ".join(f"{role[:3]} H {r['entropy']:.3f} KL {r['kl'] or 0:.4f}" for role, r in roles.items())
        print(f"    {name} step {metrics.step:3d}  reward {metrics.reward_mean or 0:.3f}  parts "
              + " ".join(f"{k} {v:.2f}" for k, v in record["part_shares"].items()) + f"  {shown}", flush=True)

    train_online(policy, chosen.graph, rows, config, reward=watch.reward, store=None, progress=False, on_step=keep,
                 until=lambda history: plan.out_of_time(), engine=engine)
    if policy.steps_done < plan.steps:
        raise TimeoutError(f"{name} stopped at step {policy.steps_done} of {plan.steps} (--max-minutes)")
    torch.save({k: v.detach().cpu().clone() for k, v in policy.model.state_dict().items()}, work / "final.pt")
    done.write_text(json.dumps({"key": key, "steps": policy.steps_done}))
    return RunLog(method, seed, _read_jsonl(log))


def evaluate(base: Path, weights: Path | None, rows: list[dict[str, str]], plan: Plan) -> dict[str, list[float]]:
    """Per-problem held-out scores of the base model with ``weights`` (``None``: the base weights)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    if weights is not None:
        model.load_state_dict(torch.load(weights, weights_only=True))
    scored = score_parts(model, rows, samples=plan.eval_samples, k=4, rsa_n=8, rsa_steps=2,
                         pass_at=tuple(m for m in (8, 32) if m <= plan.eval_samples), seed=EVAL_SEED,
                         tokenizer=AutoTokenizer.from_pretrained(base))
    return {name: [round(v, 4) for v in values] for name, values in scored.scores.items()}


def positive_control(base: Path, task: PartsTask, problems: int, seed: int = 0) -> dict[str, Any]:
    """The set-level signal of the base model (see the protocol): sets of 4 of its samples, aggregated once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scaffold.pocket._parts_eval import _Sampler
    from scaffold.pocket._prompts import render

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = task.problems(problems, seed=seed, split="validation")
    sampler = _Sampler(model, tokenizer, 1024, seed)
    texts = sampler.run([render(PARTS_SOLVE_PROMPT, r["problem"]) for r in rows for _ in range(8)], temperature=1.0,
                        max_new_tokens=task.solve_budget())
    rng = random.Random(f"control/{seed}")
    sets, members = [], []
    for i in range(len(rows)):
        mine = texts[i * 8:(i + 1) * 8]
        for chosen in ([0, 1, 2, 3], [4, 5, 6, 7], sorted(rng.sample(range(8), 4)), sorted(rng.sample(range(8), 4))):
            sets.append((i, [mine[j] for j in chosen]))
    merged = sampler.run([render(PARTS_AGGREGATE_PROMPT, rows[i]["problem"], group, task.show_candidates)
                          for i, group in sets],
                         temperature=1.0, max_new_tokens=task.aggregate_budget())
    for (i, group), text in zip(sets, merged):
        reference = rows[i]["answer"]
        answers = [extract_boxed(t) for t in group]
        right = [a for a in answers if task.score(a, reference)]
        members.append({"success": task.score(extract_boxed(text), reference, whole=True), "right": len(right),
                        "coverage": len({task.part_of(a) for a in right}),
                        "diversity": len({task.part_of(a) for a in answers} - {None})})
    report = set_signal(members, added=("coverage", "diversity"))
    return report.as_dict()


def summarise(runs: list[RunLog], before: dict[str, list[float]], attr: str = "scores") -> tuple[dict, dict]:
    """Per method: means over seeds and problems, and 95% half-widths (two-level bootstrap)."""
    results: dict[str, Any] = {}
    ci: dict[str, Any] = {}
    before_mean = {m: round(_mean(before[m]), 4) for m in METRICS if m in before}
    before_ci = {m: round(_half(seeds_bootstrap_ci([before[m]])), 4) for m in METRICS if m in before}
    for method in dict.fromkeys(r.method for r in runs):
        mine = [getattr(r, attr) for r in runs if r.method == method and getattr(r, attr)]
        if not mine:
            continue
        results[method] = {"before": before_mean,
                           "after": {m: round(_mean([_mean(s[m]) for s in mine]), 4) for m in METRICS if m in mine[0]}}
        ci[method] = {"before": before_ci,
                      "after": {m: round(_half(seeds_bootstrap_ci([s[m] for s in mine])), 4) for m in METRICS
                                if m in mine[0]}}
    return results, ci


def differences(runs: list[RunLog], before: dict[str, list[float]]) -> dict[str, Any]:
    """Paired differences (same seed, same problem) with 95% intervals: the targets and each method against
    the start."""
    by = {(r.method, r.seed): r.scores for r in runs if r.scores}
    seeds = sorted({r.seed for r in runs})

    def paired(a: str, b: str | None, metric: str) -> dict[str, float] | None:
        rows = []
        for s in seeds:
            if (a, s) not in by or (b is not None and (b, s) not in by) or metric not in by[(a, s)]:
                return None
            other = before[metric] if b is None else by[(b, s)][metric]
            rows.append([x - y for x, y in zip(by[(a, s)][metric], other)])
        mean, low, high = seeds_bootstrap_ci(rows)
        return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}

    methods = list(dict.fromkeys(r.method for r in runs))
    out: dict[str, Any] = {}
    for metric in ("rsa_pop", "rsa_vote", "pass32", "entropy_search", "agg4"):
        out[f"{metric}_minus_grpo"] = {m: d for m in methods if m != "grpo" and (d := paired(m, "grpo", metric))}
    out["rsa_pop_minus_start"] = {m: d for m in methods if (d := paired(m, None, "rsa_pop"))}
    out["agg4_minus_maj4"] = {}
    for m in methods:
        rows = [[x - y for x, y in zip(by[(m, s)]["agg4"], by[(m, s)]["maj4"])] for s in seeds if (m, s) in by]
        if rows:
            mean, low, high = seeds_bootstrap_ci(rows)
            out["agg4_minus_maj4"][m] = {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}
    return out


def matched_kl_step(runs: list[RunLog], plan: Plan) -> tuple[float, dict[tuple[str, int], int]]:
    """The KL every method is compared at (the smallest of the methods' mean final KL) and, per run, the snapshot
    step at which its KL first reaches it (its last snapshot, or its last step, if it never does; 0, the start,
    when no KL was measured at either)."""
    finals = {}
    for method in dict.fromkeys(r.method for r in runs):
        values = [_last_kl(r) for r in runs if r.method == method]
        finals[method] = _mean([v for v in values if v is not None])
    target = min(finals.values())
    steps = {}
    for run in runs:
        last = run.steps[-1]["step"] if run.steps else 0
        snapshots = [s for s in run.steps if (s["step"] % plan.snapshot_every == 0 or s["step"] == last)
                     and s.get("kl") is not None]
        hit = next((s["step"] for s in snapshots if s["kl"] >= target), snapshots[-1]["step"] if snapshots else 0)
        steps[(run.method, run.seed)] = hit
    return target, steps


def _last_kl(run: RunLog) -> float | None:
    values = [s["kl"] for s in run.steps if s.get("kl") is not None]
    return values[-1] if values else None


def cached(path: Path, key: dict[str, Any], plan: Plan, compute: Callable[[], Any]) -> Any:
    """``compute()``, saved as JSON at ``path`` under ``key`` and reused while the key is the same."""
    if plan.resume and path.exists():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved["value"]
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".partial")
    scratch.write_text(json.dumps({"key": key, "value": value}))
    os.replace(scratch, path)
    return value


def parse() -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="every method, one seed, a small plan: under 10 minutes")
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--problems-per-step", type=int)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--eval-problems", type=int)
    parser.add_argument("--eval-samples", type=int)
    parser.add_argument("--control-problems", type=int)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--model-dir", type=Path, help="a parts model directory instead of the cached default build")
    parser.add_argument("--results", type=Path, help="small results (JSON), committed: default "
                                                     "examples/results/train_spiral (quick: out/train_spiral_quick)")
    parser.add_argument("--out", type=Path, help="weights and checkpoints (default out/train_spiral[_quick])")
    parser.add_argument("--max-minutes", type=float, default=math.inf,
                        help="stop cleanly after this long (resume by running the same command again)")
    parser.add_argument("--snapshot-every", type=int, default=10,
                        help="steps between checkpoints and weight snapshots (matched-KL evaluation reads them)")
    parser.add_argument("--device", default="cpu", help="where the policy trains (cuda on a GPU)")
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                        help="rollouts: the live weights in transformers, or a refreshed in-process vLLM engine")
    parser.add_argument("--fresh", action="store_true", help="recompute everything instead of resuming")
    parser.add_argument("--control-only", action="store_true",
                        help="run (or read) the positive control, print it and stop before any method")
    args = parser.parse_args()
    quick = args.quick
    suffix = "_quick" if quick else ""
    plan = Plan(
        methods=args.methods, seeds=args.seeds or ([0] if quick else [0, 1, 2]),
        steps=args.steps or (6 if quick else 100), problems_per_step=args.problems_per_step or (4 if quick else 8),
        lr=args.lr, eval_problems=args.eval_problems or (60 if quick else 500),
        eval_samples=args.eval_samples or 32,
        control_problems=args.control_problems or (200 if quick else 500),
        results=args.results or (Path("out/train_spiral_quick") if quick else Path("examples/results/train_spiral")),
        out=args.out or Path(f"out/train_spiral{suffix}"), resume=not args.fresh, snapshot_every=args.snapshot_every,
        deadline=time.time() + 60 * args.max_minutes, device=args.device, engine=args.engine)
    return args, plan


def main() -> None:
    args, plan = parse()
    started = time.perf_counter()
    base = args.model_dir or parts_model()
    from scaffold.pocket._parts_build import parts_config

    config = parts_config(base)
    task = config.task
    report = json.loads((base / "pocket_report.json").read_text())
    plan.results.mkdir(parents=True, exist_ok=True)
    print(f"parts model {base}: held-out " + "  ".join(f"{k} {v:.3f}" for k, v in report["held_out"].items()
                                                        if k in ("pass1", "pass8", "agg4", "cover4")), flush=True)
    # 1) the positive control
    control = cached(plan.results / "control.json", {"base": _fingerprint(base), "problems": plan.control_problems},
                     plan, lambda: positive_control(base, task, plan.control_problems))
    print(f"positive control ({control['sets']} sets): held-out log-loss gain {control['loglik_gain']:.4f} nats/set, "
          f"likelihood ratio {control['lr_statistic']:.1f} on {control['df']} df, p = {control['p_value']:.2g}; "
          f"success by coverage " + ", ".join(f"{k}: {v['success']:.2f} ({v['sets']})"
                                              for k, v in control["by_feature"]["coverage"].items()), flush=True)
    if args.control_only:
        print(json.dumps({"bench": "train_spiral", "task": task.name, "positive_control": control,
                          "regime": report["in_regime"], "seconds": round(time.perf_counter() - started, 1)}))
        return
    # 2) the start, held out
    held_out = task.problems(plan.eval_problems, seed=0, split="test")
    train_rows = task.problems(max(4000, plan.steps * plan.problems_per_step), seed=1, split="train")
    before = cached(plan.results / "start.test.json", plan.key(base), plan,
                    lambda: evaluate(base, None, held_out, plan))
    print("start (held-out): " + "  ".join(f"{m} {_mean(v):.3f}" for m, v in before.items()), flush=True)
    # 3) the runs, each evaluated when done
    runs: list[RunLog] = []
    engine = None
    if plan.engine == "vllm":
        import scaffold as sf

        engine = sf.VLLMBackend(base, max_model_len=1024)
    try:
        for seed in plan.seeds:
            for method in plan.methods:
                run = train_run(base, method, seed, train_rows, plan, task, engine)
                final = plan.out / f"{method}-s{seed}" / "final.pt"
                run.scores = cached(plan.results / f"{method}-s{seed}.test.json",
                                    plan.key(base, method=method, seed=seed), plan,
                                    partial(evaluate, base, final, held_out, plan))
                runs.append(run)
                print(f"  {method} seed {seed}: " + "  ".join(f"{m} {_mean(run.scores[m]):.3f}" for m in METRICS
                                                              if m in run.scores),
                      flush=True)
                if plan.out_of_time():
                    raise TimeoutError("--max-minutes reached")
        # 4) matched KL
        target, at = matched_kl_step(runs, plan)
        for run in runs:
            step = at[(run.method, run.seed)]
            work = plan.out / f"{run.method}-s{run.seed}"
            last = run.steps[-1]["step"] if run.steps else 0
            if step == last:  # the final weights: already scored
                run.matched = run.scores
                continue
            snapshot = None if step == 0 else work / f"snapshot-{step}.pt"  # 0: no KL measured, the start
            run.matched = cached(plan.results / f"{run.method}-s{run.seed}.matched.test.json",
                                 plan.key(base, method=run.method, seed=run.seed, kl_step=step), plan,
                                 partial(evaluate, base, snapshot, held_out, plan))
    except TimeoutError as stopped:
        print(f"stopped: {stopped}; run the same command again to go on", flush=True)
        return
    results, ci = summarise(runs, before)
    matched, _ = summarise(runs, before, "matched")
    diff = differences(runs, before)
    print()
    print(table(f"held-out, mean ± 95% half-width over {len(plan.seeds)} seed(s) x {plan.eval_problems} problems, "
                f"{plan.steps} steps of {plan.problems_per_step} problems", results, ci))
    print(f"\nat matched KL to the start ({target:.5f}; steps "
          + ", ".join(f"{m} s{s} {step}" for (m, s), step in at.items()) + "):")
    print(table("", matched, {m: {"before": {}, "after": {}} for m in matched}, bare=True))
    print("\npaired differences, mean [95% interval] over seeds and problems:")
    for name, by_method in diff.items():
        for method, d in by_method.items():
            print(f"  {name:<26} {method:<16} {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]")
    kl_final = {m: round(_mean([v for r in runs if r.method == m and (v := _last_kl(r)) is not None]), 6)
                for m in plan.methods}
    summary = {
        "bench": "train_spiral", "task": task.name, "quick": args.quick,
        "positive_control": {k: control[k] for k in ("sets", "loglik_gain", "p_value", "lr_statistic", "df",
                                                     "features", "by_count", "by_feature")},
        "results": results, "ci95": ci, "matched_kl": {m: v["after"] for m, v in matched.items()},
        "matched_kl_target": target, "differences": diff, "seeds": plan.seeds, "steps": plan.steps,
        "problems_per_step": plan.problems_per_step,
        "rollouts_per_problem": {m: ROLLOUTS[m] for m in plan.methods}, "lr": {m: plan.lr for m in plan.methods},
        "kl_final": kl_final, "eval_problems": plan.eval_problems,
        "regime": {k: report["held_out"].get(k) for k in ("pass1", "pass8", "agg4", "cover4", "top_share")},
        "seconds": round(time.perf_counter() - started),
    }
    (plan.results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


def table(title: str, results: dict[str, Any], ci: dict[str, Any], *, bare: bool = False) -> str:
    shown = [m for m in METRICS if any(m in row["after"] for row in results.values())]
    lines = ([title] if title else []) + [f"{'method':<16} " + " ".join(f"{m:>16}" for m in shown)]
    if results and not bare:
        first, first_ci = next(iter(results.values())), next(iter(ci.values()))
        lines.append(f"{'start':<16} " + " ".join(
            f"{first['before'][m]:.3f} ± {first_ci['before'][m]:.3f}".rjust(16) for m in shown))
    for method, row in results.items():
        lines.append(f"{method:<16} " + " ".join(
            (f"{row['after'][m]:.3f}" + (f" ± {ci[method]['after'][m]:.3f}" if not bare else "")).rjust(16)
            for m in shown))
    return "\n".join(lines)


def _fingerprint(base: Path) -> str:
    """The base model a result depends on: its build's config fingerprint and a hash of its weights. The config
    alone is not enough: the same config trains different weights on an Intel and an AMD processor, and a result
    from one must not be resumed or reused on the other. Read once per directory and process (every result's key
    asks for it; the base weights do not change while the experiment runs)."""
    return _fingerprint_of(Path(base).resolve())


@cache
def _fingerprint_of(base: Path) -> str:
    meta = json.loads((base / "scaffold.json").read_text())
    digest = hashlib.sha256()
    for weights in sorted(base.glob("*.safetensors")):
        digest.update(weights.read_bytes())
    return f"{meta.get('fingerprint', base.name)}-{digest.hexdigest()[:12]}"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _half(interval: tuple[float, float, float]) -> float:
    return (interval[2] - interval[1]) / 2


if __name__ == "__main__":
    main()

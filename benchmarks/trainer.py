"""Trainer benchmark: update throughput of ``trainers.policy.Policy`` next to TRL's ``GRPOTrainer``, and credit speed.

Three figures, all on the CPU of whatever machine runs it (the seconds are wall-clock, so other
load shows up in them):
  - ``tokens_per_s``: completion tokens per second of :meth:`Policy.step` (collate, forward,
    backward, gradient clipping and the AdamW step) on the pocket model (the default one; the
    quick one with ``--quick``), full fine-tuning in float32. The batch is built once: the
    ``grpo_group`` graph (8 samples at temperature 1, logprobs recorded) over 8 pocket training
    problems, sampled through ``policy.backend()``, then rewarded (math equivalence) and credited
    with ``assign_credit(..., scheme="grpo")`` run by run: 64 sequences, one optimiser step each.
    One warm-up step, then ``--steps`` timed steps on that same batch, half before TRL's run and
    half after it (so both trainers see the machine's load at several moments); the figure is
    the fastest step's tokens / seconds around the ``step`` call (``tokens_per_s_mean``: total
    tokens / total seconds). The fastest step is the headline because the machine is shared.
  - ``trl_tokens_per_s``: the same for TRL's ``GRPOTrainer`` on the same model directory (loaded
    the same way, float32), with the same 8 prompts (as chat messages, rendered by the tokenizer's
    chat template), ``num_generations=8``, 64 sequences per optimiser step, the same
    ``max_completion_length`` (the pocket evaluation's cap: solution length + 16 tokens, so
    completions end by themselves), the same learning rate, gradient clipping and clip ε, ``beta=0``
    (no reference model, as ours), a math reward (``extract_boxed`` + ``equivalent``), on the CPU,
    no vLLM, no bf16/fp16, no logging, saving or evaluation. TRL generates inside each step: a
    callback times each optimiser step (``on_step_begin`` → ``on_step_end``) and a wrapper times
    ``_generate_and_score_completions`` (generation, decoding, rewards and advantages) inside it;
    the update time is the difference. Tokens are the ``completion_mask`` sums of the generated
    batches. One warm-up step is left out, like ours; the fastest step is the figure, and
    ``trl_tokens_per_s_mean`` the total over all. ``trl_step_tokens_per_s`` is the
    end-to-end figure (generation included) for reference; it is not comparable with ours,
    which excludes sampling. ``ratio`` = ours / TRL update-only (fastest steps; ``ratio_mean``: over all steps),
    measured in the same process.
  - ``advantage_ms_256x24``: best of ``--repeats`` wall times of ``assign_credit(...,
    scheme="spiral")`` on ``trainers.credit_bench.synthetic_spiral_records`` with 256 prompts ×
    (8 search + 4 sets × 4 aggregations) = 6,144 traces. Target: well under a second.

Differences that remain: TRL's batch is its own generation (a similar but not identical number of
completion tokens; the per-token rates absorb that) and its loss is its default (``dapo``) where
ours is the token-normalised clipped loss; both do one forward and one backward per sequence per
step, without a reference model.

Prints the figures, then last one JSON object with them.

Usage: python benchmarks/trainer.py [--quick] [--steps N] [--trl-steps N] [--max-tokens N] [--repeats N] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import graphs
import scaffold as sf
from scaffold.pocket import SOLVE_PROMPT, PocketConfig, pocket_model, pocket_task
from trainers.credit import assign_credit
from trainers.credit_bench import synthetic_spiral_records
from trainers.policy import Policy, PolicyConfig
from trainers.rewards import rewards_from
from trainers.types import Credited

PROBLEMS = 8
SAMPLES = 8
LR = 1e-5


def build_batch(policy: Policy, rows: list[dict[str, str]], max_tokens: int, seed: int) -> list[Credited]:
    """Sample the ``grpo_group`` graph over ``rows`` with the policy's weights, then reward and credit each run."""
    graph = graphs.grpo_group.build(n=SAMPLES, prompt=SOLVE_PROMPT)
    model = sf.Model(policy.backend(max_new_tokens=max_tokens), params={"temperature": 1.0, "max_tokens": max_tokens})
    results = graph.map_sync([{"problem": r["problem"]} for r in rows], models={"solver": model}, store=None,
                             seed=seed, concurrency=len(rows))
    batch: list[Credited] = []
    for result in results:
        traces = [t for t in result.traces if t.kind is sf.TraceKind.MODEL]
        answer = rows[result.index or 0]["answer"]
        batch.extend(assign_credit(traces, rewards_from(traces, answer), scheme="grpo"))
    return batch


def prepare_policy(model_dir: Path, rows: list[dict[str, str]], max_tokens: int, seed: int
                   ) -> tuple[Policy, list[Credited]]:
    """The policy and its fixed batch, after one warm-up step on it."""
    policy = Policy(model_dir, PolicyConfig(lr=LR, seed=seed))
    batch = build_batch(policy, rows, max_tokens, seed)
    policy.step(batch)  # warm-up
    return policy, batch


def time_policy(policy: Policy, batch: list[Credited], steps: int) -> list[tuple[int, float]]:
    """(completion tokens, seconds) of ``steps`` calls of ``Policy.step`` on ``batch``."""
    timed = []
    for _ in range(steps):
        start = time.perf_counter()
        metrics = policy.step(batch)
        timed.append((metrics.tokens, time.perf_counter() - start))
    return timed


def rates(timed: list[tuple[int, float]]) -> tuple[float, float]:
    """Tokens per second of the fastest step, and over all steps together."""
    best = max(tokens / seconds for tokens, seconds in timed)
    return best, sum(t for t, _ in timed) / sum(s for _, s in timed)


def time_trl(model_dir: Path, rows: list[dict[str, str]], max_tokens: int, steps: int, seed: int) -> dict[str, Any]:
    """TRL ``GRPOTrainer`` on the same model and prompts: update-only and end-to-end completion tokens per second."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    def math_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float | None]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [1.0 if sf.equivalent(sf.extract_boxed(t), a) else 0.0 for t, a in zip(texts, answer, strict=True)]

    generation_seconds: list[float] = []
    generated_tokens: list[int] = []
    step_seconds: list[float] = []

    class StepTimer(TrainerCallback):  # type: ignore[misc]
        started = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step_seconds.append(time.perf_counter() - self.started)

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": SOLVE_PROMPT.format(problem=r["problem"])}],
                                  "answer": r["answer"]} for r in rows])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory(prefix="scaffold-trl-bench-") as scratch:
        config = GRPOConfig(
            output_dir=scratch, use_cpu=True, bf16=False, fp16=False, report_to="none", logging_strategy="no",
            save_strategy="no", eval_strategy="no", max_steps=steps + 1, learning_rate=LR,
            lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, epsilon=0.2,
            per_device_train_batch_size=len(rows) * SAMPLES, gradient_accumulation_steps=1,
            num_generations=SAMPLES, max_completion_length=max_tokens, temperature=1.0, beta=0.0,
            use_vllm=False, log_completions=False, disable_tqdm=True, disable_dropout=True, seed=seed,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=math_reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[StepTimer()])
        generate = trainer._generate_and_score_completions

        def timed_generate(inputs: Any) -> Any:
            start = time.perf_counter()
            out = generate(inputs)
            generation_seconds.append(time.perf_counter() - start)
            generated_tokens.append(int(out["completion_mask"].sum().item()))
            return out

        trainer._generate_and_score_completions = timed_generate  # type: ignore[method-assign]
        trainer.train()
    if not (len(step_seconds) == len(generation_seconds) == steps + 1):
        raise RuntimeError(f"expected {steps + 1} timed TRL steps and generations, got {len(step_seconds)} "
                           f"and {len(generation_seconds)}")
    tokens = generated_tokens[1:]
    update = [(t, step - gen) for t, step, gen in zip(tokens, step_seconds[1:], generation_seconds[1:], strict=True)]
    best, mean = rates(update)
    step_best, step_mean = rates(list(zip(tokens, step_seconds[1:], strict=True)))
    return {"tokens_per_s": best, "tokens_per_s_mean": mean, "step_tokens_per_s": step_best,
            "step_tokens_per_s_mean": step_mean, "generation_seconds": sum(generation_seconds[1:]),
            "tokens_per_step": sum(tokens) / steps, "version": trl.__version__}


def time_credit(repeats: int) -> tuple[float, int]:
    """Best wall time (ms) of SPIRAL credit assignment over 256 × 24 synthetic traces, and the trace count."""
    traces, rewards = synthetic_spiral_records(prompts=256, search=8, sets=4, set_size=4, per_set=4)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        assign_credit(traces, rewards, scheme="spiral")
        best = min(best, time.perf_counter() - start)
    return best * 1000, len(traces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick pocket model and fewer steps (a smoke run)")
    parser.add_argument("--steps", type=int, help="timed Policy.step calls (default 6; 4 with --quick)")
    parser.add_argument("--trl-steps", type=int, help="timed GRPOTrainer steps (default 4; 3 with --quick)")
    parser.add_argument("--max-tokens", type=int,
                        help="completion cap for both trainers (default: the pocket eval's, solution length + 16)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the credit timing (best kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    steps = args.steps or (4 if args.quick else 6)
    trl_steps = args.trl_steps or (3 if args.quick else 4)

    model_dir = pocket_model(config=PocketConfig.quick() if args.quick else None, progress=False)
    task = pocket_task(model_dir)
    rows = task.problems(PROBLEMS, seed=args.seed, split="train")
    max_tokens = args.max_tokens or len(task.solution(rows[0]["problem"])) + 16

    credit_ms, credit_traces = time_credit(args.repeats)
    print(f"assign_credit(spiral): {credit_traces} traces in {credit_ms:.1f} ms (best of {args.repeats})")

    policy, batch = prepare_policy(model_dir, rows, max_tokens, args.seed)
    timed = time_policy(policy, batch, (steps + 1) // 2)  # half before TRL's steps, half after
    theirs = time_trl(model_dir, rows, max_tokens, trl_steps, args.seed)
    timed += time_policy(policy, batch, steps // 2)
    best, mean = rates(timed)
    ours = {"tokens_per_s": best, "tokens_per_s_mean": mean, "tokens_per_step": sum(t for t, _ in timed) / steps}
    print(f"Policy.step: {len(batch)} sequences, {ours['tokens_per_step']:.0f} completion tokens per step, "
          f"{best:.0f} tokens/s (fastest of {steps} steps; {mean:.0f} over all)")
    print(f"TRL {theirs['version']} GRPOTrainer: {theirs['tokens_per_step']:.0f} completion tokens per step, "
          f"update {theirs['tokens_per_s']:.0f} tokens/s (fastest of {trl_steps} steps; "
          f"{theirs['tokens_per_s_mean']:.0f} over all), end to end with generation {theirs['step_tokens_per_s']:.0f} "
          f"tokens/s ({theirs['step_tokens_per_s_mean']:.0f} over all)")
    ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
    print(f"update throughput ours / TRL: {ratio:.2f}x (end-to-end TRL includes sampling; ours excludes it)")

    figures = {
        "bench": "trainer",
        "quick": args.quick,
        "model": model_dir.name,
        "task": task.name,
        "sequences": len(batch),
        "max_completion_tokens": max_tokens,
        "steps": steps,
        "trl_steps": trl_steps,
        "tokens_per_step": round(ours["tokens_per_step"], 1),
        "trl_tokens_per_step": round(theirs["tokens_per_step"], 1),
        "tokens_per_s": round(ours["tokens_per_s"], 1),
        "trl_tokens_per_s": round(theirs["tokens_per_s"], 1),
        "tokens_per_s_mean": round(ours["tokens_per_s_mean"], 1),
        "trl_tokens_per_s_mean": round(theirs["tokens_per_s_mean"], 1),
        "trl_step_tokens_per_s": round(theirs["step_tokens_per_s"], 1),
        "trl_generation_seconds": round(theirs["generation_seconds"], 2),
        "ratio": round(ratio, 3),
        "ratio_mean": round(ours["tokens_per_s_mean"] / theirs["tokens_per_s_mean"], 3),
        "trl_version": theirs["version"],
        "advantage_ms_256x24": round(credit_ms, 2),
        "advantage_traces": credit_traces,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""Training a pocket model from scratch: worked solutions and aggregation examples, one readable loop.

The model is a small Qwen2 decoder with untied embeddings (vLLM's in-place weight updates skip a
tied output layer) over the character tokenizer. Every ``aggregate_every``-th step trains on
aggregation examples (problem + four candidates → the correct worked solution), the others on
solving examples (problem → worked solution). The loss is on the answer and its closing
``<|im_end|>`` only. Candidates are right, or wrong the way a small model trained on this task is
wrong (:meth:`~scaffold.pocket.PocketTask.slipped_solution`: a miscopied answer digit, a running
sum off by one, ...), the number of right ones drawn per example: trained on random noise instead,
an aggregator learns to copy a candidate.

Where it departs from a plain fixed-length run: accuracy on this task stays near zero for a few
hundred steps and then climbs within a few dozen, so the loop keeps an exponential moving average
of the weights (which climbs smoothly where the raw weights jump about), checks it on held-out
problems, and stops at the first check that reaches ``stop_at``. The stop depends on the seed,
not on how fast the machine is.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scaffold.pocket.cache import REPORT
from scaffold.pocket.config import FORMAT_VERSION, BuildReport, PocketConfig
from scaffold.pocket.evaluate import check_accuracy, evaluate_pocket
from scaffold.pocket.prompts import aggregate_prompt, encode_example, solve_prompt
from scaffold.pocket.task import PocketTask
from scaffold.pocket.tokenizer import build_tokenizer

EVAL_SEED = 0
"""Seed of the held-out evaluation problems (the same for every build, so builds compare)."""
CHECK_SEED = 1
"""Seed of the held-out problems the stopping check samples (the evaluation problems left out)."""
CANDIDATES = 4
"""Candidates per aggregation training example."""

Example = tuple[list[int], int]
"""Token ids of one example and the position its answer starts at."""


class Examples:
    """An endless, seeded supply of tokenised training examples from the train split."""

    def __init__(self, task: PocketTask, tokenizer: Any, seed: int) -> None:
        self.task = task
        self.tokenizer = tokenizer
        self.rng = random.Random(f"pocket-train/{seed}")
        self.problems = task.stream(self.rng, "train")

    def solving(self, count: int) -> list[Example]:
        """Problem → worked solution."""
        out = []
        for _ in range(count):
            problem = next(self.problems)
            out.append(encode_example(self.tokenizer, solve_prompt(problem), self.task.solution(problem)))
        return out

    def aggregation(self, count: int) -> list[Example]:
        """Problem and four candidates (some right, the rest with one or two slips) → the worked solution."""
        out = []
        for _ in range(count):
            problem = next(self.problems)
            solution = self.task.solution(problem)
            share_right = self.rng.uniform(0.0, 0.8)
            candidates = [
                solution if self.rng.random() < share_right
                else self.task.slipped_solution(problem, self.rng, slips=1 if self.rng.random() < 0.75 else 2)
                for _ in range(CANDIDATES)
            ]
            out.append(encode_example(self.tokenizer, aggregate_prompt(problem, candidates), solution))
        return out


def build_pocket_model(
    out_dir: str | Path, config: PocketConfig | None = None, *, progress: bool = True
) -> BuildReport:
    """Train a pocket model from scratch, save it to ``out_dir`` and evaluate it on held-out problems.

    Saves the model and tokenizer with ``save_pretrained`` (the transformers backend, a vLLM server
    and the trainer all load the directory), ``scaffold.json`` (kind, config, format version) and
    ``pocket_report.json`` (the :class:`BuildReport`). Prints progress and the figures unless
    ``progress=False``. Deterministic given ``config.seed`` and ``config.threads``.

    Example:
        >>> report = build_pocket_model("/tmp/pocket", PocketConfig(max_steps=300))  # doctest: +SKIP
        >>> report.pass1, report.agg4  # doctest: +SKIP
    """
    import torch

    config = config or PocketConfig()
    say: Callable[[str], None] = print if progress else (lambda _: None)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        task = config.task
        tokenizer = build_tokenizer()
        model = new_model(config, tokenizer)
        params = sum(p.numel() for p in model.parameters())
        eval_rows = task.problems(config.eval_problems, seed=EVAL_SEED, split="test")
        say(f"pocket: task {task.name}, {params / 1e6:.2f}M parameters, at most {config.max_steps} steps")
        steps, checks = train(model, tokenizer, config, eval_rows, say)
        train_seconds = time.perf_counter() - started
        stopped = bool(checks) and checks[-1][1] >= config.stop_at
        if not stopped:
            say(f"pocket: no check reached {config.stop_at} in {config.max_steps} steps; keeping the last model")
        out = Path(out_dir)
        save(model, tokenizer, config, out)
        check_saved_tokenizer(tokenizer, out, task)
        say(f"pocket: trained {steps} steps in {train_seconds:.0f} s; evaluating on {len(eval_rows)} problems")
        with _quiet_transformers():
            figures = evaluate_pocket(out, eval_rows, samples=config.eval_samples, k=config.eval_k, seed=config.seed)
    finally:
        torch.set_num_threads(threads)
    s, k = config.eval_samples, config.eval_k
    report = BuildReport(
        build_seconds=time.perf_counter() - started, train_seconds=train_seconds, steps=steps, params=params,
        pass1=figures["pass1"], pass8=figures[f"pass{s}"], maj8=figures[f"maj{s}"], maj4=figures[f"maj{k}"],
        agg4=figures[f"agg{k}"], stopped=stopped, checks=tuple(checks), eval=figures,
    )
    (out / REPORT).write_text(json.dumps(asdict(report), indent=2) + "\n")
    say(format_report(report))
    return report


def format_report(report: BuildReport) -> str:
    """The figures of a build on a few lines."""
    e = report.eval
    return (
        f"pocket: {report.steps} steps, {report.params / 1e6:.2f}M parameters, built in {report.build_seconds:.0f} s "
        f"(training {report.train_seconds:.0f} s)\n"
        f"  held-out, {int(e.get('problems', 0))} problems, temperature 1: pass@1 {report.pass1:.3f}  "
        f"pass@8 {report.pass8:.3f}  maj@8 {report.maj8:.3f}  maj@4 {report.maj4:.3f}  "
        f"agg@4 (greedy, own samples) {report.agg4:.3f}\n"
        f"  speed: {e.get('samples_per_second', 0):.0f} solutions/s, "
        f"{e.get('aggregations_per_second', 0):.0f} aggregations/s"
    )


def new_model(config: PocketConfig, tokenizer: Any) -> Any:
    """A freshly initialised Qwen2 causal LM (untied embeddings) seeded by ``config.seed``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.kv_heads,
        max_position_embeddings=config.max_positions, tie_word_embeddings=False,
        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config.eos_token_id = model_config.eos_token_id
    model.generation_config.pad_token_id = model_config.pad_token_id
    return model


def train(model: Any, tokenizer: Any, config: PocketConfig, eval_rows: list[dict[str, str]],
          say: Callable[[str], None]) -> tuple[int, list[tuple[int, float]]]:
    """The training loop; returns the steps taken and the (step, accuracy) of every check."""
    import torch

    task = config.task
    examples = Examples(task, tokenizer, config.seed)
    held = {row["problem"] for row in eval_rows}
    check_rows = [r for r in task.problems(config.check_problems + len(eval_rows), seed=CHECK_SEED, split="test")
                  if r["problem"] not in held][: config.check_problems]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    average = WeightAverage(model, config.ema_decay)
    checks: list[tuple[int, float]] = []
    model.train()
    step, started = 0, time.perf_counter()
    for step in range(1, config.max_steps + 1):
        # 1) a batch: every few steps an aggregation batch
        every = config.aggregate_every
        if every > 0 and step >= config.aggregate_from and step % every == 0:
            batch = examples.aggregation(config.aggregate_batch_size)
        else:
            batch = examples.solving(config.batch_size)
        # 2) the update, with a linear warm-up
        loss = update(model, optimizer, batch, tokenizer.pad_token_id,
                      config.lr * min(1.0, step / max(1, config.warmup_steps)))
        average.update(step)
        # 3) the stopping check, every few steps once accuracy starts to climb
        climbing = bool(checks) and checks[-1][1] >= config.stop_at / 4
        if step >= config.check_from and step % (config.check_every_close if climbing else config.check_every) == 0:
            with average.swapped_in():
                accuracy = check_accuracy(model, tokenizer, task, check_rows, samples=config.check_samples,
                                          seed=config.seed + step)
            checks.append((step, accuracy))
            say(f"  step {step:5d}  loss {loss:.3f}  check {accuracy:.3f}  {time.perf_counter() - started:.0f} s")
            if accuracy >= config.stop_at:
                break
    average.copy_to_model()
    return step, checks


class WeightAverage:
    """An exponential moving average of the weights: what is checked, saved and evaluated.

    A small batch at a high learning rate moves the raw weights' accuracy up and down by several
    points from one step to the next just as it climbs; the average climbs smoothly, so the
    check that stops training measures the model that is kept.
    """

    def __init__(self, model: Any, decay: float) -> None:
        self.params = [p for p in model.parameters()]
        self.decay = decay
        self.average = [p.detach().clone() for p in self.params]

    def update(self, step: int) -> None:
        import torch

        decay = min(self.decay, (1 + step) / (10 + step))
        with torch.no_grad():
            torch._foreach_lerp_(self.average, [p.detach() for p in self.params], 1 - decay)

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The averaged weights in the model for the duration, the trained ones restored after."""
        import torch

        saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.average)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.params, saved)

    def copy_to_model(self) -> None:
        import torch

        with torch.no_grad():
            torch._foreach_copy_(self.params, self.average)


def update(model: Any, optimizer: Any, batch: list[Example], pad_id: int, lr: float) -> float:
    """One optimiser step on one batch at learning rate ``lr``; returns the loss."""
    import torch

    input_ids, labels = collate(batch, pad_id)
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    value = float(loss.item())
    if not math.isfinite(value):
        raise RuntimeError("the pocket model's loss diverged; lower the learning rate")
    return value


def collate(batch: list[Example], pad_id: int) -> tuple[Any, Any]:
    """Right-padded input ids, and labels that score only the answers (-100 elsewhere)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, (ids, start) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, start : len(ids)] = torch.tensor(ids[start:])
    return input_ids, labels


def check_saved_tokenizer(tokenizer: Any, out: Path, task: PocketTask) -> None:
    """Raise if the tokenizer ``AutoTokenizer`` loads from ``out`` encodes a training example differently."""
    from transformers import AutoTokenizer

    problem = task.draw(random.Random(0))
    user = aggregate_prompt(problem, [task.solution(problem)] * 2)
    loaded = AutoTokenizer.from_pretrained(out)
    if encode_example(loaded, user, task.solution(problem)) != encode_example(tokenizer, user, task.solution(problem)):
        raise RuntimeError(f"the tokenizer loaded from {out} encodes differently from the one trained with")


def save(model: Any, tokenizer: Any, config: PocketConfig, out: Path) -> None:
    """Save model, tokenizer and ``scaffold.json`` into ``out`` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    with _quiet_transformers():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {"kind": "pocket", "format": FORMAT_VERSION, "fingerprint": config.fingerprint(),
            "config": asdict(config)}
    (out / "scaffold.json").write_text(json.dumps(meta, indent=2) + "\n")


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No transformers progress bars for the duration (one tiny shard to write or read: they only clutter)."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()

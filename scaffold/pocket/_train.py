"""Training a pocket model from scratch: worked solutions and aggregation examples, one readable loop.

The model is a small Qwen2 decoder with untied embeddings (vLLM's in-place weight updates skip a
tied output layer) over the character tokenizer. Every ``aggregate_every``-th step trains on
aggregation examples (problem + four candidates → the correct worked solution), the others on
solving examples (problem → worked solution); see :mod:`scaffold.pocket._examples` for where the
candidates come from. The loss is on the answer and its closing ``<|im_end|>`` only.

Where it departs from a plain fixed-length run: accuracy on this task stays near zero for a few
hundred steps and then climbs within a few dozen, at a step that depends on the seed and, through
floating-point details, on the CPU. So the loop keeps an exponential moving average of the weights
(which climbs smoothly where the raw weights jump about), watches its pass@1 on validation
problems, and, while it crosses the band of the aggregation regime, checks it against every
criterion of :class:`~scaffold.pocket.Regime` and keeps the best checkpoint
(:class:`~scaffold.pocket._regime.Selection`). A climb can still cross the band without any
checkpoint meeting the regime (a seed does so on some CPUs and not on others): then the build trains
afresh from a derived seed, up to ``PocketConfig.attempts`` trainings, deciding on validation problems
only. No wall-clock budget is involved anywhere. By default the build runs in portable arithmetic
(:mod:`scaffold.pocket._portable`): pinned kernels, the same model from run to run on one machine,
though not the same on an Intel and an AMD processor (:attr:`BuildReport.cpu` says where it ran).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from scaffold.backends._transformers import quiet_progress
from scaffold.pocket._config import FORMAT_VERSION, REPORT, BuildReport, PocketConfig
from scaffold.pocket._evaluate import check_accuracy, check_figures, evaluate_pocket
from scaffold.pocket._examples import Example, Examples
from scaffold.pocket._portable import arithmetic, build_in_child, cpu_name, in_portable_process, x86_64
from scaffold.pocket._prompts import aggregate_prompt, encode_example
from scaffold.pocket._regime import Selection
from scaffold.pocket._task import PocketTask
from scaffold.pocket._tokenizer import build_tokenizer

EVAL_SEED = 0
"""Seed of the held-out evaluation problems (the same for every build, so builds compare)."""
CHECK_SEED = 1
"""Seed of the validation problems the build's checks read."""


@dataclass
class Trained:
    """What :func:`train` did: steps taken, the climb checks, and the regime checks it chose from."""

    steps: int
    chosen_step: int
    checks: list[tuple[int, float]]
    selection: Selection


def build_pocket_model(
    out_dir: str | Path, config: PocketConfig | None = None, *, progress: bool = True
) -> BuildReport:
    """Train a pocket model from scratch, save it to ``out_dir`` and evaluate it on held-out problems.

    Saves the model and tokenizer with ``save_pretrained`` (the transformers backend, a vLLM server
    and the trainer all load the directory), ``scaffold.json`` (kind, config, format version) and
    ``pocket_report.json`` (the :class:`BuildReport`). Prints progress and the figures unless
    ``progress=False``. Deterministic on one machine given ``config.seed`` and ``config.threads``;
    with ``config.portable`` (the default) the build runs in a child process with pinned kernels
    (see :mod:`scaffold.pocket._portable`).

    Examples:
        >>> report = build_pocket_model("/tmp/pocket", PocketConfig(max_steps=300))  # doctest: +SKIP
        >>> report.pass1, report.agg4  # doctest: +SKIP
    """
    config = config or PocketConfig()
    if config.attempts < 1:
        raise ValueError(f"PocketConfig.attempts must be at least 1, not {config.attempts}")
    config.task  # noqa: B018 (a bad task raises here, before any child starts)
    if config.portable and x86_64() and not in_portable_process():
        if importlib.util.find_spec("torch") is None:  # said here, as a missing module, not by the child
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return BuildReport.from_dict(build_in_child(Path(out_dir), config, progress=progress))
    import torch  # here, not above: a portable build's parent never needs it

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
        looked = max(config.check_problems, config.select_problems)
        validation = task.problems(looked + config.confirm_problems, seed=CHECK_SEED, split="validation")
        validation, confirming = validation[:looked], validation[looked:]  # the first ``looked`` of one draw
        say(f"pocket: task {task.name}, {params / 1e6:.2f}M parameters, at most {config.max_steps} steps")
        attempt, seeded = 0, config
        trained = train(model, tokenizer, seeded, validation, say)
        confirmation = confirm(model, tokenizer, seeded, confirming, trained, say)
        while not landed(config, trained, confirmation) and attempt + 1 < config.attempts:
            attempt += 1
            seeded = replace(config, seed=config.seed + 1000 * attempt)
            say(f"pocket: no checkpoint landed in the regime on validation; training afresh from seed {seeded.seed}")
            model = new_model(seeded, tokenizer)
            trained = train(model, tokenizer, seeded, validation, say)
            confirmation = confirm(model, tokenizer, seeded, confirming, trained, say)
        train_seconds = time.perf_counter() - started
        out = Path(out_dir)
        save(model, tokenizer, config, out)
        check_saved_tokenizer(tokenizer, out, task)
        say(f"pocket: trained {trained.steps} steps in {train_seconds:.0f} s, kept step {trained.chosen_step}; "
            f"evaluating on {len(eval_rows)} problems")
        with quiet_progress():
            figures = evaluate_pocket(out, eval_rows, samples=config.eval_samples, k=config.eval_k, seed=config.seed)
    finally:
        torch.set_num_threads(threads)
    s, k = config.eval_samples, config.eval_k
    held_out = {"pass1": figures["pass1"], "pass8": figures[f"pass{s}"], "maj8": figures[f"maj{s}"],
                "maj4": figures[f"maj{k}"], "agg4": figures[f"agg{k}"]}
    misses = config.regime.failures(held_out)
    report = BuildReport(
        build_seconds=time.perf_counter() - started, train_seconds=train_seconds, steps=trained.steps, params=params,
        **held_out, in_regime=not misses, chosen_step=trained.chosen_step, checks=tuple(trained.checks),
        selection=tuple((c.step, c.figures) for c in trained.selection.checkpoints), eval=figures,
        attempts=attempt + 1, trained_seed=seeded.seed, confirmation=confirmation, arithmetic=arithmetic(),
        cpu=cpu_name(),
    )
    (out / REPORT).write_text(json.dumps(asdict(report), indent=2) + "\n")
    say(format_report(report))
    if misses:
        say("pocket: warning: held-out figures outside the aggregation regime: " + "; ".join(misses))
    return report


def confirm(model: Any, tokenizer: Any, config: PocketConfig, rows: list[dict[str, str]], trained: Trained,
            say: Callable[[str], None]) -> dict[str, float]:
    """The kept checkpoint's figures on validation problems selection never read (``{}`` with none to read)."""
    if not rows or not trained.selection.eligible:
        return {}
    figures = check_figures(model, tokenizer, config.task, rows, seed=config.seed + 7)
    shown = "  ".join(f"{name} {figures[name]:.3f}" for name in ("pass1", "pass8", "maj8", "maj4", "agg4"))
    misses = config.regime.failures(figures)
    say(f"  confirmed step {trained.chosen_step} on {len(rows)} fresh validation problems: {shown}"
        + (f"  (misses: {'; '.join(misses)})" if misses else ""))
    return figures


def landed(config: PocketConfig, trained: Trained, confirmation: dict[str, float]) -> bool:
    """Whether a training kept a checkpoint eligible on validation that also meets the regime on confirmation."""
    if not trained.selection.eligible:
        return False
    return config.confirm_problems == 0 or config.regime.holds(confirmation)


def format_report(report: BuildReport) -> str:
    """The figures of a build on a few lines."""
    e = report.eval
    return (
        f"pocket: kept step {report.chosen_step} of {report.steps}"
        + (f" (training {report.attempts}, seed {report.trained_seed})" if report.attempts > 1 else "")
        + f", {report.params / 1e6:.2f}M parameters, "
        f"built in {report.build_seconds:.0f} s (training {report.train_seconds:.0f} s)"
        + (f" on {report.cpu}" if report.cpu else "")
        + f"\n  held-out, {int(e.get('problems', 0))} problems, temperature 1: pass@1 {report.pass1:.3f}  "
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


def train(model: Any, tokenizer: Any, config: PocketConfig, validation: list[dict[str, str]],
          say: Callable[[str], None]) -> Trained:
    """The training loop (see :class:`PocketConfig` for its two phases); leaves the kept weights in ``model``."""
    import torch

    task = config.task
    examples = Examples(task, tokenizer, config.seed, own_share=config.own_share)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95),
                                  weight_decay=config.weight_decay)
    average = WeightAverage(model, config.ema_decay)
    selection = Selection(config.regime, margin=config.select_margin, target_pass1=config.target_pass1,
                          after_eligible=config.select_after_eligible, max_checks=config.select_max_checks)
    checks: list[tuple[int, float]] = []
    accuracy, selecting, gated = 0.0, False, 0
    model.train()
    step, started = 0, time.perf_counter()
    for step in range(1, config.max_steps + 1):
        # 1) the model's own candidates, once it answers some problems
        if config.own_share > 0 and accuracy >= config.own_from and not examples.pool:
            with average.swapped_in():
                examples.refill(model, config.own_pool, seed=config.seed * 100_003 + step)
        # 2) a batch: every few steps an aggregation batch
        every = config.aggregate_every
        if every > 0 and step % every == 0:
            batch = examples.aggregation(config.aggregate_batch_size)
        else:
            batch = examples.solving(config.batch_size)
        # 3) the update: a linear warm-up, a lower rate while selecting
        lr = config.lr * min(1.0, step / max(1, config.warmup_steps)) * (config.select_lr_scale if selecting else 1)
        loss = update(model, optimizer, batch, tokenizer.pad_token_id, lr)
        average.update(step)
        # 4) climb: pass@1 of the average; select: every criterion of the regime
        elapsed = time.perf_counter() - started
        if selecting and step % config.select_every == 0 and config.select_gate and below_band(
                model, tokenizer, config, validation, average, step, checks):
            accuracy, gated = checks[-1][1], gated + 1
            say(f"  step {step:5d}  loss {loss:.3f}  pass1 {accuracy:.3f}  (below the band: no regime check)  "
                f"{elapsed:.0f} s")
            if gated + len(selection.checkpoints) >= config.select_max_checks:  # a climb stalled under the band
                break
        elif selecting and step % config.select_every == 0:
            with average.swapped_in():
                figures = check_figures(model, tokenizer, task, validation[: config.select_problems],
                                        seed=config.seed + step)
            selection.add(step, figures, average.snapshot())
            accuracy = figures["pass1"]
            shown = "  ".join(f"{name} {figures[name]:.3f}" for name in ("pass1", "pass8", "maj8", "maj4", "agg4"))
            say(f"  step {step:5d}  loss {loss:.3f}  {shown}  {elapsed:.0f} s")
            if selection.done:
                break
        elif not selecting and step >= config.check_from and step % (
                config.check_every * (1 if accuracy >= config.own_from else 2)) == 0:
            with average.swapped_in():
                accuracy = check_accuracy(model, tokenizer, task, validation[: config.check_problems],
                                          samples=config.check_samples, seed=config.seed + step)
            checks.append((step, accuracy))
            say(f"  step {step:5d}  loss {loss:.3f}  pass1 {accuracy:.3f}  {elapsed:.0f} s")
            selecting = accuracy >= config.select_from
    chosen = selection.choose()
    average.copy_to_model(chosen.weights if chosen is not None else None)
    return Trained(steps=step, chosen_step=chosen.step if chosen is not None else step, checks=checks,
                   selection=selection)


def below_band(model: Any, tokenizer: Any, config: PocketConfig, validation: list[dict[str, str]],
               average: WeightAverage, step: int, checks: list[tuple[int, float]]) -> bool:
    """Whether the average's climb-sized pass@1 (recorded in ``checks``) is still under the regime's band.

    Returns ``False`` (go on to the regime check) without checking once a check has read the band:
    the climb only rises from there.
    """
    if checks and checks[-1][1] >= config.regime.pass1_low:
        return False
    with average.swapped_in():
        accuracy = check_accuracy(model, tokenizer, config.task, validation[: config.check_problems],
                                  samples=config.check_samples, seed=config.seed + step)
    checks.append((step, accuracy))
    return accuracy < config.regime.pass1_low


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

    def snapshot(self) -> list[Any]:
        """A copy of the averaged weights (for :meth:`copy_to_model` later)."""
        return [p.clone() for p in self.average]

    def copy_to_model(self, weights: list[Any] | None = None) -> None:
        """Put the averaged weights (or a :meth:`snapshot` of them) into the model."""
        import torch

        with torch.no_grad():
            torch._foreach_copy_(self.params, self.average if weights is None else weights)


def update(model: Any, optimizer: Any, batch: list[Example], pad_id: int, lr: float) -> float:
    """One optimiser step on one batch at learning rate ``lr``; returns the loss."""
    return update_together(model, optimizer, [batch], pad_id, lr)


def update_together(model: Any, optimizer: Any, batches: list[list[Example]], pad_id: int, lr: float) -> float:
    """One optimiser step on several batches at once (each padded on its own, so short examples are not padded to
    long ones): the mean loss over every answer token of them all, as one batch would give; returns it.

    Examples:
        >>> update_together(model, optimizer, [solving, aggregating], pad_id, 3e-3)  # doctest: +SKIP
    """
    import torch

    for group in optimizer.param_groups:
        group["lr"] = lr
    collated = [collate(batch, pad_id) for batch in batches if batch]
    # a causal LM scores token t+1 from position t: the answer tokens counted are the labels after the first column
    counts = [int((labels[:, 1:] != -100).sum()) for _, labels in collated]
    total = max(1, sum(counts))
    value = 0.0
    for (input_ids, labels), count in zip(collated, counts):
        loss = model(input_ids=input_ids, labels=labels).loss * (count / total)
        loss.backward()
        value += float(loss.item())
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
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
    save_built(model, tokenizer, out, kind="pocket", version=FORMAT_VERSION, fingerprint=config.fingerprint(),
               config=asdict(config))


def save_built(model: Any, tokenizer: Any, out: str | Path, *, kind: str, version: int, fingerprint: str,
               config: dict[str, Any]) -> Path:
    """Save a model scaffold built (``save_pretrained``) with ``scaffold.json`` saying what it is and how it was
    built (its kind, format version, config fingerprint and config); ``out`` is created if missing."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with quiet_progress():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {"kind": kind, "format": version, "fingerprint": fingerprint, "config": config}
    (out / "scaffold.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out

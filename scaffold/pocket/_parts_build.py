"""Building the parts model: a pocket model trained from scratch on the parts task (:mod:`scaffold.pocket._parts`).

It learns two things: to *solve* (the problem → one part, worked and boxed) and to *aggregate* (the problem and
four candidates' boxed tuples → the whole tuple, copying what the candidates give and working one part they lack).
The candidates of an aggregation example are written by the task itself: each works a part drawn from a
per-example mix (so every kind of coverage occurs), right or with a slip; a share of the examples reads whole
tuples instead (what the second step of Recursive Self-Aggregation reads).

Training has two phases. First it only solves, every part equally often (:attr:`PartsConfig.learn_choice`), until a
check on validation problems (:func:`~scaffold.pocket._parts_eval.score_parts`, every ``check_every`` steps
from ``check_from``) finds each part right at least ``part_floor`` of the time. Then every step trains on solving
and aggregation examples together (one optimiser step over both, :func:`~scaffold.pocket._train.update_together`):
solving examples work the parts with the skewed probabilities :attr:`PartsConfig.choice` (the easy part most
often) and carry a slip at each part's rate :attr:`PartsConfig.slips` (the hard part most often), and from
``skew_steps`` on every check is measured against the regime (:class:`PartsRegime`); training ends at the first
check inside it with its margin. The build keeps that weight average, or, when no check landed by ``max_steps``,
trains afresh from a derived seed (``attempts``) and keeps the check that missed the fewest criteria. It trains in
this process's native arithmetic: an Intel and an AMD processor build different models.

Why this schedule, measured on a 2-core AMD EPYC: with one aggregation step in three from the start, no part was
right more than 12% of the time at step 1,050; solving alone learned every part (each right at least 77% of the
time) by step 800. Aggregation steps that alternate with solving steps then unlearned the solving (part B right 1%
of the time, 100 steps after they began) before both came back; trained together in one step, they do not pull
the weights to and fro.

Examples:
    >>> PartsConfig().task.name
    'parts-2.3.4x2'
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from scaffold.pocket._cache import cache_root, cached_build
from scaffold.pocket._config import REPORT, PocketConfig
from scaffold.pocket._parts import PartsTask
from scaffold.pocket._parts_eval import score_parts
from scaffold.pocket._prompts import PARTS_AGGREGATE_PROMPT, PARTS_SOLVE_PROMPT, encode_example, render

PARTS_FORMAT = 3
"""Bumped whenever the task text, prompts or training change what a parts build produces."""


@dataclass(frozen=True, kw_only=True)
class PartsRegime:
    """Where a parts model must land for set-level credit to have something to act on (fractions in [0, 1]).

    - ``pass1`` (the share of candidates whose part is right) in ``[pass1_low, pass1_high]``;
    - the most chosen part's share in ``[top_low, top_high]``: sets of its samples start redundant;
    - every part chosen at least ``min_share`` of the time: there is a choice to learn;
    - ``cover4`` (groups of four whose right members cover every part) at most ``cover_high``: coverage is
      often missing, so a candidate supplying the missing part can matter;
    - ``agg4`` at least ``agg_low``: the aggregator works.

    Examples:
        >>> PartsRegime().failures({"pass1": 0.6, "top_share": 0.6, "min_share": 0.1, "cover4": 0.3, "agg4": 0.4})
        []
    """

    pass1_low: float = 0.35
    pass1_high: float = 0.92
    top_low: float = 0.45
    top_high: float = 0.85
    min_share: float = 0.03
    cover_high: float = 0.6
    agg_low: float = 0.2

    def failures(self, figures: Mapping[str, float], *, margin: float = 0.0) -> list[str]:
        """The criteria ``figures`` miss, in words (empty: it is in the regime), each tightened by ``margin``."""
        out = []
        p1, top, low, cover, agg = (figures[k] for k in ("pass1", "top_share", "min_share", "cover4", "agg4"))
        if not self.pass1_low + margin <= p1 <= self.pass1_high - margin:
            out.append(f"pass1 {p1:.3f} outside [{self.pass1_low + margin:.3f}, {self.pass1_high - margin:.3f}]")
        if not self.top_low + margin <= top <= self.top_high - margin:
            out.append(f"top part share {top:.3f} outside [{self.top_low + margin:.3f}, {self.top_high - margin:.3f}]")
        if low < self.min_share:
            out.append(f"a part chosen {low:.3f} < {self.min_share:.3f} of the time")
        if cover > self.cover_high - margin:
            out.append(f"cover4 {cover:.3f} > {self.cover_high - margin:.3f}")
        if agg < self.agg_low + margin:
            out.append(f"agg4 {agg:.3f} < {self.agg_low + margin:.3f}")
        return out

    def holds(self, figures: Mapping[str, float], *, margin: float = 0.0) -> bool:
        return not self.failures(figures, margin=margin)


@dataclass(frozen=True, kw_only=True)
class PartsConfig:
    """Everything that decides a parts model build: the task, the skew of the part choice, size and schedule."""

    digits: tuple[int, ...] = (2, 3, 4)
    """Digits of each part's numbers (see :class:`~scaffold.pocket.PartsTask`)."""
    terms: int = 2
    choice: tuple[float, ...] = (0.65, 0.25, 0.1)
    """How often solving examples work each part once every part is learned (the second phase): the easy part most
    often, so the built model's sets are redundant."""
    slips: tuple[float, ...] = (0.2, 0.4, 0.6)
    """Per part, the share of its solving examples that carry a slip (:meth:`PartsTask.part_solution`) in the second
    phase: the parts differ in difficulty by design, so a candidate of the built model is wrong about as often as
    this on top of its own mistakes, whatever step its accuracy climbed at."""
    learn_choice: tuple[float, ...] = ()
    """How often solving examples work each part while the parts are learned (the first phase; empty: equally)."""
    part_floor: float = 0.3
    """The first phase (solving only) ends at the first check where every part is right at least this often."""
    skew_steps: int = 200
    """Steps of the second phase before its first check."""
    tuple_share: float = 0.25
    """Share of aggregation examples whose candidates are whole tuples (RSA's later steps) instead of parts."""
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 1024
    seed: int = 0
    threads: int = 2
    max_steps: int = 3000
    batch_size: int = 32
    """Solving examples in every step."""
    aggregate_batch_size: int = 16
    """Aggregation examples in every step of the second phase, trained together with the solving ones (one
    optimiser step over both)."""
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.1
    ema_decay: float = 0.98
    check_from: int = 500
    check_every: int = 100
    check_problems: int = 48
    margin: float = 0.03
    attempts: int = 2
    regime: PartsRegime = field(default_factory=PartsRegime)
    eval_problems: int = 200

    @classmethod
    def quick(cls, **overrides: Any) -> PartsConfig:
        """A seconds-sized build (0.14M parameters, a few hundred steps) for tests and smoke runs: it runs every stage
        of the build (its second phase from the first check on, whatever the parts score) but is not trained long
        enough to land in the regime."""
        values: dict[str, Any] = dict(hidden_size=64, layers=3, heads=2, kv_heads=2, intermediate_size=128,
                                      max_steps=200, check_from=100, check_every=100, check_problems=16, attempts=1,
                                      part_floor=0.0, skew_steps=50,
                                      eval_problems=32, batch_size=16, aggregate_batch_size=8)
        return cls(**{**values, **overrides})

    @property
    def task(self) -> PartsTask:
        return PartsTask(digits=tuple(self.digits), terms=self.terms)

    def fingerprint(self) -> str:
        """A short hash of the config and :data:`PARTS_FORMAT`: the cache directory's name (after ``parts-``)."""
        text = json.dumps({"parts_format": PARTS_FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartsConfig:
        """The config ``asdict`` wrote (``scaffold.json`` holds one)."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}  # a field an older format had: dropped
        for name in ("digits", "choice", "learn_choice", "slips"):
            values[name] = tuple(values.get(name, ()))
        if isinstance(values.get("regime"), dict):
            values["regime"] = PartsRegime(**values["regime"])
        return cls(**values)

    def model_config(self, seed: int) -> PocketConfig:
        return PocketConfig(hidden_size=self.hidden_size, layers=self.layers, heads=self.heads, kv_heads=self.kv_heads,
                            intermediate_size=self.intermediate_size, max_positions=self.max_positions, seed=seed)


@dataclass(frozen=True, kw_only=True)
class PartsReport:
    """What a parts build did, and how the saved model does on held-out problems."""

    build_seconds: float
    train_seconds: float
    steps: int
    params: int
    in_regime: bool
    held_out: dict[str, float]
    """:func:`~scaffold.pocket._parts_eval.score_parts` means on ``eval_problems`` test problems (8 candidates each)."""
    shares: dict[str, float]
    """How often the held-out candidates chose each part."""
    accuracy: dict[str, float]
    """Per part, how often the held-out candidates that chose it were right."""
    checks: tuple[tuple[int, dict[str, float]], ...] = ()
    parts_learned_at: int | None = None
    """The step of the check that found every part learned, where the second phase began (``None``: never)."""
    attempts: int = 1
    trained_seed: int = 0
    cpu: str = ""


class PartsExamples:
    """An endless, seeded supply of tokenised training examples of the parts task (train split)."""

    def __init__(self, config: PartsConfig, tokenizer: Any, seed: int) -> None:
        self.config, self.task, self.tokenizer = config, config.task, tokenizer
        self.rng = random.Random(f"parts-train/{seed}")
        self.problems: Iterator[str] = self.task.stream(self.rng, "train")
        self.slips = dict.fromkeys(self.task.labels, 0.0)
        """Per part, the share of :meth:`solving` examples with a slip (the build sets it between its phases)."""
        self.choice: tuple[float, ...] = tuple(config.choice)
        """How often :meth:`solving` works each part (the build changes it between its phases)."""

    def solving(self, count: int) -> list[tuple[list[int], int]]:
        """Problem → one part, chosen with :attr:`choice`, worked and boxed."""
        out = []
        for _ in range(count):
            problem = next(self.problems)
            label = self.rng.choices(self.task.labels, weights=self.choice)[0]
            slipped = self.rng.random() < self.slips[label]
            out.append(encode_example(self.tokenizer, render(PARTS_SOLVE_PROMPT, problem),
                                      self.task.part_solution(problem, label, rng=self.rng, slips=int(slipped))))
        return out

    def aggregation(self, count: int) -> list[tuple[list[int], int]]:
        """Problem and four candidates → what :meth:`PartsTask.aggregation` writes."""
        out = []
        for _ in range(count):
            problem = next(self.problems)
            texts = self.candidates(problem)
            user = render(PARTS_AGGREGATE_PROMPT, problem, texts, self.task.show_candidates)
            out.append(encode_example(self.tokenizer, user, self.task.aggregation(problem, texts)))
        return out

    def candidates(self, problem: str, count: int = 4, *, tuples: bool = True) -> list[str]:
        """Candidates working parts drawn from a per-example mix, right or with a slip; or (``tuples``) whole tuples
        aggregated from such candidates."""
        rng, task = self.rng, self.task
        if tuples and rng.random() < self.config.tuple_share:
            return [task.aggregation(problem, self.candidates(problem, tuples=False)) for _ in range(count)]
        weights = [rng.random() ** 2 for _ in task.labels]
        right = rng.uniform(0.3, 1.0)
        labels = rng.choices(task.labels, weights=weights, k=count)
        return [task.part_solution(problem, label, rng=rng, slips=0 if rng.random() < right else 1)
                for label in labels]


def build_parts_model(out_dir: str | Path, config: PartsConfig | None = None, *, progress: bool = True) -> PartsReport:
    """Train a parts model from scratch, save it to ``out_dir`` and measure it on held-out problems.

    Saves the model and tokenizer (``save_pretrained``), ``scaffold.json`` (kind ``pocket-parts``) and
    ``pocket_report.json`` (the :class:`PartsReport`).

    Examples:
        >>> report = build_parts_model("/tmp/parts")  # doctest: +SKIP
        >>> report.shares  # doctest: +SKIP
    """
    import torch

    from scaffold.pocket._portable import cpu_name
    from scaffold.pocket._tokenizer import build_tokenizer
    from scaffold.pocket._train import new_model, save_built

    config = config or PartsConfig()
    for name in ("choice", "slips", "learn_choice"):
        given = getattr(config, name)
        if given and len(given) != len(config.digits):
            raise ValueError(f"{name} has {len(given)} values for {len(config.digits)} parts")
    say: Callable[[str], None] = print if progress else (lambda _: None)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        task, tokenizer = config.task, build_tokenizer()
        validation = task.problems(config.check_problems, seed=1, split="validation")
        params = sum(p.numel() for p in new_model(config.model_config(config.seed), tokenizer).parameters())
        say(f"parts model: task {task.name}, {params / 1e6:.2f}M parameters, at most {config.max_steps} steps")
        attempt, seed = 0, config.seed
        while True:
            model, step, checks, landed, learned_at = train(config, tokenizer, validation, seed, say)
            if landed or attempt + 1 >= config.attempts:
                break
            attempt += 1
            seed = config.seed + 1000 * attempt
            say(f"parts model: no check landed in the regime; training afresh from seed {seed}")
        train_seconds = time.perf_counter() - started
        out = save_built(model, tokenizer, out_dir, kind="pocket-parts", version=PARTS_FORMAT,
                         fingerprint=config.fingerprint(), config=asdict(config))
        rows = task.problems(config.eval_problems, seed=0, split="test")
        scored = score_parts(model, rows, samples=8, seed=config.seed, tokenizer=tokenizer)
    finally:
        torch.set_num_threads(threads)
    held_out = {**scored.means(), **_choice_figures(scored.shares)}
    report = PartsReport(build_seconds=time.perf_counter() - started, train_seconds=train_seconds, steps=step,
                         params=params, in_regime=config.regime.holds(held_out), held_out=held_out,
                         shares=scored.shares, accuracy=scored.accuracy, checks=tuple(checks),
                         parts_learned_at=learned_at,
                         attempts=attempt + 1, trained_seed=seed, cpu=cpu_name())
    (out / REPORT).write_text(json.dumps(asdict(report), indent=2) + "\n")
    say(f"parts model: held-out ({len(rows)} problems): " + _shown(held_out) + "; parts chosen "
        + ", ".join(f"{k} {v:.2f}" for k, v in scored.shares.items()) + "; right per part "
        + ", ".join(f"{k} {v:.2f}" for k, v in scored.accuracy.items())
        + f"; built in {report.build_seconds:.0f} s" + ("" if report.in_regime else " (outside the regime)"))
    return report


def train(config: PartsConfig, tokenizer: Any, validation: Sequence[dict[str, str]], seed: int,
          say: Callable[[str], None]) -> tuple[Any, int, list[tuple[int, dict[str, float]]], bool, int | None]:
    """One training from ``seed`` in two phases (see :class:`PartsConfig`); returns the model (holding the weights
    kept), the steps, the checks, whether a check landed in the regime and the step the second phase began at."""
    import torch

    from scaffold.pocket._train import WeightAverage, new_model, update_together

    model = new_model(config.model_config(seed), tokenizer)
    examples = PartsExamples(config, tokenizer, seed)
    examples.choice = config.learn_choice or tuple(1.0 for _ in config.digits)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay)
    average = WeightAverage(model, config.ema_decay)
    checks: list[tuple[int, dict[str, float]]] = []
    kept: tuple[int, list[Any]] | None = None
    skewed_at: int | None = None
    model.train()
    step, started = 0, time.perf_counter()
    for step in range(1, config.max_steps + 1):
        batches = [examples.solving(config.batch_size)]
        if skewed_at is not None:
            batches.append(examples.aggregation(config.aggregate_batch_size))
        loss = update_together(model, optimizer, batches, tokenizer.pad_token_id,
                               config.lr * min(1.0, step / max(1, config.warmup_steps)))
        average.update(step)
        due = step % config.check_every == 0 and (
            step >= config.check_from if skewed_at is None else step - skewed_at >= config.skew_steps)
        if not due:
            continue
        with average.swapped_in():
            scored = score_parts(model, validation, samples=8, seed=seed + step, tokenizer=tokenizer)
        figures = {**scored.means(), **_choice_figures(scored.shares),
                   **{f"right_{label}": value for label, value in scored.accuracy.items()}}
        checks.append((step, figures))
        elapsed = time.perf_counter() - started
        if skewed_at is None:
            # 1) learning every part: does each get its part right often enough?
            learned = min(scored.accuracy.values()) >= config.part_floor
            say(f"  step {step:5d}  loss {loss:.3f}  {_shown(figures)}  right per part "
                + " ".join(f"{k} {v:.2f}" for k, v in scored.accuracy.items()) + f"  {elapsed:.0f} s"
                + ("  (every part learned: skewing the choice, training the aggregator)" if learned else ""))
            if learned:
                skewed_at, examples.choice = step, config.choice
                examples.slips = dict(zip(examples.task.labels, config.slips or (0.0,) * len(config.digits)))
            continue
        # 2) the skewed choice: keep the first check inside the regime
        misses = config.regime.failures(figures, margin=config.margin)
        say(f"  step {step:5d}  loss {loss:.3f}  {_shown(figures)}  {elapsed:.0f} s"
            + (f"  (misses: {'; '.join(misses)})" if misses else "  in the regime"))
        if kept is None or len(misses) < kept[0]:  # the check missing the fewest criteria so far
            kept = (len(misses), average.snapshot())
        if not misses:
            break
    landed = kept is not None and kept[0] == 0
    average.copy_to_model(kept[1] if kept is not None else None)
    return model, step, checks, landed, skewed_at


def parts_model(cache_dir: str | Path | None = None, *, config: PartsConfig | None = None, rebuild: bool = False,
                progress: bool = True) -> Path:
    """The directory of the parts model for ``config`` (the default one if ``None``), built on first use.

    It is ``<cache>/pocket/parts-<fingerprint>`` (see :func:`~scaffold.pocket.cache_root`).

    Examples:
        >>> from scaffold.pocket import parts_model
        >>> path = parts_model()  # doctest: +SKIP
    """
    config = config or PartsConfig()
    target = cache_root(cache_dir) / f"parts-{config.fingerprint()}"
    return cached_build(target, lambda building: build_parts_model(building, config, progress=progress),
                        rebuild=rebuild)


def parts_config(path: str | Path) -> PartsConfig:
    """The :class:`PartsConfig` a parts model directory was built with (``ValueError`` if it is not one)."""
    meta_path = Path(path) / "scaffold.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} is not a model directory scaffold built: it has no scaffold.json") from None
    if meta.get("kind") != "pocket-parts":
        raise ValueError(f"{meta_path}: kind is {meta.get('kind')!r}, not 'pocket-parts'")
    return PartsConfig.from_dict(meta["config"])


def _choice_figures(shares: Mapping[str, float]) -> dict[str, float]:
    chosen = [v for k, v in shares.items() if k != "none"]
    return {"top_share": max(chosen), "min_share": min(chosen)}


def _shown(figures: Mapping[str, float]) -> str:
    names = ("pass1", "pass8", "maj4", "agg4", "cover4", "top_share", "min_share", "part_entropy")
    return "  ".join(f"{n} {figures[n]:.3f}" for n in names if n in figures)


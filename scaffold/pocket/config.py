"""What a pocket model build is made of (:class:`PocketConfig`) and what it measured (:class:`BuildReport`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from scaffold.pocket.task import PocketTask

FORMAT_VERSION = 1
"""Bumped whenever the task text, prompts, tokenizer or training code change what a build produces."""


@dataclass(frozen=True, kw_only=True)
class PocketConfig:
    """Everything that decides a pocket model: task, model size, training schedule, stopping rule, evaluation.

    Training is deterministic given ``seed`` and ``threads``: a number of steps decided by the
    seed, never a wall-clock budget. Accuracy on this task stays near zero for a few hundred steps
    and then climbs within a few dozen, so from ``check_from`` on, every ``check_every`` steps
    (every ``check_every_close`` once climbing) the averaged model samples ``check_samples``
    temperature-1 solutions for ``check_problems`` held-out problems (not the evaluation ones),
    and training stops at the first check whose accuracy reaches ``stop_at``: the model lands in
    the aggregation regime, right about 40% of the time, rather than wherever a time budget ended.
    A build that reaches ``max_steps`` first keeps that model and says so.

    Example:
        >>> PocketConfig(hidden_size=64, max_steps=300).task.name
        '3x3'
    """

    digits: int = 3
    """Digits of every operand of the task."""
    terms: int = 3
    """Operands per problem."""
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    """Attention heads (of ``hidden_size / heads`` dimensions; vLLM's CPU attention takes 32 and up)."""
    kv_heads: int = 2
    intermediate_size: int = 256
    max_positions: int = 1024
    seed: int = 0
    """Seeds the weights, the training problems and candidates, and the checks' sampling."""
    threads: int = 2
    """Torch threads while building (results can depend on it in the last bits)."""
    max_steps: int = 3000
    batch_size: int = 16
    """Solving examples per solving step."""
    aggregate_batch_size: int = 8
    """Aggregation examples per aggregation step (each is about four times as long as a solving one)."""
    aggregate_every: int = 2
    """Every this many steps, from ``aggregate_from`` on, is an aggregation step (0: none)."""
    aggregate_from: int = 0
    lr: float = 2e-3
    """AdamW's learning rate after a linear warm-up over ``warmup_steps``; constant afterwards."""
    warmup_steps: int = 50
    weight_decay: float = 0.1
    ema_decay: float = 0.98
    """The model checked and kept is this exponential moving average of the trained weights."""
    check_from: int = 200
    check_every: int = 50
    check_every_close: int = 10
    """How often to check once a check reached a quarter of ``stop_at``."""
    check_problems: int = 64
    check_samples: int = 4
    stop_at: float = 0.35
    """Training stops at the first check whose accuracy (temperature 1) reaches this."""
    eval_problems: int = 200
    """Held-out problems the build evaluates the saved model on (always the same ones, seed 0)."""
    eval_samples: int = 8
    eval_k: int = 4
    """Aggregation (and majority) group size in the evaluation."""

    @classmethod
    def quick(cls, **overrides: Any) -> PocketConfig:
        """A seconds-sized model (0.09M parameters, 2 × 2-digit sums, at most 400 steps) for tests and smoke runs.

        It learns its easier task well above chance in about 20 s on two cores, but it is not in
        the aggregation regime the default model is built for.
        """
        values: dict[str, Any] = dict(
            digits=2, terms=2, hidden_size=64, layers=2, heads=2, kv_heads=1, intermediate_size=128,
            max_steps=400, aggregate_every=4, ema_decay=0.9, check_from=100, check_every=50, check_every_close=50,
            check_problems=32, check_samples=2, stop_at=0.6, eval_problems=32,
        )
        return cls(**{**values, **overrides})

    @property
    def task(self) -> PocketTask:
        return PocketTask(digits=self.digits, terms=self.terms)

    def fingerprint(self) -> str:
        """A short hash of the config and :data:`FORMAT_VERSION`: the cache directory's name."""
        text = json.dumps({"format": FORMAT_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    """What a build did, and what the saved model scores on held-out problems (fractions in [0, 1]).

    ``pass1``, ``pass8`` and ``maj8`` come from 8 temperature-1 samples per problem; ``maj4`` is the
    majority of each group of 4 of them and ``agg4`` the model aggregating the same groups with
    :data:`~scaffold.pocket.AGGREGATE_PROMPT`, greedily.
    """

    build_seconds: float
    train_seconds: float
    steps: int
    params: int
    pass1: float
    pass8: float
    maj8: float
    maj4: float
    agg4: float
    stopped: bool = True
    """Whether a check reached ``stop_at`` (else training ran all ``max_steps``)."""
    checks: tuple[tuple[int, float], ...] = ()
    """(step, quick-check accuracy) of every check made while training."""
    eval: dict[str, float] = field(default_factory=dict)
    """Everything :func:`~scaffold.pocket.evaluate_pocket` returned."""

"""What a pocket model build is made of (:class:`PocketConfig`) and what it measured (:class:`BuildReport`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from scaffold.pocket._regime import Regime
from scaffold.pocket._task import PocketTask

REPORT = "pocket_report.json"
"""Written last by a build: a directory holding it is complete."""

FORMAT_VERSION = 3
"""Bumped whenever the task text, prompts, tokenizer or training code change what a build produces."""


@dataclass(frozen=True, kw_only=True)
class PocketConfig:
    """Everything that decides a pocket model: task, model size, training schedule, checkpoint selection.

    Training is deterministic given ``seed`` and ``threads`` on one machine. With ``portable=True``
    (the default) the build trains in a child process with pinned MKL and ATen kernels (see
    :mod:`scaffold.pocket._portable`), so nothing the caller sets changes it; it still differs between
    an Intel and an AMD processor (measured with an earlier pinning: seed 0 kept step 630 on an AMD EPYC,
    650 on an Intel Xeon), and it may differ with the thread count (on an AMD EPYC 1 and 2 threads trained the
    same weights; on an Intel Xeon they differ in the last bits). The way
    the checkpoint is chosen aims every build at the aggregation regime (:class:`~scaffold.pocket.Regime`)
    on any machine:

    1. *climb*: from ``check_from`` on, every ``check_every`` steps the weight average samples
       ``check_samples`` temperature-1 solutions of ``check_problems`` validation problems;
       once that pass@1 reaches ``own_from``, a share ``own_share`` of aggregation examples
       read the model's own samples (see :mod:`scaffold.pocket._examples`);
    2. *select*: once it reaches ``select_from``, the learning rate is scaled by
       ``select_lr_scale`` and every ``select_every`` steps the average is checked against the
       regime on ``select_problems`` validation problems (8 samples each, maj@4 and agg@4 on
       their two groups of four); with ``select_gate``, a climb-sized pass@1 check comes first
       and the regime check is made only once it reads at least the band's low end (a regime
       check costs about ten climb checks, and below the band none is eligible); training ends
       when selection is done (see :class:`~scaffold.pocket._regime.Selection`) or at
       ``max_steps``, and the build keeps the chosen checkpoint;
    3. *confirm*: the kept checkpoint is checked once more on ``confirm_problems`` validation problems
       selection never read; when it misses the regime there (or nothing was eligible), the build
       trains afresh (see ``attempts``).

    Examples:
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
    kv_heads: int = 4
    """Key/value heads (as many as ``heads``: grouped-query attention only adds copies at this size)."""
    intermediate_size: int = 256
    max_positions: int = 1024
    seed: int = 0
    """Seeds the weights, the training problems and candidates, and the checks' sampling."""
    threads: int = 2
    """Torch threads while building (part of what decides the model: another count can change the last bits, as
    it does on an Intel Xeon even in portable arithmetic)."""
    portable: bool = True
    """Train with pinned kernels (MKL's AVX2 branch and ATen's AVX2 kernels, in a child process;
    about as fast as native): the same model from run to run whatever the caller's kernel
    settings, though an Intel and an AMD processor still train different ones. ``False``: this
    process's native arithmetic, faster."""
    max_steps: int = 3000
    batch_size: int = 16
    """Solving examples per solving step."""
    aggregate_batch_size: int = 8
    """Aggregation examples per aggregation step (each is about four times as long as a solving one)."""
    aggregate_every: int = 2
    """Every this many steps is an aggregation step (0: none)."""
    own_share: float = 0.5
    """Share of aggregation examples whose candidates are the model's own samples (once ``own_from`` is reached)."""
    own_from: float = 0.03
    """The climb check's pass@1 from which the model's own samples are used."""
    own_pool: int = 64
    """Problems sampled at a time for own-candidate examples."""
    lr: float = 2e-3
    """AdamW's learning rate after a linear warm-up over ``warmup_steps``; constant afterwards."""
    warmup_steps: int = 50
    weight_decay: float = 0.1
    ema_decay: float = 0.98
    """The model checked and kept is this exponential moving average of the trained weights."""
    check_from: int = 400
    check_every: int = 25
    """How often the climb is checked once the model answers some problems (``own_from``); twice as seldom before."""
    check_problems: int = 64
    check_samples: int = 2
    select_from: float = 0.15
    """The climb check's pass@1 at which selection starts."""
    select_every: int = 10
    select_problems: int = 64
    select_lr_scale: float = 0.5
    select_margin: float = 0.05
    """How far inside every criterion of the regime an eligible checkpoint must be."""
    select_after_eligible: int = 1
    """Checks made after the first eligible one before selection ends."""
    select_gate: bool = True
    """Whether a selection check starts with a climb check and goes on to the regime only once its pass@1 reads
    at least :attr:`Regime.pass1_low`."""
    select_max_checks: int = 24
    confirm_problems: int = 96
    """Fresh validation problems (none of those selection read) the kept checkpoint is checked on once a
    training ends: selection keeps the best of a couple of dozen noisy looks, so its figures flatter it;
    a training whose checkpoint misses the regime there counts as having none (0: no confirmation)."""
    target_pass1: float = 0.38
    """Of the eligible checkpoints, the one whose pass@1 is nearest this is kept."""
    attempts: int = 3
    """Trainings tried before giving up on the regime: when a training's climb leaves no checkpoint that
    meets it with the margin on validation, or the kept one misses it on the confirmation problems, the
    build trains afresh from the seed ``seed + 1000 * attempt``; the last training is kept if none lands."""
    regime: Regime = field(default_factory=Regime)
    eval_problems: int = 100
    """Held-out problems the build evaluates the saved model on (always the same ones, seed 0)."""
    eval_samples: int = 8
    eval_k: int = 4
    """Aggregation (and majority) group size in the evaluation."""

    @classmethod
    def quick(cls, **overrides: Any) -> PocketConfig:
        """A seconds-sized model (0.14M parameters, 2 × 2-digit sums) for tests and smoke runs.

        Built by the same procedure as the default model in about 40 s on two cores, on an easier
        task, with smaller checks (48 validation problems) and evaluation (64 problems).
        """
        values: dict[str, Any] = dict(
            digits=2, terms=2, hidden_size=64, layers=3, heads=2, kv_heads=2, intermediate_size=128,
            max_steps=1500, ema_decay=0.9, check_from=100, check_problems=32, check_samples=2,
            select_problems=48, confirm_problems=48, eval_problems=64,
            select_after_eligible=3, select_gate=False,
        )
        return cls(**{**values, **overrides})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PocketConfig:
        """The config ``dataclasses.asdict`` wrote (``scaffold.json`` holds one); unknown keys are an error.

        Examples:
            >>> from dataclasses import asdict
            >>> PocketConfig.from_dict(asdict(PocketConfig(seed=3))) == PocketConfig(seed=3)
            True
        """
        values = dict(data)
        if isinstance(values.get("regime"), dict):
            values["regime"] = Regime(**values["regime"])
        return cls(**values)

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
    in_regime: bool = True
    """Whether these held-out figures meet the config's :class:`~scaffold.pocket.Regime`."""
    chosen_step: int = 0
    """The step of the checkpoint kept (``steps`` is how many were trained in all)."""
    checks: tuple[tuple[int, float], ...] = ()
    """(step, pass@1) of every climb check made while training."""
    selection: tuple[tuple[int, dict[str, float]], ...] = ()
    """(step, validation figures) of every regime check made while selecting."""
    eval: dict[str, float] = field(default_factory=dict)
    """Everything :func:`~scaffold.pocket.evaluate_pocket` returned."""
    attempts: int = 1
    """Trainings made (more than one when a training kept no checkpoint that met the regime on validation
    and on the confirmation problems)."""
    trained_seed: int = 0
    """The seed of the training kept (``seed`` unless a later attempt was kept)."""
    confirmation: dict[str, float] = field(default_factory=dict)
    """The kept checkpoint's figures on the confirmation problems (empty with ``confirm_problems=0``)."""
    arithmetic: str = ""
    """How the build computed, e.g. ``"portable (MKL AVX2, ATen AVX2, x86_64)"``
    (see :attr:`PocketConfig.portable`)."""
    cpu: str = ""
    """The processor it was built on, e.g. ``"GenuineIntel Intel(R) Xeon(R) Processor"``: builds of one
    config differ between an Intel and an AMD processor (see :attr:`PocketConfig.portable`)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BuildReport:
        """The report a build saved as ``pocket_report.json`` (lists turned back into tuples).

        Examples:
            >>> from dataclasses import asdict
            >>> r = BuildReport(build_seconds=1, train_seconds=1, steps=2, params=3, pass1=0.4, pass8=0.9,
            ...                 maj8=0.5, maj4=0.4, agg4=0.6, checks=((1, 0.5),), selection=((1, {"pass1": 0.4}),))
            >>> BuildReport.from_dict(json.loads(json.dumps(asdict(r)))) == r
            True
        """
        values = dict(data)
        values["checks"] = tuple((int(s), float(a)) for s, a in values.get("checks", ()))
        values["selection"] = tuple((int(s), dict(f)) for s, f in values.get("selection", ()))
        return cls(**values)

"""The records the trainer passes between its stages: rewarded traces, credited traces, tensor batches, metrics.

Record → reward → credit → batch → update: every stage is a small function over these types. What
the loops need of a policy is a protocol here too (:class:`TrainablePolicy`, :class:`RolloutPolicy`):
:class:`~trainers.Policy` satisfies it, and so can a fake in tests.
Shape suffixes on tensors: ``_B`` batch rows, ``_T`` token positions (``input_ids_BT``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from scaffold._types import Trace

if TYPE_CHECKING:
    import torch

    from scaffold import Backend

ROLES = ("single", "search", "aggregate")
"""What a trace was in its graph: a lone sample, a candidate later aggregated, or an aggregation."""


class RewardedRun(NamedTuple):
    """One recorded run ready for credit assignment: its traces, their rewards, the reference answer.

    Examples:
        >>> t = Trace(id="r/s#0", run_id="r", node="s", index=0, answer="4")
        >>> RewardedRun([t], {"r/s#0": 1.0}, "4").rewards
        {'r/s#0': 1.0}
    """

    traces: Sequence[Trace]
    """Every trace of the run (model calls, rules, inputs), with their lineage."""
    rewards: Mapping[str, float]
    """Trace id → reward (only rewarded traces appear)."""
    answer: str | None = None
    """The reference answer; only the AggLM selection reads it (to tell hard sets from easy ones)."""


@dataclass(frozen=True)
class Credited:
    """One recorded model trace with the advantage credit assignment gave it: one training sequence.

    Examples:
        >>> t = Trace(id="r/s#0", run_id="r", node="s", index=0, token_ids=(5, 6), logprobs=(-0.1, -0.2))
        >>> Credited(t, advantage=0.5, role="search").advantage
        0.5
    """

    trace: Trace
    """The model call: its request (to rebuild the prompt), token ids and sampling logprobs."""
    advantage: float
    """The scalar the policy gradient multiplies this trace's token log-probabilities by."""
    role: str = "single"
    """One of :data:`ROLES`."""
    reward: float | None = None
    """The trace's own reward, when it has one (for metrics)."""
    group: str = ""
    """The group it was centred in (for metrics and debugging)."""


@dataclass
class TrainBatch:
    """Padded tensors of a list of :class:`Credited` traces (built by :func:`trainers.batch.collate`)."""

    input_ids_BT: torch.Tensor
    """Prompt then completion token ids, right-padded."""
    attention_mask_BT: torch.Tensor
    completion_mask_BT: torch.Tensor
    """1.0 where position ``t`` holds a completion token (its logprob is predicted from ``t - 1``)."""
    old_logprobs_BT: torch.Tensor
    """The recorded sampling logprob of each completion token (0 elsewhere)."""
    advantages_B: torch.Tensor
    roles: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Completion tokens in the batch."""
        return int(self.completion_mask_BT.sum().item())


@dataclass(frozen=True)
class StepMetrics:
    """What one optimiser step measured; one JSON line of the training log."""

    step: int
    loss: float
    reward_mean: float | None
    accuracy: float | None
    advantage_mean: float
    advantage_std: float
    advantage_abs_max: float
    entropy: float
    kl: float | None
    clip_fraction: float
    tokens: int
    tokens_per_s: float
    extra: Mapping[str, Any] = field(default_factory=dict)


class TrainablePolicy(Protocol):
    """What :func:`~trainers.train_offline` and :func:`~trainers.train_step` use of a policy: update, checkpoint."""

    def step(self, items: Sequence[Credited]) -> StepMetrics:
        """One optimiser step on the credited traces; ``StepMetrics.step`` counts the steps taken, this one included."""
        ...

    def save(self, directory: str) -> object:
        """Write a checkpoint to ``directory``."""
        ...


class RolloutPolicy(TrainablePolicy, Protocol):
    """What :func:`~trainers.train_online` uses besides: the steps taken, a rollout backend, and refreshing one."""

    @property
    def steps_done(self) -> int:
        """Optimiser steps taken so far (a resumed policy continues with the batches it had not seen)."""
        ...

    def backend(self) -> Backend:
        """A rollout backend that samples with the current weights (refreshing it is a no-op)."""
        ...

    def refresh(self, backend: Backend) -> None:
        """Bring ``backend`` up to the current weights after an update; nothing to do if it shares them."""
        ...

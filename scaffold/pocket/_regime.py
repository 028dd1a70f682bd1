"""The aggregation regime: where sampling, voting and aggregating all matter, and how a build lands in it.

:class:`Regime` states the criteria a pocket model must meet on held-out problems (8 samples per
problem at temperature 1; maj@4 and agg@4 over the same two groups of four):

- ``pass1`` in ``[pass1_low, pass1_high]``: often wrong, often right;
- ``pass8 >= pass8_ratio * pass1``: sampling more finds more;
- ``maj8 > pass1``: voting helps;
- ``agg4 >= maj4 + agg_gain``: the model's own prompted aggregation (greedy) beats its own vote.

:class:`Selection` is how a build gets there on any machine: accuracy on this task climbs steeply
and the step it climbs at depends on floating-point details of the CPU, so rather than stopping
at the first check over a threshold, a build checks its weight average against the criteria on
validation problems every few steps while it crosses the band, and keeps the checkpoint that
meets them with a margin and whose pass@1 is nearest a target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Regime:
    """The criteria of the aggregation regime (fractions in [0, 1]).

    Examples:
        >>> Regime().failures({"pass1": 0.4, "pass8": 0.9, "maj8": 0.5, "maj4": 0.45, "agg4": 0.6})
        []
        >>> Regime().failures({"pass1": 0.4, "pass8": 0.9, "maj8": 0.5, "maj4": 0.45, "agg4": 0.47})
        ['agg4 0.470 < maj4 0.450 + 0.050']
    """

    pass1_low: float = 0.25
    pass1_high: float = 0.60
    pass8_ratio: float = 1.5
    agg_gain: float = 0.05

    def failures(self, figures: Mapping[str, float], *, margin: float = 0.0) -> list[str]:
        """The criteria ``figures`` miss, in words (empty: it is in the regime).

        ``margin`` tightens every criterion by that much: the band shrinks by ``margin`` at each
        end, and pass@8, maj@8 and agg@4 must clear their bars by ``margin``.
        """
        p1, p8, m8, m4, a4 = (figures[k] for k in ("pass1", "pass8", "maj8", "maj4", "agg4"))
        low, high = self.pass1_low + margin, self.pass1_high - margin
        out = []
        if not low <= p1 <= high:
            out.append(f"pass1 {p1:.3f} outside [{low:.3f}, {high:.3f}]")
        if p8 < self.pass8_ratio * p1 + margin:
            out.append(f"pass8 {p8:.3f} < {self.pass8_ratio} x pass1 {p1:.3f}" + (f" + {margin}" if margin else ""))
        if m8 <= p1 + margin:
            out.append(f"maj8 {m8:.3f} <= pass1 {p1:.3f}" + (f" + {margin}" if margin else ""))
        if a4 < m4 + self.agg_gain + margin:
            out.append(f"agg4 {a4:.3f} < maj4 {m4:.3f} + {self.agg_gain + margin:.3f}")
        return out

    def holds(self, figures: Mapping[str, float], *, margin: float = 0.0) -> bool:
        """Whether ``figures`` meet every criterion (tightened by ``margin``)."""
        return not self.failures(figures, margin=margin)


@dataclass
class Checkpoint:
    """A weight average checked against the regime on validation problems while selecting."""

    step: int
    figures: dict[str, float]
    weights: list[Any] = field(repr=False)


@dataclass
class Selection:
    """The checkpoints a build checked while crossing the band, and which one it keeps.

    A checkpoint is *eligible* when it meets the regime with ``margin``. Selection is *done*
    once ``after_eligible`` checks have followed the first eligible one, or a check's pass@1
    passed the band narrowed by the margin (later ones only climb), or ``max_checks`` were made. :meth:`choose` keeps
    the eligible checkpoint whose pass@1 is nearest ``target_pass1`` (ties: the larger
    aggregation gain); with none eligible, the one that meets the untightened regime nearest
    the target; with none of those either, the one missing the fewest criteria.
    """

    regime: Regime
    margin: float
    target_pass1: float
    after_eligible: int
    max_checks: int
    checkpoints: list[Checkpoint] = field(default_factory=list)

    def add(self, step: int, figures: Mapping[str, float], weights: list[Any]) -> None:
        self.checkpoints.append(Checkpoint(step, dict(figures), weights))

    @property
    def eligible(self) -> bool:
        """Whether some checkpoint meets the regime with the margin."""
        return any(self.regime.holds(c.figures, margin=self.margin) for c in self.checkpoints)

    @property
    def done(self) -> bool:
        checks = self.checkpoints
        if not checks:
            return False
        eligible = [i for i, c in enumerate(checks) if self.regime.holds(c.figures, margin=self.margin)]
        if eligible and len(checks) - 1 - eligible[0] >= self.after_eligible:
            return True
        past_band = checks[-1].figures["pass1"] > self.regime.pass1_high - self.margin  # nothing eligible beyond
        return past_band or len(checks) >= self.max_checks

    def choose(self) -> Checkpoint | None:
        """The checkpoint to keep (``None`` if nothing was checked)."""
        if not self.checkpoints:
            return None

        def nearest(pool: list[Checkpoint]) -> Checkpoint:
            return min(pool, key=lambda c: (abs(c.figures["pass1"] - self.target_pass1),
                                            -(c.figures["agg4"] - c.figures["maj4"])))

        for margin in (self.margin, 0.0):
            pool = [c for c in self.checkpoints if self.regime.holds(c.figures, margin=margin)]
            if pool:
                return nearest(pool)
        fewest = min(len(self.regime.failures(c.figures)) for c in self.checkpoints)
        return nearest([c for c in self.checkpoints if len(self.regime.failures(c.figures)) == fewest])

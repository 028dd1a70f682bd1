"""A trace's confidence from its token log-probabilities, as DeepConf measures it (Fu et al. 2025, "Deep Think with
Confidence", facebookresearch/deepconf).

DeepConf scores a token by minus the mean log-probability of its top-k candidate tokens, averages that over
sliding windows of tokens ("groups") and takes, per trace, the lowest group (``"lowest_group"``), the mean of the
lowest 10% of groups (``"bottom10"``), the last group (``"tail"``) or all tokens (``"mean"``).

**Departure:** providers and engines record the log-probability of the sampled token only, not the top-k
candidates, so here a token's confidence is its own log-probability, and a trace's confidence is the geometric
mean probability ``exp(mean log p)`` over the chosen tokens: a number in (0, 1], higher when the model was surer,
usable as a vote weight as it is. The ordering of traces, which is what DeepConf's filters read, follows the same
idea: low-probability stretches mark the traces to drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from scaffold._types import Trace

__all__ = ["CONFIDENCE_MEASURES", "ConfidenceMeasure", "trace_confidence"]

ConfidenceMeasure = Literal["lowest_group", "bottom10", "tail", "mean"]
CONFIDENCE_MEASURES: tuple[str, ...] = ("lowest_group", "bottom10", "tail", "mean")
"""The measures :func:`trace_confidence` knows (DeepConf's lowest group, bottom-10% groups, tail, and the mean)."""


def trace_confidence(trace: Trace | Sequence[float] | None, *, measure: ConfidenceMeasure = "lowest_group",
                     window: int = 2048) -> float | None:
    """A trace's confidence in (0, 1] from its token log-probabilities (``None`` when it has none).

    ``measure``: ``"lowest_group"`` (the lowest mean over sliding windows of ``window`` tokens; the whole trace
    when it is shorter), ``"bottom10"`` (the mean of the lowest 10% of windows), ``"tail"`` (the last ``window``
    tokens) or ``"mean"`` (every token). The mean log-probability is returned as ``exp(mean)``.

    Examples:
        >>> import math
        >>> from scaffold import trace_confidence
        >>> round(trace_confidence([math.log(0.5)] * 4), 3)
        0.5
        >>> lows = [0.0] * 6 + [math.log(0.1)] * 2  # a sure start, two unsure tokens at the end
        >>> round(trace_confidence(lows, window=2), 3), round(trace_confidence(lows, measure="mean"), 3)
        (0.1, 0.562)
    """
    if measure not in CONFIDENCE_MEASURES:
        raise ValueError(f"measure must be one of {', '.join(CONFIDENCE_MEASURES)}; got {measure!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive number of tokens, got {window!r}")
    values = trace.logprobs if isinstance(trace, Trace) else trace
    if not values:
        return None
    logprobs = [float(v) for v in values]
    if any(math.isnan(v) for v in logprobs):
        return None
    if measure == "mean" or len(logprobs) <= window:
        return math.exp(min(0.0, sum(logprobs) / len(logprobs)))
    if measure == "tail":
        return math.exp(min(0.0, sum(logprobs[-window:]) / window))
    means = _window_means(logprobs, window)
    if measure == "lowest_group":
        return math.exp(min(0.0, min(means)))
    lowest = sorted(means)[: max(1, len(means) // 10)]
    return math.exp(min(0.0, sum(lowest) / len(lowest)))


def _window_means(values: list[float], window: int) -> list[float]:
    """The mean of every run of ``window`` consecutive values (a running sum: one pass)."""
    total = sum(values[:window])
    means = [total / window]
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        means.append(total / window)
    return means

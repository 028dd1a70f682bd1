"""Evaluation metrics as pure functions: pass@k, majority@k, bootstrap intervals, the AggLM gain bins.

Everything here works on plain numbers and answer strings, so it is tested without a model
and reused by whatever reads recorded runs. Bad arguments (``k > n``, ``c > n``, an empty
list) raise :class:`ValueError` with the offending values.

Departures from the papers, on purpose:

* :func:`pass_at_k` is the unbiased estimator of Chen et al. (2021), "Evaluating Large
  Language Models Trained on Code", computed as their numerically stable product
  ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` rather than with binomial coefficients.
* :func:`majority_at_k` clusters answers once over all ``n`` samples with
  :func:`scaffold._rules.cluster_answers` (the same clustering ``sf.vote`` uses), so a subset's
  vote is read off those clusters; ties go to the cluster whose first member comes first in
  the subset, as in ``sf.vote``. A sample without an answer takes a slot but casts no vote.
* :func:`majority_cluster_gain` follows AggLM (Zhao et al. 2025, Figure 4): accuracy of the
  majority vote and of the aggregator, grouped by how large the majority cluster was. The
  paper bins by cluster size over a fixed number of solutions; here the x-axis is the share
  (size / solutions), so problems with different sample counts can share bins.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

from scaffold._answers import Equivalence, equivalent
from scaffold._rules import cluster_answers
from scaffold._types import Trace

MAX_ENUMERATED_SUBSETS = 200_000
"""``majority_at_k(..., subsets="all")`` refuses more k-subsets than this; pass a sample count instead."""


def _check_int(name: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: ``1 - C(n-c, k) / C(n, k)`` with ``n`` samples of which ``c`` are correct.

    The probability that a random ``k``-subset of the ``n`` samples holds at least one correct one.

    Examples:
        >>> round(pass_at_k(10, 3, 1), 6), round(pass_at_k(4, 2, 2), 6)  # 3/10 and 1 - 1/6
        (0.3, 0.833333)
    """
    _check_int("n", n, 1)
    _check_int("c", c, 0)
    _check_int("k", k, 1)
    if c > n:
        raise ValueError(f"c={c} correct samples is more than n={n} samples")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k={k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(correct_counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems, each given as ``(samples, correct)``.

    Examples:
        >>> round(mean_pass_at_k([(4, 0), (4, 4), (4, 2)], 2), 6)  # (0 + 1 + 5/6) / 3
        0.611111
    """
    if not correct_counts:
        raise ValueError("mean_pass_at_k() over no problems")
    return fmean(pass_at_k(n, c, k) for n, c in correct_counts)


def pass_at_k_curve(correct_counts: Sequence[tuple[int, int]], ks: Sequence[int]) -> dict[int, float]:
    """Mean pass@k for each ``k`` in ``ks`` (in the order given), for a pass@k curve.

    Examples:
        >>> pass_at_k_curve([(4, 1), (4, 0)], [1, 2, 4])
        {1: 0.125, 2: 0.25, 4: 0.5}
    """
    return {k: mean_pass_at_k(correct_counts, k) for k in ks}


def _cluster_labels(answers: Sequence[str | None], same: Equivalence) -> tuple[list[int | None], list[str]]:
    """Each sample's cluster (``None`` without an answer) and each cluster's representative answer."""
    traces = [Trace(id=str(i), run_id="", node="", index=i, answer=a) for i, a in enumerate(answers)]
    labels: list[int | None] = [None] * len(answers)
    clusters = cluster_answers(traces, None, same)
    for label, (_, _, members) in enumerate(clusters):
        for member in members:
            labels[member.index] = label
    return labels, [answer for answer, _, _ in clusters]


def _subset_vote(labels: Sequence[int | None], positions: Sequence[int]) -> int | None:
    counts: dict[int, int] = {}  # insertion order = first appearance in the subset
    for i in positions:
        label = labels[i]
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda label: counts[label])  # max keeps the first of equal counts


def majority_at_k(
    answers: Sequence[str | None],
    reference: str,
    k: int,
    *,
    subsets: Literal["first", "all"] | int = "first",
    seed: int = 0,
    equivalence: Equivalence = equivalent,
) -> float:
    """Whether a majority vote over ``k`` of the samples gives an answer equivalent to ``reference``.

    ``subsets`` says which ``k`` samples vote:

    * ``"first"`` (default): the first ``k``, in order; the result is 0.0 or 1.0.
    * ``"all"``: the exact mean over every ``k``-subset (at most :data:`MAX_ENUMERATED_SUBSETS`).
    * an integer ``m``: the mean over ``m`` random ``k``-subsets drawn with ``random.Random(seed)``.

    Answers are clustered by ``equivalence`` (``"1/2"`` and ``"0.5"`` vote together); ``None``
    is a sample without an answer: it fills a slot but votes for nothing. A subset with no
    answer at all counts as wrong.

    Examples:
        >>> majority_at_k(["1/2", "3", "0.5", "3", "3"], "0.5", 3)
        1.0
        >>> majority_at_k(["1/2", "3", "0.5", "3", "3"], "0.5", 5)
        0.0
        >>> majority_at_k(["1", "2", "2", "2"], "2", 2, subsets="all")  # pairs holding "1" tie, and ties go to "1"
        0.5
    """
    _check_int("k", k, 1)
    if k > len(answers):
        raise ValueError(f"majority@{k} needs at least k={k} samples, got {len(answers)}")
    labels, representatives = _cluster_labels(answers, equivalence)
    correct = [equivalence(answer, reference) for answer in representatives]

    def right(positions: Sequence[int]) -> float:
        winner = _subset_vote(labels, positions)
        return 1.0 if winner is not None and correct[winner] else 0.0

    n = len(answers)
    if subsets == "first":
        return right(range(k))
    if subsets == "all":
        count = math.comb(n, k)
        if count > MAX_ENUMERATED_SUBSETS:
            raise ValueError(f"majority@{k} over all {count} subsets of {n} samples is too many; "
                             "pass subsets=<number of random subsets>")
        return fmean(right(positions) for positions in itertools.combinations(range(n), k))
    if isinstance(subsets, bool) or not isinstance(subsets, int) or subsets < 1:
        raise ValueError(f"subsets must be 'first', 'all' or a positive number of random subsets, got {subsets!r}")
    rng = random.Random(seed)
    return fmean(right(sorted(rng.sample(range(n), k))) for _ in range(subsets))


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (NumPy's default ``"linear"`` method)."""
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def bootstrap_ci(
    values: Sequence[float],
    *,
    statistic: Callable[[Sequence[float]], float] = fmean,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(estimate, low, high)``: ``statistic(values)`` and its percentile-bootstrap interval.

    ``values`` holds one number per problem (a 0/1 correctness, a pass@k, a token count); each
    resample draws as many problems with replacement, from ``random.Random(seed)``, so the
    interval is reproducible.

    Examples:
        >>> estimate, low, high = bootstrap_ci([1, 0, 1, 1, 0, 1, 1, 0], resamples=500)
        >>> estimate, low <= estimate <= high
        (0.625, True)
    """
    if not values:
        raise ValueError("bootstrap_ci() over no values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    _check_int("resamples", resamples, 1)
    data = [float(v) for v in values]
    rng = random.Random(seed)
    stats = sorted(float(statistic(rng.choices(data, k=len(data)))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return float(statistic(data)), _percentile(stats, tail), _percentile(stats, 1 - tail)


def seeds_bootstrap_ci(
    scores: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(mean, low, high)`` over runs and problems: ``scores[r][p]`` is run ``r``'s score on problem ``p``.

    A two-level percentile bootstrap for experiments repeated over training seeds on one set of
    problems: each resample draws the runs with replacement and, independently, the problems with
    replacement (the same problems for every run drawn, since every run saw the same ones), so the
    interval covers both the seed-to-seed spread of training and the sampling of problems. With
    one run it is :func:`bootstrap_ci` over problems. For a paired difference between two
    methods, pass the differences ``a[r][p] - b[r][p]``.

    Examples:
        >>> mean, low, high = seeds_bootstrap_ci([[1, 0, 1, 1], [1, 1, 0, 1]], resamples=500)
        >>> mean, low <= mean <= high
        (0.75, True)
    """
    if not scores or not scores[0]:
        raise ValueError("seeds_bootstrap_ci() over no scores")
    problems = len(scores[0])
    if any(len(run) != problems for run in scores):
        raise ValueError("every run needs a score for every problem")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    _check_int("resamples", resamples, 1)
    data = [[float(v) for v in run] for run in scores]
    rng = random.Random(seed)
    runs = range(len(data))
    stats = []
    for _ in range(resamples):
        chosen_runs = rng.choices(runs, k=len(data))
        chosen_problems = rng.choices(range(problems), k=problems)
        stats.append(fmean(data[r][p] for r in chosen_runs for p in chosen_problems))
    stats.sort()
    tail = (1 - confidence) / 2
    return fmean(v for run in data for v in run), _percentile(stats, tail), _percentile(stats, 1 - tail)


@dataclass(frozen=True, slots=True)
class MajorityRow:
    """One problem for :func:`majority_cluster_gain`."""

    majority_share: float
    """Size of the majority answer cluster over the number of solutions voted on, in ``[0, 1]``."""
    majority_correct: bool
    """Whether the majority vote's answer was right."""
    aggregator_correct: bool
    """Whether the aggregator's (e.g. AggLM's) answer was right."""


@dataclass(frozen=True, slots=True)
class GainBin:
    """Accuracy of majority vote and of the aggregator over the problems whose majority share fell in one bin."""

    low: float
    """Lower edge (exclusive, except for the first bin)."""
    high: float
    """Upper edge (inclusive)."""
    problems: int
    majority_accuracy: float | None
    """``None`` when the bin is empty."""
    aggregator_accuracy: float | None
    """``None`` when the bin is empty."""

    @property
    def gain(self) -> float | None:
        """Aggregator accuracy minus majority accuracy; ``None`` when the bin is empty."""
        if self.majority_accuracy is None or self.aggregator_accuracy is None:
            return None
        return self.aggregator_accuracy - self.majority_accuracy


DEFAULT_SHARE_EDGES = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Quarter bins of the majority share: ``[0, .25], (.25, .5], (.5, .75], (.75, 1]``."""


def majority_cluster_gain(
    rows: Sequence[MajorityRow | tuple[float, bool, bool]],
    edges: Sequence[float] = DEFAULT_SHARE_EDGES,
) -> list[GainBin]:
    """Majority-vote and aggregator accuracy binned by the majority cluster's share (AggLM Figure 4).

    ``rows`` has one ``(majority_share, majority_correct, aggregator_correct)`` per problem.
    Bins are right-closed, ``[e0, e1], (e1, e2], …``, one per pair of increasing ``edges``;
    every bin is returned, empty ones with ``None`` accuracies, so plots keep their x-axis.
    A share outside ``[edges[0], edges[-1]]`` is an error. To bin by cluster size over ``N``
    solutions instead, use shares ``size / N`` and edges ``[0, 1/N, 2/N, …, 1]``: bin ``i`` then
    holds the clusters of size ``i + 1``.

    Examples:
        >>> bins = majority_cluster_gain([(0.25, False, True), (0.5, True, True), (1.0, True, True)], [0, 0.5, 1])
        >>> [(b.problems, b.majority_accuracy, b.aggregator_accuracy, b.gain) for b in bins]
        [(2, 0.5, 1.0, 0.5), (1, 1.0, 1.0, 0.0)]
    """
    bounds = [float(e) for e in edges]
    if len(bounds) < 2 or any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"edges must be at least two strictly increasing numbers, got {list(edges)!r}")
    members: list[list[MajorityRow]] = [[] for _ in range(len(bounds) - 1)]
    for raw in rows:
        row = raw if isinstance(raw, MajorityRow) else MajorityRow(float(raw[0]), bool(raw[1]), bool(raw[2]))
        share = row.majority_share
        if not bounds[0] <= share <= bounds[-1]:
            raise ValueError(f"majority share {share} is outside the bins [{bounds[0]}, {bounds[-1]}]")
        where = next(i for i in range(len(members)) if share <= bounds[i + 1])
        members[where].append(row)
    bins = []
    for i, group in enumerate(members):
        size = len(group)
        bins.append(GainBin(
            low=bounds[i],
            high=bounds[i + 1],
            problems=size,
            majority_accuracy=sum(r.majority_correct for r in group) / size if size else None,
            aggregator_accuracy=sum(r.aggregator_correct for r in group) / size if size else None,
        ))
    return bins

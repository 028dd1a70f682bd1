"""Evaluation metrics: pass@k against brute force, majority@k over equivalent answers, bootstrap CIs, AggLM bins."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from statistics import median

import pytest

from scaffold.evaluation import (
    GainBin,
    MajorityRow,
    bootstrap_ci,
    majority_at_k,
    majority_cluster_gain,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_curve,
)


def brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Share of k-subsets of n samples (the first c correct) holding a correct one, by enumeration."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in s) for s in subsets), len(subsets))


def test_pass_at_k_matches_enumeration_over_all_subsets():
    """The stable product form equals the exact share of k-subsets with a correct sample, for every n <= 12, c, k."""
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(brute_pass_at_k(n, c, k)), abs=1e-12), (n, c, k)


def test_pass_at_k_edges():
    """No correct sample gives 0, all correct gives 1, k = n gives 1 as soon as one is correct, pass@1 is c/n."""
    assert pass_at_k(16, 0, 4) == 0.0
    assert pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)
    assert pass_at_k(12, 9, 4) == 1.0  # fewer than k wrong samples: every subset holds a correct one


def test_pass_at_k_stays_finite_for_large_n():
    """Large sample counts do not overflow (no binomials): n=10000 is in [0, 1] and close to 1-(1-p)^k."""
    value = pass_at_k(10_000, 100, 50)
    assert 0 < value < 1
    assert value == pytest.approx(1 - (1 - 0.01) ** 50, rel=1e-2)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [(4, 1, 5, "k=5"), (4, 5, 1, "c=5"), (0, 0, 1, "n must"), (4, 1, 0, "k must"), (4, -1, 1, "c must"),
     (4, 1, True, "k must"), (4.0, 1, 1, "n must")],
)
def test_pass_at_k_rejects_impossible_arguments(n, c, k, message):
    """k > n, c > n, non-positive or non-integer counts raise ValueError naming the bad value."""
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_and_curve():
    """The mean is over problems; the curve maps each k to that mean and is non-decreasing in k."""
    counts = [(8, 0), (8, 1), (8, 4), (8, 8)]
    expected = (0 + 2 / 8 + float(brute_pass_at_k(8, 4, 2)) + 1) / 4
    assert mean_pass_at_k(counts, 2) == pytest.approx(expected)
    curve = pass_at_k_curve(counts, [1, 2, 4, 8])
    assert list(curve) == [1, 2, 4, 8]
    assert curve[1] == pytest.approx((0 + 1 / 8 + 4 / 8 + 1) / 4)
    assert curve[8] == pytest.approx(0.75)
    assert all(a <= b for a, b in itertools.pairwise(curve.values()))
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], 1)
    with pytest.raises(ValueError, match="k=9"):
        pass_at_k_curve(counts, [9])


def test_majority_at_k_clusters_equivalent_forms():
    """ "1/2", "0.5" and "\\frac{1}{2}" vote together, and a reference in another form still counts as right."""
    answers = ["3", "1/2", "0.5", r"\frac{1}{2}", "3"]
    assert majority_at_k(answers, "0.5", 5) == 1.0
    assert majority_at_k(answers, r"\frac{1}{2}", 4) == 1.0
    assert majority_at_k(answers, "3", 1) == 1.0
    assert majority_at_k(answers, "1/2", 1) == 0.0


def test_majority_at_k_ties_go_to_the_answer_seen_first():
    """On a tie the cluster whose first member comes first wins, as in sf.vote."""
    assert majority_at_k(["1", "2", "2", "1"], "1", 4) == 1.0
    assert majority_at_k(["2", "1", "1", "2"], "1", 4) == 0.0
    assert majority_at_k(["2", "1"], "1", 2) == 0.0


def test_majority_at_k_missing_answers_fill_slots_but_do_not_vote():
    """None takes one of the k slots without voting; a subset with no answer at all is wrong."""
    assert majority_at_k([None, None, "7", "8", "8"], "7", 3) == 1.0
    assert majority_at_k([None, None, "7"], "7", 2) == 0.0
    assert majority_at_k([None, "5"], "5", 2) == 1.0


def test_majority_at_k_over_all_subsets_matches_enumeration():
    """subsets="all" is the exact mean of the first-k vote over every k-subset (kept in sample order)."""
    answers = ["1", "2", "0.5", "2", "1/2", None, "3", "2.0"]
    for k in range(1, len(answers) + 1):
        by_hand = [majority_at_k([answers[i] for i in s], "1/2", k)
                   for s in itertools.combinations(range(len(answers)), k)]
        assert majority_at_k(answers, "1/2", k, subsets="all") == pytest.approx(sum(by_hand) / len(by_hand))
    assert majority_at_k(answers, "2", len(answers), subsets="all") == 1.0


def test_majority_at_k_random_subsets_are_seeded_and_close_to_exact():
    """subsets=m averages m random k-subsets: the same seed gives the same value, near the exact mean."""
    rng = random.Random(1)
    answers = [rng.choice(["1", "2", "0.5", "1/2", "3"]) for _ in range(12)]
    exact = majority_at_k(answers, "0.5", 5, subsets="all")
    sampled = majority_at_k(answers, "0.5", 5, subsets=3000, seed=7)
    assert sampled == majority_at_k(answers, "0.5", 5, subsets=3000, seed=7)
    assert sampled == pytest.approx(exact, abs=0.05)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"k": 4}, "k=4"), ({"k": 0}, "k must"), ({"k": 2, "subsets": 0}, "subsets"),
     ({"k": 2, "subsets": "some"}, "subsets")],
)
def test_majority_at_k_rejects_bad_arguments(kwargs, message):
    """k beyond the sample count, k < 1 and an unknown subsets mode raise ValueError."""
    with pytest.raises(ValueError, match=message):
        majority_at_k(["1", "2", "3"], "1", **kwargs)


def test_majority_at_k_refuses_too_many_subsets():
    """Enumerating C(n, k) subsets past the cap asks for a random sample count instead."""
    with pytest.raises(ValueError, match="subsets=<number"):
        majority_at_k(["1"] * 40, "1", 20, subsets="all")


def test_bootstrap_ci_contains_the_estimate():
    """The estimate is the statistic on the data and lies inside its percentile interval."""
    values = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1]
    estimate, low, high = bootstrap_ci(values)
    assert estimate == pytest.approx(8 / 12)
    assert 0 <= low < estimate < high <= 1


def test_bootstrap_ci_narrows_with_more_problems():
    """Four times the problems at the same accuracy roughly halves the interval's width."""
    small = [1, 0, 1, 1, 0] * 8
    large = small * 4
    _, low_small, high_small = bootstrap_ci(small, resamples=1000)
    _, low_large, high_large = bootstrap_ci(large, resamples=1000)
    width_small, width_large = high_small - low_small, high_large - low_large
    assert width_large < width_small
    assert width_large == pytest.approx(width_small / 2, rel=0.3)


def test_bootstrap_ci_is_reproducible_by_seed():
    """The same seed gives the same interval; another seed gives a (slightly) different one."""
    values = [0.1, 0.4, 0.35, 0.8, 0.2, 0.9, 0.55]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=3) != bootstrap_ci(values, seed=4)


def test_bootstrap_ci_takes_any_statistic_and_confidence():
    """A custom statistic (median) is used for estimate and resamples; a higher confidence widens the interval."""
    values = [1.0, 2.0, 3.0, 4.0, 100.0, 5.0, 6.0]
    estimate, low, high = bootstrap_ci(values, statistic=median, resamples=500)
    assert estimate == 4.0
    assert low <= estimate <= high < 100
    _, low99, high99 = bootstrap_ci(values, statistic=median, confidence=0.99, resamples=500)
    assert low99 <= low and high <= high99
    assert bootstrap_ci([2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="no values"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0], confidence=1.0)


def test_majority_cluster_gain_bins_a_hand_example():
    """Quarter bins, right-closed: the aggregator's gain over majority vote is largest where the majority is small."""
    rows = [
        (0.25, False, True),  # [0, .25]: a quarter agreeing, majority wrong, aggregator right
        (0.125, False, False),
        (0.5, False, True),  # (.25, .5]
        (0.375, True, True),
        (0.5, True, False),
        (1.0, True, True),  # (.75, 1]
        MajorityRow(0.875, True, True),
    ]
    bins = majority_cluster_gain(rows)
    assert bins == [
        GainBin(0.0, 0.25, 2, 0.0, 0.5),
        GainBin(0.25, 0.5, 3, 2 / 3, 2 / 3),
        GainBin(0.5, 0.75, 0, None, None),
        GainBin(0.75, 1.0, 2, 1.0, 1.0),
    ]
    assert [b.gain for b in bins] == [0.5, 0.0, None, 0.0]


def test_majority_cluster_gain_by_cluster_size_and_bad_input():
    """Edges at size/N bin by cluster size; a share outside the edges or unsorted edges raise ValueError."""
    solutions = 4
    edges = [0] + [size / solutions for size in range(1, solutions + 1)]
    bins = majority_cluster_gain([(1 / 4, False, True), (2 / 4, True, True), (2 / 4, False, False)], edges)
    assert [b.problems for b in bins] == [1, 2, 0, 0]  # bin i holds majority clusters of size i + 1
    assert bins[1].majority_accuracy == 0.5
    with pytest.raises(ValueError, match="outside"):
        majority_cluster_gain([(1.5, True, True)])
    with pytest.raises(ValueError, match="increasing"):
        majority_cluster_gain([], [0.5, 0.25])


def test_seeds_bootstrap_covers_the_spread_between_runs_as_well_as_problems() -> None:
    """Identical runs give the problems-only interval's width; runs that disagree widen it; constants give 0."""
    from scaffold.evaluation import seeds_bootstrap_ci

    problems = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0] * 4
    same = seeds_bootstrap_ci([problems, problems, problems], resamples=800, seed=1)
    shifted = [[min(1.0, v + d) for v in problems] for d in (0.0, 0.5, 1.0)]
    spread = seeds_bootstrap_ci(shifted, resamples=800, seed=1)
    assert same[0] == pytest.approx(0.6) and same[1] < 0.6 < same[2]
    assert spread[2] - spread[1] > 1.2 * (same[2] - same[1]) and spread[1] < spread[0] < spread[2]
    assert seeds_bootstrap_ci([[0.5, 0.5], [0.5, 0.5]]) == (0.5, 0.5, 0.5)
    assert seeds_bootstrap_ci(shifted, resamples=800, seed=1) == spread  # seeded
    with pytest.raises(ValueError, match="every run"):
        seeds_bootstrap_ci([[1.0, 0.0], [1.0]])
    with pytest.raises(ValueError):
        seeds_bootstrap_ci([])

"""Evaluating topologies on datasets: metrics over recorded samples (pass@k, majority@k, bootstrap intervals).

The functions are pure: they take counts, answers and per-problem numbers, never a store or a model.
"""

from scaffold.evaluation.metrics import (
    DEFAULT_SHARE_EDGES,
    MAX_ENUMERATED_SUBSETS,
    GainBin,
    MajorityRow,
    bootstrap_ci,
    majority_at_k,
    majority_cluster_gain,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_curve,
)

__all__ = [
    # sampling metrics
    "pass_at_k",
    "mean_pass_at_k",
    "pass_at_k_curve",
    "majority_at_k",
    "MAX_ENUMERATED_SUBSETS",
    # uncertainty
    "bootstrap_ci",
    # aggregator analysis (AggLM Figure 4)
    "majority_cluster_gain",
    "MajorityRow",
    "GainBin",
    "DEFAULT_SHARE_EDGES",
]

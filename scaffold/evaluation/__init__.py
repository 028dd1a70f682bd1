"""Evaluating topologies on datasets: run and record, report from the store, compare at equal budget.

* :func:`evaluate` runs a graph over problem rows as a named, resumable evaluation and scores
  every recorded trace; :func:`load_report` computes an :class:`EvalReport` from the store.
* The metrics are pure functions on counts and answers (pass@k, majority@k, bootstrap
  intervals, the AggLM gain bins).
"""

from scaffold.evaluation._compare import (
    COLUMNS,
    PairedDifference,
    comparison_rows,
    paired_difference,
    to_csv,
    to_markdown,
    to_text,
)
from scaffold.evaluation._harness import evaluate, evaluate_async
from scaffold.evaluation._import import IMPORTED, Imported, ImportedOutput, ImportedRow, import_outputs
from scaffold.evaluation._metrics import (
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
    seeds_bootstrap_ci,
)
from scaffold.evaluation._plots import (
    BudgetPoint,
    budget_points,
    plot_budget,
    plot_majority_gain,
    plot_pass_at_k,
    replay_points,
    write_plots,
)
from scaffold.evaluation._replay import METHODS, ReplayPoint, ReplayReport, replay, replay_aggregation
from scaffold.evaluation._report import EVAL_SOURCE, Estimate, EvalReport, ProblemOutcome, load_report

__all__ = [
    # running and reading evaluations
    "evaluate",
    "evaluate_async",
    "load_report",
    "EvalReport",
    "ProblemOutcome",
    "Estimate",
    "EVAL_SOURCE",
    # importing outputs collected elsewhere
    "import_outputs",
    "Imported",
    "ImportedRow",
    "ImportedOutput",
    "IMPORTED",
    # replaying recorded samples with no model call
    "replay",
    "replay_aggregation",
    "ReplayReport",
    "ReplayPoint",
    "METHODS",
    # comparing evaluations
    "comparison_rows",
    "paired_difference",
    "PairedDifference",
    "to_text",
    "to_markdown",
    "to_csv",
    "COLUMNS",
    # plots
    "budget_points",
    "replay_points",
    "BudgetPoint",
    "plot_budget",
    "plot_pass_at_k",
    "plot_majority_gain",
    "write_plots",
    # sampling metrics
    "pass_at_k",
    "mean_pass_at_k",
    "pass_at_k_curve",
    "majority_at_k",
    "MAX_ENUMERATED_SUBSETS",
    # uncertainty
    "bootstrap_ci",
    "seeds_bootstrap_ci",
    # aggregator analysis (AggLM Figure 4)
    "majority_cluster_gain",
    "MajorityRow",
    "GainBin",
    "DEFAULT_SHARE_EDGES",
]

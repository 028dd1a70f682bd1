"""Comparing evaluations at equal budget: one row per evaluation, as text, Markdown or CSV; paired differences.

:func:`comparison_rows` gives each evaluation's accuracy (with its bootstrap interval), pass@1,
the largest majority@k, and what it spent per problem (tokens, dollars, seconds, calls), so a
table sorted by tokens reads as an accuracy-against-budget curve. :func:`paired_difference`
compares two evaluations of the same dataset problem by problem: the accuracy difference with a
bootstrap interval over problems (paired, so it is much tighter than the two intervals suggest),
and how many problems each got right that the other did not.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from scaffold._errors import EvaluationError
from scaffold.evaluation._metrics import bootstrap_ci
from scaffold.evaluation._report import Estimate, EvalReport

COLUMNS = ("evaluation", "topology", "problems", "accuracy", "accuracy_low", "accuracy_high", "pass_at_1",
           "majority_k", "majority_at_k", "tokens_per_problem", "cost_per_problem", "latency_per_problem",
           "calls_per_problem")
"""The keys of every comparison row (and the CSV header), in order."""


def comparison_rows(reports: Sequence[EvalReport]) -> list[dict[str, Any]]:
    """One row per report, sorted by tokens per problem (cheapest first); unknown figures are ``None``.

    Examples:
        >>> comparison_rows([])
        []
    """
    rows = []
    for report in reports:
        top = max(report.majority_at_k, default=None)
        rows.append({
            "evaluation": report.name,
            "topology": report.graph,
            "problems": f"{report.finished}/{report.problems}",
            "accuracy": report.accuracy.value,
            "accuracy_low": report.accuracy.low,
            "accuracy_high": report.accuracy.high,
            "pass_at_1": report.pass_at_k[1].value if 1 in report.pass_at_k else None,
            "majority_k": top,
            "majority_at_k": report.majority_at_k[top].value if top is not None else None,
            "tokens_per_problem": report.tokens.value,
            "cost_per_problem": None if report.cost is None else report.cost.value,
            "latency_per_problem": None if report.latency is None else report.latency.value,
            "calls_per_problem": report.calls,
        })
    return sorted(rows, key=lambda row: (_number(row["tokens_per_problem"]), row["evaluation"]))


def _number(value: Any) -> float:
    return math.inf if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _cells(row: dict[str, Any]) -> list[str]:
    def num(value: Any, digits: int = 3) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"

    majority = f"{num(row['majority_at_k'])} @{row['majority_k']}" if row["majority_k"] is not None else "-"
    cost = "?" if row["cost_per_problem"] is None else f"${row['cost_per_problem']:.4f}"
    latency = "-" if row["latency_per_problem"] is None else f"{row['latency_per_problem']:.2f}"
    return [row["evaluation"], row["topology"], row["problems"],
            f"{num(row['accuracy'])} [{num(row['accuracy_low'])}, {num(row['accuracy_high'])}]",
            num(row["pass_at_1"]), majority, f"{row['tokens_per_problem']:,.0f}", cost, latency,
            f"{row['calls_per_problem']:.1f}"]


HEADER = ("evaluation", "topology", "problems", "accuracy [95% CI]", "pass@1", "maj@k", "tokens/problem",
          "$/problem", "s/problem", "calls/problem")
"""The columns of the text and Markdown tables."""


def to_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`comparison_rows`.

    Examples:
        >>> print(to_markdown([]).splitlines()[1])
        |---|---|---|---|---|---|---|---|---|---|
    """
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in rows]
    return "\n".join(lines)


def to_text(rows: Sequence[dict[str, Any]]) -> str:
    """A plain text table of :func:`comparison_rows` (numbers right-aligned)."""
    table = [list(HEADER)] + [_cells(row) for row in rows]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(HEADER))]
    return "\n".join("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(cells, widths))).rstrip() for cells in table)


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV of :func:`comparison_rows` with the :data:`COLUMNS` header (empty cells for unknown figures)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row[k] is None else row[k] for k in COLUMNS})
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """Evaluation ``a`` against ``b`` on the problems both scored."""

    a: str
    b: str
    problems: int
    difference: Estimate
    """Accuracy of ``a`` minus accuracy of ``b``, with a paired bootstrap interval."""
    only_a: int
    """Problems ``a`` got right and ``b`` did not."""
    only_b: int
    token_ratio: float | None
    """Tokens per problem of ``a`` over those of ``b`` (``None`` if ``b`` used none)."""

    def __str__(self) -> str:
        ratio = "-" if self.token_ratio is None else f"{self.token_ratio:.2f}x"
        return (f"{self.a} - {self.b}: accuracy {self.difference.value:+.3f} "
                f"[{self.difference.low:+.3f}, {self.difference.high:+.3f}] over {self.problems} problems; "
                f"right only in {self.a}: {self.only_a}, only in {self.b}: {self.only_b}; tokens {ratio}")


def paired_difference(a: EvalReport, b: EvalReport, *, resamples: int = 2000, seed: int = 0,
                      confidence: float = 0.95) -> PairedDifference:
    """``a`` minus ``b``, problem by problem; the two must be evaluations of the same dataset."""
    if a.dataset != b.dataset:
        raise EvaluationError(f"{a.name} ran on dataset {a.dataset!r} and {b.name} on {b.dataset!r}: "
                              "a paired comparison needs the same problems")
    scored_b = {o.item: o for o in b.outcomes if o.correct is not None}
    pairs = [(o, scored_b[o.item]) for o in a.outcomes if o.correct is not None and o.item in scored_b]
    if not pairs:
        raise EvaluationError(f"{a.name} and {b.name} have no scored problem in common")
    deltas = [float(bool(x.correct)) - float(bool(y.correct)) for x, y in pairs]
    low_high = bootstrap_ci(deltas, resamples=resamples, seed=seed, confidence=confidence)
    tokens_a = fmean(x.tokens for x, _ in pairs)
    tokens_b = fmean(y.tokens for _, y in pairs)
    return PairedDifference(
        a=a.name, b=b.name, problems=len(pairs), difference=Estimate(*low_high),
        only_a=sum(d > 0 for d in deltas), only_b=sum(d < 0 for d in deltas),
        token_ratio=tokens_a / tokens_b if tokens_b else None,
    )

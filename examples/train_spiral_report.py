"""Reading the SPIRAL experiment's runs (``examples/train_spiral_sums.py``): means, intervals, paired differences,
per-role statistics, the printed tables and the plot. Nothing here trains or samples a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaffold.evaluation import seeds_bootstrap_ci
from trainers.types import StepMetrics

METRICS = ("pass1", "pass8", "maj4", "maj8", "agg4", "rsa")
"""The held-out metrics, in table order."""


@dataclass
class Run:
    """One training run: its step metrics and copies of its weights at the two budgets."""

    method: str
    seed: int
    lr: float
    history: list[StepMetrics]
    at: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    """``"tokens"`` / ``"steps"`` → (step, weights) at that budget."""
    scores: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """``"tokens"`` / ``"steps"`` → metric → per-problem held-out scores."""


def means(scores: dict[str, list[float]]) -> dict[str, float]:
    """Per metric, the mean over problems (4 decimals)."""
    return {m: round(sum(scores[m]) / len(scores[m]), 4) for m in METRICS}


def summarise(runs: list[Run], before: dict[str, list[float]], budget: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per method: means over seeds and problems, and 95% half-widths (two-level bootstrap)."""
    results: dict[str, Any] = {}
    ci: dict[str, Any] = {}
    before_mean = means(before)
    before_ci = {m: round(_half(seeds_bootstrap_ci([before[m]])), 4) for m in METRICS}
    for method in dict.fromkeys(r.method for r in runs):
        mine = [r for r in runs if r.method == method]
        results[method] = {"before": before_mean, "after": {
            m: round(sum(sum(r.scores[budget][m]) / len(r.scores[budget][m]) for r in mine) / len(mine), 4)
            for m in METRICS}}
        ci[method] = {"before": before_ci, "after": {
            m: round(_half(seeds_bootstrap_ci([r.scores[budget][m] for r in mine])), 4) for m in METRICS}}
    return results, ci


def differences(runs: list[Run], budget: str, before: dict[str, list[float]]) -> dict[str, Any]:
    """Paired differences (same seed, same problem) with 95% intervals: the experiment's two targets, and each
    method's RSA accuracy against the start's (``before``, the same problems and evaluation seed)."""
    out: dict[str, Any] = {}
    by = {(r.method, r.seed): r for r in runs}
    seeds = sorted({r.seed for r in runs})

    def paired(a: tuple[str, str], b: tuple[str, str]) -> dict[str, float] | None:
        if not all((a[0], s) in by and (b[0], s) in by for s in seeds):
            return None
        rows = [[x - y for x, y in zip(by[(a[0], s)].scores[budget][a[1]], by[(b[0], s)].scores[budget][b[1]])]
                for s in seeds]
        mean, low, high = seeds_bootstrap_ci(rows)
        return {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}

    methods = list(dict.fromkeys(r.method for r in runs))
    out["rsa_minus_grpo_rsa"] = {m: d for m in methods if m != "grpo" and (d := paired((m, "rsa"), ("grpo", "rsa")))}
    out["agg4_minus_maj4"] = {m: d for m in methods if (d := paired((m, "agg4"), (m, "maj4")))}
    out["rsa_minus_start_rsa"] = {}
    for m in methods:
        rows = [[x - y for x, y in zip(by[(m, s)].scores[budget]["rsa"], before["rsa"])] for s in seeds
                if (m, s) in by]
        mean, low, high = seeds_bootstrap_ci(rows)
        out["rsa_minus_start_rsa"][m] = {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)}
    return out


def _half(interval: tuple[float, float, float]) -> float:
    return (interval[2] - interval[1]) / 2


def role_stats(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per role, over every step of ``runs``: mean zero-advantage share, mean |advantage|, mean token entropy,
    the KL to the start at the last measured step (mean over runs) and the lowest answered share."""
    collected: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        last_kl: dict[str, float] = {}
        for metrics in run.history:
            for role, values in metrics.extra["roles"].items():
                mine = collected.setdefault(role, {"zero_advantage": [], "advantage_abs_mean": [], "entropy": [],
                                                   "kl_end": [], "answered_min": []})
                for key in ("zero_advantage", "advantage_abs_mean", "entropy"):
                    mine[key].append(values[key])
                if values.get("answered") is not None:
                    mine["answered_min"].append(values["answered"])
                if values.get("kl") is not None:
                    last_kl[role] = values["kl"]
        for role, kl in last_kl.items():
            collected[role]["kl_end"].append(kl)
    out: dict[str, dict[str, float]] = {}
    for role, lists in collected.items():
        out[role] = {key: round(min(v) if key == "answered_min" else sum(v) / len(v), 4)
                     for key, v in lists.items() if v}
    return out


def table(title: str, results: dict[str, Any], ci: dict[str, Any], steps: dict[str, float]) -> str:
    lines = [title, f"{'method':<22} {'steps':>5}  " + "  ".join(f"{m:>19}" for m in METRICS)]
    first = next(iter(results.values()))
    lines.append(f"{'start':<22} {0:>5}  " + "  ".join(
        f"{first['before'][m]:.3f} ± {next(iter(ci.values()))['before'][m]:.3f}".rjust(19) for m in METRICS))
    for method, row in results.items():
        lines.append(f"{method:<22} {steps[method]:>5.0f}  " + "  ".join(
            f"{row['after'][m]:.3f} ± {ci[method]['after'][m]:.3f}".rjust(19) for m in METRICS))
    return "\n".join(lines)


def plot(path: Path, results: dict[str, Any], ci: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.5), sharey=True, squeeze=False)
    for ax, (name, row) in zip(axes[0], results.items()):
        xs = range(len(METRICS))
        ax.bar([x - 0.2 for x in xs], [row["before"][m] for m in METRICS], width=0.4, label="start")
        ax.bar([x + 0.2 for x in xs], [row["after"][m] for m in METRICS], width=0.4, label="trained",
               yerr=[ci[name]["after"][m] for m in METRICS], capsize=2)
        ax.set_xticks(list(xs), METRICS, fontsize=8)
        ax.set_title(name)
        ax.set_ylim(0, 1.12)
    axes[0][0].set_ylabel("held-out accuracy")
    axes[0][0].legend(loc="upper left", ncol=2, fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

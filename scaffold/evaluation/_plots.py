"""Plots of evaluation reports: accuracy against budget, pass@k curves, the AggLM gain bars.

Every plot reads :class:`~scaffold.evaluation.EvalReport` objects only (so it can be redrawn from
a store with :func:`~scaffold.evaluation.load_report`) and writes a PNG. matplotlib is an optional
dependency (``pip install scaffold-sdk[plot]``), imported when a plot is drawn; figures are made
with ``matplotlib.figure.Figure`` on the Agg canvas, so no display is needed and pyplot's global
state is never touched. :func:`budget_points` is the plain data behind :func:`plot_budget` and
needs no matplotlib.

* :func:`plot_budget` — accuracy (with its confidence interval) against tokens or dollars per
  problem, one line per topology: the points of a sweep (self-consistency at n = 1, 4, 16) joined.
* :func:`plot_pass_at_k` — pass@k (solid, with its interval shaded) and majority@k (dashed) of
  the samples node against ``k``, as in SPIRAL's Figure 3; the final answer's accuracy dotted.
* :func:`plot_majority_gain` — AggLM's Figure 4: majority-vote and aggregator accuracy per bin of
  the majority answer's share among the candidates an aggregation call read.
* :func:`write_plots` — every plot the reports have data for, into one folder.

Departure from the papers: the gain bins are shares of the candidates (see
:func:`~scaffold.evaluation.majority_cluster_gain`), and their counts are aggregation calls, not
problems (one problem of RSA holds many aggregation calls).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from scaffold._errors import EvaluationError
from scaffold.evaluation._metrics import GainBin
from scaffold.evaluation._report import EvalReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from scaffold.evaluation._replay import ReplayReport

BudgetAxis = Literal["tokens", "cost"]

_AXIS_TITLES = {"tokens": "tokens per problem", "cost": "dollars per problem"}
_LABEL_VALUE_CHARS = 24
"""Parameter values longer than this (prompts, mostly) are left out of a point's label."""


@dataclass(frozen=True, slots=True)
class BudgetPoint:
    """One evaluation on an accuracy-against-budget plot."""

    name: str
    """The evaluation's name."""
    label: str
    """Short text drawn next to the point: the evaluation's parameters (``n=16``), else its name."""
    x: float
    """Tokens or dollars per problem."""
    accuracy: float
    low: float
    """Lower end of the accuracy's confidence interval."""
    high: float
    """Upper end of the accuracy's confidence interval."""


def budget_points(reports: Iterable[EvalReport], x: BudgetAxis = "tokens") -> dict[str, list[BudgetPoint]]:
    """Accuracy against budget as data: topology (``report.graph``) -> its points, sorted by ``x``.

    ``x="tokens"`` uses tokens per problem, ``x="cost"`` dollars per problem; a report whose cost
    is unknown (``None``) is left out of a cost plot, and :class:`~scaffold._errors.EvaluationError`
    is raised when no report has one. A report whose budget is not a number (no run ever ran)
    is left out. Topologies keep the order in which they first appear in ``reports``.

    Examples:
        >>> from scaffold.evaluation import Estimate, EvalReport
        >>> def made(name, n, tokens, accuracy):
        ...     return EvalReport(name=name, graph="self_consistency", dataset=None, settings={"params": {"n": n}},
        ...                       problems=10, outcomes=(), samples_node=None,
        ...                       accuracy=Estimate(accuracy, accuracy - 0.1, accuracy + 0.1), pass_at_k={},
        ...                       majority_at_k={}, tokens=Estimate(tokens, tokens, tokens), cost=None, latency=None,
        ...                       calls=float(n), node_accuracy={}, gain=())
        >>> series = budget_points([made("sc16", "16", 8000.0, 0.7), made("sc1", "1", 500.0, 0.4)])
        >>> [(p.label, p.x, p.accuracy) for p in series["self_consistency"]]
        [('n=1', 500.0, 0.4), ('n=16', 8000.0, 0.7)]
    """
    if x not in _AXIS_TITLES:
        raise ValueError(f"x must be 'tokens' or 'cost', got {x!r}")
    series: dict[str, list[BudgetPoint]] = {}
    reports_list = list(reports)
    for report in reports_list:
        budget = report.tokens if x == "tokens" else report.cost
        if budget is None or not math.isfinite(budget.value):
            continue
        series.setdefault(report.graph, []).append(BudgetPoint(
            name=report.name, label=point_label(report), x=budget.value, accuracy=report.accuracy.value,
            low=report.accuracy.low, high=report.accuracy.high,
        ))
    if x == "cost" and not series:
        raise EvaluationError("no evaluation has known prices, so none can be placed on a cost axis; "
                              "plot against tokens instead")
    params = {report.name: _params(report) for report in reports_list}
    return {graph: sorted(_varying_labels(points, params), key=lambda p: (p.x, p.name))
            for graph, points in series.items()}


def replay_points(replays: Iterable[ReplayReport], x: BudgetAxis = "tokens") -> dict[str, list[BudgetPoint]]:
    """Replayed curves as plot data: ``"replay: METHOD (NAME)"`` -> one point per k, by budget (a curve whose
    dollars are unknown is left out of a cost plot).

    Examples:
        >>> from scaffold.evaluation import Estimate, ReplayPoint, ReplayReport
        >>> point = ReplayPoint("vote", 4, Estimate(0.6, 0.5, 0.7), tokens=400.0, cost=None)
        >>> found = replay_points([ReplayReport("sc16", "samples", 16, 10, 200, 0, (point,))])
        >>> [(name, [(p.label, p.x) for p in points]) for name, points in found.items()]
        [('replay: vote (sc16)', [('k=4', 400.0)])]
    """
    series: dict[str, list[BudgetPoint]] = {}
    for replayed in replays:
        for point in replayed.points:
            budget = point.tokens if x == "tokens" else point.cost
            if budget is None or not math.isfinite(budget):
                continue
            series.setdefault(f"replay: {point.method} ({replayed.name})", []).append(BudgetPoint(
                name=replayed.name, label=f"k={point.k}", x=budget, accuracy=point.accuracy.value,
                low=point.accuracy.low, high=point.accuracy.high))
    return {name: sorted(points, key=lambda p: p.x) for name, points in series.items()}


def _params(report: EvalReport) -> dict[str, Any]:
    found = report.settings.get("params") if isinstance(report.settings, Mapping) else None
    return {k: v for k, v in found.items() if _short_value(v)} if isinstance(found, Mapping) else {}


def _varying_labels(points: list[BudgetPoint], params: Mapping[str, dict[str, Any]]) -> list[BudgetPoint]:
    """Within a sweep, label each point by the parameters that vary (``steps=1``, ``steps=3``), not all of them."""
    if len(points) < 2:
        return points
    keys = sorted({k for p in points for k in params.get(p.name, {})})
    varying = [k for k in keys if len({str(params.get(p.name, {}).get(k)) for p in points}) > 1]
    if not varying:
        return points
    return [replace(p, label=", ".join(f"{k}={params[p.name][k]}" for k in varying if k in params.get(p.name, {}))
                    or p.label) for p in points]


def point_label(report: EvalReport) -> str:
    """``report``'s parameters as ``key=value`` pairs (long values such as prompts left out), else its name.

    Examples:
        >>> from scaffold.evaluation import Estimate, EvalReport
        >>> e = Estimate(0.5, 0.4, 0.6)
        >>> report = EvalReport(name="rsa-small", graph="rsa", dataset=None,
        ...                     settings={"params": {"n": "4", "prompt": "Solve the problem " * 3}},
        ...                     problems=1, outcomes=(), samples_node=None, accuracy=e, pass_at_k={}, majority_at_k={},
        ...                     tokens=e, cost=None, latency=None, calls=1.0, node_accuracy={}, gain=())
        >>> point_label(report)
        'n=4'
    """
    params = report.settings.get("params") if isinstance(report.settings, Mapping) else None
    if not isinstance(params, Mapping):
        return report.name
    pairs = [f"{key}={value}" for key, value in params.items() if _short_value(value)]
    return ", ".join(pairs) or report.name


def _short_value(value: Any) -> bool:
    if value is None or isinstance(value, Mapping | list | tuple | set):
        return False
    text = str(value)
    return len(text) <= _LABEL_VALUE_CHARS and "\n" not in text


# -- drawing -----------------------------------------------------------------------------------
def _figure(*, width: float = 7.0, height: float = 5.0) -> Figure:
    """A figure on the Agg canvas (no display, no pyplot state)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise EvaluationError("plots need matplotlib: pip install 'scaffold-sdk[plot]'") from error
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=120)
    return target


def _colour(index: int) -> str:
    return f"C{index % 10}"


def _clip(text: str, limit: int = 32) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def plot_budget(reports: Iterable[EvalReport], path: str | Path, *, x: BudgetAxis = "tokens",
                title: str | None = None, replays: Iterable[ReplayReport] = ()) -> Path:
    """Accuracy against tokens (or dollars, ``x="cost"``) per problem, one line per topology; returns the PNG's path.

    ``replays`` (:func:`~scaffold.evaluation.replay`) add their rules' curves over k, dashed, beside the live
    evaluations.

    Each point carries its confidence interval as an error bar and its label (see
    :func:`budget_points`); the x axis is logarithmic unless some budget is zero. Parent folders
    of ``path`` are created.

    Examples:
        >>> import os, tempfile
        >>> from scaffold.evaluation import Estimate, EvalReport
        >>> def made(name, n, tokens):
        ...     e = Estimate(0.5, 0.3, 0.7)
        ...     return EvalReport(name=name, graph="sc", dataset=None, settings={"params": {"n": n}}, problems=4,
        ...                       outcomes=(), samples_node=None, accuracy=e, pass_at_k={}, majority_at_k={},
        ...                       tokens=Estimate(tokens, tokens, tokens), cost=None, latency=None, calls=1.0,
        ...                       node_accuracy={}, gain=())
        >>> out = plot_budget([made("a", "1", 100.0), made("b", "4", 400.0)],
        ...                   os.path.join(tempfile.mkdtemp(), "plots", "budget.png"))
        >>> out.name, out.read_bytes()[:4]
        ('budget.png', b'\\x89PNG')
    """
    chosen = list(reports)
    replayed = replay_points(replays, x)
    try:
        series = budget_points(chosen, x) if chosen else {}
    except EvaluationError:
        if not replayed:
            raise
        series = {}
    if not series and not replayed:
        raise EvaluationError("no evaluation to plot: no report has a budget that is a number")
    figure = _figure()
    axes = figure.add_subplot()
    dashed = set(replayed)
    for index, (graph, points) in enumerate({**series, **replayed}.items()):
        xs = [p.x for p in points]
        ys = [p.accuracy for p in points]
        errors = [[max(0.0, p.accuracy - p.low) for p in points], [max(0.0, p.high - p.accuracy) for p in points]]
        axes.errorbar(xs, ys, yerr=errors, fmt="--s" if graph in dashed else "-o", capsize=3, color=_colour(index),
                      label=graph)
        for point in points:
            note = axes.annotate(_clip(point.label), (point.x, point.accuracy), textcoords="offset points",
                                 xytext=(5, 5), fontsize=8, color=_colour(index))
            note.set_in_layout(False)  # a long label must not shrink the axes
    if all(p.x > 0 for points in (*series.values(), *replayed.values()) for p in points):
        axes.set_xscale("log")
    axes.margins(x=0.15)  # room for the labels of the outermost points
    axes.set_xlabel(_AXIS_TITLES[x])
    axes.set_ylabel("accuracy")
    axes.set_ylim(-0.02, 1.05)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(title="topology", fontsize=8)
    axes.set_title(title or f"accuracy vs {_AXIS_TITLES[x]}")
    return _save(figure, path)


def plot_pass_at_k(reports: Iterable[EvalReport], path: str | Path, *, title: str | None = None,
                   final_accuracy: bool = True) -> Path:
    """Pass@k (solid, interval shaded) and majority@k (dashed) against ``k`` on a log2 axis; returns the PNG's path.

    One colour per report that has pass@k values (those of its samples node); with
    ``final_accuracy`` the accuracy of the topology's final answer is a dotted horizontal line
    in the same colour. Raises :class:`~scaffold._errors.EvaluationError` when no report has pass@k.

    Examples:
        >>> import os, tempfile
        >>> from scaffold.evaluation import Estimate, EvalReport
        >>> curve = {1: Estimate(0.3, 0.2, 0.4), 2: Estimate(0.5, 0.4, 0.6), 4: Estimate(0.7, 0.6, 0.8)}
        >>> votes = {1: Estimate(0.3, 0.2, 0.4), 2: Estimate(0.3, 0.2, 0.4), 4: Estimate(0.4, 0.3, 0.5)}
        >>> report = EvalReport(name="sc4", graph="sc", dataset=None, settings={}, problems=4, outcomes=(),
        ...                     samples_node="samples", accuracy=Estimate(0.4, 0.2, 0.6), pass_at_k=curve,
        ...                     majority_at_k=votes, tokens=Estimate(1.0, 1.0, 1.0), cost=None, latency=None,
        ...                     calls=1.0, node_accuracy={}, gain=())
        >>> plot_pass_at_k([report], os.path.join(tempfile.mkdtemp(), "pass.png")).read_bytes()[:4]
        b'\\x89PNG'
    """
    drawn = [report for report in reports if report.pass_at_k]
    if not drawn:
        raise EvaluationError("no evaluation has pass@k values (none recorded a samples node with traces)")
    figure = _figure()
    from matplotlib.lines import Line2D

    axes = figure.add_subplot()
    ks_seen: set[int] = set()
    for index, report in enumerate(drawn):
        colour = _colour(index)
        ks = sorted(report.pass_at_k)
        ks_seen.update(ks)
        curve = [report.pass_at_k[k] for k in ks]
        axes.plot(ks, [e.value for e in curve], "-o", color=colour, label=report.name)
        axes.fill_between(ks, [e.low for e in curve], [e.high for e in curve], color=colour, alpha=0.15, linewidth=0)
        votes = sorted(report.majority_at_k)
        if votes:
            axes.plot(votes, [report.majority_at_k[k].value for k in votes], "--s", color=colour, markersize=4)
        if final_accuracy and math.isfinite(report.accuracy.value):
            axes.axhline(report.accuracy.value, color=colour, linestyle=":", linewidth=1.2)
    ticks = sorted(ks_seen)
    axes.set_xscale("log", base=2)
    axes.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
    axes.set_xticks(ticks, [str(k) for k in ticks])
    axes.minorticks_off()
    axes.set_xlabel("k (samples)")
    axes.set_ylabel("accuracy")
    axes.set_ylim(-0.02, 1.05)
    axes.grid(True, alpha=0.3)
    # one legend entry per report (its colour), then one per line style
    styles = [Line2D([], [], color="black", linestyle="-", marker="o", label="pass@k"),
              Line2D([], [], color="black", linestyle="--", marker="s", markersize=4, label="majority@k")]
    if final_accuracy:
        styles.append(Line2D([], [], color="black", linestyle=":", label="final answer"))
    handles, _ = axes.get_legend_handles_labels()
    axes.legend(handles=[*handles, *styles], fontsize=8)
    axes.set_title(title or "pass@k and majority@k")
    return _save(figure, path)


def plot_majority_gain(reports: Iterable[EvalReport], path: str | Path, *, title: str | None = None) -> Path:
    """AggLM Figure 4: per report, majority-vote vs aggregator accuracy per majority-share bin; returns the PNG's path.

    One panel per report with aggregation rows; each bar is labelled with its bin's number of
    aggregation calls, and an empty bin leaves a gap. Raises
    :class:`~scaffold._errors.EvaluationError` when no report has any aggregation call.

    Examples:
        >>> import os, tempfile
        >>> from scaffold.evaluation import Estimate, EvalReport, majority_cluster_gain
        >>> bins = tuple(majority_cluster_gain([(0.5, False, True), (0.5, True, True), (1.0, True, True)]))
        >>> e = Estimate(0.5, 0.4, 0.6)
        >>> report = EvalReport(name="rsa", graph="rsa", dataset=None, settings={}, problems=3, outcomes=(),
        ...                     samples_node="step0", accuracy=e, pass_at_k={}, majority_at_k={}, tokens=e,
        ...                     cost=None, latency=None, calls=3.0, node_accuracy={}, gain=bins)
        >>> plot_majority_gain([report], os.path.join(tempfile.mkdtemp(), "gain.png")).read_bytes()[:4]
        b'\\x89PNG'
    """
    drawn = [report for report in reports if any(b.problems for b in report.gain)]
    if not drawn:
        raise EvaluationError("no evaluation has aggregation calls (a model call reading two or more candidates)")
    columns = min(len(drawn), 3)
    rows = math.ceil(len(drawn) / columns)
    figure = _figure(width=5.0 * columns, height=4.0 * rows)
    panels = figure.subplots(rows, columns, squeeze=False).ravel()
    for axes, report in zip(panels, drawn):
        _gain_panel(axes, report.name, report.gain)
    for axes in panels[len(drawn):]:
        axes.set_visible(False)
    figure.suptitle(title or "majority vote vs aggregator, by the majority answer's share")
    return _save(figure, path)


def _gain_panel(axes: Axes, name: str, bins: Sequence[GainBin]) -> None:
    width = 0.38
    filled = [(i, b) for i, b in enumerate(bins) if b.problems]
    for offset, label, colour, height_of in (
        (-width / 2, "majority vote", "C0", lambda b: b.majority_accuracy),
        (width / 2, "aggregator", "C1", lambda b: b.aggregator_accuracy),
    ):
        bars = axes.bar([i + offset for i, _ in filled], [height_of(b) or 0.0 for _, b in filled], width,
                        color=colour, label=label)
        axes.bar_label(bars, labels=[str(b.problems) for _, b in filled], fontsize=7, padding=2)
    axes.set_xticks(range(len(bins)), [gain_bin_label(b, first=i == 0) for i, b in enumerate(bins)], fontsize=8)
    axes.set_xlim(-0.6, len(bins) - 0.4)
    axes.set_ylim(0, 1.15)
    axes.set_xlabel("majority answer's share of the candidates")
    axes.set_ylabel("accuracy")
    axes.set_title(name, fontsize=10)
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8, loc="upper left")


def gain_bin_label(gain_bin: GainBin, *, first: bool = False) -> str:
    """A bin's interval as text: right-closed, and closed on both sides for the first bin.

    Examples:
        >>> from scaffold.evaluation import GainBin
        >>> gain_bin_label(GainBin(0.25, 0.5, 3, 0.5, 1.0))
        '(0.25, 0.5]'
        >>> gain_bin_label(GainBin(0.0, 0.25, 0, None, None), first=True)
        '[0, 0.25]'
    """
    return f"{'[' if first else '('}{gain_bin.low:g}, {gain_bin.high:g}]"


def write_plots(reports: Iterable[EvalReport], out_dir: str | Path,
                replays: Iterable[ReplayReport] = ()) -> list[Path]:
    """Every plot the reports have data for, as PNGs in ``out_dir`` (created); returns the paths written.
    ``replays`` join the accuracy-against-budget plots.

    Always ``accuracy_vs_tokens.png``; ``accuracy_vs_cost.png`` when some report's cost is known,
    ``pass_at_k.png`` when some report has pass@k values and ``majority_gain.png`` when some
    report has aggregation calls.

    Examples:
        >>> import os, tempfile
        >>> from scaffold.evaluation import Estimate, EvalReport
        >>> e = Estimate(0.5, 0.4, 0.6)
        >>> report = EvalReport(name="one", graph="single", dataset=None, settings={}, problems=2, outcomes=(),
        ...                     samples_node=None, accuracy=e, pass_at_k={}, majority_at_k={},
        ...                     tokens=Estimate(120.0, 100.0, 140.0), cost=None, latency=None, calls=1.0,
        ...                     node_accuracy={}, gain=())
        >>> [p.name for p in write_plots([report], tempfile.mkdtemp())]
        ['accuracy_vs_tokens.png']
    """
    chosen = list(reports)
    replayed = list(replays)
    folder = Path(out_dir)
    written = [plot_budget(chosen, folder / "accuracy_vs_tokens.png", replays=replayed)]
    if any(report.cost is not None and math.isfinite(report.cost.value) for report in chosen):
        written.append(plot_budget(chosen, folder / "accuracy_vs_cost.png", x="cost", replays=replayed))
    if any(report.pass_at_k for report in chosen):
        written.append(plot_pass_at_k(chosen, folder / "pass_at_k.png"))
    if any(b.problems for report in chosen for b in report.gain):
        written.append(plot_majority_gain(chosen, folder / "majority_gain.png"))
    return written

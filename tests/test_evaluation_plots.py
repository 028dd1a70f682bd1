"""Evaluation plots: budget series from real reports, cost points, PNGs written, which plots write_plots makes."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import boxed

import graphs
import scaffold as sf
from scaffold._errors import EvaluationError
from scaffold._types import Completion, Request
from scaffold.evaluation import EvalReport, evaluate
from scaffold.evaluation._plots import (
    BudgetPoint,
    budget_points,
    plot_budget,
    plot_majority_gain,
    plot_pass_at_k,
    point_label,
    write_plots,
)
from scaffold.testing import ScriptedBackend

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROWS = [{"problem": f"{i}+{i}", "answer": str(2 * i)} for i in range(1, 5)]


@sf.graph
def sc(problem, *, n: int = 4):
    """Self-consistency: n samples and a vote."""
    return sf.vote(sf.sample("Solve {problem}", model="m", n=n))


@sf.graph
def one(problem):
    """A single answer."""
    return sf.generate("Solve {problem}", model="m")


def cycling(price: float | None = None) -> Callable[[Request], str | Completion]:
    """Replies cycle through 2, 4, 6, 8 (right for one problem in four), priced per call when ``price`` is given."""
    counter = itertools.count()

    def reply(request: Request) -> str | Completion:
        text = boxed(2 * (next(counter) % 4 + 1))
        return text if price is None else Completion(text=text, cost=price)

    return reply


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvalReport]:
    """Real reports from one store: sc at n=4, 1, 2 (in that order), one answer, RSA (priced and not)."""
    store = sf.Store(str(tmp_path_factory.mktemp("plots") / "e.db"))
    made: dict[str, EvalReport] = {}
    try:
        for n in (4, 1, 2):
            made[f"sc{n}"] = evaluate(sc.build(n=n), ROWS, {"m": ScriptedBackend(cycling())}, name=f"sc{n}",
                                      store=store)
        made["one"] = evaluate(one.build(), ROWS, {"m": ScriptedBackend(cycling())}, name="one", store=store)
        rsa = graphs.build_topology("rsa", {"n": "4", "k": "2", "steps": "1"})
        made["rsa"] = evaluate(rsa, ROWS, {"solver": ScriptedBackend(cycling())}, name="rsa", store=store)
        made["rsa_priced"] = evaluate(rsa, ROWS, {"solver": ScriptedBackend(cycling(price=0.001))},
                                      name="rsa-priced", store=store, settings={"params": {"n": "4"}})
    finally:
        store.close()
    return made


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000, f"{path} is only {len(data)} bytes"


def test_budget_points_group_by_topology_and_sort_by_tokens(reports):
    """One series per topology in first-seen order; a sweep's points sorted by tokens, labelled by their params."""
    given = [reports["sc4"], reports["one"], reports["sc1"], reports["sc2"]]
    series = budget_points(given)
    assert list(series) == ["sc", "one"]
    sweep = series["sc"]
    assert [p.name for p in sweep] == ["sc1", "sc2", "sc4"]
    assert [p.label for p in sweep] == ["n=1", "n=2", "n=4"]
    assert sweep[0].x < sweep[1].x < sweep[2].x
    for point in sweep:
        report = reports[point.name]
        assert point == BudgetPoint(point.name, point.label, report.tokens.value, report.accuracy.value,
                                    report.accuracy.low, report.accuracy.high)
    assert [p.label for p in series["one"]] == ["one"]  # no parameters: the name


def test_point_label_uses_recorded_params_or_the_name(reports):
    """Short params become key=value pairs (prompts left out); no params at all falls back to the name."""
    base = reports["sc4"]
    cli = dataclasses.replace(base, settings={"params": {"n": "8", "k": "4",
                                                          "prompt": "Solve this problem carefully\n{problem}"}})
    assert point_label(cli) == "n=8, k=4"
    assert point_label(dataclasses.replace(base, settings={"topology": "sc"})) == "sc4"
    assert point_label(dataclasses.replace(base, settings={"params": {}})) == "sc4"
    assert point_label(reports["rsa"]).startswith("n=4, k=2, steps=1")
    assert "Solve" not in point_label(reports["rsa"])


def test_cost_axis_keeps_only_priced_reports(reports):
    """x="cost" places priced reports at dollars per problem and leaves unpriced ones out; none priced is an error."""
    priced, unpriced = reports["rsa_priced"], reports["rsa"]
    assert priced.cost is not None and priced.cost.value > 0
    assert unpriced.cost is None
    series = budget_points([unpriced, priced, reports["sc1"]], x="cost")
    assert list(series) == ["rsa"]
    assert [(p.name, p.x, p.label) for p in series["rsa"]] == [("rsa-priced", priced.cost.value, "n=4")]
    with pytest.raises(EvaluationError, match="known prices"):
        budget_points([unpriced, reports["sc1"]], x="cost")
    with pytest.raises(EvaluationError, match="known prices"):
        plot_budget([unpriced], Path("never-written.png"), x="cost")


def test_budget_axis_must_be_tokens_or_cost(reports):
    """Any other x is a ValueError naming the choices."""
    with pytest.raises(ValueError, match="'tokens' or 'cost'"):
        budget_points([reports["sc1"]], x="dollars")  # type: ignore[arg-type]


def test_plot_budget_writes_a_png_and_creates_folders(reports, tmp_path):
    """Tokens and cost plots are PNG files at the given path, parent folders made."""
    target = tmp_path / "deep" / "er" / "budget.png"
    out = plot_budget(list(reports.values()), target, title="sweep")
    assert out == target
    assert_png(target)
    assert_png(plot_budget([reports["rsa_priced"], reports["rsa"]], str(tmp_path / "cost.png"), x="cost"))


def test_plot_budget_with_nothing_to_plot_is_an_error(tmp_path):
    """No report: an EvaluationError and no file."""
    with pytest.raises(EvaluationError, match="no evaluation to plot"):
        plot_budget([], tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()


def test_plot_pass_at_k_draws_reports_with_curves(reports, tmp_path):
    """Reports with pass@k (single k included) make a PNG; reports without any are refused."""
    assert reports["sc4"].pass_at_k and reports["sc4"].majority_at_k
    assert list(reports["one"].pass_at_k) == [1]
    assert_png(plot_pass_at_k([reports["sc4"], reports["one"], reports["rsa"]], tmp_path / "pass.png"))
    assert_png(plot_pass_at_k([reports["one"]], tmp_path / "single-k.png", final_accuracy=False))
    bare = dataclasses.replace(reports["sc4"], pass_at_k={}, majority_at_k={})
    with pytest.raises(EvaluationError, match="pass@k"):
        plot_pass_at_k([bare], tmp_path / "none.png")


def test_plot_majority_gain_needs_aggregation_rows(reports, tmp_path):
    """RSA's aggregation calls fill gain bins and make a panel; a vote-only topology has none and is refused."""
    assert sum(b.problems for b in reports["rsa"].gain) > 0
    assert all(b.problems == 0 for b in reports["sc4"].gain)
    assert_png(plot_majority_gain([reports["sc4"], reports["rsa"], reports["rsa_priced"]], tmp_path / "gain.png"))
    with pytest.raises(EvaluationError, match="aggregation"):
        plot_majority_gain([reports["sc4"], reports["one"]], tmp_path / "none.png")


def test_gain_panel_leaves_empty_bins_as_gaps_and_labels_bars_with_counts(reports):
    """Two bars per non-empty bin only, each labelled with its bin's call count; every bin keeps its tick."""
    from matplotlib.figure import Figure

    from scaffold.evaluation._plots import _gain_panel

    bins = reports["rsa"].gain
    filled = [b for b in bins if b.problems]
    assert 0 < len(filled) < len(bins)  # the cycling script puts every call in one bin: there are gaps to leave
    axes = Figure().add_subplot()
    _gain_panel(axes, "rsa", bins)
    assert len(axes.patches) == 2 * len(filled)
    heights = sorted(round(p.get_height(), 6) for p in axes.patches)
    expected = [b.majority_accuracy for b in filled] + [b.aggregator_accuracy for b in filled]
    assert heights == sorted(round(h or 0.0, 6) for h in expected)
    counts = [t.get_text() for t in axes.texts]
    assert counts == [str(b.problems) for b in filled] * 2
    ticks = [t.get_text() for t in axes.get_xticklabels()]
    assert ticks == ["[0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1]"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["sc4", "sc1"], {"accuracy_vs_tokens.png", "pass_at_k.png"}),
        (["rsa"], {"accuracy_vs_tokens.png", "pass_at_k.png", "majority_gain.png"}),
        (["sc1", "rsa_priced"], {"accuracy_vs_tokens.png", "accuracy_vs_cost.png", "pass_at_k.png",
                                 "majority_gain.png"}),
    ],
)
def test_write_plots_writes_exactly_the_plots_with_data(reports, tmp_path, names, expected):
    """The cost, pass@k and gain plots appear only when some report has prices, curves or aggregation rows."""
    bare = {name: reports[name] for name in names}
    out = tmp_path / "plots"
    written = write_plots(bare.values(), out)
    assert {p.name for p in written} == expected
    assert {p.name for p in out.iterdir()} == expected
    for path in written:
        assert path.parent == out
        assert_png(path)


def test_write_plots_without_pass_at_k(reports, tmp_path):
    """A report with no samples-node curves gets the budget plot only."""
    bare = dataclasses.replace(reports["one"], pass_at_k={}, majority_at_k={})
    assert [p.name for p in write_plots([bare], tmp_path)] == ["accuracy_vs_tokens.png"]


def test_missing_matplotlib_is_an_evaluation_error(reports, tmp_path, monkeypatch):
    """Without matplotlib a plot raises EvaluationError naming the extra to install; budget_points still works."""
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)
    assert budget_points([reports["sc1"]])
    with pytest.raises(EvaluationError, match=r"pip install 'scaffold-sdk\[plot\]'"):
        plot_budget([reports["sc1"]], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()

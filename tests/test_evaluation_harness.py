"""Evaluations as a library: recorded, scored, resumable, reported from the store alone, compared."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import scaffold as sf
from scaffold._errors import EvaluationError, ServerError
from scaffold.evaluation import (
    COLUMNS,
    EVAL_SOURCE,
    comparison_rows,
    evaluate,
    load_report,
    paired_difference,
    pass_at_k,
    to_csv,
    to_markdown,
)
from scaffold.testing import ScriptedBackend

ROWS = [{"problem": f"{a}+{a}", "answer": str(2 * a)} for a in (1, 2, 3, 4)]


@sf.graph
def sc(problem: str, *, n: int = 4) -> Any:
    return sf.vote(sf.sample("Solve {problem}", model="m", n=n, name="samples"), name="vote")


@sf.graph
def agg(problem: str) -> Any:
    pop = sf.sample("Solve {problem}", model="m", n=4, name="step0")
    return sf.aggregate(pop, model="m", prompt="Pick: {problem} {candidates}", k=4, n=1, name="step1")


def cycling(answers_by_problem: dict[str, list[str]]) -> ScriptedBackend:
    """Sample ``i`` of a problem answers ``answers_by_problem[problem][i % len]``; aggregations answer right."""
    turns: dict[str, int] = {}

    def reply(request: Any) -> str:
        text = request.last_content
        problem = next(p for p in answers_by_problem if p in text)
        if text.startswith("Pick"):
            return rf"\boxed{{{eval(problem)}}}"
        turn = turns.get(problem, 0)
        turns[problem] = turn + 1
        options = answers_by_problem[problem]
        return rf"\boxed{{{options[turn % len(options)]}}}"

    return ScriptedBackend(reply)


def test_an_evaluation_scores_every_trace_and_reports_from_the_store(tmp_path: Path) -> None:
    """Accuracy, pass@k, maj@k and per-node accuracy follow the recorded answers; a new Store reads the same."""
    answers = {"1+1": ["2", "2", "3", "2"], "2+2": ["5", "4", "5", "6"], "3+3": ["7", "7", "7", "7"],
               "4+4": ["8", "9", "9", "8"]}
    db = str(tmp_path / "e.db")
    report = evaluate(sc.build(), ROWS, {"m": cycling(answers)}, name="sc4", store=db)
    # the vote: 2 (right), 5 (wrong), 7 (wrong), 8 (tie 8/9, first seen wins: right)
    assert [o.correct for o in report.outcomes] == [True, False, False, True]
    assert report.accuracy.value == 0.5 and report.finished == 4 and report.complete
    counts = [(4, 3), (4, 1), (4, 0), (4, 2)]
    for k in (1, 2, 4):
        assert report.pass_at_k[k].value == pytest.approx(sum(pass_at_k(n, c, k) for n, c in counts) / 4)
    assert report.majority_at_k[4].value == pytest.approx(0.5)
    assert report.node_accuracy == {"samples": pytest.approx(6 / 16)}
    assert report.samples_node == "samples" and report.calls == 4.0 and report.tokens.value > 0
    assert report.accuracy.low <= 0.5 <= report.accuracy.high
    with sf.Store(db) as store:
        again = load_report(store, "sc4")
        rewards = store.rewards_of([f"sc4-{i}" for i in range(4)], source=EVAL_SOURCE)
        assert {o.run_id for o in again.outcomes} == {f"sc4-{i}" for i in range(4)}
        assert store.evaluation("sc4").problems == 4
    assert again.summary() == report.summary()
    assert len(rewards) == 4 * 4 + 4  # every sample and every run, once
    assert {r["metadata"]["reference"] for r in rewards if r["call_id"] is None} == {"2", "4", "6", "8"}


def test_majority_at_k_votes_equivalent_answers_together(tmp_path: Path) -> None:
    """'1/2', '0.5' and '\\frac{1}{2}' are one right answer (3 votes) against two '3's; ties go to the first.

    maj@k is the mean over every k-subset: k=2 -> 5 of 10 pairs, k=4 -> 2 of 5 subsets, k=5 -> right.
    """
    rows = [{"problem": "half", "answer": "0.5"}]
    backend = cycling({"half": ["3", "1/2", "0.5", "3", "\\frac{1}{2}"]})
    db = str(tmp_path / "e.db")
    report = evaluate(sc.build(n=5), rows, {"m": backend}, name="half", store=db)
    assert report.outcomes[0].correct is True
    assert report.pass_at_k[1].value == pytest.approx(3 / 5)
    assert report.majority_at_k[2].value == pytest.approx(0.5)
    assert report.majority_at_k[4].value == pytest.approx(0.4)
    with sf.Store(db) as store:
        assert load_report(store, "half", ks=[5]).majority_at_k[5].value == 1.0


def test_a_failed_row_is_recorded_and_the_same_name_resumes_only_what_is_missing(tmp_path: Path) -> None:
    """A provider error fails one row (counted wrong, not scored); evaluating again sends only that row's calls."""
    db = str(tmp_path / "e.db")

    def flaky(request: Any) -> Any:
        if "3+3" in request.last_content:
            raise ServerError("the provider is down")
        return rf"\boxed{{{eval(request.last_content.split()[-1])}}}"

    first = evaluate(sc.build(n=2), ROWS, {"m": ScriptedBackend(flaky)}, name="resume", store=db)
    assert first.finished == 3 and first.failed == 1 and not first.complete
    assert first.accuracy.value == 0.75  # the failed row counts as wrong
    good = ScriptedBackend(lambda r: rf"\boxed{{{eval(r.last_content.split()[-1])}}}")
    second = evaluate(sc.build(n=2), ROWS, {"m": good}, name="resume", store=db)
    assert good.calls == 2  # only the failed row's two samples
    assert second.complete and second.accuracy.value == 1.0
    with sf.Store(db) as store:
        run_rewards = [r for r in store.rewards_of([f"resume-{i}" for i in range(4)], source=EVAL_SOURCE)
                       if r["call_id"] is None]
    assert sorted(r["run_id"] for r in run_rewards) == [f"resume-{i}" for i in range(4)]


def test_a_name_recorded_with_other_settings_is_refused(tmp_path: Path) -> None:
    """Reusing a name with another parameter or row count would mix evaluations: the error says what differs."""
    db = str(tmp_path / "e.db")
    backend = ScriptedBackend(lambda r: r"\boxed{2}")
    evaluate(sc.build(n=2), ROWS, {"m": backend}, name="same", store=db)
    with pytest.raises(EvaluationError, match="other settings.*params"):
        evaluate(sc.build(n=3), ROWS, {"m": backend}, name="same", store=db)
    with pytest.raises(EvaluationError, match="4 problems != 3"):
        evaluate(sc.build(n=2), ROWS[:3], {"m": backend}, name="same", store=db)


@pytest.mark.parametrize("rows, name, store, message", [
    ([], "e", "DB", "at least one row"),
    ([{"problem": "1+1"}], "e", "DB", "row 0 needs 'answer'"),
    ([{"question": "1+1", "answer": "2"}], "e", "DB", "row 0 needs 'problem'"),
    (ROWS, "has space", "DB", "without spaces"),
    (ROWS, "e", None, "store=None"),
])
def test_bad_evaluation_input_is_a_typed_error(tmp_path: Path, rows: Any, name: str, store: Any, message: str) -> None:
    backend = ScriptedBackend(lambda r: r"\boxed{2}")
    target = str(tmp_path / "e.db") if store == "DB" else store
    with pytest.raises(EvaluationError, match=message):
        evaluate(sc.build(n=2), rows, {"m": backend}, name=name, store=target)
    assert backend.calls == 0


def test_aggregation_calls_give_agglm_gain_rows(tmp_path: Path) -> None:
    """Each aggregation is one row: its candidates' majority share and correctness, and its own correctness."""
    answers = {"1+1": ["3", "3", "3", "2"], "2+2": ["4", "4", "5", "4"], "3+3": ["1", "2", "3", "4"],
               "4+4": ["8", "8", "8", "8"]}
    report = evaluate(agg.build(), ROWS, {"m": cycling(answers)}, name="agg", store=str(tmp_path / "e.db"))
    rows = [row for o in report.outcomes for row in o.aggregations]
    assert [(r.majority_share, r.majority_correct, r.aggregator_correct) for r in rows] == [
        (0.75, False, True), (0.75, True, True), (0.25, False, True), (1.0, True, True)]
    assert report.node_accuracy == {"step0": pytest.approx(8 / 16), "step1": 1.0}
    by_bin = {(b.low, b.high): (b.problems, b.gain) for b in report.gain}
    assert by_bin[(0.5, 0.75)] == (2, pytest.approx(0.5))
    assert by_bin[(0.0, 0.25)] == (1, pytest.approx(1.0))


def test_comparison_tables_and_the_paired_difference(tmp_path: Path) -> None:
    """Rows sorted by tokens; CSV has the documented columns; the paired difference counts problem by problem."""
    db = str(tmp_path / "e.db")
    right = ScriptedBackend(lambda r: rf"\boxed{{{eval(r.last_content.split()[-1])}}}")
    wrong_on_two = ScriptedBackend(lambda r: r"\boxed{0}" if r.last_content.endswith(("1+1", "2+2"))
                                   else rf"\boxed{{{eval(r.last_content.split()[-1])}}}")
    big = evaluate(sc.build(n=4), ROWS, {"m": right}, name="big", store=db, dataset="four")
    small = evaluate(sc.build(n=1), ROWS, {"m": wrong_on_two}, name="small", store=db, dataset="four")
    rows = comparison_rows([big, small])
    assert [r["evaluation"] for r in rows] == ["small", "big"]  # cheaper first
    assert rows[0]["accuracy"] == 0.5 and rows[1]["accuracy"] == 1.0 and rows[1]["majority_k"] == 4
    csv_lines = to_csv(rows).splitlines()
    assert csv_lines[0].split(",") == list(COLUMNS) and len(csv_lines) == 3
    assert to_markdown(rows).count("\n") == 3
    pair = paired_difference(big, small)
    assert (pair.problems, pair.only_a, pair.only_b) == (4, 2, 0)
    assert pair.difference.value == pytest.approx(0.5) and pair.token_ratio == pytest.approx(4.0, rel=0.2)
    other = evaluate(sc.build(n=1), ROWS, {"m": right}, name="other", store=db, dataset="elsewhere")
    with pytest.raises(EvaluationError, match="same problems"):
        paired_difference(big, other)


def test_a_version_1_store_gains_the_evaluations_table(tmp_path: Path) -> None:
    """A store written before evaluations existed (schema 1) is upgraded on open and can hold one."""
    db = tmp_path / "old.db"
    sf.Store(str(db)).close()
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE evaluations"))
        conn.execute(sa.text("UPDATE schema_info SET version = 1"))
    engine.dispose()
    report = evaluate(sc.build(n=1), ROWS[:1], {"m": ScriptedBackend(lambda r: r"\boxed{2}")}, name="new",
                      store=str(db))
    assert report.accuracy.value == 1.0
    with sf.Store(str(db)) as store:
        assert [e.name for e in store.evaluations()] == ["new"]


def test_an_empty_report_has_no_numbers_rather_than_wrong_ones(tmp_path: Path) -> None:
    """Every row failing: accuracy 0 over the problems, no pass@k, tokens NaN-free."""
    failing = ScriptedBackend(lambda r: ServerError("down"))
    report = evaluate(sc.build(n=2), ROWS[:2], {"m": failing}, name="down", store=str(tmp_path / "e.db"))
    assert report.finished == 0 and report.failed == 2 and report.accuracy.value == 0.0
    assert report.pass_at_k == {} and not math.isnan(report.tokens.value)

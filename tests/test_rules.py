"""Rule aggregators and set operations: vote clustering, weighted vote, best-of, top-k, map_traces."""

from __future__ import annotations

import asyncio

import pytest
from helpers import boxed

import scaffold as sf
from scaffold.types import Trace


def run_rule(make, values):
    """Run a one-rule graph over fixed candidates and return its output trace."""

    @sf.graph
    def g():
        return make(sf.candidates(values))

    return g.run_sync({}, models={}, run_id="r", store=None).output


def test_equivalent_answers_form_one_cluster():
    """ "1/2", "0.5" and "\\frac{1}{2}" are one cluster; the counts are recorded in metadata["counts"]."""
    out = run_rule(sf.vote, [boxed("1/2"), boxed("3"), boxed("0.5"), boxed(r"\frac{1}{2}"), boxed("3")])
    assert out.answer == "1/2"
    assert out.metadata["counts"] == [["1/2", 3.0, 3], ["3", 2.0, 2]]
    assert out.metadata["share"] == pytest.approx(0.6)
    assert out.metadata["voters"] == 5
    assert out.metadata["winner"] == "r/candidates#0"
    assert out.text == boxed("1/2")


def test_vote_follows_the_majority_even_when_it_is_wrong():
    """The vote reports the most common answer, not the correct one (it knows nothing else)."""
    out = run_rule(sf.vote, [boxed(5), boxed(4), boxed(5), boxed(5)])
    assert out.answer == "5"
    assert out.metadata["counts"][0] == ["5", 3.0, 3]


def test_vote_ties_go_to_the_answer_seen_first():
    """On a tie the cluster seen first wins."""
    assert run_rule(sf.vote, [boxed(2), boxed(1), boxed(1), boxed(2)]).answer == "2"


def test_vote_ignores_members_without_an_answer():
    """Members with no extractable answer do not vote; a set without answers yields answer None."""
    out = run_rule(sf.vote, ["no answer here", boxed(3)])
    assert out.answer == "3"
    assert out.metadata["counts"] == [["3", 1.0, 1]]
    empty = run_rule(sf.vote, ["nothing", "still nothing"])
    assert empty.answer is None
    assert empty.metadata["counts"] == []


def test_vote_with_a_custom_equivalence():
    """``equivalence=`` replaces mathematical equivalence (here: case-insensitive strings)."""
    out = run_rule(
        lambda s: sf.vote(s, equivalence=lambda a, b: a.lower() == b.lower()), [boxed("Yes"), boxed("no"), boxed("YES")]
    )
    assert out.answer == "Yes"
    assert out.metadata["counts"][0] == ["Yes", 2.0, 2]


def test_weighted_vote_can_overturn_the_majority():
    """A heavy minority beats a light majority in weighted_vote; weights are summed per cluster."""
    values = [
        {"text": boxed(1), "score": 0.1},
        {"text": boxed(1), "score": 0.2},
        {"text": boxed(2), "score": 0.9},
    ]
    assert run_rule(sf.vote, values).answer == "1"
    out = run_rule(lambda s: sf.weighted_vote(s, weight=lambda t: t.metadata["score"]), values)
    assert out.answer == "2"
    assert out.metadata["counts"][0][:2] == ["2", pytest.approx(0.9)]
    assert out.metadata["counts"][1][2] == 2


def test_best_of_with_an_async_scorer():
    """best_of awaits an async scorer and keeps the highest-scoring member, recording every score."""

    async def scorer(trace: Trace) -> float:
        await asyncio.sleep(0.001)
        return float(len(trace.text))

    out = run_rule(lambda s: sf.best_of(s, scorer=scorer), [boxed(1), boxed(22222), boxed(333)])
    assert out.answer == "22222"
    assert out.metadata["scores"] == [float(len(boxed(1))), float(len(boxed(22222))), float(len(boxed(333)))]
    assert out.metadata["winner"] == "r/candidates#1"
    assert out.inputs == ("r/candidates#0", "r/candidates#1", "r/candidates#2")


def test_best_of_with_a_sync_scorer():
    """best_of with a plain scorer picks the maximum."""
    out = run_rule(lambda s: sf.best_of(s, scorer=lambda t: -int(t.answer)), [boxed(5), boxed(2), boxed(9)])
    assert out.answer == "2"


def test_top_k_orders_by_score_and_keeps_set_order_on_ties():
    """top_k returns the k best members, best first, ties in set order."""

    @sf.graph
    def g():
        return sf.top_k(sf.candidates(["b", "ccc", "a", "dd", "eee"]), k=3, score=lambda t: len(t.text))

    result = g.run_sync({}, models={}, run_id="r")
    assert [t.text for t in result.output] == ["ccc", "eee", "dd"]
    assert [t.id for t in result.output] == ["r/candidates#1", "r/candidates#4", "r/candidates#3"]


def test_map_traces_makes_one_new_trace_per_member():
    """map_traces applies a function to each member; each result is a rule trace reading only that member."""

    @sf.graph
    def g():
        return sf.map_traces(sf.candidates([boxed(1), boxed(2)]), lambda t: boxed(int(t.answer) * 10))

    result = g.run_sync({}, models={}, run_id="r")
    assert [t.answer for t in result.output] == ["10", "20"]
    assert [t.inputs for t in result.output] == [("r/candidates#0",), ("r/candidates#1",)]
    assert all(t.kind is sf.TraceKind.RULE for t in result.output)


def test_map_traces_accepts_rule_output():
    """A RuleOutput from the map function sets text, answer and metadata directly."""

    @sf.graph
    def g():
        return sf.map_traces(sf.candidates(["x"]), lambda t: sf.RuleOutput("y", answer="9", metadata={"why": 1}))

    out = g.run_sync({}, models={}).output[0]
    assert (out.text, out.answer, dict(out.metadata)) == ("y", "9", {"why": 1})


def test_cluster_answers_sums_weights_and_orders_best_first():
    """cluster_answers groups equivalent answers, sums weights and returns the heaviest first."""
    answers = ["2", "0.5", "1/2", None]
    traces = [Trace(id=str(i), run_id="r", node="s", index=i, answer=a) for i, a in enumerate(answers)]
    clusters = sf.cluster_answers(traces)
    assert [(a, w, [t.id for t in m]) for a, w, m in clusters] == [("0.5", 2.0, ["1", "2"]), ("2", 1.0, ["0"])]


@pytest.mark.parametrize(
    ("answers", "share", "reached"),
    [
        ("1112", 0.75, True),
        ("1112", 0.8, False),
        ("1122", 0.5, True),
        ("", 0.5, False),
    ],
)
def test_agreement(answers, share, reached):
    """agreement(share) holds when the largest answer cluster has at least that share of the set."""
    traces = [Trace(id=str(i), run_id="r", node="s", index=i, answer=a) for i, a in enumerate(answers)]
    assert sf.agreement(share)(traces) is reached


def test_agreement_share_must_be_a_fraction():
    """agreement(0) and agreement(1.5) are rejected."""
    for share in (0, 1.5):
        with pytest.raises(sf.GraphDefinitionError):
            sf.agreement(share)

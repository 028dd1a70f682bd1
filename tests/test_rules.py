"""Rule aggregators and set operations: vote clustering, weighted vote, best-of, top-k, map_traces."""

from __future__ import annotations

import asyncio

import pytest
from helpers import boxed

import scaffold as sf
from scaffold._types import Trace


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
        await asyncio.sleep(0)  # suspends once, as a scorer waiting on I/O would
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


# -- rules and selections over several sets -----------------------------------------------------------
def test_rule_reads_a_second_set_and_records_all_of_it_as_lineage():
    """sf.rule(members, fn, using=verdicts): fn sees both sets; the new trace reads every trace it was given."""
    seen = []

    def pick(members, verdicts):
        seen.append((len(members), len(verdicts)))
        score = {v.inputs[0]: float(v.text) for v in verdicts}
        best = max(members, key=lambda t: score[t.id])
        return sf.RuleOutput(best.text, best.answer, {"score": score[best.id]})

    @sf.graph
    def judged(problem):
        drafts = sf.sample("{problem}", model="solver", n=3)
        verdicts = sf.aggregate(drafts, model="judge", select="each", prompt="grade {candidates}")
        return sf.rule(drafts, pick, using=verdicts)

    import itertools
    import re

    from scaffold.testing import ScriptedBackend

    grades = {"0": "0.1", "1": "0.9", "2": "0.5"}
    counter = itertools.count()
    solver = ScriptedBackend(lambda r: (lambda i: f"draft {i}: " + boxed(i))(next(counter)))
    judge = ScriptedBackend(lambda r: grades[re.search(r"draft (\d)", r.last_content).group(1)])
    result = judged.run_sync({"problem": "p"}, models={"solver": solver, "judge": judge}, run_id="j", store=None)
    assert seen == [(3, 3)]
    assert result.answer == "1" and result.output.metadata == {"score": 0.9}
    assert len(result.output.inputs) == 6
    assert {i.split("/")[1].split("#")[0] for i in result.output.inputs} == {"sample", "aggregate"}


def test_rule_returning_text_extracts_its_answer_and_a_bad_return_fails_the_run():
    """A rule may return a plain string (answer extracted); returning anything else is a clear RunError."""
    out = run_rule(lambda s: sf.rule(s, lambda ts: "joined: " + boxed(len(ts))), ["a", "b"])
    assert out.text.startswith("joined") and out.answer == "2"
    with pytest.raises(sf.RunError, match="RuleOutput or a string"):
        run_rule(lambda s: sf.rule(s, lambda ts: 42), ["a"])


def test_select_keeps_the_chosen_members_unchanged_best_first():
    """sf.select passes the chosen traces through (same ids), in the order the function returns them."""
    @sf.graph
    def g():
        drafts = sf.candidates(["a", "bbb", "cc"])
        lengths = sf.candidates(["1", "3", "2"])
        return sf.select(drafts, 2, lambda ms, ls: [ms[i] for i in sorted(range(3), key=lambda i: -int(ls[i].text))],
                         using=lengths)

    out = g.run_sync({}, models={}, run_id="s", store=None).output
    assert [t.text for t in out] == ["bbb", "cc"]
    assert [t.id for t in out] == ["s/candidates#1", "s/candidates#2"]
    assert g.build().describe().count("select") >= 1


def test_select_refuses_traces_that_are_not_members_and_bad_k():
    """Returning a trace from outside the set fails the run; k larger than the set fails at build time."""
    @sf.graph
    def outsider():
        drafts = sf.candidates(["a", "b"])
        others = sf.candidates(["z"])
        return sf.select(drafts, 1, lambda ms, os: list(os), using=others)

    with pytest.raises(sf.RunError, match="distinct members"):
        outsider.run_sync({}, models={}, store=None)

    @sf.graph
    def too_many():
        return sf.select(sf.candidates(["a"]), 2, lambda ms: ms)

    with pytest.raises(sf.SubsetSizeError):
        too_many.build()


def test_pairs_selector_reads_every_pair_or_balanced_random_pairs():
    """Pairs() is every unordered pair once; Pairs(per_member=m) compares each member m times, seeded."""
    import random
    from collections import Counter

    assert sf.Pairs().groups(4, random.Random(0)) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    pairs = sf.Pairs(per_member=3).groups(8, random.Random(5))
    assert len(pairs) == 12 and len({tuple(sorted(p)) for p in pairs}) == 12
    assert set(Counter(i for p in pairs for i in p).values()) == {3}
    assert pairs == sf.Pairs(per_member=3).groups(8, random.Random(5))
    assert sf.Pairs(per_member=3).groups(8, random.Random(6)) != pairs
    with pytest.raises(sf.SubsetSizeError):
        sf.Pairs().check(1)

    @sf.graph
    def compare(problem):
        drafts = sf.sample("{problem}", model="m", n=5)
        return sf.aggregate(drafts, model="m", select=sf.Pairs(per_member=2), prompt="which? {candidates}")

    assert compare.build().count_calls() == {"m": 5 + 5}


def test_rule_with_inputs_true_is_given_the_runs_inputs():
    """sf.rule(..., inputs=True) calls fn(members, inputs=<run inputs>); without it no keyword is passed."""
    @sf.graph
    def g(problem):
        drafts = sf.candidates(["a", "b"])
        return sf.rule(drafts, lambda ms, *, inputs: sf.RuleOutput(f"{inputs['problem']}:{len(ms)}"), inputs=True)

    assert g.run_sync({"problem": "P"}, models={}, store=None).output.text == "P:2"

"""graphs/: best-of-N, weighted majority and pairwise ranking on scripted judges; the pocket step verifier."""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

import pytest
from helpers import boxed

import graphs
import scaffold as sf
from graphs.best_of_n import judged_scores
from graphs.pairwise import pairwise_scores
from scaffold.pocket import PocketTask
from scaffold.testing import ScriptedBackend

_BOXED = re.compile(r"\\boxed\{([^{}]+)\}")  # a filled box: the prompts themselves say \\boxed{}


def counter_backend(answers: list[Any]) -> ScriptedBackend:
    """Replies ``draft i`` with the i-th answer (cycling), every reply distinct."""
    counter = itertools.count()
    return ScriptedBackend(lambda r: (lambda i: f"draft {i} " + boxed(answers[i % len(answers)]))(next(counter)))


def scoring_judge(scores: dict[str, str]) -> ScriptedBackend:
    """A judge that scores the one candidate it reads by its answer (``scores[answer]`` is its last line)."""
    return ScriptedBackend(lambda r: "Checked.\n" + scores[_BOXED.findall(r.last_content)[-1]])


def larger_wins(r: sf.Request) -> str:
    """A consistent judge: the candidate with the larger boxed number wins."""
    a, b = (int(x) for x in _BOXED.findall(r.last_content))
    return "Winner: 1" if a > b else "Winner: 2"


def seeded_solver(r: sf.Request) -> str:
    """Samples with a number drawn from the call's seed; refinements answer one more than the best elite."""
    found = [int(x) for x in _BOXED.findall(r.last_content)]
    if "best solutions found so far" in r.last_content:
        return f"refined {found} " + boxed(max(found) + 1)
    return f"draft {r.seed} " + boxed((r.seed or 0) % 1000)


def run(graph: sf.Graph, **models: ScriptedBackend) -> sf.RunResult:
    """Run ``graph`` on problem ``p`` with the given backends, seed 0, nothing recorded."""
    return graph.run_sync({"problem": "p"}, models=models, store=None, seed=0)


# -- best-of-N and weighted majority ------------------------------------------------------------------


def test_best_of_n_calls_the_judge_once_per_sample() -> None:
    """n samples and n judge calls; a verifier replaces the judge calls."""
    solver, judge = counter_backend([1, 2]), scoring_judge({"1": "Score: 1", "2": "Score: 2"})
    result = run(graphs.best_of_n.build(n=6), solver=solver, judge=judge)
    assert (solver.calls, judge.calls) == (6, 6)
    assert graphs.best_of_n.build(n=6, verifier=lambda p, t: 0.0).count_calls() == {"solver": 6}
    assert len(result.node("samples")) == 6 and len(result.node("judgements")) == 6


def test_each_judgement_reads_exactly_one_sample() -> None:
    """Every sample is judged once, by a judgement that read it alone."""
    result = run(graphs.best_of_n.build(n=5), solver=counter_backend([1, 2]),
                 judge=scoring_judge({"1": "Score: 1", "2": "Score: 2"}))
    judgements = result.node("judgements")
    assert all(len(j.inputs) == 1 for j in judgements)
    assert sorted(j.inputs[0] for j in judgements) == sorted(s.id for s in result.node("samples"))


def test_best_of_n_returns_the_judges_favourite_even_in_the_minority() -> None:
    """One sample of 5 scored 9 beats four scored 2; every score is in the metadata."""
    result = run(graphs.best_of_n.build(n=5), solver=counter_backend([3, 3, 5, 3, 3]),
                 judge=scoring_judge({"3": "Score: 2", "5": "Score: 9"}))
    samples = result.node("samples")
    assert result.answer == "5"
    assert result.output.metadata["winner"] == next(s.id for s in samples if s.answer == "5")
    assert sorted(result.output.metadata["scores"]) == [2.0, 2.0, 2.0, 2.0, 9.0]


def test_unreadable_scores_rank_lowest() -> None:
    """A sample whose judgement has no score loses to any scored one, even a score of 0."""
    result = run(graphs.best_of_n.build(n=4), solver=counter_backend([1, 2, 1, 1]),
                 judge=scoring_judge({"1": "I cannot tell.", "2": "Score: 0"}))
    assert result.answer == "2"
    assert result.output.metadata["scores"].count(None) == 3


def test_best_of_n_verifier_gets_the_problem_and_the_sample() -> None:
    """``verifier(problem, trace)`` gets the run's ``problem`` input and each sample."""
    seen: list[str] = []

    def verifier(problem: str, trace: sf.Trace) -> float:
        seen.append(problem)
        return float(trace.answer or 0)

    result = graphs.best_of_n.build(n=4, verifier=verifier).run_sync(
        {"problem": "12+34 (a {brace})"}, models={"solver": counter_backend([3, 9, 4, 1])}, store=None)
    assert result.answer == "9"
    assert seen == ["12+34 (a {brace})"] * 4
    assert result.output.metadata["scores"] == [3.0, 9.0, 4.0, 1.0]


def test_weighted_majority_can_overturn_the_plain_majority() -> None:
    """Three samples scored 1 lose to two scored 9; the vote's metadata has the weighted counts."""
    result = run(graphs.weighted_majority.build(n=5), solver=counter_backend([3, 3, 5, 3, 5]),
                 judge=scoring_judge({"3": "Score: 1", "5": "Score: 9"}))
    assert result.answer == "5"
    meta = result.output.metadata
    assert meta["counts"] == [["5", 18.0, 2], ["3", 3.0, 3]]
    assert meta["share"] == pytest.approx(18 / 21)
    assert meta["voters"] == 5
    plain = run(graphs.self_consistency.build(n=5), solver=counter_backend([3, 3, 5, 3, 5]))
    assert plain.answer == "3"


def test_weighted_majority_with_a_verifier_and_equivalent_answers() -> None:
    """Verifier scores are the weights; equivalent answers (0.5, 1/2) pool theirs."""
    weights = {"0.5": 2.0, "1/2": 2.0, "3": 3.0}
    graph = graphs.weighted_majority.build(n=3, verifier=lambda p, t: weights[t.answer or ""])
    result = run(graph, solver=counter_backend(["0.5", "3", "1/2"]))
    assert result.answer == "0.5"
    assert result.output.metadata["counts"] == [["0.5", 4.0, 2], ["3", 3.0, 1]]


def test_weighted_majority_counts_unreadable_and_negative_scores_as_zero() -> None:
    """With no positive weight at all the answer is the first seen, with share 0."""
    result = run(graphs.weighted_majority.build(n=3), solver=counter_backend([4, 6, 6]),
                 judge=scoring_judge({"4": "Score: -2", "6": "no score"}))
    assert result.answer == "4"
    assert result.output.metadata["share"] == 0.0


def test_parse_score_edge_cases() -> None:
    """The last score wins; decimals, negatives, markdown and '=' are read; none gives None."""
    assert graphs.parse_score("Score: 3 ... final Score: 7") == 7.0
    assert graphs.parse_score("score = 6.5") == 6.5
    assert graphs.parse_score("**Score**: -1") == -1.0
    assert graphs.parse_score("SCORE:10/10") == 10.0
    assert graphs.parse_score("I'd give it a seven.") is None
    assert graphs.parse_score("") is None


def test_judged_scores_match_judgements_to_members_by_lineage() -> None:
    """Scores follow the member each judgement read, not the judgements' order."""
    t = lambda i, text="", inputs=(): sf.Trace(id=i, run_id="r", node="n", index=0, text=text, inputs=inputs)  # noqa: E731
    members = [t("a"), t("b"), t("c")]
    judged = [t("j1", "Score: 5", ("c",)), t("j0", "Score: 1", ("a",))]
    assert judged_scores(members, judged) == [1.0, None, 5.0]


# -- pairwise ranking ---------------------------------------------------------------------------------


def test_pairwise_ranking_call_counts() -> None:
    """Defaults: 8 samples + 2 x 4 refinements; 3 generations of 8 x 4 / 2 comparisons."""
    solver, judge = ScriptedBackend(seeded_solver), ScriptedBackend(larger_wins)
    result = run(graphs.pairwise_ranking.build(), solver=solver, judge=judge)
    assert graphs.pairwise_ranking.build().count_calls() == {"solver": 16, "judge": 48}
    assert (solver.calls, judge.calls) == (16, 48)
    assert [len(result.node(f"compare{g}")) for g in range(3)] == [16, 16, 16]
    assert [len(result.node(f"refine{g}")) for g in range(2)] == [4, 4]


def test_pairwise_ranking_lineage() -> None:
    """Comparisons read 2 distinct members of their generation; elites come from it; children read the elites."""
    result = run(graphs.pairwise_ranking.build(), solver=ScriptedBackend(seeded_solver),
                 judge=ScriptedBackend(larger_wins))
    pops = graphs.population_by_generation(result)
    assert [len(p) for p in pops] == [8, 8, 8]
    for g, pop in enumerate(pops):
        ids = {t.id for t in pop}
        assert len(ids) == 8
        for comparison in result.node(f"compare{g}"):
            assert len(comparison.inputs) == 2 and len(set(comparison.inputs)) == 2
            assert set(comparison.inputs) <= ids
        if g < 2:
            children = result.node(f"refine{g}")
            elites = children[0].inputs
            assert len(elites) == 4 and set(elites) <= ids
            assert all(child.inputs == elites for child in children)
    best = result.output
    assert best.metadata["winner"] in {t.id for t in pops[-1]}
    assert best.metadata["members"] == [t.id for t in pops[-1]]


def test_pairwise_elites_are_the_bradley_terry_top_under_a_consistent_judge() -> None:
    """Every pair compared once by a judge preferring larger numbers: elites and best are the largest, in order."""
    drafts = iter([40, 10, 60, 30, 50, 20])
    solver = ScriptedBackend(lambda r: "weak " + boxed(0) if "so far" in r.last_content else boxed(next(drafts)))
    graph = graphs.pairwise_ranking.build(n=6, generations=2, elites=3, comparisons_per_member=5)
    result = run(graph, solver=solver, judge=ScriptedBackend(larger_wins))
    assert len(result.node("compare0")) == 15
    by_id = {t.id: t for t in result.traces}
    assert [by_id[i].answer for i in result.node("refine0")[0].inputs] == ["60", "50", "40"]
    assert result.answer == "60"
    scores = result.output.metadata["scores"]
    assert scores[0] == max(scores) and scores[0] > scores[1] > scores[2]


def test_pairwise_ranking_with_agreement_verdict() -> None:
    """A judge that writes its own answer (7) makes the candidates that agree with it the elites."""
    graph = graphs.pairwise_ranking.build(n=4, generations=1, elites=2, comparisons_per_member=3,
                                          verdict=graphs.agreement_verdict)
    result = run(graph, solver=counter_backend([1, 7, 2, 7]), judge=ScriptedBackend(lambda r: "fixed " + boxed(7)))
    assert result.answer == "7"
    scores = result.output.metadata["scores"]
    assert scores[1] == pytest.approx(scores[3]) and min(scores[1], scores[3]) > max(scores[0], scores[2])


def test_same_seed_same_result() -> None:
    """Two runs with one seed draw the same pairs, ask the same prompts and pick the same best."""

    def once(seed: int) -> tuple[Any, ...]:
        result = graphs.pairwise_ranking.build().run_sync(
            {"problem": "p"}, models={"solver": ScriptedBackend(seeded_solver), "judge": ScriptedBackend(larger_wins)},
            store=None, seed=seed, run_id="r")
        return (result.output.text, result.output.metadata["scores"],
                [c.inputs for g in range(3) for c in result.node(f"compare{g}")])

    assert once(5) == once(5)
    assert once(5) != once(6)


def test_pairwise_ranking_rejects_impossible_sizes() -> None:
    """Elites must leave room for children, and there is at least one generation."""
    with pytest.raises(sf.SubsetSizeError):
        graphs.pairwise_ranking.build(n=4, elites=4)
    with pytest.raises(sf.SubsetSizeError):
        graphs.pairwise_ranking.build(elites=0)
    with pytest.raises(sf.GraphDefinitionError):
        graphs.pairwise_ranking.build(generations=0)
    assert graphs.pairwise_ranking.build(n=4, elites=4, generations=1).count_calls() == {
        "solver": 4, "judge": 8}


def test_bradley_terry_recovers_a_total_order() -> None:
    """A round robin won by the better item every time gives strictly ordered scores."""
    strength = [3, 0, 4, 1, 2]
    outcomes = [(i, j, 1.0 if strength[i] > strength[j] else 0.0) for i in range(5) for j in range(i + 1, 5)]
    scores = graphs.bradley_terry(5, outcomes)
    assert sorted(range(5), key=lambda i: -scores[i]) == [2, 0, 4, 3, 1]
    assert all(s > 0 and s < float("inf") for s in scores)


def test_bradley_terry_symmetric_results_give_equal_scores() -> None:
    """Ties, mutual wins and items never compared all end level."""
    assert graphs.bradley_terry(3, [(0, 1, 0.5), (1, 2, 0.5), (2, 0, 0.5)]) == pytest.approx([1.0, 1.0, 1.0])
    assert graphs.bradley_terry(2, [(0, 1, 1.0), (0, 1, 0.0)]) == pytest.approx([1.0, 1.0])
    assert graphs.bradley_terry(3, []) == [1.0, 1.0, 1.0]


def test_bradley_terry_prior_keeps_an_unbeaten_item_finite_and_shrinks() -> None:
    """One win: finite strength above 1; a larger prior pulls it towards 1; the fitted odds match the data."""
    weak, strong = graphs.bradley_terry(2, [(0, 1, 1.0)], prior=1.0), graphs.bradley_terry(2, [(0, 1, 1.0)], prior=0.01)
    assert 1.0 < weak[0] < strong[0] < float("inf")
    many = [(0, 1, 1.0)] * 30 + [(1, 0, 1.0)] * 10
    s = graphs.bradley_terry(2, many, prior=1e-6)
    assert s[0] / (s[0] + s[1]) == pytest.approx(0.75, abs=1e-3)
    with pytest.raises(ValueError):
        graphs.bradley_terry(2, [], prior=0.0)


def test_pairwise_scores_ignore_comparisons_outside_the_members() -> None:
    """A comparison that read a trace outside the set does not count."""
    t = lambda i, text="", inputs=(): sf.Trace(id=i, run_id="r", node="n", index=0, text=text, inputs=inputs)  # noqa: E731
    members = [t("a"), t("b")]
    scores = pairwise_scores(members, [t("c1", "Winner: 1", ("a", "x")), t("c2", "Winner: 2", ("b", "a"))],
                             graphs.parse_winner)
    assert scores[0] > scores[1]


def test_parse_winner_edge_cases() -> None:
    """The last 'Winner:' line decides; 1 is the first candidate; anything else is a tie."""
    t = lambda text: sf.Trace(id="j", run_id="r", node="c", index=0, text=text)  # noqa: E731
    verdict = lambda text: graphs.parse_winner(t(text), t(""), t(""))  # noqa: E731
    assert verdict("Winner: 1") == 1.0
    assert verdict("winner: candidate 2") == 0.0
    assert verdict("Winner: 2 ... no, Winner: 1") == 1.0
    assert verdict("Winner: 3") == 0.5
    assert verdict("Winner: 12") == 0.5
    assert verdict("both are fine") == 0.5


def test_agreement_verdict() -> None:
    """The candidate agreeing with the judge's answer wins; both, neither or no judge answer is a tie."""
    t = lambda answer: sf.Trace(id="t", run_id="r", node="n", index=0, answer=answer)  # noqa: E731
    assert graphs.agreement_verdict(t("1/2"), t("3"), t("0.5")) == 0.0
    assert graphs.agreement_verdict(t("3"), t("3"), t("4")) == 1.0
    assert graphs.agreement_verdict(t("3"), t("3"), t("3.0")) == 0.5
    assert graphs.agreement_verdict(t("5"), t("3"), t("4")) == 0.5
    assert graphs.agreement_verdict(t(None), t("3"), t("4")) == 0.5


# -- the pocket step verifier -------------------------------------------------------------------------


def test_check_steps_accepts_worked_solutions_and_catches_slips() -> None:
    """Correct solutions score 1.0; every slipped solution scores below 1 (no reference answer needed)."""
    rng = random.Random(0)
    for task in (PocketTask(), PocketTask(digits=2, terms=2), PocketTask(digits=5, terms=4)):
        for _ in range(40):
            problem = task.draw(rng)
            assert task.check_steps(problem, task.solution(problem)) == 1.0
            assert task.check_steps(problem, task.slipped_solution(problem, rng, slips=rng.choice((1, 2)))) < 1.0


def test_check_steps_charges_missing_extra_and_unreadable_lines() -> None:
    """Empty text scores 0; a line added, dropped or garbled costs its share; a leading 0 may be left out."""
    task = PocketTask()
    problem = "482+915+307"
    lines = task.solution(problem).splitlines()
    assert task.check_steps(problem, "") == 0.0
    assert task.check_steps(problem, "\n".join([*lines, "and more"])) == pytest.approx(4 / 5)
    assert task.check_steps(problem, "\n".join(lines[1:])) < 1.0
    assert task.check_steps(problem, "\n".join(["2+5=07+7=14", *lines[1:]])) == pytest.approx(2 / 4)
    assert task.check_steps("123+456+111", task.solution("123+456+111").replace("0690", "690")) == 1.0


def test_check_steps_as_a_best_of_n_verifier() -> None:
    """On pocket prompts the verifier picks the one worked solution among slipped ones."""
    from scaffold.pocket import SOLVE_PROMPT

    task, problem, rng = PocketTask(), "482+915+307", random.Random(1)
    texts = [task.slipped_solution(problem, rng) for _ in range(3)] + [task.solution(problem)]
    turns = itertools.count()
    solver = ScriptedBackend(lambda r: texts[next(turns) % 4])
    graph = graphs.best_of_n.build(n=4, prompt=SOLVE_PROMPT, verifier=lambda p, t: task.check_steps(p, t.text))
    result = graph.run_sync({"problem": problem}, models={"solver": solver}, store=None)
    assert result.answer == "1704"
    assert result.output.metadata["scores"][3] == 1.0

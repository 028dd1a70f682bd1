"""Replay: rule topologies over an evaluation's recorded samples, checked against exact combinatorics computed here
independently (hypergeometric counts, rank probabilities, every subset), against live runs, and for its errors."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Sequence
from fractions import Fraction

import pytest

import scaffold as sf
from scaffold._types import Completion, Request, Usage
from scaffold.evaluation import evaluate
from scaffold.testing import ScriptedBackend


@sf.graph
def self_consistency(problem, *, n: int = 8):
    return sf.vote(sf.sample("{problem}", model="m", n=n))


def planned(plans: dict[str, list[Completion]]) -> ScriptedBackend:
    """A backend answering each problem from its own planned multiset of completions (one per sample)."""

    def answer(request: Request) -> Completion:
        text = request.messages[-1][1]
        return plans[text].pop()

    return ScriptedBackend(answer)


def completion(answer: str, *, score: float = 0.0, logprob: float = -0.1, tokens: int = 5) -> Completion:
    return Completion(text=f"score={score} \\boxed{{{answer}}}", usage=Usage(10, tokens), cost=1e-6 * tokens,
                      logprobs=(logprob,) * tokens)


def record(tmp_path, plans: dict[str, list[Completion]], *, n: int, name: str = "sc") -> sf.Store:
    """An evaluation of self-consistency over the planned samples, recorded in a real SQLite file."""
    rows = [{"problem": problem, "answer": "1"} for problem in plans]
    plans = {problem: list(found) for problem, found in plans.items()}
    store = sf.Store(str(tmp_path / "replay.db"))
    evaluate(self_consistency.build(n=n), rows, {"m": planned(plans)}, name=name, store=store)
    return store


def exact_vote(counts: Sequence[int], right: Sequence[bool], k: int) -> Fraction:
    """The exact majority@k of a problem whose N samples fall in clusters of ``counts`` (``right`` says which is the
    reference's): the multivariate hypergeometric law of a k-subset's counts, ties split evenly (by symmetry, the
    first-seen cluster among equals is uniform over them)."""
    total = Fraction(0)
    n = sum(counts)
    for drawn in itertools.product(*(range(min(c, k) + 1) for c in counts)):
        if sum(drawn) != k:
            continue
        ways = math.prod(math.comb(c, d) for c, d in zip(counts, drawn))
        top = max(drawn)
        tied = [i for i, d in enumerate(drawn) if d == top]
        total += Fraction(ways, math.comb(n, k)) * Fraction(sum(right[i] for i in tied), len(tied))
    return total


def exact_best(scores: Sequence[float], correct: Sequence[bool], k: int) -> Fraction:
    """The exact best-of-k: the r-th highest score is a k-subset's best with probability C(n-r, k-1) / C(n, k)."""
    n = len(scores)
    ranked = sorted(range(n), key=lambda i: -scores[i])
    return sum((Fraction(math.comb(n - r, k - 1), math.comb(n, k)) for r, i in enumerate(ranked, start=1)
                if correct[i]), Fraction(0))


def test_replayed_votes_match_the_hypergeometric_expectation(tmp_path):
    """Thirty problems of 12 samples in varied clusters: for every k, the replayed mean majority@k over seeded draws
    is within 0.005 of the exact combinatorial expectation."""
    rng = random.Random(7)
    plans, clusters = {}, {}
    for i in range(30):
        sizes = [rng.randint(0, 6) for _ in range(rng.randint(2, 4))]
        sizes[0] = max(sizes[0], 1)
        sizes[-1] += 12 - sum(sizes) if sum(sizes) < 12 else 0
        while sum(sizes) > 12:
            sizes[sizes.index(max(sizes))] -= 1
        answers = [str(c + 1) for c, size in enumerate(sizes) for _ in range(size)]  # cluster 0 answers "1": right
        plans[f"problem {i}"] = [completion(a) for a in answers]
        clusters[f"problem {i}"] = [s for s in sizes if s]
    store = record(tmp_path, plans, n=12)
    report = sf.replay(store, "sc", ks=range(1, 13), draws=3000, seed=1)
    assert report.calls == 0 and report.samples == 12 and report.problems == 30
    for k in range(1, 13):
        exact = sum(float(exact_vote(sizes, [j == 0 for j in range(len(sizes))], k))
                    for sizes in clusters.values()) / 30
        assert report.at("vote", k).accuracy.value == pytest.approx(exact, abs=0.005), k
    store.close()


def test_replayed_best_of_matches_the_rank_probabilities(tmp_path):
    rng = random.Random(3)
    plans, truth = {}, {}
    for i in range(20):
        scores = rng.sample(range(100), 10)
        correct = [rng.random() < 0.4 for _ in scores]
        plans[f"problem {i}"] = [completion("1" if good else "2", score=s) for s, good in zip(scores, correct)]
        truth[f"problem {i}"] = (scores, correct)
    store = record(tmp_path, plans, n=10)
    score = lambda trace: float(re.search(r"score=([\d.]+)", trace.text).group(1))  # noqa: E731
    report = sf.replay(store, "sc", methods=["best_of"], scorer=score, ks=[1, 3, 10], draws=3000, seed=2)
    for k in (1, 3, 10):
        exact = sum(float(exact_best(s, c, k)) for s, c in truth.values()) / 20
        assert report.at("best_of", k).accuracy.value == pytest.approx(exact, abs=0.006), k
    assert report.at("best_of", 10).accuracy.value == pytest.approx(
        sum(c[max(range(10), key=lambda j: s[j])] for s, c in truth.values()) / 20)  # k = N is exact
    store.close()


def test_deepconf_keeps_the_confident_share_then_votes_by_confidence(tmp_path):
    """Confident samples are right, unsure ones agree on a wrong answer: the vote is misled, DeepConf's filter is
    not. Checked against every subset of six samples, enumerated here."""
    sure, unsure = math.log(0.9), math.log(0.3)
    plan = [completion("1", logprob=sure)] * 2 + [completion("2", logprob=unsure)] * 4
    store = record(tmp_path, {"problem": plan}, n=6)
    report = sf.replay(store, "sc", methods=["vote", "deepconf"], ks=[3, 6], draws=4000, eta=0.5, seed=0)

    def filtered_right(subset: Sequence[int]) -> float:
        keep = max(1, math.ceil(0.5 * len(subset)))
        kept = sorted(subset, key=lambda i: -(0.9 if i < 2 else 0.3))[:keep]
        weights = {"1": sum(0.9 for i in kept if i < 2), "2": sum(0.3 for i in kept if i >= 2)}
        return 1.0 if weights["1"] > weights["2"] else 0.0

    for k in (3, 6):
        subsets = list(itertools.combinations(range(6), k))
        exact = sum(filtered_right(s) for s in subsets) / len(subsets)
        assert report.at("deepconf", k).accuracy.value == pytest.approx(exact, abs=0.02)
    assert report.at("deepconf", 6).accuracy.value == 1.0 and report.at("vote", 6).accuracy.value == 0.0
    store.close()


def test_replay_matches_a_live_run_within_its_interval(tmp_path):
    """SC@4 replayed from a recorded SC@16 agrees with a live SC@4 evaluation on the same problems: the live
    accuracy lies in the replayed interval widened by the live one's."""
    rng = random.Random(11)
    chances = {f"problem {i}": rng.random() for i in range(60)}

    def sampler(seed: int) -> ScriptedBackend:
        draw = random.Random(seed)
        return ScriptedBackend(lambda request: completion(
            "1" if draw.random() < chances[request.messages[-1][1]] else str(draw.randint(2, 3))))

    rows = [{"problem": p, "answer": "1"} for p in chances]
    store = sf.Store(str(tmp_path / "live.db"))
    evaluate(self_consistency.build(n=16), rows, {"m": sampler(1)}, name="sc16", store=store)
    live = evaluate(self_consistency.build(n=4), rows, {"m": sampler(2)}, name="sc4", store=store)
    replayed = sf.replay(store, "sc16", ks=[4], draws=500).at("vote", 4)
    half = (replayed.accuracy.high - replayed.accuracy.low) / 2 + (live.accuracy.high - live.accuracy.low) / 2
    assert abs(live.accuracy.value - replayed.accuracy.value) <= half
    assert replayed.tokens == pytest.approx(live.tokens.value, rel=0.01)  # 4 samples' tokens, as the live run spent
    store.close()


def test_replay_records_nothing_and_reports_tokens_and_cost_at_k(tmp_path):
    store = record(tmp_path, {"problem": [completion("1", tokens=4), completion("2", tokens=8)] * 2}, n=4)

    def recorded():
        return [(run.id, run.calls, len(store.traces(run.id))) for run in store.runs()]

    before = recorded()
    report = sf.replay(store, "sc")
    assert recorded() == before  # no run, no call, no trace
    assert [p.k for p in report.curve("vote")] == [1, 2, 4]
    point = report.at("vote", 2)
    assert point.tokens == pytest.approx(2 * (10 + 6)) and point.cost == pytest.approx(2 * 6e-6)
    assert report.summary()["calls"] == 0 and "vote" in report.to_text()
    store.close()


def test_replay_errors_are_clear(tmp_path):
    store = record(tmp_path, {"problem": [Completion(text="\\boxed{1}", usage=Usage(1, 1))] * 4}, n=4)
    with pytest.raises(ValueError, match="methods must be among"):
        sf.replay(store, "sc", methods=["majority"])
    with pytest.raises(ValueError, match="no logprobs"):
        sf.replay(store, "sc", methods=["deepconf"])
    with pytest.raises(ValueError, match="no k"):
        sf.replay(store, "sc", ks=[9])
    with pytest.raises(sf.StoreError, match="no evaluation"):
        sf.replay(store, "missing")
    store.close()


def test_trace_confidence_measures():
    lows = [0.0] * 10 + [math.log(0.25)] * 2
    assert sf.trace_confidence(lows, window=2) == pytest.approx(0.25)
    assert sf.trace_confidence(lows, measure="tail", window=4) == pytest.approx(0.5)
    assert sf.trace_confidence(lows, measure="mean") == pytest.approx(0.25 ** (2 / 12))
    assert sf.trace_confidence(None) is None and sf.trace_confidence([]) is None
    with pytest.raises(ValueError, match="measure"):
        sf.trace_confidence(lows, measure="median")  # type: ignore[arg-type]


def test_the_command_line_replays_and_plots_beside_the_evaluation(tmp_path):
    from click.testing import CliRunner

    from scaffold.cli._main import main
    from scaffold.cli._replay import METHODS as CLI_METHODS
    from scaffold.evaluation import METHODS

    assert CLI_METHODS == METHODS
    plan = [completion("1", logprob=math.log(0.9))] * 3 + [completion("2", logprob=math.log(0.4))] * 5
    store = record(tmp_path, {"problem": plan}, n=8)
    store.close()
    db = str(tmp_path / "replay.db")
    runner = CliRunner()
    found = runner.invoke(main, ["--store", db, "replay", "--from", "sc", "--method", "vote", "--method", "deepconf",
                                 "--k", "1,8", "--format", "json"])
    assert found.exit_code == 0, found.output
    summary = json.loads(found.output)
    assert summary["calls"] == 0 and {(p["method"], p["k"]) for p in summary["points"]} == {
        ("vote", 1), ("vote", 8), ("deepconf", 1), ("deepconf", 8)}
    out = tmp_path / "out"
    shown = runner.invoke(main, ["--store", db, "replay", "--from", "sc", "--out", str(out)])
    assert shown.exit_code == 0 and "replay of 'sc'" in shown.output
    assert (out / "replay.json").exists() and (out / "accuracy_vs_tokens.png").read_bytes()[:4] == b"\x89PNG"
    compared = runner.invoke(main, ["--store", db, "compare", "sc", "--replay", "sc"])
    assert compared.exit_code == 0 and "replay of 'sc'" in compared.output
    bad = runner.invoke(main, ["--store", db, "replay", "--from", "sc", "--k", "x"])
    assert bad.exit_code != 0 and "--k takes sample counts" in bad.output


def test_an_aggregator_replayed_over_recorded_pools_pays_only_its_own_calls(tmp_path):
    """One aggregation over k=3 of each problem's 6 recorded samples, 4 draws: the samples are reused (their ids
    in the new runs' lineage), only the aggregator is called, and the result is an evaluation like any other."""
    import graphs
    from scaffold.evaluation import load_report, replay_aggregation

    plans = {f"problem {i}": [completion("1")] * 3 + [completion("2")] * 3 for i in range(5)}
    store = record(tmp_path, plans, n=6)
    recorded = {t.id for i in range(5) for t in store.traces(f"sc-{i}") if t.kind is sf.TraceKind.MODEL}
    seen: list[str] = []

    def aggregate(request: Request) -> str:
        seen.append(request.messages[-1][1])
        return "\\boxed{1}"

    aggregator = ScriptedBackend(aggregate)
    report = replay_aggregation(store, "sc", graphs.aggregate_given.build(), {"aggregator": aggregator},
                                name="agg-over-sc", k=3, draws=4, seed=5)
    assert aggregator.calls == 20 and report.problems == 20 and report.accuracy.value == 1.0
    run = store.traces("agg-over-sc-0")
    given = [t for t in run if t.kind is sf.TraceKind.EXTERNAL]
    assert len(given) == 3 and {t.metadata["source_id"] for t in given} <= recorded
    assert all(t.usage.completion_tokens == 5 for t in given)  # the reused samples keep what they cost
    assert all(prompt.count("score=") == 3 for prompt in seen)  # each call read its 3 candidates
    assert load_report(store, "agg-over-sc").settings["replayed_from"] == "sc"
    with pytest.raises(ValueError, match="candidates"):
        replay_aggregation(store, "sc", self_consistency.build(n=2), {"m": aggregator}, name="wrong")
    store.close()

"""Credit assignment: GRPO/RLOO baselines, SPIRAL's set credit at two and three levels, AggLM's data mix."""

from __future__ import annotations

import itertools
import random

import pytest

import scaffold as sf
from graphs.rsa import rsa
from scaffold._types import Completion, Request, Status, Trace, TraceKind
from scaffold.testing import ScriptedBackend
from trainers import (
    SCHEMES,
    agglm_select,
    assign_credit,
    group_advantages,
    is_hard,
    math_reward,
    register_scheme,
    rewards_from,
    set_advantages,
    spiral_set_advantages,
)
from trainers.credit_bench import synthetic_spiral_records


def trace(name: str, *, inputs: tuple[str, ...] = (), run: str = "r", **fields) -> Trace:
    """A trainable model trace ``{run}/{node}#{index}`` reading ``inputs`` (short names, same run)."""
    node, index = name.split("#")
    fields.setdefault("token_ids", (1, 2))
    return Trace(id=f"{run}/{name}", run_id=run, node=node, index=int(index),
                 inputs=tuple(f"{run}/{i}" for i in inputs), **fields)


def by_name(credited) -> dict[str, float]:
    """Credited advantages keyed by the short trace name (``node#index``)."""
    return {c.trace.id.split("/", 1)[1]: c.advantage for c in credited}


# ----- pure functions ----------------------------------------------------------------------------


def test_grpo_centres_on_the_group_mean_and_optionally_scales_by_std():
    """GRPO: reward minus the group mean; with scale_by_std divided by the population std (+ eps)."""
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    # std of [1, 0, 0, 0] = sqrt(3/16) = 0.4330
    assert group_advantages([1.0, 0.0, 0.0, 0.0], scale_by_std=True) == pytest.approx(
        [0.75 / 0.4330127, -0.25 / 0.4330127, -0.25 / 0.4330127, -0.25 / 0.4330127], rel=1e-5)
    assert group_advantages([1.0, 1.0], scale_by_std=True) == [0.0, 0.0]
    assert group_advantages([]) == []


def test_rloo_centres_on_the_mean_of_the_others():
    """RLOO: reward minus the mean of the other rewards; a group of one gets 0."""
    assert group_advantages([1.0, 0.0, 0.0, 0.0], baseline="rloo") == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert group_advantages([2.0, 1.0, 0.0], baseline="rloo") == pytest.approx([1.5, 0.0, -1.5])
    assert group_advantages([1.0], baseline="rloo") == [0.0]
    with pytest.raises(ValueError, match="rloo"):
        group_advantages([1.0], baseline="median")


def test_spiral_two_levels_hand_example():
    """f(G)=set mean, A(G)=f−f̂, search = mean A over its sets (None in no set), aggregations centred in their set."""
    # f(G0) = 0.5, f(G1) = 0.75, f̂ = 0.625 -> A = -0.125, +0.125
    search, aggregations = spiral_set_advantages(
        5, [[0, 1, 2], [2, 3]], [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    assert search[:4] == pytest.approx([-0.125, -0.125, 0.0, 0.125])
    assert search[4] is None
    assert aggregations[0] == pytest.approx([0.5, 0.5, -0.5, -0.5])
    assert aggregations[1] == pytest.approx([0.25, 0.25, 0.25, -0.75])
    _, scaled = spiral_set_advantages(5, [[0, 1, 2], [2, 3]], [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]],
                                      scale_by_std=True)
    assert scaled[0] == pytest.approx([1.0, 1.0, -1.0, -1.0], rel=1e-5)
    assert scaled[1] == pytest.approx([0.25 / 0.4330127, 0.25 / 0.4330127, 0.25 / 0.4330127, -0.75 / 0.4330127],
                                      rel=1e-5)
    assert sum(set_advantages([[1.0, 0.0], [1.0, 1.0], [0.0]])) == pytest.approx(0.0)


def test_spiral_set_advantages_rejects_bad_input():
    """Mismatched lengths, an out-of-range member and a set without rewards raise ValueError."""
    with pytest.raises(ValueError):
        spiral_set_advantages(2, [[0, 1]], [])
    with pytest.raises(ValueError):
        spiral_set_advantages(2, [[0, 2]], [[1.0]])
    with pytest.raises(ValueError):
        spiral_set_advantages(2, [[0, 1]], [[]])


# ----- recorded traces ---------------------------------------------------------------------------


def three_levels() -> tuple[list[Trace], dict[str, float]]:
    """Level 0: s#0..s#3; level 1: a#0,a#1 read {s0,s1}, a#2,a#3 read {s1,s2}; level 2: b#0 {a0,a2}, b#1 {a1,a3}."""
    traces = [trace(f"s#{i}") for i in range(4)]
    traces += [trace("a#0", inputs=("s#0", "s#1")), trace("a#1", inputs=("s#1", "s#0")),
               trace("a#2", inputs=("s#1", "s#2")), trace("a#3", inputs=("s#2", "s#1"))]
    traces += [trace("b#0", inputs=("a#0", "a#2")), trace("b#1", inputs=("a#1", "a#3"))]
    rewards = {"r/s#0": 1.0, "r/s#1": 0.0, "r/s#2": 1.0, "r/s#3": 0.0,
               "r/a#0": 1.0, "r/a#1": 0.0, "r/a#2": 1.0, "r/a#3": 1.0, "r/b#0": 1.0, "r/b#1": 0.0}
    return traces, rewards


def test_spiral_three_levels_hand_example():
    """The multi-level rule on a hand example: final level node-centred, middle level mean of its two roles."""
    traces, rewards = three_levels()
    credited = assign_credit(traces, rewards, scheme="spiral")
    # level 2: one call per set -> centred on the node: mean 0.5.  Sets {a0,a2}: A=+0.5, {a1,a3}: A=-0.5.
    # level 1 own sets: {s0,s1} rewards (1, 0) -> ±0.5; {s1,s2} rewards (1, 1) -> 0, 0.
    #   a0 = (0.5 + 0.5)/2, a1 = (-0.5 - 0.5)/2, a2 = (0 + 0.5)/2, a3 = (0 - 0.5)/2
    # level 1 sets: f = 0.5, 1.0, f̂ = 0.75 -> A = -0.25, +0.25; s0 in the first, s1 in both, s2 in the second.
    assert by_name(credited) == pytest.approx({
        "b#0": 0.5, "b#1": -0.5,
        "a#0": 0.5, "a#1": -0.5, "a#2": 0.25, "a#3": -0.25,
        "s#0": -0.25, "s#1": 0.0, "s#2": 0.25,
    })
    assert "s#3" not in by_name(credited)  # in no set: no gradient
    roles = {c.trace.id: c.role for c in credited}
    assert roles["r/s#0"] == "search" and roles["r/a#0"] == "aggregate" and roles["r/b#0"] == "aggregate"
    groups = {c.trace.id: c.group for c in credited}
    assert groups["r/a#0"] == groups["r/a#1"] == "r/a{s#0,s#1}"
    assert groups["r/b#0"] == groups["r/b#1"] == "r/b"
    assert groups["r/s#1"] == "r/a"


def test_spiral_role_weights():
    """aggregate_weight and search_weight weigh an intermediate trace's two roles."""
    traces, rewards = three_levels()
    credited = by_name(assign_credit(traces, rewards, scheme="spiral", aggregate_weight=3.0, search_weight=1.0))
    assert credited["a#2"] == pytest.approx((3 * 0.0 + 1 * 0.5) / 4)
    assert credited["b#0"] == pytest.approx(0.5)  # one role: weights do not apply
    only_search = by_name(assign_credit(traces, rewards, scheme="spiral", aggregate_weight=0.0))
    assert only_search["a#0"] == pytest.approx(0.5) and only_search["a#3"] == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        assign_credit(traces, rewards, scheme="spiral", aggregate_weight=0.0, search_weight=0.0)


def test_grpo_groups_by_input_set_or_by_node():
    """GRPO centres samples of one input set together; a node with one call per set is centred as a node."""
    traces, rewards = three_levels()
    credited = {c.trace.id: c for c in assign_credit(traces, rewards, scheme="grpo")}
    assert len(credited) == 10 and all(c.reward == rewards[i] for i, c in credited.items())
    assert credited["r/s#0"].advantage == pytest.approx(0.5) and credited["r/s#0"].group == "r/s"
    assert credited["r/a#0"].advantage == pytest.approx(0.5) and credited["r/a#3"].advantage == pytest.approx(0.0)
    assert credited["r/b#0"].advantage == pytest.approx(0.5) and credited["r/b#1"].group == "r/b"
    assert credited["r/s#3"].role == "single" and credited["r/s#1"].role == "search"
    rloo = by_name(assign_credit(traces, rewards, scheme="rloo"))
    assert rloo["s#0"] == pytest.approx(1.0 - 1 / 3) and rloo["a#1"] == pytest.approx(-1.0)


def test_failed_untokenised_rule_and_unrewarded_traces_are_skipped():
    """Failed calls, traces without token ids, rule traces and unrewarded traces get no credit; rules pass none on."""
    traces = [trace("s#0"), trace("s#1"), trace("s#2", status=Status.ERROR), trace("s#3", token_ids=None),
              trace("s#4"), Trace(id="r/vote#0", run_id="r", node="vote", index=0, kind=TraceKind.RULE,
                                  inputs=("r/s#0", "r/s#1"))]
    traces.append(trace("a#0", inputs=("s#0", "s#1", "s#2", "vote#0")))
    traces.append(trace("a#1", inputs=("s#0", "s#1", "s#2", "vote#0")))
    rewards = {t.id: 1.0 for t in traces} | {"r/s#1": 0.0, "r/a#1": 0.0}
    del rewards["r/s#4"]
    grpo = by_name(assign_credit(traces, rewards, scheme="grpo"))
    assert grpo == pytest.approx({"s#0": 0.5, "s#1": -0.5, "a#0": 0.5, "a#1": -0.5})
    spiral = by_name(assign_credit(traces, rewards, scheme="spiral"))
    # one set: A(G) = 0, so search traces s#0, s#1 get 0; s#4 was not read and its node was: no gradient
    assert spiral == pytest.approx({"s#0": 0.0, "s#1": 0.0, "a#0": 0.5, "a#1": -0.5})


def test_unknown_scheme_names_the_known_ones():
    """An unknown scheme raises ValueError listing the registered schemes."""
    with pytest.raises(ValueError, match="grpo, rloo, spiral"):
        assign_credit([], {}, scheme="ppo")


def test_register_scheme(monkeypatch: pytest.MonkeyPatch):
    """A registered scheme is chosen by name and receives the traces, rewards and options."""
    monkeypatch.setattr("trainers.credit.SCHEMES", dict(SCHEMES))
    seen = {}

    def constant(traces, rewards, *, value: float = 1.0):
        seen.update(traces=len(traces), value=value)
        return []

    register_scheme("constant", constant)
    assert assign_credit([trace("s#0")], {}, scheme="constant", value=2.0) == []
    assert seen == {"traces": 1, "value": 2.0}


# ----- real graph runs ---------------------------------------------------------------------------


def answering(answers: list[int]) -> ScriptedBackend:
    """A backend whose i-th call answers ``answers[i % len]`` with token ids."""
    counter = itertools.count()

    def script(request: Request) -> Completion:
        return Completion(text=f"so \\boxed{{{answers[next(counter) % len(answers)]}}}", token_ids=(1, 2, 3))

    return ScriptedBackend(script)


@sf.graph
def spiral_graph(problem):
    """SPIRAL's topology: 4 search samples, 3 random 2-subsets (they may repeat), 2 aggregations each, a vote."""
    pop = sf.sample("Solve {problem}", model="m", n=4)
    return sf.vote(sf.aggregate(pop, model="m", k=2, n=3, samples=2))


def test_spiral_over_a_real_run():
    """On a recorded SPIRAL run: roles, set groups centred to zero, search credit = mean set advantage."""
    run = spiral_graph.run_sync({"problem": "x"}, models={"m": answering([4, 5, 4, 4, 5, 5, 4, 5, 4, 4])},
                                store=None, seed=3)
    rewards = rewards_from(run.traces, "4")
    assert f"{run.run_id}/vote#0" not in rewards and len(rewards) == 10
    credited = assign_credit(run.traces, rewards)
    roles = {c.trace.node: c.role for c in credited}
    assert roles == {"sample": "search", "aggregate": "aggregate"}
    aggregations = [c for c in credited if c.role == "aggregate"]
    assert len(aggregations) == 6
    by_set: dict[frozenset[str], list[float]] = {}
    for c in aggregations:
        by_set.setdefault(frozenset(c.trace.inputs), []).append(rewards[c.trace.id])
        mates = [d for d in aggregations if d.group == c.group]
        assert len(mates) >= 2 and {frozenset(d.trace.inputs) for d in mates} == {frozenset(c.trace.inputs)}
        assert sum(d.advantage for d in mates) == pytest.approx(0.0)
    sets = list(by_set)
    set_adv = set_advantages(list(by_set.values()))
    assert sum(set_adv) == pytest.approx(0.0)
    for c in credited:
        if c.role == "search":
            mine = [a for s, a in zip(sets, set_adv) if c.trace.id in s]
            assert c.advantage == pytest.approx(sum(mine) / len(mine))
    unread = {t.id for t in run.node("sample")} - set().union(*sets)
    assert unread.isdisjoint(c.trace.id for c in credited)


def test_rsa_run_credits_every_step_and_not_the_vote():
    """RSA (T=2): step0 search, step1 both roles, step2 node-centred aggregations; the vote is not trained."""
    run = rsa.build(n=4, k=2, steps=2).run_sync(
        {"problem": "x"}, models={"solver": answering([4, 5, 4, 4, 5, 5, 4, 5, 4, 4, 5, 4])}, store=None, seed=1)
    credited = assign_credit(run.traces, rewards_from(run.traces, "4"))
    nodes = {c.trace.node for c in credited}
    assert nodes <= {"step0", "step1", "step2"} and "step2" in nodes
    assert {c.role for c in credited if c.trace.node == "step0"} == {"search"}
    final = [c for c in credited if c.trace.node == "step2"]
    assert len(final) == 4 and {c.group for c in final} == {f"{run.run_id}/step2"}
    assert sum(c.advantage for c in final) == pytest.approx(0.0)


def test_failed_calls_of_a_real_run_are_skipped():
    """A sample that failed (dropped by on_error="drop") is recorded but gets no credit."""
    counter = itertools.count()

    def script(request: Request) -> Completion:
        if next(counter) == 1:
            raise RuntimeError("boom")
        return Completion(text="\\boxed{4}", token_ids=(1,))

    @sf.graph
    def samples(problem):
        return sf.sample("Solve {problem}", model="m", n=3, on_error="drop")

    run = samples.run_sync({"problem": "x"}, models={"m": ScriptedBackend(script)}, store=None)
    failed = [t.id for t in run.traces if not t.ok]
    assert len(failed) == 1
    credited = assign_credit(run.traces, rewards_from(run.traces, "4"), scheme="grpo")
    assert len(credited) == 2 and failed[0] not in {c.trace.id for c in credited}


# ----- rewards, AggLM, speed ---------------------------------------------------------------------


def test_rewards_by_equivalence_for_model_traces_only():
    """math_reward uses math equivalence; rewards_from skips rule traces and takes a reference per run."""
    a = Trace(id="r/s#0", run_id="r", node="s", index=0, answer="0.5")
    b = Trace(id="q/s#0", run_id="q", node="s", index=0, answer="3")
    vote = Trace(id="r/vote#0", run_id="r", node="vote", index=0, kind=TraceKind.RULE, answer="0.5")
    assert math_reward(a, "1/2") == 1.0 and math_reward(a.__class__(id="x", run_id="r", node="s", index=0), "1") == 0.0
    assert rewards_from([a, b, vote], {"r": "1/2", "q": "4"}) == {"r/s#0": 1.0, "q/s#0": 0.0}


def test_agglm_keeps_every_hard_set_and_a_seeded_share_of_easy_ones():
    """A set is hard when its clustered majority is wrong; all hard sets plus round(p × easy) easy ones, seeded."""
    assert is_hard(["1/2", "0.5", "3"], "1/2") is False
    assert is_hard(["3", "3", "0.5"], "0.5") is True
    assert is_hard([None, None], "1") is True
    hard = [(["3", "3", "4"], "4")] * 6
    easy = [(["4", "0.5", "4"], "4")] * 10
    sets = hard + easy
    chosen = agglm_select(sets, easy_fraction=0.5, rng=random.Random(7))
    assert set(range(6)) <= set(chosen) and len(chosen) == 6 + 5
    assert chosen == agglm_select(sets, easy_fraction=0.5, rng=7) == sorted(chosen)
    assert agglm_select(sets, easy_fraction=0.0) == list(range(6))
    assert agglm_select(sets, easy_fraction=1.0) == list(range(16))
    assert agglm_select([["3", "3"], ["4"]], "4", easy_fraction=0.0) == [0]


def test_credit_for_a_large_spiral_batch_sums_to_zero_per_run():
    """256 prompts × 24 traces with sets: SPIRAL credits every aggregation, and set credit sums to zero per run.

    How fast is measured by ``benchmarks/trainer.py`` (``advantage_ms_256x24``), not asserted here.
    """
    traces, rewards = synthetic_spiral_records()
    assert len(traces) == 256 * 24
    credited = assign_credit(traces, rewards, scheme="spiral")
    aggregations = [c for c in credited if c.role == "aggregate"]
    assert len(aggregations) == 256 * 16
    per_run: dict[str, float] = {}
    for c in aggregations:
        per_run[c.trace.run_id] = per_run.get(c.trace.run_id, 0.0) + c.advantage
    assert len(per_run) == 256
    assert max(abs(total) for total in per_run.values()) == pytest.approx(0.0, abs=1e-9)

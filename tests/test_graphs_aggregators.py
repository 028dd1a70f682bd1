"""Ready-made aggregation topologies: Mixture-of-Agents, Self-MoA, evolve, AggLM, SSA, aggregation trees."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from helpers import boxed

import graphs
import scaffold as sf
from graphs.tree import tree_sizes
from scaffold._types import Request
from scaffold.testing import ScriptedBackend


def counting(label: str, answer: object = 1) -> ScriptedBackend:
    """A backend whose every reply is unique (``label 0``, ``label 1``...) and boxes ``answer``."""
    counter = itertools.count()
    return ScriptedBackend(lambda request: f"{label} {next(counter)} {boxed(answer)}")


def ids(traces: list[sf.Trace]) -> tuple[str, ...]:
    """The ids of some traces, in order."""
    return tuple(t.id for t in traces)


# Mixture-of-Agents


def test_moa_defaults_follow_the_paper():
    """Six proposers in two proposer layers, then one aggregator: 6*2 proposer calls and 1 final call."""
    counts = graphs.mixture_of_agents.build().count_calls()
    assert counts == {f"proposer{i}": 2 for i in range(1, 7)} | {"aggregator": 1}


def test_moa_every_layer_reads_all_responses_of_the_layer_before():
    """Layer 1 reads nothing; a layer-l call reads exactly all layer-(l-1) outputs; the final reads the last layer."""
    proposers = ("a", "b", "c")
    g = graphs.mixture_of_agents.build(proposers=proposers, layers=4)
    backends = {alias: counting(alias) for alias in (*proposers, "aggregator")}
    result = g.run_sync({"problem": "1+0"}, models=backends, store=None)
    assert {alias: b.calls for alias, b in backends.items()} == g.count_calls() == {"a": 3, "b": 3, "c": 3,
                                                                                    "aggregator": 1}
    layer = [result.node(f"layer1_{alias}") for alias in proposers]
    assert all(len(t) == 1 and t[0].inputs == () for t in layer)
    for number in (2, 3):
        previous = tuple(t[0].id for t in layer)
        layer = [result.node(f"layer{number}_{alias}") for alias in proposers]
        for traces in layer:
            assert len(traces) == 1 and traces[0].inputs == previous
    final = result.node("final")
    assert len(final) == 1 and final[0].inputs == tuple(t[0].id for t in layer)
    assert result.output.id == final[0].id and result.answer == "1"
    prompt = backends["aggregator"].requests[0].last_content
    assert all(t[0].text in prompt for t in layer)


def test_moa_rejects_bad_parameters_at_build_time():
    """Fewer than two layers, an empty proposer tuple or a bare string of proposers fail when building."""
    with pytest.raises(sf.GraphError, match="layers"):
        graphs.mixture_of_agents.build(layers=1)
    with pytest.raises(sf.GraphError, match="proposers"):
        graphs.mixture_of_agents.build(proposers=())
    with pytest.raises(sf.GraphError, match="proposers"):
        graphs.mixture_of_agents.build(proposers="solver")


def test_self_moa_samples_one_model_and_aggregates_with_it():
    """Self-MoA: ``samples`` calls of one model, then one aggregation by the same model reading them all."""
    solver = counting("s")
    g = graphs.self_moa.build(n=4)
    result = g.run_sync({"problem": "1"}, models={"solver": solver}, store=None)
    assert g.count_calls() == {"solver": 5} and solver.calls == 5
    assert result.output.inputs == ids(result.node("samples"))
    assert graphs.self_moa.build(aggregator="big").count_calls() == {"solver": 6, "big": 1}


# evolve


def test_evolve_calls_per_generation_and_named_steps():
    """``n`` samples, then ``n`` children per generation; every step is ``step{g}``."""
    solver = counting("s")
    g = graphs.evolve.build(n=6, generations=3, k=3)
    result = g.run_sync({"problem": "1"}, models={"solver": solver}, store=None)
    assert g.count_calls() == {"solver": 24} and solver.calls == 24
    assert [len(p) for p in graphs.population_by_step(result)] == [6, 6, 6, 6]
    assert result.answer == "1"


def test_evolve_children_read_distinct_parents_of_the_previous_generation():
    """Every child reads exactly ``k`` distinct members (parents) of the previous population."""
    result = graphs.evolve.build(n=5, generations=3, k=3).run_sync(
        {"problem": "1"}, models={"solver": counting("s")}, seed=7, store=None)
    steps = graphs.population_by_step(result)
    for previous, children in itertools.pairwise(steps):
        allowed = set(ids(previous))
        for child in children:
            assert len(child.inputs) == 3 and len(set(child.inputs)) == 3
            assert set(child.inputs) <= allowed


def test_evolve_same_seed_same_lineage_and_answer():
    """Parent sets are drawn from the run's seed: the same seed gives the same lineage, another seed another."""

    def lineage(seed: int) -> tuple[list[tuple[str, ...]], str | None]:
        result = graphs.evolve.build(n=8, generations=2, k=2).run_sync(
            {"problem": "1"}, models={"solver": counting("s")}, seed=seed, run_id="r", store=None)
        return [t.inputs for t in result.traces if t.node.startswith("step")], result.answer

    assert lineage(3) == lineage(3)
    assert lineage(3)[0] != lineage(4)[0]


def test_evolve_with_fitness_keeps_the_best_of_parents_and_children():
    """With ``fitness``, each generation keeps the top ``n`` of parents plus children, and they breed."""
    counter = itertools.count()
    solver = ScriptedBackend(lambda request: boxed(next(counter)))  # answers 0..3, then 4..7, then 8..11
    g = graphs.evolve.build(n=4, generations=2, k=2, fitness=lambda t: -float(t.answer or 0))
    result = g.run_sync({"problem": "1"}, models={"solver": solver}, store=None)
    assert g.count_calls() == {"solver": 12} and solver.calls == 12
    first = ids(result.node("step0"))  # the lowest answers: fitter than every child
    assert len(result.node("children2")) == 4
    assert all(set(child.inputs) <= set(first) for child in result.node("children2"))
    assert ids(result.node("step1")) == ids(result.node("step2")) == first  # the survivors of each generation
    assert [len(p) for p in graphs.population_by_step(result)] == [4, 4, 4]
    vote = result.output
    assert set(vote.inputs) == set(first) and result.answer == "0"


def test_evolve_rejects_bad_parameters_at_build_time():
    """More parents than the population, or no generations, fail when building."""
    with pytest.raises(sf.GraphError, match="parents"):
        graphs.evolve.build(n=3, k=4)
    with pytest.raises(sf.GraphError, match="generations"):
        graphs.evolve.build(generations=0)
    with pytest.raises(sf.GraphError, match="fitness"):
        graphs.evolve.build(fitness=3)


# AggLM, SSA, given candidates


def minority_script() -> Callable[[Request], str]:
    """Five drafts answer 5 (wrong), three carry a CHECKED marker and answer 4 (right)."""
    counter = itertools.count()

    def reply(request: Request) -> str:
        i = next(counter)
        return f"CHECKED {boxed(4)}" if i % 8 in (1, 4, 6) else f"guess {boxed(5)}"

    return reply


def marker_aggregator(request: Request) -> str:
    """An aggregator that trusts the candidate carrying the CHECKED marker."""
    prompt = request.last_content
    return f"The checked candidate is right: {boxed(4)}" if "CHECKED" in prompt else boxed(5)


def test_agglm_aggregator_reads_every_candidate():
    """m samples, then one aggregator call whose lineage is all m candidates."""
    solver, aggregator = counting("s"), counting("agg")
    g = graphs.agglm.build(n=6)
    result = g.run_sync({"problem": "1"}, models={"solver": solver, "aggregator": aggregator}, store=None)
    assert g.count_calls() == {"solver": 6, "aggregator": 1}
    assert (solver.calls, aggregator.calls) == (6, 1)
    assert result.node("aggregate")[0].inputs == ids(result.node("candidates"))
    assert all(t.text in aggregator.requests[0].last_content for t in result.node("candidates"))


def test_ready_topologies_show_candidates_with_the_render_given():
    """``render=`` reaches the aggregation prompt of agglm, rsa and spiral: the aggregator reads what it returns."""
    def shown(traces: list[sf.Trace]) -> str:
        return " | ".join(f"<{t.text.split()[1]}>" for t in traces)

    for g, candidates in ((graphs.agglm.build(n=3, render=shown), "candidates"),
                          (graphs.rsa.build(n=3, k=3, steps=1, final_vote=False, render=shown), "step0"),
                          (graphs.spiral.build(n=3, k=3, sets=1, aggregations=1, render=shown), "search")):
        solver = counting("s")
        result = g.run_sync({"problem": "1"}, models={"solver": solver, "aggregator": solver}, store=None)
        numbers = [t.text.split()[1] for t in result.node(candidates)]
        aggregation = solver.requests[-1].last_content
        assert all(f"<{n}>" in aggregation for n in numbers) and aggregation.count(" | ") == 2
        assert "Candidate 1:" not in aggregation
    plain = counting("s")
    graphs.rsa.build(n=2, k=2, steps=1).run_sync({"problem": "1"}, models={"solver": plain}, store=None)
    assert "Candidate 1:\ns " in plain.requests[-1].last_content  # None: format_candidates, each whole text
    with pytest.raises(sf.GraphDefinitionError, match="render must be a function"):
        graphs.rsa.build(n=2, k=2, steps=1, render="answers only")  # caught when the graph is built, not run


def test_agglm_can_recover_the_minority_answer_the_vote_loses():
    """An aggregator that checks the candidates returns the correct minority; a vote over them returns the majority."""
    result = graphs.agglm.run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(minority_script()),
                                                             "aggregator": ScriptedBackend(marker_aggregator)},
                                   store=None)
    cands = result.node("candidates")
    assert sorted(t.answer or "" for t in cands) == ["4"] * 3 + ["5"] * 5
    assert sf.cluster_answers(cands)[0][0] == "5"
    assert result.answer == "4"
    given = {"problem": "2+2", "given": [t.text for t in cands]}
    assert graphs.aggregate_given.run_sync(given, models={"aggregator": ScriptedBackend(marker_aggregator)},
                                           store=None).answer == "4"
    assert graphs.self_consistency.run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(minority_script())},
                                            store=None).answer == "5"


def test_ssa_returns_the_aggregators_short_answer():
    """SSA's output is the aggregator's short answer, read from all samples with the summary prompt."""
    solver = counting("long derivation", answer=5)
    aggregator = ScriptedBackend(lambda request: boxed(6))
    result = graphs.ssa.build(n=5).run_sync({"problem": "1"}, models={"solver": solver,
                                                                           "aggregator": aggregator}, store=None)
    assert (solver.calls, aggregator.calls) == (5, 1)
    assert result.answer == "6" and result.output.text == boxed(6)
    assert result.output.inputs == ids(result.node("samples"))
    assert "state the final answer only" in aggregator.requests[0].last_content


def test_aggregate_given_reads_external_candidates_as_one_set():
    """Candidates given per run are aggregated in one call without any sampling."""
    aggregator = counting("agg", answer=2)
    g = graphs.aggregate_given.build(aggregate_prompt=graphs.SUMMARY_PROMPT)
    result = g.run_sync({"problem": "1+1", "given": ["x", {"text": "y"}, boxed(2)]},
                        models={"aggregator": aggregator}, store=None)
    assert aggregator.calls == 1 and len(result.output.inputs) == 3
    assert "Here are 3 independent attempts" in aggregator.requests[0].last_content


# aggregation tree


def test_tree_sizes_are_ceil_divisions():
    """Levels shrink by ceiling division down to one root."""
    assert tree_sizes(16, 4) == [16, 4, 1]
    assert tree_sizes(10, 3) == [10, 4, 2, 1]
    assert tree_sizes(2, 8) == [2, 1]


def test_tree_nodes_read_their_partition_groups_and_end_in_one_trace():
    """Each level-l trace reads exactly its consecutive group of level l-1; the root reads the whole last level."""
    solver = counting("s")
    g = graphs.aggregation_tree.build(n=10, k=3)
    result = g.run_sync({"problem": "1"}, models={"solver": solver}, store=None)
    assert g.count_calls() == {"solver": 17} and solver.calls == 17
    levels = [result.node(f"level{i}") for i in range(4)]
    assert [len(level) for level in levels] == [10, 4, 2, 1]
    for below, above in itertools.pairwise(levels[:3]):
        groups = [ids(below)[i : i + 3] for i in range(0, len(below), 3)]
        assert [t.inputs for t in above] == groups
    assert levels[3][0].inputs == ids(levels[2])
    assert isinstance(result.output, sf.Trace) and result.output.id == levels[3][0].id


def test_shuffled_tree_partitions_each_level():
    """With ``shuffle``, groups are a seeded permutation: disjoint, covering the level, of size ``k``."""
    result = graphs.aggregation_tree.build(n=16, k=4, shuffle=True).run_sync(
        {"problem": "1"}, models={"solver": counting("s")}, seed=1, store=None)
    below, above = result.node("level0"), result.node("level1")
    read = [i for t in above for i in t.inputs]
    assert sorted(read) == sorted(ids(below)) and all(len(t.inputs) == 4 for t in above)
    assert read != list(ids(below))


def test_tree_rejects_bad_parameters_at_build_time():
    """A branching factor below 2 or fewer than 2 leaves fail when building."""
    with pytest.raises(sf.GraphError, match="branching"):
        graphs.aggregation_tree.build(k=1)
    with pytest.raises(sf.GraphError, match="leaves"):
        graphs.aggregation_tree.build(n=1)

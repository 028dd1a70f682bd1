"""Looking at a graph without running it: describe(), mermaid(), spec() and count_calls()."""

from __future__ import annotations

import pytest
from helpers import boxed, rsa

import scaffold as sf
from scaffold.testing import ScriptedBackend


@sf.graph
def mixture(problem, *, proposers: int = 3, layers: int = 2):
    """Mixture-of-agents: proposers answer, an aggregator model merges each layer, a judge picks one."""
    layer = sf.concat(
        *[sf.sample("Solve {problem}", model="proposer", n=2, name=f"proposer_{i}") for i in range(proposers)]
    )
    for _ in range(layers):
        layer = sf.aggregate(layer, model="aggregator", select="partition", k=2)
    return sf.aggregate(layer, model="judge")


def test_rsa_call_count():
    """RSA with N=16, K=4, T=10 makes 16 + 10 * 16 = 176 calls to "solver"."""
    assert rsa.build(n=16, k=4, steps=10).count_calls() == {"solver": 176}


def test_count_calls_matches_a_real_run():
    """The dry-run count equals the requests a run actually sends."""
    graph = rsa.build(n=6, k=2, steps=2)
    backend = ScriptedBackend(lambda r: boxed(1))
    result = graph.run_sync({"problem": "p"}, models={"solver": backend})
    assert graph.count_calls() == {"solver": backend.calls} == result.calls_by_model() == {"solver": 18}


def test_count_calls_per_alias():
    """A graph using several aliases counts each one separately."""
    # 3 proposers x 2 = 6 traces; layer 1: 3 groups; layer 2: 2 groups; judge: 1
    assert mixture.build().count_calls() == {"proposer": 6, "aggregator": 5, "judge": 1}
    assert mixture.build(proposers=4, layers=1).count_calls() == {"proposer": 8, "aggregator": 4, "judge": 1}


def test_count_calls_with_input_sizes():
    """Graphs reading candidates supplied at run time need ``input_sizes`` to be counted."""

    @sf.graph
    def agg(problem, candidates):
        refined = sf.aggregate(candidates, model="m", select="each")
        return sf.aggregate(refined, model="m", k=2, n=3)

    with pytest.raises(sf.GraphDefinitionError, match="input_sizes"):
        agg.count_calls()
    assert agg.count_calls(input_sizes={"candidates": 5}) == {"m": 5 + 3}
    assert agg.count_calls(input_sizes={"candidates": 2}) == {"m": 2 + 3}


def test_count_calls_counts_every_loop_step_as_an_upper_bound():
    """A loop with ``until`` is counted as if every step ran."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        return sf.loop(lambda p: sf.aggregate(p, model="m", k=2, n=4), pop, steps=3, until=sf.agreement(1.0))

    assert g.count_calls() == {"m": 16}
    assert "at most" in g.build().describe()


def test_describe_lists_nodes_and_totals():
    """describe() shows the build parameters, one row per node with its alias and size, and the call totals."""
    text = rsa.build(n=16, k=4, steps=10).describe()
    lines = text.splitlines()
    assert lines[0].startswith("graph rsa(problem) with n=16, k=4, steps=10, final_vote=True, model='solver', ")
    assert len(lines) == 1 + 1 + 12 + 1
    sample_row = next(line for line in lines if line.split()[0] == "step0")
    assert "solver" in sample_row and "16" in sample_row
    assert lines[-1].startswith("calls: 176")
    assert "solver: 176" in lines[-1]
    assert all(f"step{i} " in text for i in range(1, 11))


def test_describe_without_known_sizes_says_so():
    """A graph over run-time candidates describes its call count as input-dependent instead of failing."""

    @sf.graph
    def agg(problem, candidates):
        return sf.aggregate(candidates, model="m", k=2, n=3)

    assert "depend on the sizes" in agg.build().describe()


def test_mermaid_has_one_box_per_node_and_one_edge_per_read():
    """mermaid() is a flowchart with a box for every node and an arrow for every data dependency."""
    graph = mixture.build()
    text = graph.mermaid()
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    boxes = [line for line in lines[1:] if "-->" not in line and "-.->" not in line]
    edges = [line for line in lines if "-->" in line]
    assert len(boxes) == len(graph.nodes)
    assert len(edges) == sum(len(n.reads) for n in graph.nodes)
    assert "    n3 --> n4" in lines  # concat feeds the first aggregation layer


def test_spec_is_plain_data():
    """spec() describes nodes, reads and outputs as JSON-friendly data."""
    import json

    spec = rsa.build(n=2, k=1, steps=1).spec()
    assert json.loads(json.dumps(spec)) == spec
    assert [n["name"] for n in spec["nodes"]] == ["step0", "step1", "vote"]
    assert spec["nodes"][1]["reads"] == ["step0"]
    assert spec["output"] == "vote"
    assert {key: spec["params"][key] for key in ("n", "k", "steps")} == {"n": 2, "k": 1, "steps": 1}

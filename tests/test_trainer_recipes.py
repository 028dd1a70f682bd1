"""The experiment's training recipes: which graph each rolls out, how it is credited, what its calls ask for."""

from __future__ import annotations

import pytest

from scaffold.testing import ScriptedBackend
from trainers.recipes import METHODS, recipe


def test_each_recipe_rolls_out_its_graph_and_names_its_credit() -> None:
    """grpo 8 samples; aggregator-only 8 + 8 aggregations, aggregations only; spiral and spiral_rsa 24 calls."""
    calls = {name: recipe(name).graph.count_calls()["solver"] for name in METHODS}
    assert calls == {"grpo": 8, "aggregator_only": 16, "spiral": 24, "spiral_rsa": 24}
    assert recipe("grpo").loop_options == {"scheme": "grpo"}
    assert recipe("agglm").loop_options == {"scheme": "grpo", "roles": ("aggregate",), "easy_fraction": 0.5}
    assert recipe("spiral").loop_options == recipe("spiral_rsa").loop_options == {"scheme": "spiral"}
    assert recipe("spiral_search_only").loop_options == {"scheme": "spiral", "roles": ("search",)}
    assert recipe("spiral_aggregate_only").loop_options == {"scheme": "spiral", "roles": ("aggregate",)}
    with pytest.raises(ValueError, match="unknown recipe 'ppo'"):
        recipe("ppo")


@pytest.mark.parametrize("name", ["aggregator_only", "spiral", "spiral_rsa"])
def test_aggregations_sample_at_their_own_temperature_and_every_call_records_logprobs(name: str) -> None:
    """aggregate_temperature reaches aggregation requests only; every model call asks for logprobs."""
    backend = ScriptedBackend(lambda request: "\\boxed{1}")
    recipe(name, aggregate_temperature=1.3).graph.run_sync({"problem": "1+1"}, models={"solver": backend},
                                                           store=None, seed=0)
    aggregations = [r for r in backend.requests if "Candidate" in r.last_content]
    samples = [r for r in backend.requests if "Candidate" not in r.last_content]
    assert aggregations and samples
    assert {r.params.get("temperature") for r in aggregations} == {1.3}
    assert {r.params.get("temperature") for r in samples} == {None}
    assert all(r.logprobs for r in backend.requests)



@pytest.mark.parametrize("name", METHODS)
def test_every_recipes_vote_uses_the_equivalence_it_is_given(name: str) -> None:
    """recipe(..., equivalence=same) reaches the graph's final vote: answers equal under it form one cluster, and
    answers mathematically equal but not under it stay apart; without it the vote is mathematical."""

    def same(a: str, b: str) -> bool:  # leading zeros do not count; nothing else is equal
        return a.replace("=0", "=") == b.replace("=0", "=")

    def clusters(**options: object) -> dict[str, int]:
        answers = iter(["\\boxed{x=01}", "\\boxed{x=1}", "\\boxed{1/2}", "\\boxed{0.5}"] * 20)
        backend = ScriptedBackend(lambda request: next(answers))
        result = recipe(name, **options).graph.run_sync({"problem": "p"}, models={"solver": backend}, store=None,
                                                         seed=0)
        return {answer: members for answer, _, members in result.output.metadata["counts"]}

    given = clusters(equivalence=same)
    assert len(given) == 3 and "1/2" in given and "0.5" in given
    assert given["1/2"] == given["0.5"] and sum(given.values()) == 4 * given["1/2"]  # x=01 and x=1: one cluster
    assert not {"1/2", "0.5"} <= set(clusters())

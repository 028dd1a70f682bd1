"""Run-time mistakes get errors as good as build-time ones: typed, naming what was wrong and what to write."""

from __future__ import annotations

import pytest

import scaffold as sf
from scaffold.testing import ScriptedBackend


@sf.graph
def sc(problem, *, n: int = 2):
    return sf.vote(sf.sample("{problem}", model="solver", n=n))


def backend() -> ScriptedBackend:
    return ScriptedBackend(lambda request: r"\boxed{1}")


def test_models_given_as_a_list_name_the_expected_mapping() -> None:
    with pytest.raises(sf.ArgumentError, match=r"models= maps each model alias .* models=\{'solver': backend\}; "
                                               r"got list"):
        sc.run_sync({"problem": "x"}, models=[backend()], store=None)  # type: ignore[arg-type]
    with pytest.raises(sf.ArgumentError, match="keyed by alias strings"):
        sc.run_sync({"problem": "x"}, models={1: backend()}, store=None)  # type: ignore[dict-item]


def test_a_bad_seed_and_a_bad_budget_are_typed() -> None:
    with pytest.raises(sf.InputError, match="the seed must be an integer, not str"):
        sc.run_sync({"problem": "x"}, models={"solver": backend()}, seed="abc", store=None)  # type: ignore[arg-type]
    with pytest.raises(sf.ArgumentError, match=r"budget= takes a scaffold.Budget, e.g. sf.Budget\(max_tokens="):
        sc.run_sync({"problem": "x"}, models={"solver": backend()}, budget=100, store=None)  # type: ignore[arg-type]


def test_a_build_parameter_passed_at_run_time_points_to_build() -> None:
    with pytest.raises(sf.ArgumentError, match=r"'n' is a build parameter of graph 'sc'.*sc.build\(n=5\)"):
        sc.run_sync({"problem": "x"}, models={"solver": backend()}, n=5)
    with pytest.raises(sf.ArgumentError, match=r"sc.build\(n=3\).map"):
        sc.build().map_sync([{"problem": "x"}], models={"solver": backend()}, n=3)
    with pytest.raises(sf.ArgumentError, match="run\\(\\) takes no argument 'colour'; its arguments: answer_kind"):
        sc.run_sync({"problem": "x"}, models={"solver": backend()}, colour="red")
    assert isinstance(sf.ArgumentError("x"), TypeError)  # what a wrong keyword has always been


def test_a_bad_concurrency_is_typed_and_map_sync_exists_on_graph_functions() -> None:
    with pytest.raises(sf.ArgumentError, match="concurrency= is how many rows run at once"):
        sc.map_sync([{"problem": "x"}], models={"solver": backend()}, concurrency=0, store=None)
    results = sc.map_sync([{"problem": "a"}, {"problem": "b"}], models={"solver": backend()}, store=None)
    assert [r.answer for r in results] == ["1", "1"]


def test_a_rule_that_raises_names_its_node() -> None:
    @sf.graph
    def picky(problem):
        return sf.best_of(sf.sample("{problem}", model="solver", n=2), lambda trace: trace.missing_field,
                          name="pick")

    with pytest.raises(sf.RunError, match=r"pick#0 failed: AttributeError"):
        picky.run_sync({"problem": "x"}, models={"solver": backend()}, store=None)


def test_a_sub_graph_that_calls_itself_forever_is_a_definition_error() -> None:
    @sf.graph
    def forever(problem):
        return forever(problem)

    with pytest.raises(sf.GraphDefinitionError, match=r"sub-graph 'forever' is nested 64 deep .* calls itself"):
        forever.build()

    @sf.graph
    def countdown(problem, *, depth: int = 3):
        if depth == 0:
            return sf.generate("{problem}", model="solver")
        return countdown.build(depth=depth - 1)(problem)

    assert countdown.build().count_calls() == {"solver": 1}  # a recursion that stops is fine


def test_an_aggregate_prompt_that_never_shows_the_candidates_is_a_build_error() -> None:
    @sf.graph
    def blind(problem):
        return sf.aggregate(sf.sample("{problem}", model="solver", n=2), model="solver", prompt="Improve: {problem}")

    with pytest.raises(sf.GraphDefinitionError, match=r"never shows the candidates; put \{candidates\}"):
        blind.build()

    @sf.graph
    def in_system(problem):
        return sf.aggregate(sf.sample("{problem}", model="solver", n=2), model="solver", prompt="Improve: {problem}",
                            system="Candidates:\n{candidates}")

    assert in_system.build().count_calls() == {"solver": 3}

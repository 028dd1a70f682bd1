"""Topologies by name with parameters from text (what the command line builds)."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphs
from graphs.registry import RENAMED, StepVerifier, describe_parameters
from scaffold._errors import GraphError
from scaffold.pocket import AGGREGATE_PROMPT, SOLVE_PROMPT, PocketTask


def test_every_named_topology_builds_with_its_defaults_and_takes_only_a_problem() -> None:
    for name, function in graphs.TOPOLOGIES.items():
        graph = graphs.build_topology(name)
        assert graph.inputs == ("problem",) and graph.name == function.name, name
        assert sum(graph.count_calls().values()) >= 1


def test_text_parameters_are_typed_like_their_defaults() -> None:
    graph = graphs.build_topology("mixture_of_agents", {"proposers": "a,b", "layers": "2", "aggregator": "agg"})
    assert graph.params["proposers"] == ("a", "b") and graph.params["layers"] == 2
    assert set(graph.count_calls()) == {"a", "b", "agg"}
    rsa = graphs.build_topology("rsa", {"n": "4", "k": "2", "steps": "1", "final_vote": "false"})
    assert rsa.params["final_vote"] is False and rsa.count_calls() == {"solver": 8}


@pytest.mark.parametrize("name, params, message", [
    ("tree_of_thought", {}, "unknown topology 'tree_of_thought'; known: single_sample"),
    ("rsa", {"populaton": "4"}, "has no parameter 'populaton'; its parameters are: n, k, steps, final_vote"),
    ("rsa", {"final_vote": "maybe"}, "takes true or false"),
    ("rsa", {"n": "four"}, "takes a whole number"),
    ("rsa", {"k": "9", "n": "4"}, "k=9 is larger than the set"),
])
def test_bad_names_and_values_fail_at_build_time(name: str, params: dict[str, str], message: str) -> None:
    with pytest.raises(GraphError, match=message):
        graphs.build_topology(name, params)


@pytest.mark.parametrize("name, old, new", [(name, old, new) for name, renamed in RENAMED.items()
                                            for old, new in renamed.items()])
def test_an_old_parameter_name_still_builds_with_a_deprecation_warning(name: str, old: str, new: str) -> None:
    """``-p population=4`` builds what ``-p n=4`` builds, warning that the old name is deprecated for the new."""
    value = graphs.topology(name).defaults[new] + 1
    with pytest.warns(DeprecationWarning, match=f"parameter '{old}' of '{name}' is deprecated; use '{new}'"):
        graph = graphs.build_topology(name, {old: str(value)})
    assert graph.params == graphs.build_topology(name, {new: str(value)}).params and graph.params[new] == value
    assert old not in graph.params


def test_an_old_and_a_new_name_of_one_parameter_together_are_an_error() -> None:
    """Giving ``population`` and ``n`` at once is ambiguous: a build error naming both, and no warning."""
    with pytest.raises(GraphError, match="'population' of 'rsa' is the old name of 'n'.*give only 'n'"):
        graphs.build_topology("rsa", {"population": "4", "n": "8"})


def test_parameter_listings_show_only_the_new_names() -> None:
    """``graph list --params`` and unknown-parameter errors name ``n`` and ``k``, never the old names."""
    for name, renamed in RENAMED.items():
        listed = {line.split(" = ")[0] for line in describe_parameters(name).splitlines()}
        assert set(renamed.values()) <= listed and not set(renamed) & listed, name


def test_pocket_prompts_fit_every_prompt_parameter_and_name_the_verifier_stably() -> None:
    """Solve prompt for first samples, aggregation prompt for every prompt that reads candidates; the step
    verifier and agreement verdict replace judge models; the recorded parameter is a stable name."""
    rsa = graphs.build_topology("rsa", prompts="pocket")
    assert rsa.params["prompt"] == SOLVE_PROMPT and rsa.params["aggregate_prompt"] == AGGREGATE_PROMPT
    pairwise = graphs.build_topology("pairwise_ranking", prompts="pocket")
    assert pairwise.params["compare_prompt"] == AGGREGATE_PROMPT and pairwise.params["verdict"] is \
        graphs.agreement_verdict
    best = graphs.build_topology("best_of_n", {"n": "4"}, prompts="pocket")
    assert isinstance(best.params["verifier"], StepVerifier)
    assert best.spec()["params"]["verifier"] == "graphs.registry.StepVerifier(3x3)"
    assert "judge" not in best.count_calls()
    task = PocketTask()
    row = task.problems(1, seed=0)[0]
    assert best.params["verifier"](row["problem"], _trace(task.solution(row["problem"]))) == 1.0
    explicit = graphs.build_topology("rsa", {"prompt": "Mine: {problem}"}, prompts="pocket")
    assert explicit.params["prompt"] == "Mine: {problem}"  # explicit parameters win


def _trace(text: str):  # type: ignore[no-untyped-def]
    import scaffold as sf

    return sf.Trace(id="r/s#0", run_id="r", node="s", index=0, text=text)


USER_GRAPH = """
import scaffold as sf

@sf.graph
def double_check(problem, *, n: int = 2, prompt: str = "Solve: {problem}"):
    return sf.vote(sf.sample(prompt, model="solver", n=n, name="samples"))

not_a_graph = 3
"""


def test_your_own_graph_by_file_and_name(tmp_path: Path) -> None:
    """FILE.py:NAME loads a user's @sf.graph function: parameters from text, pocket prompts where it takes them."""
    source = tmp_path / "mine.py"
    source.write_text(USER_GRAPH)
    graph = graphs.build_topology(f"{source}:double_check", {"n": "3"})
    assert graph.count_calls() == {"solver": 3}
    pocket = graphs.build_topology(f"{source}:double_check", prompts="pocket")
    assert pocket.params["prompt"] == SOLVE_PROMPT
    assert graphs.topology("graphs.rsa:rsa") is graphs.rsa  # MODULE:NAME


@pytest.mark.parametrize("reference, message", [
    ("{dir}/missing.py:g", "no file"),
    ("{dir}/mine.py:nothing", "has no 'nothing'"),
    ("{dir}/mine.py:not_a_graph", "is a int, not an @sf.graph function"),
    ("{dir}/broken.py:g", "importing .* failed: ZeroDivisionError"),
    ("no_such_module_xyz:g", "importing no_such_module_xyz failed: ModuleNotFoundError"),
])
def test_a_bad_reference_to_your_own_graph_is_one_clear_error(tmp_path: Path, reference: str, message: str) -> None:
    (tmp_path / "mine.py").write_text(USER_GRAPH)
    (tmp_path / "broken.py").write_text("1 / 0\n")
    with pytest.raises(GraphError, match=message):
        graphs.topology(reference.format(dir=tmp_path))

"""graphs/: self-consistency and Recursive Self-Aggregation on scripted backends."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from helpers import boxed

import graphs
import scaffold as sf
from scaffold.testing import ScriptedBackend


def counter_backend(answers: list[Any]) -> ScriptedBackend:
    """Replies ``draft i`` with the i-th answer (cycling), every reply distinct."""
    counter = itertools.count()
    return ScriptedBackend(lambda r: (lambda i: f"draft {i} " + boxed(answers[i % len(answers)]))(next(counter)))


def test_self_consistency_defaults_to_the_papers_forty_samples() -> None:
    """The paper's 40 sampled paths, then one vote."""
    assert graphs.self_consistency.build().count_calls() == {"solver": 40}


def test_self_consistency_votes_the_majority_even_when_it_is_wrong() -> None:
    """Three wrong samples outvote two right ones; equivalent forms (0.5, 1/2) count as one answer."""
    backend = counter_backend(["0.5", "3", "1/2", "3", "3"])
    result = graphs.self_consistency.build(n=5).run_sync({"problem": "p"}, models={"solver": backend}, store=None)
    assert result.answer == "3"
    assert result.output.metadata["counts"] == [["3", 3.0, 3], ["0.5", 2.0, 2]]
    assert len(backend.requests) == 5 and len(result.node("samples")) == 5


def test_rsa_defaults_are_the_papers() -> None:
    """N=16, K=4, T=10: 16 samples plus 10 steps of 16 aggregations, each over 4 candidates."""
    graph = graphs.rsa.build()
    assert graph.count_calls() == {"solver": 16 + 10 * 16}
    assert graph.params["n"] == 16 and graph.params["k"] == 4 and graph.params["steps"] == 10


@pytest.mark.parametrize("k", [1, 3])
def test_every_rsa_aggregation_reads_k_distinct_members_of_the_previous_step(k: int) -> None:
    """Lineage: step t's calls each read exactly K distinct traces of step t-1 (K=1 is self-refinement)."""
    backend = counter_backend([1, 2])
    result = graphs.rsa.build(n=6, k=k, steps=3).run_sync(
        {"problem": "p"}, models={"solver": backend}, seed=4, store=None)
    steps = graphs.population_by_step(result)
    assert [len(s) for s in steps] == [6, 6, 6, 6]
    assert len(backend.requests) == 6 * 4
    for previous, current in zip(steps, steps[1:]):
        ids = {t.id for t in previous}
        for trace in current:
            assert len(trace.inputs) == k == len(set(trace.inputs))
            assert set(trace.inputs) <= ids
            shown = re.findall(r"draft \d+", trace.request.last_content)
            assert sorted(shown) == sorted(re.search(r"draft \d+", t.text).group(0)
                                           for t in previous if t.id in trace.inputs)
    assert set(result.output.inputs) == {t.id for t in steps[-1]}


def test_rsa_is_reproducible_by_seed_and_can_return_the_population() -> None:
    """Same seed, same subsets and result; another seed draws other subsets; final_vote=False gives the set."""
    def subsets(seed: int) -> list[tuple[str, ...]]:
        result = graphs.rsa.build(n=8, k=2, steps=2).run_sync(
            {"problem": "p"}, models={"solver": counter_backend([1, 2, 3])}, seed=seed, store=None)
        return [tuple(i.split("/", 1)[1] for i in t.inputs) for t in result.traces
                if t.node.startswith("step") and t.node != "step0"]

    assert subsets(1) == subsets(1)
    assert subsets(1) != subsets(2)
    result = graphs.rsa.build(n=4, k=2, steps=1, final_vote=False).run_sync(
        {"problem": "p"}, models={"solver": counter_backend([5])}, store=None)
    assert isinstance(result.output, list) and len(result.output) == 4
    assert all(t.node == "step1" for t in result.output)


def test_rsa_subset_larger_than_the_population_fails_at_build_time() -> None:
    """K > N is a build error, before any call."""
    with pytest.raises(sf.SubsetSizeError):
        graphs.rsa.build(n=3, k=4)


def test_callable_build_parameters_are_recorded_by_name() -> None:
    """A function given as a build parameter is recorded as module.qualname, the same in every process."""
    import math

    @sf.graph
    def scored(problem: Any, *, scorer: Any = math.sqrt) -> Any:
        return sf.best_of(sf.sample("{problem}", model="m", n=2), scorer=lambda t: 1.0)

    spec = scored.build().spec()
    assert spec["params"]["scorer"] == "math.sqrt"


def test_graphs_exports_import() -> None:
    """Every name in graphs.__all__ imports, and ``import *`` gives exactly ``__all__``."""
    namespace: dict[str, object] = {}
    exec("from graphs import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(graphs.__all__)
    for name in graphs.__all__:
        value = getattr(graphs, name)
        if isinstance(value, sf.GraphFunction):
            assert value.__doc__ or value.fn.__doc__, name


def test_default_prompts_send_a_literal_boxed_and_no_doubled_braces() -> None:
    """Every default prompt renders with its variables filled (``{answer_format}`` as the default math kind words
    it), ``\\boxed{}`` intact and no ``{{`` left over."""
    from scaffold._template import Template
    from scaffold.answers import MathAnswer

    values = {"problem": "PROBLEM", "candidates": "CANDIDATES", "k": 2, "answer_format": MathAnswer().instruction}
    for name in [n for n in graphs.__all__ if n.endswith("_PROMPT")]:
        text = Template(getattr(graphs, name)).render(values)
        assert "{{" not in text and "}}" not in text, name
        assert "PROBLEM" in text, name
        assert "\\boxed{}" in text or "Score:" in text or "Winner:" in text, name

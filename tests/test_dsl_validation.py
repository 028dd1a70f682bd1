"""Structural mistakes raise typed errors at build time (or at run start), before any model call."""

from __future__ import annotations

import pytest
from helpers import boxed

import scaffold as sf
from scaffold.testing import ScriptedBackend


def test_subset_larger_than_population_raises_before_any_call(constant):
    """``aggregate(pop, k > n)`` is a SubsetSizeError raised while building; the backend is never called."""

    @sf.graph
    def rsa(problem, *, n: int = 4, k: int = 5):
        pop = sf.sample("Solve {problem}", model="m", n=n)
        return sf.aggregate(pop, model="m", k=k, n=n)

    backend = constant()
    with pytest.raises(sf.SubsetSizeError, match="k=5"):
        rsa.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 0
    assert rsa.build(k=4).count_calls() == {"m": 8}  # the same graph with k == n is fine


def test_partition_group_larger_than_set_raises():
    """A partition whose group size exceeds the set is a SubsetSizeError at build time."""

    @sf.graph
    def tree(problem):
        return sf.aggregate(sf.sample("S {problem}", model="m", n=3), model="m", select="partition", k=4)

    with pytest.raises(sf.SubsetSizeError):
        tree.build()


@pytest.mark.parametrize(
    "make",
    [
        lambda: sf.sample("S {problem}", model="m", n=0),
        lambda: sf.sample("S {problem}", model="m", n=-2),
        lambda: sf.aggregate(sf.sample("S {problem}", model="m", n=2), model="m", n=0),
        lambda: sf.aggregate(sf.sample("S {problem}", model="m", n=2), model="m", k=0, n=2),
        lambda: sf.aggregate(sf.sample("S {problem}", model="m", n=2), model="m", samples=0),
        lambda: sf.top_k(sf.sample("S {problem}", model="m", n=2), k=0, score=len),
        lambda: sf.top_k(sf.sample("S {problem}", model="m", n=2), k=3, score=len),
        lambda: sf.loop(lambda p: p, sf.sample("S {problem}", model="m", n=2), steps=0),
    ],
    ids=[
        "sample-n0",
        "sample-negative",
        "aggregate-n0",
        "aggregate-k0",
        "aggregate-samples0",
        "top_k-k0",
        "top_k-k-too-big",
        "loop-steps0",
    ],
)
def test_impossible_sizes_are_subset_size_errors(make, constant):
    """n < 1, k < 1, samples < 1, top_k larger than its set and steps < 1 raise SubsetSizeError at build time."""

    @sf.graph
    def g(problem):
        return make()

    backend = constant()
    with pytest.raises(sf.SubsetSizeError):
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: sf.aggregate(sf.candidates([]), model="m"),
        lambda: sf.aggregate(sf.candidates([]), model="m", k=2, n=3),
        lambda: sf.vote(sf.candidates([])),
        lambda: sf.weighted_vote(sf.candidates([]), weight=lambda t: 1.0),
        lambda: sf.best_of(sf.candidates([]), scorer=lambda t: 1.0),
        lambda: sf.top_k(sf.candidates([]), k=1, score=lambda t: 1.0),
        lambda: sf.generate("{ctx}", model="m", context={"ctx": sf.candidates([])}),
    ],
    ids=["aggregate", "aggregate-k", "vote", "weighted_vote", "best_of", "top_k", "context"],
)
def test_reading_an_empty_set_is_an_empty_set_error(make, constant):
    """Aggregating, voting or selecting over a set that is empty by construction raises EmptySetError."""

    @sf.graph
    def g(problem):
        return make()

    backend = constant()
    with pytest.raises(sf.EmptySetError):
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 0


def test_empty_candidates_given_at_run_start_raise_before_any_call(constant):
    """An input candidate set that is empty when the run starts is an EmptySetError before any call is sent."""

    @sf.graph
    def g(problem, candidates):
        side = sf.generate("independent {problem}", model="m")
        return {"side": side, "vote": sf.vote(candidates)}

    backend = constant()
    with pytest.raises(sf.EmptySetError):
        g.run_sync({"problem": "p", "candidates": []}, models={"m": backend})
    assert backend.calls == 0


def test_input_candidates_smaller_than_k_raise_before_any_call(constant):
    """Candidates supplied at run time with k > len raise SubsetSizeError before even independent nodes run."""

    @sf.graph
    def g(problem, candidates):
        side = sf.sample("independent {problem}", model="m", n=3)
        return {"side": side, "agg": sf.aggregate(candidates, model="m", k=3, n=2)}

    backend = constant()
    with pytest.raises(sf.SubsetSizeError, match="k=3"):
        g.run_sync({"problem": "p", "candidates": ["a", "b"]}, models={"m": backend})
    assert backend.calls == 0
    ok = g.run_sync({"problem": "p", "candidates": ["a", "b", "c"]}, models={"m": backend}, seed=0)
    assert len(ok.output["agg"]) == 2


def test_template_with_unknown_variable_lists_available_ones():
    """A template naming a variable nobody provides is a TemplateError listing the variables that exist."""

    @sf.graph
    def g(problem, hint):
        return sf.generate("Solve {problem} using {missing}", model="m")

    with pytest.raises(sf.TemplateError) as info:
        g.build()
    message = str(info.value)
    assert "{missing}" in message
    assert "hint" in message and "problem" in message


def test_system_prompt_is_checked_too():
    """The system template is validated like the prompt."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m", system="You are {persona}")

    with pytest.raises(sf.TemplateError, match="persona"):
        g.build()


def test_aggregate_provides_candidates_and_k_but_generate_does_not():
    """``{candidates}`` and ``{k}`` are available to aggregate's prompt only."""

    @sf.graph
    def agg(problem):
        return sf.aggregate(sf.sample("S {problem}", model="m", n=2), model="m", prompt="{k}: {candidates}")

    @sf.graph
    def gen(problem):
        return sf.generate("{k}: {candidates}", model="m")

    agg.build()
    with pytest.raises(sf.TemplateError):
        gen.build()


def test_unknown_model_alias_lists_bound_aliases(constant):
    """Running with an alias left unbound raises ModelAliasError naming it and listing the bound aliases."""

    @sf.graph
    def g(problem):
        draft = sf.generate("Solve {problem}", model="solver")
        return sf.generate("Check {draft}", model="verifier", context={"draft": draft})

    backend = constant()
    with pytest.raises(sf.ModelAliasError) as info:
        g.run_sync({"problem": "p"}, models={"solver": backend, "writer": backend})
    message = str(info.value)
    assert "'verifier'" in message
    assert "solver" in message and "writer" in message
    assert backend.calls == 0


def test_alias_bound_to_a_model_name_without_a_key_names_the_missing_variable(monkeypatch):
    """A litellm model name with no API key fails at once (no retry) with an AuthenticationError naming the variable."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    with pytest.raises(sf.CallError, match="OPENAI_API_KEY") as info:
        g.run_sync({"problem": "p"}, models={"m": "openai/gpt-4o"})
    assert isinstance(info.value.__cause__, sf.AuthenticationError)
    assert info.value.__cause__.attempts == 1


def test_alias_bound_to_something_else_is_rejected():
    """Binding an alias to neither a backend, a Model nor a model name is a ModelAliasError."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    with pytest.raises(sf.ModelAliasError, match="42"):
        g.run_sync({"problem": "p"}, models={"m": 42})


def test_missing_run_input_is_an_input_error(constant):
    """A run without one of the graph's inputs raises InputError (a ValueError) naming it; nothing is sent."""

    @sf.graph
    def g(problem, context):
        return sf.generate("Solve {problem} given {context}", model="m")

    backend = constant()
    with pytest.raises(sf.InputError, match="'context'") as info:
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert isinstance(info.value, ValueError)
    assert backend.calls == 0


def test_bad_candidate_row_is_an_input_error(constant):
    """A candidate that is not a string, Trace or ``{"text": ...}`` mapping is an InputError at run start."""

    @sf.graph
    def g(candidates):
        return sf.vote(candidates)

    with pytest.raises(sf.InputError, match="candidate 1"):
        g.run_sync({"candidates": [boxed(1), 42]}, models={})
    with pytest.raises(sf.InputError):
        g.run_sync({"candidates": "not a list"}, models={})


@pytest.mark.parametrize(
    "call",
    [
        lambda: sf.generate("x", model="m"),
        lambda: sf.sample("x", model="m", n=2),
        lambda: sf.aggregate(["a", "b"], model="m"),
        lambda: sf.candidates(["a"]),
        lambda: sf.vote(["a"]),
        lambda: sf.concat(["a"], ["b"]),
        lambda: sf.loop(lambda p: p, ["a"], steps=1),
    ],
    ids=["generate", "sample", "aggregate", "candidates", "vote", "concat", "loop"],
)
def test_primitives_outside_a_graph_raise(call):
    """Calling a primitive outside an ``@sf.graph`` function is a GraphDefinitionError that says where to call it."""
    with pytest.raises(sf.GraphDefinitionError, match="@sf.graph"):
        call()


def test_calling_a_graph_function_outside_a_graph_raises():
    """Calling a graph like a function outside another graph is a GraphDefinitionError pointing at ``.run``."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    with pytest.raises(sf.GraphDefinitionError, match="run"):
        g("2+2")


@pytest.mark.parametrize(
    "make",
    [
        lambda: sf.aggregate(sf.sample("S {problem}", model="m", n=2), model="m", select="bogus"),
        lambda: sf.aggregate(sf.sample("S {problem}", model="m", n=2), model="m", select="partition"),
        lambda: sf.sample("S {problem}", model="m", n=2, on_error="ignore"),
        lambda: sf.sample("S {problem}", model="m", n=2, on_error=True),
        lambda: sf.generate("S {problem}", model=""),
        lambda: sf.vote(42),
        lambda: sf.best_of(sf.sample("S {problem}", model="m", n=2), scorer="len"),
    ],
    ids=[
        "unknown-select",
        "partition-without-k",
        "bad-policy",
        "bool-policy",
        "empty-alias",
        "not-a-set",
        "scorer-not-callable",
    ],
)
def test_malformed_graphs_are_definition_errors(make):
    """Other misuse of the DSL raises GraphDefinitionError when the graph is built."""

    @sf.graph
    def g(problem):
        return make()

    with pytest.raises(sf.GraphDefinitionError):
        g.build()


def test_graph_must_return_a_node():
    """A graph function that returns no node is rejected."""

    @sf.graph
    def g(problem):
        sf.generate("Solve {problem}", model="m")
        return "done"

    with pytest.raises(sf.GraphDefinitionError, match="must return a node"):
        g.build()


def test_unknown_build_parameter_is_rejected():
    """``build(**params)`` only accepts the graph's keyword-only parameters and names the valid ones."""

    @sf.graph
    def g(problem, *, n: int = 2):
        return sf.sample("S {problem}", model="m", n=n)

    with pytest.raises(sf.GraphDefinitionError, match="steps") as info:
        g.build(steps=3)
    assert "n" in str(info.value)


def test_quorum_must_be_positive():
    """``Quorum(0)`` is a SubsetSizeError."""
    with pytest.raises(sf.SubsetSizeError):
        sf.Quorum(0)


def test_quorum_larger_than_the_set_never_passes(constant):
    """A quorum larger than the node's set can never be met: it must fail at build time or at run time."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("S {problem}", model="m", n=4, on_error=sf.Quorum(5)))

    with pytest.raises((sf.SubsetSizeError, sf.QuorumError)):
        g.run_sync({"problem": "p"}, models={"m": constant()})


def test_validation_does_not_call_anything(constant):
    """``Graph.validate`` checks aliases and inputs without any request."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    backend = constant()
    graph = g.build()
    graph.validate({"m": backend}, {"problem": "p"})
    with pytest.raises(sf.ModelAliasError):
        graph.validate({})
    with pytest.raises(sf.InputError):
        graph.validate({"m": backend}, {})
    assert backend.calls == 0


def test_literal_latex_braces_and_escapes_render_verbatim():
    """``\\boxed{}`` and ``\\frac{1}{2}`` in a template are literal; ``{{x}}`` renders as ``{x}``."""
    seen = []

    @sf.graph
    def g(problem):
        return sf.generate(r"Solve {problem}. Is it \frac{1}{2}? Put it in \boxed{}. Keep {{x}} as is.", model="m")

    backend = ScriptedBackend(lambda request: seen.append(request) or boxed(1))
    g.run_sync({"problem": "2+2"}, models={"m": backend})
    assert seen[0].last_content == r"Solve 2+2. Is it \frac{1}{2}? Put it in \boxed{}. Keep {x} as is."
    assert sf.Template(r"\frac{1}{2} {{x}} {y}").variables == {"y"}

"""Loops with a data-dependent stop, and sub-graphs inlined into other graphs."""

from __future__ import annotations

import itertools

import pytest
from helpers import boxed, numbered_script, prompt_of

import scaffold as sf
from scaffold.testing import ScriptedBackend


@sf.graph
def rsa_until(problem, *, n: int = 4, k: int = 2, steps: int = 5, share: float = 0.75):
    pop = sf.sample("Solve {problem}", model="m", n=n)
    pop = sf.loop(lambda p: sf.aggregate(p, model="m", k=k, n=n), pop, steps=steps, until=sf.agreement(share))
    return sf.vote(pop)


def disagree_then_agree(agreeing_step: int):
    """Samples disagree; aggregations of step < ``agreeing_step`` (prompt ``step<i> ...``) too; later ones say 7."""
    counter = itertools.count()

    def script(request):
        first_word = prompt_of(request).split()[0]
        if first_word.startswith("step") and int(first_word[4:]) >= agreeing_step:
            return boxed(7)
        return boxed(next(counter))

    return script


def step_tagged_rsa():
    """RSA whose aggregation prompt names its loop step, so a script can answer per step."""

    @sf.graph
    def rsa(problem, *, steps: int = 5):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        body = lambda p, step: sf.aggregate(p, model="m", k=2, n=4, prompt=f"step{step} {{candidates}}")
        return sf.vote(sf.loop(body, pop, steps=steps, until=sf.agreement(0.75)))

    return rsa


def test_loop_stops_once_agreement_is_reached():
    """With ``until=agreement(0.75)`` the loop stops after the first step that agrees; later steps are never sent."""
    backend = ScriptedBackend(disagree_then_agree(1))
    result = step_tagged_rsa().run_sync({"problem": "p"}, models={"m": backend}, seed=0)
    assert result.ok
    sent_steps = sorted({prompt_of(r).split()[0] for r in backend.requests if not prompt_of(r).startswith("Solve")})
    assert sent_steps == ["step0", "step1"]
    assert backend.calls == 4 + 4 + 4
    nodes = {t.node for t in result.traces}
    assert {"loop@0/aggregate", "loop@1/aggregate"} <= nodes
    assert not any(name.startswith(("loop@2", "loop@3", "loop@4")) for name in nodes)
    assert result.answer == "7"
    assert result.output.inputs == tuple(t.id for t in result.node("loop@1/aggregate"))


def test_loop_stops_before_the_first_step_when_the_input_already_agrees():
    """If the initial set already agrees, no aggregation is sent and the loop returns its input."""
    backend = ScriptedBackend(lambda r: boxed(3))
    result = rsa_until.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 4
    assert result.ok and result.answer == "3"
    assert result.output.inputs == tuple(t.id for t in result.node("sample"))


def test_loop_without_reaching_agreement_runs_every_step():
    """When ``until`` never holds, every step runs and the loop returns the last step's set."""
    counter = itertools.count()
    backend = ScriptedBackend(lambda r: boxed(next(counter)))
    result = rsa_until.build(steps=3).run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 4 + 3 * 4
    assert result.output.inputs == tuple(t.id for t in result.node("loop@2/aggregate"))


def test_loop_without_until_runs_all_steps():
    """A loop with no stop condition is plain unrolling: every step is sent, names carry ``@step``."""

    @sf.graph
    def rsa(problem, *, steps: int = 5):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        return sf.vote(sf.loop(lambda p: sf.aggregate(p, model="m", k=2, n=4), pop, steps=steps))

    backend = ScriptedBackend(lambda r: boxed(3))
    result = rsa.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 4 + 5 * 4
    assert [f"loop@{s}/aggregate" for s in range(5)] == sorted({t.node for t in result.traces if "@" in t.node})
    assert result.output.inputs == tuple(t.id for t in result.node("loop@4/aggregate"))


def test_loop_body_can_take_the_step_number():
    """A two-argument body receives the step index 0..steps-1."""
    seen: list[int] = []

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=2)

        def body(p, step):
            seen.append(step)
            return sf.aggregate(p, model="m", select="each")

        return sf.loop(body, pop, steps=3)

    g.build()
    assert seen == [0, 1, 2]


def test_loop_with_until_must_keep_the_set_size():
    """A body that changes the set size cannot be stopped early (the result would have no fixed size)."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        return sf.loop(lambda p: sf.aggregate(p, model="m", k=2, n=2), pop, steps=2, until=sf.agreement(1.0))

    with pytest.raises(sf.GraphDefinitionError):
        g.build()


def test_loop_body_must_return_a_set():
    """A loop body returning something other than a node is rejected."""

    @sf.graph
    def g(problem):
        return sf.loop(lambda p: "nope", sf.sample("Solve {problem}", model="m", n=2), steps=2)

    with pytest.raises(sf.GraphDefinitionError):
        g.build()


# -- sub-graphs ----------------------------------------------------------------------------------------------


@sf.graph
def solve(problem, *, n: int = 2):
    return sf.vote(sf.sample("Solve {problem}", model="m", n=n))


def test_subgraph_is_inlined_with_a_name_prefix():
    """A graph called inside another adds its nodes under a prefix; a second call gets a fresh prefix."""

    @sf.graph
    def twice(problem):
        return sf.concat(solve(problem), solve(problem))

    backend = ScriptedBackend(lambda r: boxed(1))
    result = twice.run_sync({"problem": "p"}, models={"m": backend})
    assert {t.node for t in result.traces} == {"solve/sample", "solve/vote", "solve_2/sample", "solve_2/vote"}
    assert [t.node for t in result.output] == ["solve/vote", "solve_2/vote"]
    assert backend.calls == 4


def test_subgraph_input_binds_to_an_outer_input():
    """A sub-graph input passed the outer graph's input renders the outer run's value."""

    @sf.graph
    def outer(question):
        return solve(question)

    backend = ScriptedBackend(lambda r: boxed(1))
    outer.run_sync({"question": "what is 6*7"}, models={"m": backend})
    assert {prompt_of(r) for r in backend.requests} == {"Solve what is 6*7"}


def test_subgraph_input_binds_to_a_constant_string():
    """A sub-graph input passed a string is a constant in its prompts."""

    @sf.graph
    def outer(question):
        return sf.concat(solve("1+1"), solve(problem=question))

    backend = ScriptedBackend(lambda r: boxed(1))
    outer.run_sync({"question": "2+2"}, models={"m": backend})
    assert sorted(prompt_of(r) for r in backend.requests) == ["Solve 1+1"] * 2 + ["Solve 2+2"] * 2


def test_subgraph_build_parameters_are_keyword_arguments():
    """Keyword arguments that are build parameters configure the inlined sub-graph."""

    @sf.graph
    def outer(problem):
        return sf.concat(solve(problem, n=3), solve(problem, n=1))

    assert outer.count_calls() == {"m": 4}
    result = outer.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))})
    assert len(result.node("solve/sample")) == 3
    assert len(result.node("solve_2/sample")) == 1


def test_subgraph_can_take_a_set():
    """A sub-graph whose input is a set aggregates the outer graph's traces, with lineage to them."""

    @sf.graph
    def refine(population, *, k: int = 2):
        return sf.aggregate(population, model="m", k=k, n=2, prompt="Refine {candidates}")

    @sf.graph
    def outer(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3)
        return refine(pop)

    result = outer.run_sync({"problem": "p"}, models={"m": ScriptedBackend(numbered_script())}, seed=0)
    sample_ids = {t.id for t in result.node("sample")}
    assert [t.node for t in result.output] == ["refine/aggregate"] * 2
    assert all(len(t.inputs) == 2 and set(t.inputs) <= sample_ids for t in result.output)


def test_built_graph_can_be_used_as_a_subgraph():
    """A built Graph (with its parameters) inlines like the decorated function."""
    solve_three = solve.build(n=3)

    @sf.graph
    def outer(problem):
        return solve_three(problem)

    assert outer.count_calls() == {"m": 3}


@pytest.mark.parametrize(
    "call",
    [lambda p: solve(), lambda p: solve(p, p), lambda p: solve(p, steps=2), lambda p: solve(p, problem=p)],
    ids=["missing-input", "too-many", "unknown-keyword", "twice"],
)
def test_subgraph_call_errors(call):
    """Wrong sub-graph calls (missing, extra, unknown or repeated inputs) are GraphDefinitionErrors."""

    @sf.graph
    def outer(problem):
        return call(problem)

    with pytest.raises(sf.GraphDefinitionError):
        outer.build()

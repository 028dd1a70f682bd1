"""Answer extraction, custom extractors, templates, and candidates supplied from outside the graph."""

from __future__ import annotations

import pytest
from helpers import boxed, prompt_of

import scaffold as sf
from scaffold.testing import ScriptedBackend

# -- answer extraction --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (r"the answer is \boxed{42}.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\sqrt{\frac{a}{b}}} done", r"\sqrt{\frac{a}{b}}"),
        (r"first \boxed{1}, then corrected: \boxed{2}", "2"),
        (r"\boxed 5", "5"),
        (r"\boxed 5.", "5"),
        (r"\fbox{x+1}", "x+1"),
        (r"\boxed{ 3 }", "3"),
        (r"good \boxed{9} then broken \boxed{", "9"),
        ("no answer here", None),
        ("", None),
    ],
    ids=[
        "plain",
        "nested",
        "deeply-nested",
        "last-wins",
        "no-braces",
        "no-braces-period",
        "fbox",
        "spaces",
        "unclosed-last",
        "none",
        "empty",
    ],
)
def test_extract_boxed(text, answer):
    """extract_boxed returns the last complete boxed answer, handles nested braces, ``\\boxed 5``, else None."""
    assert sf.extract_boxed(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [("it costs 1,200 dollars", "1200"), ("-3 and then 4.5", "4.5"), ("none", None)],
)
def test_extract_last_number(text, answer):
    """extract_last_number returns the last number without thousands separators, or None."""
    assert sf.extract_last_number(text) == answer


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("1/2", "0.5", True),
        (r"\frac{1}{2}", "0.5", True),
        (r"\dfrac{1}{2}", r"\frac{1}{2}", True),
        ("$7$", "7", True),
        ("7", "8", False),
        (None, "7", False),
        ("", "7", False),
    ],
)
def test_equivalent(a, b, same):
    """equivalent compares answers as mathematical values, and never equates a missing answer."""
    assert sf.equivalent(a, b) is same
    assert sf.equivalent(b, a) is same


def test_custom_extract_on_a_node():
    """``extract=`` on a node replaces the default boxed extractor for that node only."""

    @sf.graph
    def g(problem):
        numbers = sf.sample("Solve {problem}", model="m", n=2, extract=sf.extract_last_number)
        boxed_ones = sf.sample("Again {problem}", model="m", n=2)
        return {"numbers": numbers, "boxed": boxed_ones}

    backend = ScriptedBackend(lambda r: r"I think 12 then \boxed{3} and finally 8")
    result = g.run_sync({"problem": "p"}, models={"m": backend})
    assert [t.answer for t in result.output["numbers"]] == ["8", "8"]
    assert [t.answer for t in result.output["boxed"]] == ["3", "3"]


def test_run_level_extract_applies_to_every_node_without_its_own():
    """``run(extract=...)`` sets the extractor for model and external traces of that run."""

    @sf.graph
    def g(problem, candidates):
        return sf.vote(sf.concat(sf.sample("Solve {problem}", model="m", n=2), candidates))

    backend = ScriptedBackend(lambda r: "answer: 5")
    result = g.run_sync(
        {"problem": "p", "candidates": ["answer: 5", "answer: 6"]},
        models={"m": backend},
        extract=sf.extract_last_number,
    )
    assert result.answer == "5"
    assert result.output.metadata["counts"] == [["5", 3.0, 3], ["6", 1.0, 1]]


# -- templates ------------------------------------------------------------------------------------------------


def test_template_variables_and_rendering():
    """Only ``{identifier}`` is a placeholder; other braces and ``{{name}}`` render literally."""
    template = sf.Template(r"{problem} \boxed{} \frac{1}{2} {{problem}} {x}")
    assert template.variables == {"problem", "x"}
    assert template.render({"problem": "P", "x": 3}) == r"P \boxed{} \frac{1}{2} {problem} 3"
    with pytest.raises(sf.TemplateError):
        template.render({"problem": "P"})
    with pytest.raises(sf.TemplateError):
        sf.Template(42)


def test_fstring_with_a_graph_input_becomes_a_placeholder():
    """Formatting a graph input into an f-string yields its placeholder, filled at run time."""

    @sf.graph
    def g(problem):
        return sf.generate(f"Please solve: {problem}", model="m")

    backend = ScriptedBackend(lambda r: boxed(1))
    g.run_sync({"problem": "3*3"}, models={"m": backend})
    assert prompt_of(backend.requests[0]) == "Please solve: 3*3"


def test_system_prompt_is_sent_first():
    """A node's system template becomes a system message before the user message."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m", system="You check {problem} carefully.")

    backend = ScriptedBackend(lambda r: boxed(1))
    g.run_sync({"problem": "x"}, models={"m": backend})
    messages = backend.requests[0].messages
    assert [tuple(m) for m in messages] == [("system", "You check x carefully."), ("user", "Solve x")]


def test_custom_render_of_candidates():
    """``render=`` controls how the candidate set appears in the aggregation prompt."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3)
        return sf.aggregate(
            pop, model="m", prompt="Answers: {candidates}", render=lambda traces: " | ".join(t.answer for t in traces)
        )

    answers = iter([boxed(1), boxed(2), boxed(3), boxed(4)])
    backend = ScriptedBackend(lambda r: next(answers))
    g.run_sync({"problem": "p"}, models={"m": backend})
    assert prompt_of(backend.requests[-1]) == "Answers: 1 | 2 | 3"


def test_format_candidates_numbers_from_one():
    """The default candidate rendering numbers candidates from 1 and separates them with a blank line."""

    @sf.graph
    def g():
        return sf.candidates(["a", "b"])

    traces = g.run_sync({}, models={}).output
    assert sf.format_candidates(traces) == "Candidate 1:\na\n\nCandidate 2:\nb"


# -- external candidates ----------------------------------------------------------------------------------------


@sf.graph
def aggregate_given(problem, candidates):
    return sf.aggregate(candidates, model="m", prompt="{problem}\n{candidates}")


def test_external_candidates_of_every_form_are_aggregated():
    """Strings, Traces and ``{"text": ...}`` rows given at run time become EXTERNAL traces read by the aggregation."""
    earlier = sf.Trace(id="old/sample#3", run_id="old", node="sample", index=3, model="solver", text=boxed(2))
    given = [boxed(1), earlier, {"text": "three", "answer": 3, "source": "human"}]
    backend = ScriptedBackend(lambda r: boxed(9))
    result = aggregate_given.run_sync({"problem": "p", "candidates": given}, models={"m": backend}, run_id="r")
    external = result.node("candidates")
    assert [t.kind for t in external] == [sf.TraceKind.EXTERNAL] * 3
    assert [t.id for t in external] == ["r/candidates#0", "r/candidates#1", "r/candidates#2"]
    assert [t.answer for t in external] == ["1", "2", "3"]
    assert external[1].metadata["source_id"] == "old/sample#3"
    assert external[1].model == "solver"
    assert external[2].metadata["source"] == "human"
    assert result.output.inputs == tuple(t.id for t in external)
    assert prompt_of(backend.requests[0]) == "p\n" + sf.format_candidates(external)
    assert backend.calls == 1


def test_external_candidates_with_random_subsets():
    """An input set can be subsampled like any population; count_calls needs its size."""

    @sf.graph
    def agg(problem, candidates, *, k: int = 2, n: int = 3):
        return sf.aggregate(candidates, model="m", k=k, n=n)

    given = [boxed(i) for i in range(5)]
    result = agg.run_sync(
        {"problem": "p", "candidates": given}, models={"m": ScriptedBackend(lambda r: boxed(0))}, run_id="r", seed=1
    )
    ids = {f"r/candidates#{i}" for i in range(5)}
    assert len(result.output) == 3
    assert all(len(set(t.inputs)) == 2 and set(t.inputs) <= ids for t in result.output)


def test_vote_over_input_strings_needs_no_model():
    """``sf.vote`` over candidates given as strings runs with no model bound at all."""

    @sf.graph
    def majority(candidates):
        return sf.vote(candidates)

    result = majority.run_sync({"candidates": [boxed("0.5"), boxed(3), boxed("1/2")]}, models={})
    assert result.answer == "0.5"
    assert result.output.metadata["counts"] == [["0.5", 2.0, 2], ["3", 1.0, 1]]
    assert result.calls_by_model() == {}


def test_one_input_read_twice_is_one_set():
    """Reading the same input set from two nodes yields one set of external traces, not two."""

    @sf.graph
    def g(candidates):
        return {"vote": sf.vote(candidates), "best": sf.best_of(candidates, scorer=lambda t: len(t.text))}

    result = g.run_sync({"candidates": ["a", boxed(10)]}, models={}, run_id="r")
    assert [t.id for t in result.traces if t.kind is sf.TraceKind.EXTERNAL] == ["r/candidates#0", "r/candidates#1"]
    assert result.output["vote"].inputs == result.output["best"].inputs

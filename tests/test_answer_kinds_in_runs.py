"""Answer kinds in runs: per run, per node, in votes and prompts (``{answer_format}``), and recorded in a store."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import scaffold as sf
from scaffold.answers import ChoiceAnswer, JsonAnswer, TextAnswer
from scaffold.testing import ScriptedBackend


def scripted(*texts: str) -> ScriptedBackend:
    replies = iter(texts)
    return ScriptedBackend(lambda request: next(replies))


@sf.graph
def consistency(problem):
    return sf.vote(sf.sample("{problem}\n{answer_format}", model="m", n=3))


def test_a_runs_answer_kind_reads_every_answer_and_the_vote_clusters_by_it() -> None:
    backend = scripted("The answer is (B).", "**Answer: C**", "I am not sure.")
    result = consistency.run_sync({"problem": "Which?"}, models={"m": backend}, answer_kind="choice", store=None)
    assert [t.answer for t in result.traces if t.node == "sample"] == ["B", "C", None]
    assert result.answer == "B" and result.output.metadata["counts"] == [["B", 1.0, 1], ["C", 1.0, 1]]
    default = consistency.run_sync({"problem": "Which?"}, models={"m": scripted(r"\boxed{1/2}", r"\boxed{0.5}",
                                                                                 r"\boxed{3}")}, store=None)
    assert default.answer == "1/2" and default.output.metadata["share"] == pytest.approx(2 / 3)


def test_answer_format_fills_each_prompt_from_the_kind() -> None:
    backend = scripted("Answer: A", "Answer: A", "Answer: A")
    consistency.run_sync({"problem": "Q"}, models={"m": backend}, answer_kind="choice", store=None)
    assert backend.requests[0].last_content == "Q\n" + ChoiceAnswer().instruction
    math = scripted(*[r"\boxed{1}"] * 3)
    consistency.run_sync({"problem": "Q"}, models={"m": math}, store=None)
    assert math.requests[0].last_content == "Q\nEnd with the final answer in \\boxed{}."


def test_a_graph_input_named_answer_format_wins_over_the_kind() -> None:
    @sf.graph
    def own(problem, answer_format):
        return sf.generate("{problem} {answer_format}", model="m")

    backend = scripted("x")
    own.run_sync({"problem": "Q", "answer_format": "mine"}, models={"m": backend}, store=None)
    assert backend.requests[0].last_content == "Q mine"


def test_the_rows_options_reach_a_choice_kind() -> None:
    """A run's ``choices`` input binds the kind: an answer stating an option's text is read as its letter."""
    @sf.graph
    def ask(problem):
        return sf.generate("{problem}", model="m")

    def answer(text: str) -> str | None:
        return ask.run_sync({"problem": "Capital of France?", "choices": ["Paris", "Rome"]},
                            models={"m": scripted(text)}, answer_kind="choice", store=None).answer

    assert answer("The answer is Rome.") == "B"  # a cue followed by an option's text is its letter
    assert answer("It is Paris.") == "A"  # with no choice stated: the one option the last sentence names
    assert answer("Paris or Rome: I cannot tell.") is None  # two options named: no choice
    assert answer("Answer: (C)") is None  # two options: no C


def test_a_nodes_own_kind_wins_over_the_runs_and_fills_its_prompt() -> None:
    @sf.graph
    def mixed(problem):
        pick = sf.generate("{problem} {answer_format}", model="m", extract="choice", name="pick")
        return sf.generate("{problem} {answer_format}", model="m", context={"pick": pick}, name="count")

    backend = scripted("Answer: D", r"so \boxed{007}")
    result = mixed.run_sync({"problem": "Q"}, models={"m": backend}, answer_kind="integer", store=None)
    assert {t.node: t.answer for t in result.traces} == {"pick": "D", "count": "7"}
    assert backend.requests[0].last_content == "Q " + ChoiceAnswer().instruction
    assert "integer" in backend.requests[1].last_content


def test_a_votes_own_equivalence_wins_over_the_runs_kind() -> None:
    @sf.graph
    def by_text():
        return sf.vote(sf.candidates(["Answer: The Eiffel Tower", "Answer: eiffel tower!", "Answer: Big Ben"]),
                       equivalence="text")

    result = by_text.run_sync({}, models={}, answer_kind="text", store=None)
    assert result.output.metadata["share"] == pytest.approx(2 / 3)
    exact = sf.graph(lambda: sf.vote(sf.candidates(["Answer: A", "Answer: a"]), equivalence=lambda a, b: a == b))
    assert exact.run_sync({}, models={}, answer_kind="text", store=None).output.metadata["share"] == 0.5


def test_an_explicit_extract_overrides_the_kinds_extractor_only() -> None:
    backend = scripted("Answer: X1", "Answer: x1", "Answer: y")
    result = consistency.run_sync({"problem": "Q"}, models={"m": backend}, answer_kind="text", store=None,
                                  extract=lambda text: text.split(": ")[1])
    assert result.answer == "X1" and result.output.metadata["share"] == pytest.approx(2 / 3)  # text's equivalence


def test_bad_kinds_are_typed_errors_at_build_and_run_time() -> None:
    with pytest.raises(sf.AnswerKindError, match="unknown answer kind 'letters'"):
        consistency.run_sync({"problem": "Q"}, models={"m": scripted()}, answer_kind="letters", store=None)
    with pytest.raises(sf.AnswerKindError, match="unknown answer kind"):
        sf.graph(lambda problem: sf.generate("{problem}", model="m", extract="letters")).build()
    with pytest.raises(sf.GraphDefinitionError, match="extract= takes a function of the text, an answer kind"):
        sf.graph(lambda problem: sf.generate("{problem}", model="m", extract=3)).build()  # type: ignore[arg-type]
    with pytest.raises(sf.GraphDefinitionError, match="equivalence=...\\) takes a function of two answers"):
        sf.graph(lambda: sf.vote(sf.candidates(["a"]), equivalence=3)).build()  # type: ignore[arg-type]


def test_answers_of_a_kind_are_recorded_in_a_real_sqlite_store(tmp_path) -> None:
    store = sf.Store(tmp_path / "runs.db")
    backend = scripted("The answer is (B).", "Answer: B", "I choose (A)")
    result = consistency.run_sync({"problem": "Which?"}, models={"m": backend}, answer_kind="choice", store=store)
    store.flush()
    traces = store.traces(result.run_id)
    assert next(t for t in traces if t.node == "vote").answer == "B"
    assert sorted(t.answer for t in traces if t.node == "sample") == ["A", "B", "B"]
    store.close()


def test_text_kind_reads_whole_texts_for_a_free_text_graph() -> None:
    @sf.graph
    def moa(problem):
        return sf.aggregate(sf.sample("{problem}", model="m", n=2), model="m")

    result = moa.run_sync({"problem": "Describe Paris in one line."},
                          models={"m": scripted("A city.", "A capital.", "Paris is the capital of France.")},
                          answer_kind=TextAnswer(), store=None)
    assert result.answer == "Paris is the capital of France."


class City(BaseModel):
    country: str
    city: str


def test_a_json_answer_is_validated_and_reasked_with_the_error_and_every_reply_is_recorded(tmp_path) -> None:
    """The first reply is not valid (no city): it is recorded, and the model is asked again with the validation
    error; the second reply is the call's trace, reading the first. The backend takes JSON schemas, so every
    call carries the kind's response_format."""
    replies = iter(['{"country": "France"}', 'Sure: {"country": "France", "city": "Paris"}'])
    backend = ScriptedBackend(lambda request: next(replies), json_schema=True)

    @sf.graph
    def ask(problem):
        return sf.generate("{problem} {answer_format}", model="m", extract=JsonAnswer(City, field="city"))

    store = sf.Store(tmp_path / "runs.db")
    result = ask.run_sync({"problem": "Capital of France?"}, models={"m": backend}, store=store, run_id="j1")
    assert result.answer == "Paris" and result.output.metadata["reasks"] == 1
    assert backend.calls == 2
    assert backend.requests[0].params["response_format"]["json_schema"]["name"] == "City"
    again = backend.requests[1]
    assert [role for role, _ in again.messages] == ["user", "assistant", "user"]
    assert "1 validation error for City" in again.messages[-1][1] and "city" in again.messages[-1][1]
    store.flush()
    traces = {t.id: t for t in store.traces("j1")}
    refused = traces["j1/generate#0.reask1"]
    assert refused.answer is None and "validation error" in refused.metadata["invalid"]
    assert traces["j1/generate#0"].inputs == ("j1/generate#0.reask1",)
    store.close()


def test_a_json_answer_that_stays_invalid_has_no_answer_and_says_why() -> None:
    backend = ScriptedBackend(lambda request: "not json")

    @sf.graph
    def ask(problem):
        return sf.generate("{problem}", model="m")

    result = ask.run_sync({"problem": "?"}, models={"m": backend}, answer_kind=JsonAnswer(City, reask=1), store=None)
    assert result.answer is None and backend.calls == 2
    assert result.output.metadata == {**result.output.metadata, "reasks": 1, "invalid": "no JSON object found"}
    assert "response_format" not in backend.requests[0].params  # this backend takes no JSON schema

"""Judged votes (``sf.vote(..., equivalence=sf.judge(...))``): few judge calls, each recorded with its lineage,
resumed, budgeted, and typed errors."""

from __future__ import annotations

from typing import Any

import pytest

import scaffold as sf
from scaffold.testing import ScriptedBackend

EIGHT = ["Paris", "The capital is Lyon", "paris, France", "Marseille", "Lyon it is", "It's Paris",
         "Marseille, surely", "the city of Lyon"]
"""Eight free-text answers in three clusters (Paris, Lyon, Marseille), in a fixed order."""


def city(text: str) -> str:
    return next(c for c in ("paris", "lyon", "marseille") if c in text.lower())


def oracle(request: Any) -> str:
    """A stand-in judge that knows which city each answer names."""
    body = request.last_content
    first = body.split("Answer 1:\n")[1].split("\n\nAnswer 2:")[0]
    second = body.split("Answer 2:\n")[1].split("\n\n")[0]
    return "Same" if city(first) == city(second) else "Different"


@sf.graph
def judged(problem):
    return sf.vote(sf.sample("{problem}", model="m", n=8), equivalence=sf.judge(model="judge"))


def run(store: Any = None, **options: Any) -> tuple[sf.RunResult, ScriptedBackend, ScriptedBackend]:
    answers = iter(EIGHT)
    solver, judge = ScriptedBackend(lambda r: next(answers)), ScriptedBackend(oracle)
    result = judged.run_sync({"problem": "Which city?"}, models={"m": solver, "judge": judge}, answer_kind="text",
                             store=store, **options)
    return result, solver, judge


def test_eight_answers_in_three_clusters_take_at_most_twelve_judge_calls() -> None:
    """Each new answer meets one representative per cluster, largest first: 0+1+1+2+2+1+3+2 = 12 calls."""
    result, _, judge = run()
    assert result.output.metadata["counts"] == [["Paris", 3.0, 3], ["The capital is Lyon", 3.0, 3],
                                                ["Marseille", 2.0, 2]]
    assert result.answer == "Paris" and judge.calls == result.output.metadata["judge_calls"] == 12
    assert judged.build().count_calls() == {"m": 8, "judge": 28}  # the worst case: every pair


def test_answers_the_kind_calls_equal_need_no_judge() -> None:
    @sf.graph
    def same_words():
        return sf.vote(sf.candidates(["Answer: Paris", "Answer: paris!", "Answer: PARIS"]),
                       equivalence=sf.judge(model="judge"))

    judge = ScriptedBackend(oracle)
    result = same_words.run_sync({}, models={"judge": judge}, answer_kind="text", store=None)
    assert judge.calls == 0 and result.output.metadata["share"] == 1.0


def test_every_judgment_is_a_recorded_trace_reading_the_two_answers(tmp_path) -> None:
    store = sf.Store(tmp_path / "runs.db")
    result, _, _ = run(store=store, run_id="judged-1", seed=3)
    store.flush()
    traces = store.traces("judged-1")
    judgments = [t for t in traces if t.node == "vote" and t.kind is sf.TraceKind.MODEL]
    samples = {t.id: t for t in traces if t.node == "sample"}
    assert len(judgments) == 12 and all(t.model == "judge" for t in judgments)
    for t in judgments:
        first, second = (samples[i].answer for i in t.inputs)
        assert t.answer == ("same" if city(first) == city(second) else "different")
    assert len(store.dag("judged-1").nodes) >= 8 + 12 + 1
    store.close()


def test_a_resumed_judged_vote_asks_no_judgment_again(tmp_path) -> None:
    store = sf.Store(tmp_path / "runs.db")
    first, _, judge = run(store=store, run_id="judged-2", seed=5)
    again, solver, judge_again = run(store=store, run_id="judged-2")
    assert again.answer == first.answer and again.output.metadata["judge_calls"] == 12
    assert solver.calls == 0 and judge_again.calls == 0
    store.close()


def test_a_budget_refuses_judge_calls_and_the_vote_fails_typed() -> None:
    with pytest.raises(sf.BudgetExceeded):
        run(budget=sf.Budget(max_tokens=8 * 40))  # room for the samples, not for every judgment


def test_max_calls_caps_the_judge_and_the_rest_compare_by_the_kind() -> None:
    @sf.graph
    def capped(problem):
        return sf.vote(sf.sample("{problem}", model="m", n=8), equivalence=sf.judge(model="judge", max_calls=2))

    answers = iter(EIGHT)
    judge = ScriptedBackend(oracle)
    result = capped.run_sync({"problem": "?"}, models={"m": ScriptedBackend(lambda r: next(answers)),
                                                       "judge": judge}, answer_kind="text", store=None)
    assert judge.calls == 2 and result.output.metadata["judge_calls"] == 2
    assert capped.build().count_calls()["judge"] == 2


def test_a_failing_judge_fails_the_vote_and_bad_judges_fail_at_build_time() -> None:
    def broken(request: Any) -> str:
        raise sf.BackendError("judge down")

    answers = iter(EIGHT)
    with pytest.raises(sf.RunError, match="judge down"):
        judged.run_sync({"problem": "?"}, models={"m": ScriptedBackend(lambda r: next(answers)),
                                                  "judge": ScriptedBackend(broken)}, answer_kind="text", store=None)
    with pytest.raises(sf.GraphDefinitionError, match=r"must show both answers: it lacks \{second\}"):
        sf.judge(model="j", prompt="Is {first} right?")
    with pytest.raises(sf.GraphDefinitionError, match="takes a model alias string"):
        sf.judge(model="")
    with pytest.raises(sf.ModelAliasError, match="judge"):
        judged.run_sync({"problem": "?"}, models={"m": ScriptedBackend(lambda r: "x")}, store=None)


def test_the_judge_prompt_has_the_question_when_the_graph_has_one() -> None:
    _, _, judge = run()
    assert judge.requests[0].last_content.startswith("Question:\nWhich city?")
    assert judge.requests[0].params.get("temperature") == 0.0


def test_a_similarity_vote_over_real_http_embeds_once_and_clusters_by_cosine(tmp_path) -> None:
    """sf.similar against the test server's /v1/embeddings (bag-of-words vectors): answers with the same words
    cluster, the embedding call is one recorded trace reading the distinct answers."""
    from scaffold.testing import OpenAIServer

    @sf.graph
    def by_embedding(problem):
        return sf.vote(sf.sample("{problem}", model="m", n=5), equivalence=sf.similar(model="e", threshold=0.8))

    answers = iter(["Answer: Paris France", "Answer: france, paris!", "Answer: Lyon", "Answer: PARIS FRANCE",
                    "Answer: Lyon"])
    store = sf.Store(tmp_path / "runs.db")
    with OpenAIServer() as server:
        embedder = sf.OpenAIBackend("embedder", base_url=server.base_url)
        result = by_embedding.run_sync({"problem": "?"}, models={"m": ScriptedBackend(lambda r: next(answers)),
                                                                 "e": embedder},
                                       answer_kind="text", store=store, run_id="sim-1")
    assert result.output.metadata["counts"] == [["Paris France", 3.0, 3], ["Lyon", 2.0, 2]]
    assert result.output.metadata["judge_calls"] == 1
    store.flush()
    embedded = [t for t in store.traces("sim-1") if t.node == "vote" and t.kind is sf.TraceKind.MODEL]
    assert len(embedded) == 1 and len(embedded[0].inputs) == 3  # the distinct answers: paris france, france paris, lyon
    assert by_embedding.build().count_calls() == {"m": 5, "e": 1}
    store.close()


def test_a_similarity_vote_needs_a_backend_that_embeds() -> None:
    @sf.graph
    def by_embedding(problem):
        return sf.vote(sf.sample("{problem}", model="m", n=2), equivalence=sf.similar(model="e"))

    with pytest.raises(sf.RunError, match="gives no embeddings"):
        by_embedding.run_sync({"problem": "?"}, models={"m": ScriptedBackend(lambda r: "Answer: x"),
                                                        "e": sf.Model(_NoEmbed())}, answer_kind="text", store=None)
    with pytest.raises(sf.GraphDefinitionError, match="a cosine between -1 and 1"):
        sf.similar(model="e", threshold=2)


class _NoEmbed:
    capabilities = sf.Capabilities()

    async def complete(self, request: Any) -> list[sf.Completion]:
        return [sf.Completion(text="x")] * request.n

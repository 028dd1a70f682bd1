"""The dataflow executor: lineage of every trace, no step barriers, seeded subsets, n-batching and events."""

from __future__ import annotations

import asyncio
import random

import pytest
from helpers import boxed, numbered_script, prompt_of, rsa

import scaffold as sf
from scaffold.testing import ScriptedBackend, SimulatedBackend


def aggregation_inputs(result: sf.RunResult) -> dict[str, tuple[str, ...]]:
    """Trace id -> lineage of every aggregation trace of a run (a model call that read inputs)."""
    return {t.id: t.inputs for t in result.traces if t.kind is sf.TraceKind.MODEL and t.inputs}


# -- lineage ---------------------------------------------------------------------------------------


def test_rsa_aggregation_reads_k_distinct_members_of_the_previous_step():
    """Every RSA aggregation trace has exactly K distinct inputs, all produced by the previous step's node."""
    backend = ScriptedBackend(numbered_script())
    result = rsa.build(n=8, k=3, steps=3).run_sync({"problem": "p"}, models={"solver": backend}, seed=3)
    steps = ["step0", "step1", "step2", "step3"]
    for previous, current in zip(steps, steps[1:]):
        previous_ids = {t.id for t in result.node(previous)}
        traces = result.node(current)
        assert len(traces) == 8
        for trace in traces:
            assert len(trace.inputs) == 3
            assert len(set(trace.inputs)) == 3
            assert set(trace.inputs) <= previous_ids
    assert backend.calls == 8 * 4


def test_aggregation_prompt_shows_the_inputs_in_lineage_order():
    """The candidates rendered into an aggregation prompt are exactly the texts of ``trace.inputs``, in order."""
    backend = ScriptedBackend(numbered_script())
    result = rsa.build(n=6, k=3, steps=1).run_sync({"problem": "p"}, models={"solver": backend}, seed=11)
    by_id = {t.id: t for t in result.traces}
    assert len(result.node("step1")) == 6
    for trace in result.node("step1"):
        expected = "\n\n".join(f"Candidate {i}:\n{by_id[tid].text}" for i, tid in enumerate(trace.inputs, 1))
        assert expected in prompt_of(trace.request)
        assert "Below are 3 candidate solutions" in prompt_of(trace.request)
        assert "Problem:\np" in prompt_of(trace.request)


def test_vote_inputs_are_its_members():
    """A vote trace's lineage is the ids of the set it voted over, in set order."""
    result = rsa.build(n=4, k=2, steps=1).run_sync(
        {"problem": "p"}, models={"solver": ScriptedBackend(numbered_script())}, seed=0
    )
    vote = result.node("vote")[0]
    assert vote.kind is sf.TraceKind.RULE
    assert vote.inputs == tuple(t.id for t in result.node("step1"))
    assert result.output is vote


def test_concat_and_top_k_pass_traces_through_unchanged():
    """concat and top_k create no traces: their outputs are the original trace objects with their ids."""

    @sf.graph
    def g(problem):
        a = sf.sample("A {problem}", model="m", n=2)
        b = sf.sample("B {problem}", model="m", n=3)
        joined = sf.concat(a, b)
        best = sf.top_k(joined, k=2, score=lambda t: int(t.text.split()[1]))
        return {"joined": joined, "best": best, "vote": sf.vote(best)}

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(numbered_script())})
    originals = result.node("sample") + result.node("sample_2")
    assert [t.id for t in result.output["joined"]] == [t.id for t in originals]
    assert all(out is orig for out, orig in zip(result.output["joined"], originals))
    by_id = {t.id: t for t in result.traces}
    assert all(by_id[t.id] is t for t in result.output["best"])
    assert {t.node for t in result.traces} == {"sample", "sample_2", "vote"}
    assert result.output["vote"].inputs == tuple(t.id for t in result.output["best"])


def test_context_nodes_appear_in_lineage():
    """Traces read through ``context=`` are part of the reader's lineage and are rendered into its prompt."""

    @sf.graph
    def g(problem):
        draft = sf.generate("Draft {problem}", model="m")
        notes = sf.sample("Note {problem}", model="m", n=2)
        check = sf.generate("Check {draft}", model="m", context={"draft": draft})
        agg = sf.aggregate(notes, model="m", prompt="{candidates}\nDraft: {draft}", context={"draft": draft})
        return {"check": check, "agg": agg}

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(numbered_script())})
    draft = result.node("generate")[0]
    notes = result.node("sample")
    check = result.output["check"]
    assert check.inputs == (draft.id,)
    assert prompt_of(check.request) == f"Check {draft.text}"
    agg = result.output["agg"]
    assert agg.inputs == (*[t.id for t in notes], draft.id)
    assert prompt_of(agg.request).endswith(f"Draft: {draft.text}")


# -- dataflow ordering -----------------------------------------------------------------------------


class HeldFirstSample:
    """A script whose first ``Solve`` request is held until a trace of node ``until`` has finished (its
    :meth:`subscriber` sees it); every other request answers at once, each reply unique (``draft n``).

    With a step barrier no such trace could finish while a sample is held: the held call then gives up after
    a generous deadline and sets ``gave_up``, so the test fails with a message instead of hanging.
    """

    def __init__(self, until: str) -> None:
        self.until = until
        self.released = asyncio.Event()
        self.held_seed: int | None = None
        self.gave_up = False
        self.reply = numbered_script()

    async def __call__(self, request: sf.Request) -> str:
        if prompt_of(request).startswith("Solve") and self.held_seed is None:
            self.held_seed = request.seed
            try:
                await asyncio.wait_for(self.released.wait(), timeout=60)
            except TimeoutError:
                self.gave_up = True
        return self.reply(request)

    def subscriber(self, event: sf.Event) -> None:
        if isinstance(event, sf.TraceFinished) and event.trace.node == self.until:
            self.released.set()


def test_aggregation_starts_before_the_slowest_member_of_the_previous_step_finishes():
    """No step barrier: a group that does not contain the slow sample is aggregated while the slow one still runs."""

    @sf.graph
    def tree(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        return sf.aggregate(pop, model="m", prompt="{candidates}", select="partition", k=2)

    script = HeldFirstSample(until="aggregate")  # the slow sample answers once an aggregation has finished
    backend = ScriptedBackend(script)
    result = tree.run_sync({"problem": "p"}, models={"m": backend}, subscribers=[script.subscriber])
    assert not script.gave_up, "no aggregation finished while a sample of the step before was still running"
    samples = result.node("sample")
    slow = next(t for t in samples if t.request.seed == script.held_seed)
    groups = result.node("aggregate")
    assert len(groups) == 2
    with_slow = [g for g in groups if slow.id in g.inputs]
    without_slow = [g for g in groups if slow.id not in g.inputs]
    assert len(with_slow) == 1 and len(without_slow) == 1
    order = [t.id for t in result.traces]  # the order in which the traces finished
    assert order.index(without_slow[0].id) < order.index(slow.id) < order.index(with_slow[0].id)
    assert [prompt_of(r) for r in backend.requests].index(prompt_of(with_slow[0].request)) == 5  # sent last


def test_no_barrier_across_several_steps():
    """Two aggregation steps downstream of fast members both finish before one slow first-step member does."""

    @sf.graph
    def chain(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        refined = sf.aggregate(pop, model="m", prompt="Refine {candidates}", select="each")
        return sf.aggregate(refined, model="m", prompt="Merge {candidates}", select="partition", k=2)

    script = HeldFirstSample(until="aggregate_2")  # the slow sample answers once a merge (two steps on) finished
    result = chain.run_sync({"problem": "p"}, models={"m": ScriptedBackend(script)}, subscribers=[script.subscriber])
    assert not script.gave_up, "no merge finished while a sample two steps before it was still running"
    slow = next(t for t in result.node("sample") if t.request.seed == script.held_seed)
    refined_slow = next(t for t in result.node("aggregate") if t.inputs == (slow.id,))
    fast_merge = next(t for t in result.node("aggregate_2") if refined_slow.id not in t.inputs)
    slow_merge = next(t for t in result.node("aggregate_2") if refined_slow.id in t.inputs)
    order = [t.id for t in result.traces]  # the order in which the traces finished
    assert order.index(fast_merge.id) < order.index(slow.id) < order.index(refined_slow.id) < order.index(slow_merge.id)


# -- seeds -------------------------------------------------------------------------------------------


def test_same_seed_gives_same_subsets_and_result():
    """Two runs with one seed draw identical subsets for every aggregation and return the same answer."""
    graph = rsa.build(n=16, k=4, steps=2)

    def run(seed):
        return graph.run_sync(
            {"problem": "p"}, models={"solver": ScriptedBackend(numbered_script())}, seed=seed, run_id="r", store=None
        )

    first, second = run(123), run(123)
    assert first.seed == second.seed == 123
    assert aggregation_inputs(first) == aggregation_inputs(second)
    assert len(aggregation_inputs(first)) == 32
    assert first.output.text == second.output.text
    assert [t.request.seed for t in first.traces if t.request] == [t.request.seed for t in second.traces if t.request]


def test_different_seeds_give_different_subsets():
    """Two seeds draw different subsets from a population of 16."""
    graph = rsa.build(n=16, k=4, steps=2)
    results = [
        graph.run_sync(
            {"problem": "p"}, models={"solver": ScriptedBackend(numbered_script())}, seed=s, run_id="r", store=None
        )
        for s in (1, 2)
    ]
    assert aggregation_inputs(results[0]) != aggregation_inputs(results[1])


def test_subsets_do_not_depend_on_finishing_order():
    """With one seed, subsets are the same however fast each call is (subsets come from the seed, not timing)."""
    graph = rsa.build(n=8, k=3, steps=2)

    def run(jitter_seed):
        jitter = random.Random(jitter_seed)
        backend = ScriptedBackend(numbered_script(), delay=lambda request: jitter.uniform(0, 0.02))
        return graph.run_sync({"problem": "p"}, models={"solver": backend}, seed=9, run_id="r", store=None)

    first, second = run(0), run(1)
    assert [t.id for t in first.traces] != [t.id for t in second.traces]  # the finishing order really differs
    assert len(aggregation_inputs(first)) == 16 and aggregation_inputs(first) == aggregation_inputs(second)


def test_seed_is_recorded_and_replays_the_run():
    """Without a seed one is drawn and recorded in RunResult.seed; passing it back reproduces the subsets."""
    graph = rsa.build(n=8, k=3, steps=1)
    first = graph.run_sync({"problem": "p"}, models={"solver": SimulatedBackend(median=0.001)}, run_id="r", store=None)
    assert isinstance(first.seed, int)
    replay = graph.run_sync(
        {"problem": "p"}, models={"solver": SimulatedBackend(median=0.001)}, run_id="r", seed=first.seed, store=None
    )
    assert replay.seed == first.seed
    assert len(aggregation_inputs(first)) == 8 and aggregation_inputs(replay) == aggregation_inputs(first)
    latencies = lambda r: {t.id: t.metadata["simulated_latency"] for t in r.traces if t.request}
    assert latencies(replay) == latencies(first)


def test_request_seeds_are_distinct_per_call():
    """Every call of a run gets its own request seed (derived from the run seed, node and index)."""
    backend = ScriptedBackend(numbered_script())
    rsa.build(n=8, k=3, steps=2).run_sync({"problem": "p"}, models={"solver": backend}, seed=5)
    seeds = [r.seed for r in backend.requests]
    assert len(seeds) == 24
    assert len(set(seeds)) == 24


# -- n-batching ----------------------------------------------------------------------------------------


@sf.graph
def self_consistency(problem, *, n: int = 8):
    return sf.vote(sf.sample("Solve {problem}", model="m", n=n))


def test_backend_supporting_n_gets_one_request_for_a_sample():
    """With ``supports_n`` the 8 samples go out as one request with n=8, and each choice is its own trace."""
    backend = ScriptedBackend(numbered_script(), supports_n=True)
    result = self_consistency.run_sync({"problem": "p"}, models={"m": backend}, run_id="r")
    assert [r.n for r in backend.requests] == [8]
    samples = result.node("sample")
    assert [t.id for t in samples] == [f"r/sample#{i}" for i in range(8)]
    assert len({t.text for t in samples}) == 8
    assert all(t.request is backend.requests[0] for t in samples)
    assert result.output.metadata["voters"] == 8


def test_backend_without_n_gets_one_request_per_sample():
    """Without ``supports_n`` a sample of 8 is 8 requests with n=1."""
    backend = ScriptedBackend(numbered_script(), supports_n=False)
    result = self_consistency.run_sync({"problem": "p"}, models={"m": backend})
    assert [r.n for r in backend.requests] == [1] * 8
    assert len(result.node("sample")) == 8


def test_max_n_splits_a_sample_into_batches():
    """``max_n=3`` splits a sample of 8 into requests of 3, 3 and 2, with indices 0..7 in order."""
    backend = ScriptedBackend(numbered_script(), supports_n=True, max_n=3)
    result = self_consistency.run_sync({"problem": "p"}, models={"m": backend}, run_id="r")
    assert sorted(r.n for r in backend.requests) == [2, 3, 3]
    samples = result.node("sample")
    assert [t.index for t in samples] == list(range(8))
    assert [samples[i].request.n for i in (0, 3, 6)] == [3, 3, 2]


def test_aggregate_samples_are_batched_per_group():
    """``aggregate(samples=3)`` on an n-capable backend sends one request per group with n=3."""

    @sf.graph
    def spiral(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4)
        return sf.aggregate(pop, model="m", select="partition", k=2, samples=3)

    backend = ScriptedBackend(numbered_script(), supports_n=True)
    result = spiral.run_sync({"problem": "p"}, models={"m": backend})
    assert [r.n for r in backend.requests] == [4, 3, 3]
    aggregates = result.node("aggregate")
    assert len(aggregates) == 6
    assert [a.inputs for a in aggregates[:3]] == [aggregates[0].inputs] * 3
    assert aggregates[0].inputs != aggregates[3].inputs


def test_simulated_backend_answers_n_choices():
    """SimulatedBackend with supports_n fills every choice of a batched request."""
    backend = SimulatedBackend(median=0.001, supports_n=True)
    result = self_consistency.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 1
    assert result.answer == "42"
    assert result.output.metadata["counts"] == [["42", 8.0, 8]]


# -- events and trace ids ---------------------------------------------------------------------------------


def test_events_come_in_order_with_one_trace_finished_per_trace():
    """Subscribers see RunStarted first, one TraceFinished per recorded trace, and RunFinished last."""
    events: list[sf.Event] = []
    result = rsa.build(n=4, k=2, steps=2).run_sync(
        {"problem": "p"},
        models={"solver": ScriptedBackend(numbered_script())},
        subscribers=[events.append],
        seed=1,
        run_id="r",
    )
    assert isinstance(events[0], sf.RunStarted)
    assert (events[0].run_id, events[0].seed) == ("r", 1)
    assert {key: events[0].params[key] for key in ("n", "k", "steps")} == {"n": 4, "k": 2, "steps": 2}
    assert isinstance(events[-1], sf.RunFinished)
    assert events[-1].result is result
    finished = [e.trace for e in events if isinstance(e, sf.TraceFinished)]
    assert finished == result.traces
    started = [e for e in events if isinstance(e, sf.CallStarted)]
    assert len(started) == 12
    position = {id(e): i for i, e in enumerate(events)}
    finished_at = {e.trace.id: position[id(e)] for e in events if isinstance(e, sf.TraceFinished)}
    for call in started:
        assert call.model == "solver"
        assert all(position[id(call)] < finished_at[tid] for tid in call.trace_ids)


def test_run_started_comes_before_traces_of_external_candidates():
    """Even candidates known before any call (sf.candidates, input sets) are reported after RunStarted."""
    events: list[sf.Event] = []

    @sf.graph
    def g(problem, extra):
        return sf.vote(sf.concat(sf.candidates([boxed(1), boxed(2)]), extra))

    result = g.run_sync({"problem": "p", "extra": [boxed(1)]}, models={}, subscribers=[events.append])
    assert [type(e).__name__ for e in events] == ["RunStarted"] + ["TraceFinished"] * 4 + ["RunFinished"]
    assert result.answer == "1"


def test_trace_ids_are_unique_and_deterministic():
    """Trace ids are ``{run_id}/{node}#{index}``, unique within a run and identical across replays."""
    graph = rsa.build(n=4, k=2, steps=2)

    def ids():
        result = graph.run_sync(
            {"problem": "p"}, models={"solver": ScriptedBackend(numbered_script())}, run_id="run-1", seed=4
        )
        for t in result.traces:
            assert t.id == f"run-1/{t.node}#{t.index}"
            assert t.run_id == "run-1"
        return [t.id for t in result.traces]

    first = ids()
    assert len(first) == len(set(first)) == 4 + 4 + 4 + 1
    assert sorted(first) == sorted(ids())
    assert "run-1/step2#3" in first


def test_run_result_accounts_usage_and_calls():
    """RunResult totals tokens over model traces and counts calls per alias."""
    backend = ScriptedBackend(lambda request: "one two three")
    result = self_consistency.run_sync({"problem": "p"}, models={"m": backend})
    assert result.calls_by_model() == {"m": 8}
    assert result.usage.completion_tokens == 8 * 3
    assert result.usage.prompt_tokens == 8 * 2
    assert result.cost is None
    assert result.ok and result.answer is None


@pytest.mark.parametrize("output_kind", ["trace", "list", "dict"])
def test_output_mirrors_the_graph_return_value(output_kind):
    """The run's output replaces nodes with traces in the shape the graph returned (trace, list or dict)."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3)
        vote = sf.vote(pop)
        return {"trace": vote, "list": pop, "dict": {"pop": pop, "vote": vote}}[output_kind]

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(5))})
    if output_kind == "trace":
        assert result.answer == "5"
    elif output_kind == "list":
        assert [t.answer for t in result.output] == ["5"] * 3
    else:
        assert result.output["vote"].answer == "5" and len(result.output["pop"]) == 3


def test_requests_carry_plain_role_content_pairs_equal_to_message() -> None:
    """The executor sends (role, content) pairs: equal to sf.Message, readable through Request.last_content."""
    import scaffold as sf
    from scaffold.testing import ScriptedBackend

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m", system="Be brief.")

    backend = ScriptedBackend(lambda r: r"\boxed{1}")
    g.run_sync({"problem": "x"}, models={"m": backend})
    request = backend.requests[0]
    assert request.messages == (sf.Message("system", "Be brief."), sf.Message("user", "Solve x"))
    assert type(request.messages[1]) is tuple
    assert request.last_content == "Solve x"


def test_a_subscriber_gets_only_the_events_it_asks_for():
    """A subscriber with `events = (TraceFinished,)` gets one event per trace and nothing else, while one
    without the attribute gets every event of the same run, in order."""
    only_traces: list[object] = []
    everything: list[object] = []

    def traces(event: object) -> None:
        only_traces.append(event)

    traces.events = (sf.TraceFinished,)  # type: ignore[attr-defined]
    models = {"solver": ScriptedBackend(lambda r: boxed(1))}
    rsa.build(n=4, k=2, steps=1).run_sync({"problem": "p"}, models=models, seed=0, store=None,
                                           subscribers=[traces, everything.append])
    assert [type(e).__name__ for e in only_traces] == ["TraceFinished"] * 9
    kinds = [type(e).__name__ for e in everything]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    assert kinds.count("TraceFinished") == 9 and kinds.count("CallStarted") == 8

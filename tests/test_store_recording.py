"""The trajectory store records every run exactly: traces, requests, lineage, failures, rollups, filters,
rewards, datasets and the schema's upgrade path. Every test runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import gc
import json
import math
import os
import threading
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import rsa

import scaffold as sf
from scaffold._call import call_seed
from scaffold._errors import BackendError, SchemaVersionError
from scaffold._json import to_json
from scaffold._types import Completion, Status, Trace, TraceKind, Usage
from scaffold.store import Store
from scaffold.store._codec import request_key
from scaffold.store._migrations import upgrade
from scaffold.store._schema import CALLS, DATASETS, EDGES, ITEMS, REQUESTS, RUNS, SCHEMA_VERSION
from scaffold.store._store import normalise_url
from scaffold.testing import ScriptedBackend

# token ids at the int32 edges and logprobs that only an exact float64 round trip keeps
TOKEN_IDS = (0, 1, 151_643, 2**31 - 1, -(2**31))
LOGPROBS = (-0.0, -1e-300, -5e-324, -math.pi, -math.inf, -0.1 + -0.2)


@sf.graph
def mixed(problem, given):
    """Model calls on two aliases, external candidates, an aggregation over both, and a rule."""
    pop = sf.sample("Solve: {problem}", model="solver", n=3, logprobs=True,
                    system="You are careful.", params={"temperature": 0.7})
    agg = sf.aggregate(sf.concat(pop, given), model="judge", k=2, n=2)
    return sf.vote(agg)


@sf.graph
def solo(problem):
    return sf.generate("Q: {problem}", model="m")


def solver_reply(request) -> Completion:
    """A completion with every measured field set, derived from the request's seed."""
    s = request.seed
    return Completion(text=f"solution {s} \\boxed{{{s % 2}}}", token_ids=(s % 1000, *TOKEN_IDS), logprobs=LOGPROBS,
                      usage=Usage(11 + s % 5, 7), cost=1.25e-4 * (1 + s % 3), finish_reason="stop",
                      metadata={"engine": "scripted", "seed_mod": s % 7})


def judge_reply(request) -> Completion:
    return Completion(text=f"judged {request.seed} \\boxed{{1}}", usage=Usage(40, 3))


def mixed_models(**solver: Any) -> dict[str, Any]:
    return {"solver": sf.Model(ScriptedBackend(solver_reply), name="solver-v1", params={"max_tokens": 64}, **solver),
            "judge": sf.Model(ScriptedBackend(judge_reply), name="judge-v2")}


MIXED_INPUTS = {"problem": "2+2", "given": ["external a \\boxed{1}", "external b \\boxed{0}"]}


def rows(store: Store, table: sa.Table, *where: Any) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(table).where(*where))]


def same_trace(stored: Trace, original: Trace) -> None:
    """Every field of a trace survives the store (metadata through JSON, as documented)."""
    for name in ("id", "run_id", "node", "index", "kind", "model", "text", "answer", "token_ids", "logprobs",
                 "usage", "cost", "latency", "started_at", "inputs", "status", "error", "attempt", "request"):
        assert getattr(stored, name) == getattr(original, name), (original.id, name)
    assert dict(stored.metadata) == json.loads(json.dumps(to_json(original.metadata))), original.id


# -- traces ------------------------------------------------------------------------------------------------


def test_every_trace_is_recorded_with_its_exact_fields(store):
    """Model, rule and external traces are all recorded, each field (text, usage, cost, latency, seed...) exact."""
    result = mixed.run_sync(MIXED_INPUTS, models=mixed_models(), store=store, run_id="mix", seed=5)
    stored = store.traces("mix")
    kinds = [t.kind for t in stored]
    assert (kinds.count(TraceKind.MODEL), kinds.count(TraceKind.RULE), kinds.count(TraceKind.EXTERNAL)) == (5, 1, 2)
    assert len(result.traces) == 8
    by_id = {t.id: t for t in stored}
    assert set(by_id) == {t.id for t in result.traces}
    for original in result.traces:
        same_trace(by_id[original.id], original)
    sample = by_id["mix/sample#1"]
    assert sample.request is not None and sample.request.seed == call_seed(5, "sample", 1)
    assert sample.cost == pytest.approx(1.25e-4 * (1 + sample.request.seed % 3)) and sample.cost > 0
    assert sample.latency > 0 and sample.started_at > 0
    assert by_id["mix/given#1"].text == "external b \\boxed{0}" and by_id["mix/given#1"].answer == "0"
    assert by_id["mix/vote#0"].answer == result.answer == "1"
    info = store.run("mix")
    model_traces = [t for t in result.traces if t.kind is TraceKind.MODEL]
    assert (info.status, info.seed, info.answer, info.calls, info.attempts) == ("ok", 5, "1", 5, 1)
    assert info.prompt_tokens == sum(t.usage.prompt_tokens for t in model_traces)
    assert info.completion_tokens == sum(t.usage.completion_tokens for t in model_traces)
    assert info.cost is None  # the judge's price is unknown: never summed as 0
    assert info.output == "mix/vote#0"
    assert info.inputs == MIXED_INPUTS
    assert info.models == {"solver": {"model": "solver-v1", "backend": "ScriptedBackend"},
                           "judge": {"model": "judge-v2", "backend": "ScriptedBackend"}}
    assert info.finished_at is not None and info.finished_at >= info.started_at


def test_token_ids_and_logprobs_round_trip_exactly(store):
    """int32 token ids (edges included) and float64 logprobs (-0.0, subnormals, -inf) come back bit for bit."""
    result = mixed.run_sync(MIXED_INPUTS, models=mixed_models(), store=store, run_id="tok", seed=9)
    samples = {t.id: t for t in store.traces("tok") if t.node == "sample"}
    assert len(samples) == 3
    for original in result.node("sample"):
        stored = samples[original.id]
        assert stored.token_ids == original.token_ids == (original.request.seed % 1000, *TOKEN_IDS)
        assert stored.logprobs is not None and len(stored.logprobs) == len(LOGPROBS)
        for got, want in zip(stored.logprobs, LOGPROBS):
            assert got.hex() == want.hex()  # exact, sign of zero included
    judged = [t for t in store.traces("tok") if t.node == "aggregate"]
    assert len(judged) == 2 and all(t.token_ids is None and t.logprobs is None for t in judged)


def test_retried_call_records_its_attempt(store):
    """A call that succeeded on its second attempt is recorded with attempt=2."""
    failed_once: set[int] = set()

    def flaky(request):
        if request.seed not in failed_once:
            failed_once.add(request.seed)
            raise BackendError("try again", retryable=True)
        return "fine \\boxed{3}"

    model = sf.Model(ScriptedBackend(flaky), retry=sf.Retry(attempts=3, initial_delay=0.001, max_delay=0.002))
    solo.run_sync({"problem": "p"}, models={"m": model}, store=store, run_id="retry")
    (trace,) = store.traces("retry")
    assert (trace.attempt, trace.status, trace.text) == (2, Status.OK, "fine \\boxed{3}")


def test_lineage_every_rsa_aggregation_reads_k_distinct_members_of_the_previous_step(store):
    """Edges keep each aggregation's 4 distinct inputs from the previous step, in prompt order, in traces and DAG."""
    result = rsa.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(lambda r: f"d{r.seed} \\boxed{{1}}")},
                          store=store, run_id="lin", seed=2)
    stored = {t.id: t for t in store.traces("lin")}
    assert len(stored) == 177
    order = [f"step{s}" for s in range(11)]
    for original in result.traces:
        assert stored[original.id].inputs == original.inputs
    for step, node in enumerate(order[1:], start=1):
        traces = [t for t in stored.values() if t.node == node]
        assert len(traces) == 16
        for t in traces:
            assert len(t.inputs) == 4 and len(set(t.inputs)) == 4
            assert all(stored[i].node == order[step - 1] for i in t.inputs)
            # the prompt shows the inputs in the recorded order
            assert sf.format_candidates([stored[i] for i in t.inputs]) in t.request.last_content
    dag = store.dag("lin")
    assert dag.number_of_nodes() == 177
    assert dag.number_of_edges() == 10 * 16 * 4 + 16
    for trace_id, trace in stored.items():
        preds = sorted(dag.predecessors(trace_id), key=lambda p: dag.edges[p, trace_id]["position"])
        assert tuple(preds) == trace.inputs
        assert dag.nodes[trace_id]["node"] == trace.node and dag.nodes[trace_id]["text"] == trace.text
    assert dag.in_degree("lin/vote#0") == 16
    with store.engine.connect() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(EDGES)).scalar_one()
    assert count == 10 * 16 * 4 + 16


def test_requests_are_stored_with_messages_and_params_once_per_distinct_request(store):
    """Requests keep system and user messages and merged model/node params; identical requests share a row."""
    result = mixed.run_sync(MIXED_INPUTS, models=mixed_models(), store=store, run_id="req", seed=1)
    stored = {t.id: t for t in store.traces("req")}
    sample = stored["req/sample#0"].request
    assert sample is not None
    assert sample.messages == (("system", "You are careful."), ("user", "Solve: 2+2"))
    assert sample.params == {"max_tokens": 64, "temperature": 0.7}
    assert (sample.model, sample.logprobs, sample.n) == ("solver-v1", True, 1)
    agg = stored["req/aggregate#1"].request
    assert agg is not None and "Candidate 2:" in agg.last_content and agg.params == {}
    keys = {request_key(t.request) for t in result.traces if t.request is not None}
    assert len(keys) == 3  # three identical sample requests (seed aside) + two different aggregations
    table = rows(store, REQUESTS)
    assert {r["key"] for r in table} == keys
    by_key = {r["key"]: r for r in table}
    assert json.loads(json.dumps(by_key[request_key(sample)]["messages"])) == [list(m) for m in sample.messages]
    calls = rows(store, CALLS, CALLS.c.run_id == "req", CALLS.c.kind == "model")
    assert {c["request_key"] for c in calls} == keys
    assert {c["id"]: c["seed"] for c in calls} == {t.id: t.request.seed for t in result.traces if t.request}


def test_failed_and_dropped_calls_are_recorded_with_status_and_error(store):
    """A dropped failure is recorded as error with its message; the run carries on and records ok."""
    bad = call_seed(3, "sample", 1)

    def script(request):
        if request.seed == bad:
            raise BackendError("boom on the second sample")
        return "ok \\boxed{2}"

    @sf.graph
    def tolerant(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=3, on_error="drop"))

    result = tolerant.run_sync({"problem": "p"}, models={"m": ScriptedBackend(script)}, store=store,
                               run_id="drop", seed=3)
    assert result.answer == "2"
    stored = {t.id: t for t in store.traces("drop")}
    failed = stored["drop/sample#1"]
    assert failed.status is Status.ERROR and failed.error == "BackendError: boom on the second sample"
    assert failed.text == "" and failed.request is not None and failed.request.seed == bad
    assert stored["drop/sample#0"].status is Status.OK
    assert stored["drop/vote#0"].inputs == ("drop/sample#0", "drop/sample#2")
    info = store.run("drop")
    assert (info.status, info.calls, info.error) == ("ok", 3, None)
    assert store.rollup("status", run_id="drop")["error"].calls == 1
    assert store.rollup("node", run_id="drop")["sample"].errors == 1


def test_a_failing_run_records_the_error_and_every_cancelled_call(store):
    """With on_error=raise the failure, the cancelled in-flight calls and the run's error are all recorded."""
    bad = call_seed(4, "sample", 0)

    def script(request):
        if request.seed == bad:
            raise BackendError("fatal: quota gone")
        return "late \\boxed{1}"

    backend = ScriptedBackend(script, delay=lambda r: 0.0 if r.seed == bad else 0.5)

    @sf.graph
    def strict(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4))

    with pytest.raises(sf.CallError):
        strict.run_sync({"problem": "p"}, models={"m": backend}, store=store, run_id="fail", seed=4)
    stored = {t.id: t for t in store.traces("fail")}
    assert set(stored) == {f"fail/sample#{i}" for i in range(4)}
    assert stored["fail/sample#0"].status is Status.ERROR
    assert stored["fail/sample#0"].error == "BackendError: fatal: quota gone"
    for i in (1, 2, 3):
        assert stored[f"fail/sample#{i}"].status is Status.CANCELLED
        assert stored[f"fail/sample#{i}"].error == "cancelled"
    info = store.run("fail")
    assert info.status == "error" and info.answer is None and info.output is None
    assert info.error is not None and info.error.startswith("CallError:") and "fatal: quota gone" in info.error
    assert store.rollup("run", run_id="fail")["fail"].errors == 4


# -- where runs are recorded --------------------------------------------------------------------------------


def test_store_none_records_nothing_and_creates_no_file(store_url, store, monkeypatch):
    """store=None writes to no store: neither the default one ($SCAFFOLD_STORE) nor any file."""
    default_path = Path(os.environ["SCAFFOLD_STORE"])
    result = solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, store=None)
    assert result.answer == "1"
    assert not default_path.exists() and not Path(str(default_path) + "-wal").exists()
    monkeypatch.setenv("SCAFFOLD_STORE", store_url)  # even a default pointing at a live store stays untouched
    solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, store=None, run_id="none")
    assert store.runs() == [] and rows(store, CALLS) == []


def test_default_store_is_the_one_named_by_the_environment(store_url, store, monkeypatch):
    """Without store=, a run records to $SCAFFOLD_STORE (a file path or a database URL)."""
    default_path = Path(os.environ["SCAFFOLD_STORE"])
    solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, run_id="to-file")
    sf.close_stores()
    assert default_path.exists()
    with Store(default_path) as opened:
        assert [r.id for r in opened.runs()] == ["to-file"]
        assert [t.text for t in opened.traces("to-file")] == ["\\boxed{1}"]
    monkeypatch.setenv("SCAFFOLD_STORE", store_url)
    solo.run_sync({"problem": "q"}, models={"m": ScriptedBackend(lambda r: "\\boxed{2}")}, run_id="to-url")
    assert [r.id for r in store.runs()] == ["to-url"]
    assert store.run("to-url").answer == "2"


# -- rollups and filters -----------------------------------------------------------------------------------


def expected_totals(traces: list[Trace], key) -> dict[Any, tuple[int, int, int, float | None, float, int]]:
    groups: dict[Any, list[Trace]] = {}
    for t in traces:
        if t.kind is TraceKind.MODEL:
            groups.setdefault(key(t), []).append(t)
    out = {}
    for k, ts in groups.items():
        costs = [t.cost for t in ts]
        out[k] = (len(ts), sum(t.usage.prompt_tokens for t in ts), sum(t.usage.completion_tokens for t in ts),
                  None if any(c is None for c in costs) else sum(costs), sum(t.latency for t in ts),
                  sum(t.status is not Status.OK for t in ts))
    return out


def as_tuples(totals: dict[Any, sf.Totals]) -> dict[Any, tuple[int, int, int, float | None, float, int]]:
    return {k: (v.calls, v.prompt_tokens, v.completion_tokens, v.cost, v.latency, v.errors) for k, v in totals.items()}


def assert_totals(got: dict[Any, sf.Totals], want: dict[Any, tuple]) -> None:
    got_t = as_tuples(got)
    assert set(got_t) == set(want)
    for key, (calls, prompt, completion, cost, latency, errors) in want.items():
        g = got_t[key]
        assert g[:3] == (calls, prompt, completion) and g[5] == errors, key
        assert (g[3] is None) == (cost is None), key
        if cost is not None:
            assert g[3] == pytest.approx(cost, rel=1e-12)
        assert g[4] == pytest.approx(latency, rel=1e-9)


def test_rollups_per_node_model_alias_and_run_match_the_run_results(store):
    """Rollups by node, concrete model, alias and run equal the sums computed from the RunResults."""
    first = mixed.run_sync(MIXED_INPUTS, models=mixed_models(), store=store, run_id="r1", seed=1)
    second = mixed.run_sync(MIXED_INPUTS, models=mixed_models(), store=store, run_id="r2", seed=2)
    for result in (first, second):
        assert_totals(store.rollup("node", run_id=result.run_id), expected_totals(result.traces, lambda t: t.node))
        assert_totals(store.rollup("alias", run_id=result.run_id), expected_totals(result.traces, lambda t: t.model))
        assert_totals(store.rollup("model", run_id=result.run_id),
                      expected_totals(result.traces, lambda t: t.request.model))
    both = first.traces + second.traces
    assert_totals(store.rollup("run", graph="mixed"), expected_totals(both, lambda t: t.run_id))
    assert_totals(store.rollup("model", graph="mixed"), expected_totals(both, lambda t: t.request.model))
    solver = store.rollup("model", graph="mixed")["solver-v1"]
    priced = [1.25e-4 * (1 + t.request.seed % 3) for t in both if t.node == "sample"]  # solver_reply's prices
    assert solver.calls == len(priced) == 6 and solver.cost == pytest.approx(sum(priced), rel=1e-12)
    assert store.rollup("model", graph="mixed")["judge-v2"].cost is None
    assert store.rollup("graph")["mixed"].total_tokens == sum(
        t.usage.total_tokens for t in both if t.kind is TraceKind.MODEL)


def test_run_filters_select_by_graph_dataset_model_status_and_time(store):
    """graph, dataset (set by map), model alias or concrete name, status and since/until pick the right runs."""
    t0 = time.time()
    mixed.run_sync(MIXED_INPUTS, models=mixed_models(), store=store, run_id="mixed-1", seed=1)
    t_mid = time.time()  # after mixed-1 started (it has finished), before the mapped runs start: no sleep needed
    by_m = {"m": sf.Model(ScriptedBackend(lambda r: "\\boxed{4}"), name="concrete-m")}
    mapped = solo.build().map_sync([{"problem": f"q{i}"} for i in range(3)], models=by_m, store=store,
                                   dataset="d", run_id="d")
    assert [r.run_id for r in mapped] == ["d-0", "d-1", "d-2"]

    def broken(request):
        raise BackendError("down")

    with pytest.raises(sf.CallError):
        solo.run_sync({"problem": "x"}, models={"m": ScriptedBackend(broken)}, store=store, run_id="bad")
    t_end = time.time()

    def ids(**filters):
        return sorted(r.id for r in store.runs(**filters))

    everything = ["bad", "d-0", "d-1", "d-2", "mixed-1"]
    assert ids() == everything
    assert ids(graph="mixed") == ["mixed-1"]
    assert ids(graph="solo") == ["bad", "d-0", "d-1", "d-2"]
    assert ids(dataset="d") == ["d-0", "d-1", "d-2"]
    assert ids(dataset="other") == []
    assert ids(model="judge") == ["mixed-1"]  # an alias
    assert ids(model="solver-v1") == ["mixed-1"]  # a concrete model name
    assert ids(model="concrete-m") == ["d-0", "d-1", "d-2"]
    assert ids(model="m") == ["bad", "d-0", "d-1", "d-2"]
    assert ids(status="error") == ["bad"]
    assert ids(status="ok") == ["d-0", "d-1", "d-2", "mixed-1"]
    assert ids(since=t_mid) == ["bad", "d-0", "d-1", "d-2"]
    assert ids(until=t_mid) == ["mixed-1"]
    assert ids(since=t0, until=t_end) == everything
    assert ids(since=datetime.fromtimestamp(t_mid, tz=UTC)) == ["bad", "d-0", "d-1", "d-2"]
    assert ids(graph="solo", status="ok", model="concrete-m", since=t_mid) == ["d-0", "d-1", "d-2"]
    newest = [r.id for r in store.runs()]
    assert [r.id for r in store.runs(limit=2)] == newest[:2]
    assert [r.id for r in store.runs(limit=2, offset=3)] == newest[3:]
    assert store.runs(newest_first=True)[0].id == "bad" and store.runs(newest_first=False)[0].id == "mixed-1"
    assert set(store.rollup("run", dataset="d")) == {"d-0", "d-1", "d-2"}
    assert store.rollup("dataset", graph="solo")["d"].calls == 3


# -- rewards and datasets ---------------------------------------------------------------------------------


def test_rewards_per_call_and_per_run_appear_in_rewards_and_the_dag(store):
    """add_reward for a call and for the run is listed by store.rewards and summed on the DAG node."""
    small = rsa.build(n=4, k=2, steps=1)
    small.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(lambda r: "\\boxed{1}")}, store=store,
                   run_id="rw", seed=1)
    store.add_reward(1.0, run_id="rw", call_id="rw/step0#2", source="math_verify", metadata={"gold": "1"})
    store.add_reward(0.25, run_id="rw", call_id="rw/step0#2", source="judge")
    store.add_reward(0.5, run_id="rw")
    store.flush()
    rewards = store.rewards("rw")
    assert [(r["call_id"], r["value"], r["source"]) for r in rewards] == [
        ("rw/step0#2", 1.0, "math_verify"), ("rw/step0#2", 0.25, "judge"), (None, 0.5, "user")]
    assert rewards[0]["metadata"] == {"gold": "1"} and rewards[0]["run_id"] == "rw"
    dag = store.dag("rw")
    assert dag.nodes["rw/step0#2"]["reward"] == pytest.approx(1.25)
    assert all(dag.nodes[n]["reward"] is None for n in dag.nodes if n != "rw/step0#2")
    assert store.rewards("missing") == []


def test_map_with_a_dataset_records_the_dataset_and_its_items(store):
    """Graph.map(rows, dataset="d") registers the dataset, one item per row, and each run as that item."""
    data = [{"problem": f"p{i}"} for i in range(4)]
    results = solo.build().map_sync(data, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, store=store,
                                    dataset="d", concurrency=2)
    assert all(r.ok for r in results)
    assert [r["name"] for r in rows(store, DATASETS)] == ["d"]
    items = sorted(rows(store, ITEMS), key=lambda r: r["position"])
    assert [(i["dataset"], i["position"], i["data"]) for i in items] == [("d", i, row) for i, row in enumerate(data)]
    runs = store.runs(dataset="d")
    assert sorted((r.item, r.inputs["problem"]) for r in runs) == [(i, f"p{i}") for i in range(4)]
    assert {r.id for r in runs} == {r.run_id for r in results}
    assert {r["id"]: (r["dataset"], r["item"]) for r in rows(store, RUNS)} == {
        r.run_id: ("d", r.index) for r in results}


def test_add_dataset_registers_rows_without_runs(store):
    """store.add_dataset stores a named dataset and its rows in order, idempotently."""
    store.add_dataset("gsm", [{"q": "a"}, {"q": "b"}], source="hub:gsm8k")
    store.add_dataset("gsm", [{"q": "a"}, {"q": "b"}], source="hub:gsm8k")
    store.flush()
    assert [(r["name"], r["source"]) for r in rows(store, DATASETS)] == [("gsm", "hub:gsm8k")]
    assert sorted((r["position"], r["data"]) for r in rows(store, ITEMS)) == [(0, {"q": "a"}), (1, {"q": "b"})]


# -- one bad record must not disable the store ----------------------------------------------------------------
# (more in test_store_isolation.py and test_store_fuzz.py)


def then_a_normal_run_is_recorded(store: Store) -> None:
    solo.run_sync({"problem": "after"}, models={"m": ScriptedBackend(lambda r: "\\boxed{5}")}, store=store,
                  run_id="after")
    assert store.run("after").status == "ok" and [t.answer for t in store.traces("after")] == ["5"]


def test_a_reward_for_an_unknown_call_is_dropped_and_the_store_keeps_recording(store, caplog):
    """A reward naming a call that does not exist is dropped with a warning in the store's log; the next
    reward and run are recorded."""
    solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, store=store,
                  run_id="rated")
    with caplog.at_level("WARNING", logger="scaffold.store"):
        store.add_reward(1.0, run_id="rated", call_id="rated/typo#0")
        store.flush()
    assert any("reward dropped" in record.getMessage() and "rated/typo#0" in record.getMessage()
               for record in caplog.records)
    then_a_normal_run_is_recorded(store)
    store.add_reward(0.5, run_id="rated", call_id="rated/generate#0")
    store.flush()
    assert [r["value"] for r in store.rewards("rated")] == [0.5]


def test_a_completion_containing_a_nul_character_is_recorded(store):
    """Model text with a NUL character (random models emit one) is recorded: as it is on SQLite, with the NUL
    shown as U+FFFD on PostgreSQL, whose text cannot hold it; the store keeps working."""
    text = "half\x00way \\boxed{1}"
    result = solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: text)}, store=store,
                           run_id="nul")
    assert result.answer == "1"
    (stored,) = store.traces("nul")
    postgres = store.url.get_backend_name() == "postgresql"
    assert stored.text == (text.replace("\x00", "\ufffd") if postgres else text)
    assert stored.metadata.get("sanitised") == (["text"] if postgres else None)
    then_a_normal_run_is_recorded(store)


def test_a_long_run_id_is_recorded(store):
    """A 250-character run id fits every column it goes into (run ids and trace ids are unbounded text)."""
    solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, store=store,
                  run_id="r" * 250)
    assert store.run("r" * 250).status == "ok" and [t.id for t in store.traces("r" * 250)] == [
        "r" * 250 + "/generate#0"]
    then_a_normal_run_is_recorded(store)


def test_a_seed_beyond_32_bits_is_recorded_exactly(store):
    """A user seed of 2**40 (a millisecond timestamp, say) is recorded as given, and the run can be resumed."""
    seed = 2**40 + 7
    first = rsa.build(n=4, k=2, steps=1).run_sync(
        {"problem": "p"}, models={"solver": ScriptedBackend(lambda r: f"{r.seed} \\boxed{{1}}")}, store=store,
        run_id="wide", seed=seed)
    assert store.run("wide").seed == seed == first.seed
    again = ScriptedBackend(lambda r: "never")
    resumed = rsa.build(n=4, k=2, steps=1).run_sync({"problem": "p"}, models={"solver": again}, store=store,
                                                    run_id="wide")
    assert again.calls == 0 and resumed.seed == seed
    then_a_normal_run_is_recorded(store)


def test_a_seed_no_column_holds_is_refused_before_the_run_and_nothing_hangs(store, monkeypatch):
    """A seed of 2**64 is an InputError before any call (it used to leave the writer failed and the run
    waiting forever); no thread dies, nothing is recorded, the next run is."""
    died: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(f"{args.thread.name}: {args.exc_value!r}"))
    backend = ScriptedBackend(lambda r: "\\boxed{1}")
    with pytest.raises(sf.InputError, match="does not fit in 64 bits"):
        solo.run_sync({"problem": "p"}, models={"m": backend}, store=store, run_id="huge", seed=2**64)
    assert backend.calls == 0 and died == [] and store.runs() == []
    then_a_normal_run_is_recorded(store)


# -- schema versions -----------------------------------------------------------------------------------------


def schema_version_of(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT version FROM schema_info WHERE id = 1")).scalar_one()


def refuse(store_url: str, match: str | None = None) -> list[str]:
    """Open ``store_url`` expecting SchemaVersionError; return the ResourceWarnings of what the refusal left open.

    The garbage collector is run here, with warnings recorded, so that a leaked connection is reported
    by the test that leaked it instead of failing the whole session later.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SchemaVersionError, match=match):
            Store(store_url)
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def bump_version(store_url: str, version: int) -> None:
    engine = sa.create_engine(normalise_url(store_url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE schema_info SET version = :v WHERE id = 1"), {"v": version})
    finally:
        engine.dispose()


def test_a_store_newer_than_this_code_is_refused(store_url):
    """Opening a database whose schema_info.version is above SCHEMA_VERSION raises SchemaVersionError."""
    Store(store_url).close()
    engine = sa.create_engine(normalise_url(store_url))
    try:
        assert schema_version_of(engine) == SCHEMA_VERSION
    finally:
        engine.dispose()
    bump_version(store_url, SCHEMA_VERSION + 1)
    assert refuse(store_url, match=f"version {SCHEMA_VERSION + 1}") == []


def test_a_refused_store_leaves_no_connection_open(store_url):
    """A store refused for its schema version disposes of its engine: no database connection stays open."""
    Store(store_url).close()
    bump_version(store_url, SCHEMA_VERSION + 1)
    if store_url.startswith("postgresql"):  # the server counts the connections still open, before any gc
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            with pytest.raises(SchemaVersionError):
                Store(store_url)
            admin = sa.create_engine(normalise_url(store_url), poolclass=sa.pool.NullPool)
            try:
                with admin.connect() as conn:
                    open_before_gc = conn.execute(sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid()")).scalar_one()
            finally:
                admin.dispose()
            gc.collect()
        assert open_before_gc == 0, f"{open_before_gc} connection(s) left open by the refused Store"
    assert refuse(store_url) == []  # on both databases: a connection left to the gc is a ResourceWarning


def test_upgrade_applies_a_migration_once_and_bumps_the_version(store_url):
    """upgrade(target=v+1) on a store at this version v runs the step once, records v+1, and is then a no-op."""
    with Store(store_url) as opened:
        solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")}, store=opened,
                      run_id="old")
    applied: list[int] = []

    now, then = SCHEMA_VERSION, SCHEMA_VERSION + 1

    def to_v2(conn: sa.Connection) -> None:
        applied.append(1)
        conn.execute(sa.text("ALTER TABLE calls ADD COLUMN judge_note TEXT"))
        conn.execute(sa.text("UPDATE calls SET judge_note = 'migrated'"))

    engine = sa.create_engine(normalise_url(store_url))
    try:
        assert schema_version_of(engine) == now
        assert upgrade(engine, target=then, migrations={then: to_v2}) == now
        assert applied == [1] and schema_version_of(engine) == then
        assert upgrade(engine, target=then, migrations={then: to_v2}) == then
        assert applied == [1] and schema_version_of(engine) == then
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT judge_note FROM calls")).scalars().all() == ["migrated"]
            assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one() == 1
        with pytest.raises(SchemaVersionError):  # a step missing from the chain is refused, not skipped
            upgrade(engine, target=then + 2, migrations={then + 2: to_v2})
        assert schema_version_of(engine) == then and applied == [1]
    finally:
        engine.dispose()
    assert refuse(store_url) == []  # this code now refuses the upgraded store, leaving nothing open

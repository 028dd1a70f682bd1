"""Resuming recorded runs (after SIGKILL, after a failure, after finishing) and the response cache.

Every test runs on SQLite and on a real PostgreSQL server. The SIGKILL tests run the graph in a child
process, kill it mid-run with SIGKILL, and resume it here.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import chain, rsa

import scaffold as sf
from scaffold._call import call_seed
from scaffold._errors import BackendError, ResumeError, RunError
from scaffold._types import Status, TraceKind
from scaffold.store._schema import CALLS, RUNS
from scaffold.store._store import normalise_url
from scaffold.testing import ScriptedBackend

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def reply(request) -> str:
    """Deterministic: a pure function of the request's seed (which is a function of run seed, node and index)."""
    return f"draft {request.seed} \\boxed{{{request.seed % 3}}}"


def suffixes(result_or_traces: Any) -> dict[str, str]:
    """Trace text by ``node#index`` (the id without its run id)."""
    traces = getattr(result_or_traces, "traces", result_or_traces)
    return {t.id.split("/", 1)[1]: t.text for t in traces}


def model_identities(graph: sf.Graph, seed: int) -> dict[int, str]:
    """Request seed -> ``node#index`` for every model call the graph can make (seeds are unique per call)."""
    out: dict[int, str] = {}
    for node in graph.nodes:
        if node.alias:
            for index in range(node.size or 0):
                out[call_seed(seed, node.name, index)] = f"{node.name}#{index}"
    return out


def snapshot(store: sf.Store) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every run and call row, to check that something recorded nothing."""
    with store.engine.connect() as conn:
        runs = [tuple(r) for r in conn.execute(sa.select(RUNS).order_by(RUNS.c.id))]
        calls = [tuple(r) for r in conn.execute(sa.select(CALLS).order_by(CALLS.c.id))]
    return runs, calls


# -- a child process killed with SIGKILL --------------------------------------------------------------------

CHILD = textwrap.dedent(r"""
    import sys
    url, mode, tests = sys.argv[1:4]
    sys.path.insert(0, tests)
    import scaffold as sf
    from helpers import rsa
    from scaffold.testing import ScriptedBackend

    def reply(request):
        return f"draft {request.seed} \\boxed{{{request.seed % 3}}}"

    store = sf.Store(url)
    if mode == "run":
        model = sf.Model(ScriptedBackend(reply, delay=0.01), max_in_flight=2)
        rsa.run_sync({"problem": "kill me"}, models={"solver": model}, store=store, run_id="victim", seed=11)
    else:
        graph = rsa.build(n=4, k=2, steps=3)
        rows = [{"problem": f"<row {i}>"} for i in range(8)]
        model = sf.Model(ScriptedBackend(reply, delay=0.05))
        graph.map_sync(rows, models={"solver": model}, store=store, run_id="batch", seed=100, concurrency=2)
    store.close()
    print("finished")
""")


def start_child(tmp_path: Path, store_url: str, mode: str) -> subprocess.Popen[bytes]:
    """The child, its output going to ``child_{mode}.log`` (a file, not a pipe: a full pipe would block it)."""
    script = tmp_path / f"child_{mode}.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / f"child_{mode}.log", "wb") as log:
        return subprocess.Popen([sys.executable, str(script), store_url, mode, str(TESTS)], cwd=tmp_path, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def output_of(child: subprocess.Popen[bytes]) -> str:
    return Path(child.args[1]).with_suffix(".log").read_text(errors="replace")[-3000:]  # type: ignore[index]


def kill_when(child: subprocess.Popen[bytes], store_url: str, ready: Any, timeout: float = 45.0) -> None:
    """Poll the database with a separate engine until ``ready(conn)``, then SIGKILL the child."""
    engine = sa.create_engine(normalise_url(store_url), poolclass=sa.pool.NullPool)
    deadline = time.monotonic() + timeout
    seen = "nothing yet"
    try:
        while True:
            if child.poll() is not None:
                pytest.fail(f"the child exited ({child.returncode}) before it was killed:\n{output_of(child)}")
            if time.monotonic() > deadline:
                child.kill()
                child.wait()
                pytest.fail(f"the child never reached the point to kill it at (last check: {seen}):\n"
                            f"{output_of(child)}")
            try:
                with engine.connect() as conn:
                    if ready(conn):
                        break
                    seen = "not ready"
            except sa.exc.DBAPIError as exc:  # the child has not created the tables yet
                seen = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.returncode == -signal.SIGKILL, output_of(child)
    finally:
        engine.dispose()


def ok_model_calls(conn: sa.Connection, run_id: str) -> int:
    c = CALLS.c
    return conn.execute(sa.select(sa.func.count()).select_from(CALLS).where(
        c.run_id == run_id, c.status == "ok", c.kind == "model")).scalar_one()


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_without_resending_recorded_calls(store, store_url, tmp_path):
    """After SIGKILL, resuming sends exactly the calls not recorded ok and ends as an uninterrupted run would."""
    child = start_child(tmp_path, store_url, "run")
    kill_when(child, store_url, lambda conn: ok_model_calls(conn, "victim") >= 60)

    killed = store.run("victim")
    assert (killed.status, killed.attempts, killed.finished_at) == ("running", 1, None)
    recorded = [t for t in store.traces("victim") if t.kind is TraceKind.MODEL]
    ok_before = {t.id: t for t in recorded if t.status is Status.OK}
    assert 60 <= len(ok_before) < 176, len(ok_before)
    assert all(t.status is Status.OK for t in recorded)  # nothing in flight was recorded as finished

    backend = ScriptedBackend(reply)
    result = rsa.run_sync({"problem": "kill me"}, models={"solver": backend}, store=store, run_id="victim")
    assert result.seed == 11  # taken from the record

    identity = model_identities(rsa.build(), 11)
    sent = [identity[r.seed] for r in backend.requests]
    reused = {t.id.split("/", 1)[1] for t in ok_before.values()}
    assert len(sent) == len(set(sent)) == backend.calls == 176 - len(ok_before)
    assert not set(sent) & reused  # no call recorded ok was sent again
    assert set(sent) | reused == set(identity.values())

    fresh_backend = ScriptedBackend(reply)
    fresh = rsa.run_sync({"problem": "kill me"}, models={"solver": fresh_backend}, store=store, run_id="fresh",
                         seed=11)
    assert fresh_backend.calls == 176
    assert (result.status, result.answer, result.output.text) == ("ok", fresh.answer, fresh.output.text)
    assert suffixes(result) == suffixes(fresh)
    assert suffixes(store.traces("victim")) == suffixes(fresh)
    for trace_id, trace in ok_before.items():  # the reused traces are the recorded ones, unchanged
        assert result.traces[[t.id for t in result.traces].index(trace_id)].text == trace.text

    info = store.run("victim")
    assert (info.status, info.attempts, info.calls, info.answer) == ("ok", 2, 176, fresh.answer)
    assert info.finished_at is not None and info.error is None
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(CALLS).where(
            CALLS.c.run_id == "victim")).scalar_one() == 177


@pytest.mark.slow
def test_a_map_killed_with_sigkill_finishes_every_row_without_resending_finished_rows(store, store_url, tmp_path):
    """Graph.map(run_id=...) re-run after SIGKILL finishes every row; rows that had finished send nothing."""
    graph = rsa.build(n=4, k=2, steps=3)
    rows = [{"problem": f"<row {i}>"} for i in range(8)]
    child = start_child(tmp_path, store_url, "map")

    def three_rows_done(conn: sa.Connection) -> bool:
        return conn.execute(sa.select(sa.func.count()).select_from(RUNS).where(
            RUNS.c.status == "ok")).scalar_one() >= 3

    kill_when(child, store_url, three_rows_done)
    before = {r.id: r for r in store.runs()}
    finished = {run_id for run_id, r in before.items() if r.status == "ok"}
    assert 3 <= len(finished) < 8
    ok_before = {run_id: sum(t.status is Status.OK and t.kind is TraceKind.MODEL for t in store.traces(run_id))
                 for run_id in before}
    assert all(ok_before[run_id] == 16 for run_id in finished)

    backend = ScriptedBackend(reply)
    results = graph.map_sync(rows, models={"solver": backend}, store=store, run_id="batch", seed=100, concurrency=4)
    assert [r.status for r in results] == ["ok"] * 8
    sent_per_row = {f"batch-{i}": sum(f"<row {i}>" in r.last_content for r in backend.requests) for i in range(8)}
    for run_id in finished:
        assert sent_per_row[run_id] == 0, run_id
    for run_id, sent in sent_per_row.items():
        assert sent == 16 - ok_before.get(run_id, 0), run_id
    assert backend.calls == sum(sent_per_row.values())

    reference = graph.map_sync(rows, models={"solver": ScriptedBackend(reply)}, store=None, seed=100)
    for got, want in zip(results, reference):
        assert (got.answer, suffixes(got)) == (want.answer, suffixes(want))
    for i in range(8):
        info = store.run(f"batch-{i}")
        assert info.status == "ok" and info.calls == 16
        assert info.attempts == (2 if f"batch-{i}" in before else 1)


# -- resuming in process --------------------------------------------------------------------------------------

SMALL = rsa.build(n=4, k=2, steps=2)  # 12 model calls


def test_resuming_a_finished_run_sends_nothing_and_returns_the_same_result(store):
    """A finished run resumed by its id is answered entirely from the record."""
    first = SMALL.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(reply)}, store=store, run_id="done",
                           seed=4)
    rows_before = snapshot(store)[1]
    again = ScriptedBackend(reply)
    second = SMALL.run_sync({"problem": "p"}, models={"solver": again}, store=store, run_id="done")
    assert again.calls == 0
    assert (second.answer, second.seed, suffixes(second)) == (first.answer, 4, suffixes(first))
    assert {t.id: t.inputs for t in second.traces} == {t.id: t.inputs for t in first.traces}
    assert len(snapshot(store)[1]) == len(rows_before) == 13
    info = store.run("done")
    assert (info.status, info.attempts, info.calls, info.answer) == ("ok", 2, 12, first.answer)


@pytest.mark.parametrize("change", ["graph", "structure", "inputs", "seed"])
def test_a_mismatched_resume_raises_and_records_nothing(store, change):
    """Resuming a run id with another graph, structure, inputs or seed raises ResumeError and writes nothing."""
    SMALL.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(reply)}, store=store, run_id="orig", seed=1)
    before = snapshot(store)
    backend = ScriptedBackend(reply)
    graph, inputs, seed, models = SMALL, {"problem": "p"}, 1, {"solver": backend}
    if change == "graph":
        graph, models = chain.build(), {"m": backend}
    elif change == "structure":
        graph = rsa.build(n=8, k=2, steps=2)
    elif change == "inputs":
        inputs = {"problem": "another"}
    else:
        seed = 2
    with pytest.raises(ResumeError):
        graph.run_sync(inputs, models=models, store=store, run_id="orig", seed=seed)
    store.flush()
    assert backend.calls == 0
    assert snapshot(store) == before
    assert store.run("orig").attempts == 1


def test_a_failed_run_resumes_and_resends_only_failed_and_cancelled_calls(store):
    """A run that failed (on_error=raise) is resumed: only calls not recorded ok are sent, and it completes."""
    seed = 6
    bad = call_seed(seed, "step1", 1)

    def broken(request):
        if request.seed == bad:
            raise BackendError("the provider fell over")
        return reply(request)

    failing = ScriptedBackend(broken, delay=lambda r: 0.0 if r.seed == bad else 0.05)
    with pytest.raises(sf.CallError):
        SMALL.run_sync({"problem": "p"}, models={"solver": failing}, store=store, run_id="flaky", seed=seed)
    first = store.traces("flaky")
    statuses = {t.id: t.status for t in first}
    assert statuses["flaky/step1#1"] is Status.ERROR
    assert Status.CANCELLED in statuses.values()
    assert store.run("flaky").status == "error"
    ok_before = {t.id.split("/", 1)[1] for t in first if t.status is Status.OK and t.kind is TraceKind.MODEL}
    not_ok = {t.id.split("/", 1)[1] for t in first if t.status is not Status.OK}

    healthy = ScriptedBackend(reply)
    result = SMALL.run_sync({"problem": "p"}, models={"solver": healthy}, store=store, run_id="flaky")
    identity = model_identities(SMALL, seed)
    sent = {identity[r.seed] for r in healthy.requests}
    assert healthy.calls == len(sent) == 12 - len(ok_before)
    assert not sent & ok_before and not_ok <= sent
    reference = SMALL.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(reply)}, store=None, seed=seed)
    assert (result.answer, suffixes(result)) == (reference.answer, suffixes(reference))
    assert all(t.status is Status.OK for t in store.traces("flaky"))
    info = store.run("flaky")
    assert (info.status, info.error, info.attempts, info.calls) == ("ok", None, 2, 12)


# -- the response cache ------------------------------------------------------------------------------------------


def test_cache_answers_identical_requests_of_another_run_without_sending(store):
    """cache=True on a new run id with identical requests sends nothing and marks traces cached_from."""
    first = SMALL.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(reply)}, store=store, run_id="c1",
                           seed=3)
    backend = ScriptedBackend(reply)
    second = SMALL.run_sync({"problem": "p"}, models={"solver": backend}, store=store, run_id="c2", seed=3,
                            cache=True)
    assert backend.calls == 0
    assert (second.answer, suffixes(second)) == (first.answer, suffixes(first))
    for trace in (t for t in store.traces("c2") if t.kind is TraceKind.MODEL):
        assert trace.run_id == "c2" and trace.status is Status.OK
        assert trace.metadata["cached_from"] == "c1/" + trace.id.split("/", 1)[1]
        assert trace.cost == 0.0
    assert store.run("c2").calls == 12 and store.run("c1").calls == 12


@pytest.mark.parametrize("supports_n", [False, True], ids=["one-request-per-sample", "native-n"])
def test_cache_never_collapses_the_n_samples_of_a_node(store, supports_n):
    """A node's n=4 distinct samples come back from the cache as the same 4 distinct samples, index by index."""

    @sf.graph
    def four(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4))

    counter = itertools.count()
    backend = ScriptedBackend(lambda r: f"sample {next(counter)} \\boxed{{1}}", supports_n=supports_n)
    first = four.run_sync({"problem": "p"}, models={"m": backend}, store=store, run_id="n1", seed=1)
    texts = [t.text for t in first.node("sample")]
    assert len(set(texts)) == 4
    again = ScriptedBackend(lambda r: "never \\boxed{2}", supports_n=supports_n)
    second = four.run_sync({"problem": "p"}, models={"m": again}, store=store, run_id="n2", seed=2, cache=True)
    assert again.calls == 0
    assert [t.text for t in second.node("sample")] == texts
    assert [t.metadata["cached_from"] for t in second.node("sample")] == [f"n1/sample#{i}" for i in range(4)]


def test_cache_is_off_by_default(store):
    """Without cache=True a second run with identical requests sends every call again."""
    SMALL.run_sync({"problem": "p"}, models={"solver": ScriptedBackend(reply)}, store=store, run_id="a", seed=3)
    backend = ScriptedBackend(reply)
    second = SMALL.run_sync({"problem": "p"}, models={"solver": backend}, store=store, run_id="b", seed=3)
    assert backend.calls == 12
    assert all("cached_from" not in t.metadata for t in second.traces)


def test_cache_without_a_store_is_an_error():
    """cache=True with store=None raises RunError before anything is sent."""
    backend = ScriptedBackend(reply)
    with pytest.raises(RunError, match="cache=True"):
        SMALL.run_sync({"problem": "p"}, models={"solver": backend}, store=None, cache=True)
    assert backend.calls == 0

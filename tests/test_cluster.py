"""Graphs on a real local Ray cluster: equal to one process, one store, shared limits, killed workers and drivers.

Every test uses the session's Ray cluster (``ray_local``: 4 logical CPUs) and real processes: row
workers are Ray actors, models answer over real HTTP from a local OpenAI-compatible server where
the test needs to count what was sent, and stores are real SQLite files or PostgreSQL databases.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import started_processes
from helpers import max_in_window, peak_in_flight

import graphs
import scaffold as sf
from scaffold import ClusterError
from scaffold.cluster import Cluster
from scaffold.evaluation import evaluate
from scaffold.testing import ScriptedBackend
from scaffold.testing._server import OpenAIServer, ServerRequest

pytestmark = pytest.mark.usefixtures("ray_local")

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-cluster-test"


def seeded(request: sf.Request) -> str:
    """A deterministic answer from what the call sees (its prompt and seed)."""
    return f"so \\boxed{{{(len(request.last_content) * 7 + (request.seed or 0)) % 4}}}"


def served(request: ServerRequest) -> str:
    return f"so \\boxed{{{len(str(request.body['messages'][-1]['content'])) % 3}}}"


def rows(count: int) -> list[dict[str, Any]]:
    return [{"problem": f"What is {i} + {i}?", "answer": str(i % 3)} for i in range(count)]


def http_model(server: OpenAIServer, **limits: Any) -> sf.Model:
    backend = sf.OpenAIBackend("test-model", base_url=server.base_url, api_key=KEY)
    return sf.Model(backend, retry=sf.Retry(attempts=3, initial_delay=0.01), **limits)


def rsa() -> sf.Graph:
    return graphs.rsa.build(n=4, k=2, steps=1)


def row_workers() -> list[Any]:
    """The row-worker processes of this session's Ray cluster (Ray titles them ``ray::RowWorker``): the session
    started the cluster (``ray_local``), so its workers are among this process's descendants; another program's
    are never counted or signalled."""
    return started_processes("RowWorker")


def wait_for(condition: Any, timeout: float, what: str) -> None:
    """Poll ``condition()`` until it holds; fail, saying ``what`` did not happen, after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.05)


def chat_requests(server: OpenAIServer) -> list[Any]:
    return [r for r in server.requests if r.path == "/v1/chat/completions"]


def requests_per_row(server: OpenAIServer) -> int:
    """HTTP requests one row of ``rsa()`` sends (native ``n`` folds samples into one), measured locally."""
    rsa().run_sync(rows(1)[0], models={"solver": http_model(server)}, store=None)
    count = len(chat_requests(server))
    server.reset()
    return count


def model_traces(store: sf.Store, run_ids: list[str]) -> list[Any]:
    return [t for run_id in run_ids for t in store.traces(run_id) if t.kind.value == "model"]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_cluster_evaluation_equals_the_single_process_one_row_for_row(kind: str, tmp_path: Path,
                                                                          request: pytest.FixtureRequest) -> None:
    """Same graph, seed and scripted answers: every row's answer, score and trace count match; one store."""
    if kind == "sqlite":
        local_url, cluster_url = f"sqlite:///{tmp_path / 'local.db'}", f"sqlite:///{tmp_path / 'cluster.db'}"
    else:
        from conftest import fresh_postgres_database

        server = request.getfixturevalue("postgres_server")
        local_url, cluster_url = fresh_postgres_database(server), fresh_postgres_database(server)
    graph, data = rsa(), rows(24)
    models = {"solver": ScriptedBackend(seeded)}
    local = evaluate(graph, data, models, name="ev", store=local_url, seed=3, concurrency=4)
    spread = evaluate(graph, data, models, name="ev", store=cluster_url, seed=3, concurrency=4,
                      cluster=Cluster(workers=3, num_cpus=0.5))
    assert [o.answer for o in spread.outcomes] == [o.answer for o in local.outcomes]
    assert [o.correct for o in spread.outcomes] == [o.correct for o in local.outcomes]
    assert spread.finished == local.finished == len(data)
    with sf.Store(cluster_url) as store, sf.Store(local_url) as single:
        run_ids = [f"ev-{i}" for i in range(len(data))]
        assert len(store.runs(limit=None)) == len(data)
        calls = sum(graph.count_calls().values())
        cluster_traces, local_traces = model_traces(store, run_ids), model_traces(single, run_ids)
        assert len(cluster_traces) == len(local_traces) == calls * len(data)
        assert sorted((t.node, t.text) for t in cluster_traces) == sorted((t.node, t.text) for t in local_traces)
        assert len({t.id for t in cluster_traces}) == len(cluster_traces)


def test_limits_hold_across_four_workers_at_the_server(tmp_path: Path) -> None:
    """max_in_flight=3 and 1,200 requests/min over 4 workers: the server never sees more, and the limit binds."""
    # 0.1 s a request: the first second's burst meets the in-flight limit whichever worker starts first
    with OpenAIServer(policy=served, api_key=KEY, latency=0.1) as server:
        per_row = requests_per_row(server)
        model = http_model(server, max_in_flight=3, requests_per_minute=1200)
        results = rsa().map_sync(rows(20), models={"solver": model}, concurrency=4, seed=0,
                                 store=tmp_path / "runs.db", cluster=Cluster(workers=4, num_cpus=0.5))
        sent = chat_requests(server)
    assert all(r.ok for r in results) and len(results) == 20
    assert len(sent) == 20 * per_row
    assert peak_in_flight(sent) == 3
    arrivals = sorted(r.arrived_at for r in sent)
    for window in (0.5, 1.0, 2.0):  # RateLimit's bound: one second's burst plus the rate over the window
        assert max_in_window(arrivals, window) <= 20 + window * 20 + 1


def test_a_killed_worker_loses_nothing_and_its_rows_finish_elsewhere(tmp_path: Path) -> None:
    """SIGKILL one worker mid-evaluation: every row finishes once, no trace twice, no finished call resent."""
    graph, data = rsa(), rows(24)
    calls = sum(graph.count_calls().values())
    with OpenAIServer(policy=served, api_key=KEY, latency=0.05) as server:
        per_row = requests_per_row(server)
        outcome: dict[str, Any] = {}

        def run() -> None:
            outcome["report"] = evaluate(graph, data, {"solver": http_model(server)}, name="ev", seed=1,
                                         store=tmp_path / "runs.db", concurrency=3,
                                         cluster=Cluster(workers=2, num_cpus=0.5))

        thread = threading.Thread(target=run)
        thread.start()
        wait_for(lambda: server.answered >= per_row * 4, 120, "the evaluation did not answer four rows' requests")
        wait_for(lambda: len(row_workers()) == 2, 60, "the job's two row workers were not both running")
        os.kill(row_workers()[0].pid, signal.SIGKILL)
        thread.join(300)
        assert not thread.is_alive(), "the evaluation did not end within 300 s of the kill"
        sent = len(chat_requests(server))
    report = outcome["report"]
    assert report.finished == len(data) and all(o.status == "ok" for o in report.outcomes)
    with sf.Store(tmp_path / "runs.db") as store:
        traces = model_traces(store, [f"ev-{i}" for i in range(len(data))])
        assert len(traces) == calls * len(data) and len({t.id for t in traces}) == len(traces)
        assert len(store.runs(limit=None)) == len(data)
    # a request is sent again only if it was in flight when the worker died (one per row in flight there)
    assert per_row * len(data) <= sent <= per_row * len(data) + 3 * 4


def test_a_killed_driver_resumes_without_resending_finished_calls(tmp_path: Path, ray_local: str) -> None:
    """SIGKILL the driver of a cluster evaluation, then run it again under the same name: it completes, and
    only calls that were in flight at the kill are sent twice."""
    graph, data = rsa(), rows(30)
    calls = sum(graph.count_calls().values())
    database = tmp_path / "runs.db"
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["RAY_AUTH_MODE"] = "disabled"
        import ray, graphs, scaffold as sf
        from scaffold.cluster import Cluster
        from scaffold.evaluation import evaluate
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from test_cluster import http_model_at, rows
        ray.init(address={ray_local!r}, log_to_driver=False)
        evaluate(graphs.rsa.build(n=4, k=2, steps=1), rows(30), {{"solver": http_model_at(sys.argv[1])}}, name="ev",
                 seed=2, store={str(database)!r}, concurrency=3, cluster=Cluster(workers=2, num_cpus=0.5))
    """)
    with OpenAIServer(policy=served, api_key=KEY, latency=0.05) as server:
        per_row = requests_per_row(server)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        driver = subprocess.Popen([sys.executable, "-c", script, server.base_url], cwd=ROOT, env=env)
        wait_for(lambda: server.answered >= per_row * 8 or driver.poll() is not None, 120,
                 "the driver's evaluation did not answer eight rows' requests")
        assert driver.poll() is None, "the driver ended before it could be killed"
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        before = len(chat_requests(server))
        wait_for(lambda: not row_workers(), 60, "Ray did not end the killed driver's row workers")
        report = evaluate(graph, data, {"solver": http_model(server)}, name="ev", seed=2, store=database,
                          concurrency=3, cluster=Cluster(workers=2, num_cpus=0.5))
        sent = len(chat_requests(server))
    assert before < per_row * len(data)  # the kill came mid-evaluation
    assert report.finished == len(data)
    with sf.Store(database) as store:
        traces = model_traces(store, [f"ev-{i}" for i in range(len(data))])
        assert len(traces) == calls * len(data) and len({t.id for t in traces}) == len(traces)
    assert sent <= per_row * len(data) + 2 * 3 * 4  # at most the requests in flight at the kill went twice


def http_model_at(base_url: str) -> sf.Model:
    """``http_model`` for a server known by its URL (the killed-driver script's)."""
    backend = sf.OpenAIBackend("test-model", base_url=base_url, api_key=KEY)
    return sf.Model(backend, retry=sf.Retry(attempts=3, initial_delay=0.01))


def test_options_that_cannot_reach_workers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="subscribers"):
        rsa().map_sync(rows(2), models={"solver": ScriptedBackend(seeded)}, store=tmp_path / "r.db",
                       subscribers=[print], cluster=Cluster(workers=1, num_cpus=0.5))


def test_scaffold_eval_with_ray_joins_the_cluster_and_prints_the_single_process_table(tmp_path: Path,
                                                                                     ray_local: str) -> None:
    """`scaffold eval ... --ray ADDRESS --workers 2` over real HTTP gives the same report as without --ray."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(f'{{"problem": "What is {i} + {i}?", "answer": "{i % 3}"}}\n' for i in range(8)))
    with OpenAIServer(policy=served) as server:
        def scaffold_eval(store: str, *extra: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "scaffold", "--store", store, "eval", "rsa", "-p", "n=4", "-p", "k=2",
                 "-p", "steps=1", "--model", "solver=hosted_vllm/test-model", "--api-base", server.base_url,
                 "--data", str(data), "--no-progress", "--json", *extra],
                cwd=ROOT, capture_output=True, text=True, timeout=300,
                env={**os.environ, "RAY_AUTH_MODE": "disabled"})
            assert done.returncode == 0, done.stderr[-2000:]
            return done.stdout

        import json

        alone = json.loads(scaffold_eval(str(tmp_path / "alone.db")))
        spread = json.loads(scaffold_eval(str(tmp_path / "spread.db"), "--ray", ray_local, "--workers", "2",
                                          "--worker-cpus", "0.5"))
    first, second = (r[0] if isinstance(r, list) else r for r in (alone, spread))
    assert second["finished"] == first["finished"] == 8
    assert second["accuracy"] == first["accuracy"]
    assert second["node_accuracy"] == first["node_accuracy"] and second["pass_at_k"] == first["pass_at_k"]
    with sf.Store(tmp_path / "alone.db") as alone_store, sf.Store(tmp_path / "spread.db") as spread_store:
        answers = [[(r.item, r.answer) for r in sorted(s.runs(limit=None), key=lambda r: r.item or 0)]
                   for s in (alone_store, spread_store)]
    assert answers[0] == answers[1] and len(answers[0]) == 8


def test_a_budget_holds_across_workers_and_reports_back(tmp_path: Path) -> None:
    """A token budget shared by 3 workers: never passed, the refused calls counted, totals back in the Budget."""
    budget = sf.Budget(max_tokens=4_000)
    model = sf.Model(ScriptedBackend(seeded), params={"max_tokens": 20})
    # one row at a time on each worker. A row spends 380 tokens and books at most 12 calls' estimates (127 at most
    # each) while in flight, so the first 3 rows always fit in the 4,000 and the 30 rows' 11,400 never do. With 4
    # rows a worker, 12 rows' samples could all be booked before any aggregation, and every row fail.
    results = rsa().map_sync(rows(30), models={"solver": model}, concurrency=1, seed=0,
                             store=tmp_path / "runs.db", budget=budget, cluster=Cluster(workers=3, num_cpus=0.5))
    assert len(results) == 30
    assert 0 < budget.tokens <= 4_000 and budget.refused > 0
    assert any(r.ok for r in results) and any(not r.ok for r in results)
    spent = sum(t.usage.total_tokens for r in results for t in r.traces if t.kind.value == "model" and t.ok)
    assert spent == budget.tokens


def agent_script(request: sf.Request) -> sf.Completion:
    """Asks the calculator for the problem's sum, then answers with the calculator's result."""
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if results:
        return sf.Completion(text=f"so \\boxed{{{results[0]}}}")
    expression = request.last_content.split("What is ")[-1].rstrip("?")
    return sf.Completion(text="", tool_calls=(sf.ToolCall("c", "calculator", f'{{"expression": "{expression}"}}'),))


def test_agents_with_tools_run_on_workers_as_in_one_process(tmp_path: Path) -> None:
    """An agent graph (its tools pickled to the workers, each with its own in-flight limit) gives the same answers,
    turns and tool calls on the cluster as in this process."""
    from scaffold.tools import calculator

    @sf.graph
    def solve(problem):
        return sf.agent("{problem}", model="m", tools=[calculator], n=2)

    data = rows(6)
    local = solve.map_sync(data, models={"m": ScriptedBackend(agent_script)}, seed=1, store=tmp_path / "local.db")
    spread = solve.map_sync(data, models={"m": ScriptedBackend(agent_script)}, seed=1, store=tmp_path / "cluster.db",
                            cluster=Cluster(workers=2, num_cpus=0.5))
    assert [[t.answer for t in r.output] for r in spread] == [[t.answer for t in r.output] for r in local]
    assert [[t.answer for t in r.output] for r in local] == [[str(2 * i)] * 2 for i in range(6)]
    with sf.Store(tmp_path / "cluster.db") as store:
        tools = [t for r in spread for t in store.traces(r.run_id) if t.kind is sf.TraceKind.TOOL]
    assert len(tools) == 12 and {t.metadata["tool"] for t in tools} == {"calculator"}

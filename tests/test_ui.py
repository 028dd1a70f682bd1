"""`scaffold ui`'s data and HTTP API over a store holding RSA runs, a vote evaluation and a training log."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import scaffold as sf
from scaffold.serve import ServeThread
from scaffold.testing import SampleStore, sample_store
from scaffold.ui import create_ui_app, run_view, runs_page, training_view

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleStore:
    """RSA (N=16, K=4, T=10) and a 16-sample vote, evaluated on the same 12 problems."""
    return sample_store(tmp_path_factory.mktemp("ui") / "runs.db")


@pytest.fixture(scope="module")
def training_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training log as `train_online` writes it (one StepMetrics a line), and one line that is not JSON."""
    path = tmp_path_factory.mktemp("log") / "log.jsonl"
    lines = [json.dumps({"step": i, "loss": 1 / i, "reward_mean": 0.3 + i / 100, "accuracy": 0.25 + i / 100,
                         "advantage_mean": 0.0, "advantage_std": 0.2, "advantage_abs_max": 0.8, "entropy": 1 - i / 50,
                         "kl": i / 1000, "clip_fraction": 0.0, "tokens": 640, "tokens_per_s": 900.0, "extra": {}})
             for i in range(1, 11)]
    path.write_text("\n".join([*lines[:5], "not json", *lines[5:]]) + "\n")
    return path


@pytest.fixture(scope="module")
def server(sample: SampleStore, training_log: Path) -> Iterator[ServeThread]:
    with ServeThread(create_ui_app(sample.path, training_logs=[training_log])) as running:
        yield running


def get(server: ServeThread, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(server.url + path) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_the_runs_page_pages_in_sql_filters_and_totals(sample: SampleStore) -> None:
    """24 runs, newest first, 10 a page; the graph filter keeps one evaluation; totals cover every selected run."""
    with sf.Store(sample.path) as store:
        first = runs_page(store, limit=10)
        last = runs_page(store, limit=10, offset=20)
        rsa = runs_page(store, graph="rsa", limit=100)
        everything = store.runs()
        assert first["total"] == 24 and len(first["runs"]) == 10 and len(last["runs"]) == 4
        assert [r["id"] for r in first["runs"] + runs_page(store, limit=10, offset=10)["runs"] + last["runs"]] == \
            [r.id for r in everything]
        assert rsa["total"] == 12 and {r["graph"] for r in rsa["runs"]} == {"rsa"}
        assert rsa["totals"]["calls"] == sum(r.calls for r in everything if r.graph == "rsa") == 12 * 176
        assert first["choices"]["graph"] == ["rsa", "vote"] and "solver" in first["choices"]["model"]
        assert runs_page(store, status="error")["total"] == 0


def test_a_run_view_has_every_trace_edge_and_node_in_flow_order(sample: SampleStore) -> None:
    """RSA's executed DAG: 176 calls and the vote, every lineage edge, steps in order, rewards and right/wrong."""
    with sf.Store(sample.path) as store:
        view = run_view(store, "rsa-0")
        traces = store.traces("rsa-0")
    assert len(view["traces"]) == len(traces) == 177
    assert len(view["edges"]) == sum(len(t.inputs) for t in traces) == 10 * 16 * 4 + 16
    assert [n["name"] for n in view["nodes"]] == [f"step{i}" for i in range(11)] + ["vote"]
    reference = view["run"]["reference"]
    assert reference is not None and view["run"]["correct"] == sf.equivalent(view["run"]["answer"], reference)
    model = [t for t in view["traces"] if t["kind"] == "model"]
    assert all(t["reward"] in (0.0, 1.0) for t in model)  # the evaluation rewarded every trace
    assert all(t["correct"] == (t["reward"] == 1.0) for t in model)
    assert any(t["attempt"] > 1 for t in model)  # the scripted 503s were retried
    assert all(t["prompt"] for t in model) and set(view["rollups"]) == {"node", "model"}
    assert view["rollups"]["node"]["step3"]["calls"] == 16


def test_the_api_answers_every_page_and_names_its_mistakes(server: ServeThread) -> None:
    """Every route answers JSON; an unknown run is a 404, a bad page number or a half-named comparison a 400."""
    assert get(server, "/health") == (200, {"status": "ok"})
    status, page = get(server, "/api/runs?limit=5&graph=vote")
    assert status == 200 and page["total"] == 12 and len(page["runs"]) == 5
    assert get(server, "/api/runs/rsa-3")[1]["run"]["id"] == "rsa-3"
    assert get(server, "/api/runs/nope")[0] == 404
    assert get(server, "/api/runs?limit=x")[0] == 400
    assert get(server, "/api/compare?a=rsa")[0] == 400
    assert get(server, "/api/compare?a=rsa&b=nope")[0] == 404
    status, evaluations = get(server, "/api/evaluations")
    assert status == 200 and {row["evaluation"] for row in evaluations["rows"]} == {"rsa", "vote"}
    assert {p["name"] for p in evaluations["plots"]} == {"rsa", "vote"}
    status, compared = get(server, "/api/compare?a=rsa&b=vote&differing=1")
    assert status == 200 and compared["problems"] and all(p["differs"] for p in compared["problems"])
    assert compared["difference"]["only_a"] + compared["difference"]["only_b"] == len(compared["problems"])
    assert get(server, "/api/training")[1]["logs"][0]["name"] == "log"
    assert get(server, "/api/training/7")[0] == 404
    with urllib.request.urlopen(server.url + "/") as page_response:
        html = page_response.read().decode()
    assert "/static/app.js" in html and "http" not in html.replace("http-equiv", "")  # no outside asset


def test_a_training_log_skips_lines_it_cannot_read(training_log: Path) -> None:
    """Ten steps come back in order; the line that is not JSON is counted, not fatal."""
    view = training_view(training_log)
    assert [s["step"] for s in view["steps"]] == list(range(1, 11)) and view["skipped"] == 1


def test_scaffold_ui_serves_the_store_named_on_the_command_line(sample: SampleStore) -> None:
    """`scaffold ui --store S --port P` serves the store until it is stopped."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "scaffold", "ui", "--store", sample.path, "--port", str(port)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs?limit=1") as response:
                    assert json.load(response)["total"] == 24
                    break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None and time.monotonic() < deadline, "scaffold ui did not start"
                time.sleep(0.2)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err
    missing = subprocess.run([sys.executable, "-m", "scaffold", "ui", "--store", str(ROOT / "nowhere.db")], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "no store at" in missing.stderr

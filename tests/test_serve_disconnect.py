"""A client that goes away cancels its runs at once — streamed or not — and the calls in flight are recorded
as cancelled, with the run; nothing recorded before is lost."""

from __future__ import annotations

import time

import httpx
import pytest
from helpers import wait_until

import scaffold as sf
from scaffold.serve import ServeThread, build_app
from scaffold.testing import OpenAIServer

LONG = "step " * 200 + r"\boxed{4}"


@pytest.fixture
def served(tmp_path):
    # 200 tokens 0.1 s apart: an upstream stream read to its end takes 20 s, one abandoned ends within a token or two
    with OpenAIServer(policy=LONG, token_interval=0.1) as upstream:
        store = tmp_path / "serve.db"
        app = build_app({
            "models": {"up": {"model": "hosted_vllm/m", "api_base": upstream.base_url}},
            "served": {"moa": {"topology": "self_moa", "params": {"n": 2}, "models": {"solver": "up"}},
                       "vote": {"topology": "self_consistency", "params": {"n": 3}, "models": {"solver": "up"}}},
        }, store=str(store))
        with ServeThread(app) as server:
            server.store_path, server.upstream = store, upstream
            yield server


def wait_for_run(store_path, run_id, status, seconds=10.0):
    deadline = time.monotonic() + seconds
    while True:
        with sf.Store(str(store_path)) as store:
            try:
                info = store.run(run_id)
            except sf.StoreError:
                info = None
            if info is not None and info.status == status:
                return info, store.traces(run_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} never reached {status!r} (last: {info and info.status})")
        time.sleep(0.05)


def test_a_client_leaving_mid_stream_cancels_the_run_and_records_it(served):
    """After the first streamed token the client hangs up: the final call stops and is recorded cancelled."""
    body = {"model": "moa", "stream": True, "messages": [{"role": "user", "content": "2+2?"}]}
    with httpx.Client(timeout=30) as client, client.stream("POST", served.base_url + "/chat/completions",
                                                            json=body) as response:
        run_id = response.headers["x-scaffold-run-id"]
        for line in response.iter_lines():
            if '"content":"step' in line:
                break
    info, traces = wait_for_run(served.store_path, run_id, "cancelled")
    final = [t for t in traces if t.node == "final"]
    assert [t.status for t in final] == [sf.Status.CANCELLED]
    assert [t.status for t in traces if t.node == "samples"] == [sf.Status.OK] * 2  # kept, not lost
    streams = [r for r in served.upstream.requests if r.request is not None and r.request.body.get("stream")]
    assert len(streams) == 1
    wait_until(lambda: served.upstream.requests[streams[0].number].finished_at is not None, timeout=15,
               message="the upstream stream was still being read after the client left")
    served_ids = {response_id for response_id, _ in served.upstream.choices_served}
    assert streams[0].response_id not in served_ids  # abandoned: the upstream never sent it to its end


def test_a_client_leaving_before_the_answer_cancels_the_run(served):
    """A non-streamed request whose client times out is cancelled too (the graph is between calls)."""
    served.upstream.latency = 60.0  # the client leaves at 0.5 s, long before any answer on any load
    with pytest.raises(httpx.TimeoutException):
        httpx.post(served.base_url + "/chat/completions", timeout=0.5,
                   json={"model": "vote", "messages": [{"role": "user", "content": "2+2?"}]})
    with sf.Store(str(served.store_path)) as store:
        wait_until(lambda: store.runs(graph="self_consistency", status="cancelled"), timeout=30,
                   message=lambda: f"the run was never recorded cancelled: {store.runs(graph='self_consistency')}")
        (info,) = store.runs(graph="self_consistency")
        traces = store.traces(info.id)
    assert info.status == "cancelled"
    assert [t.status for t in traces if t.node == "samples"] == [sf.Status.CANCELLED] * 3
    line = 'scaffold_requests_total{endpoint="chat",model="vote",status="499"} 1.0'
    wait_until(lambda: line in httpx.get(served.url + "/metrics").text, timeout=30,
               message=lambda: httpx.get(served.url + "/metrics").text)

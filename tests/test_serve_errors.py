"""Every error path of `scaffold serve` answers in OpenAI's error shape with the right status, over raw HTTP
(malformed bodies as curl would send them) and through the openai SDK; a client mistake is never a 500."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from helpers import wait_until

from scaffold.serve import ServeThread, build_app
from scaffold.testing import Fault, OpenAIServer

KEY = "sk-serve-test-0123456789abcdef"
ANSWER = r"so the answer is \boxed{4}"
CHAT = {"model": "vote", "messages": [{"role": "user", "content": "2+2?"}]}


@pytest.fixture
def upstream():
    with OpenAIServer(policy=ANSWER) as server:
        yield server


def app_of(upstream, model_timeout=1.0):
    """The served app: one request at a time, one queued; the upstream model times out after ``model_timeout``."""
    return build_app({
        "server": {"api_keys_env": "SCAFFOLD_TEST_SERVE_KEYS", "max_concurrent_requests": 1,
                   "max_queued_requests": 1},
        "models": {"up": {"model": "hosted_vllm/m", "api_base": upstream.base_url, "retry": 2,
                          "timeout": model_timeout}},
        "served": {
            "vote": {"topology": "self_consistency", "params": {"n": 2}, "models": {"solver": "up"},
                     "max_n": 2, "max_calls": 6, "max_params": {"n": 8}, "timeout": 5, "max_timeout": 10,
                     "budget": {"tokens": 100000}, "max_budget": {"tokens": 200000}},
            "strict": {"topology": "single_sample", "models": {"solver": "up"}, "context": "refuse",
                       "request_params": False},
        },
    }, store="none")


@pytest.fixture
def server(upstream, monkeypatch):
    monkeypatch.setenv("SCAFFOLD_TEST_SERVE_KEYS", f"other-key,{KEY}")
    with ServeThread(app_of(upstream)) as running:
        yield running


def post(server, body=None, *, content=None, key=KEY, path="/v1/chat/completions", timeout=30):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if content is not None:
        headers["content-type"] = "application/json"
        return httpx.post(server.url + path, content=content, headers=headers, timeout=timeout)
    return httpx.post(server.url + path, json=body, headers=headers, timeout=timeout)


def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


@pytest.mark.parametrize(("content", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"model": "vote"}', "`messages`: Field required"),
    (b'{"model": "vote", "messages": []}', "`messages`"),
    (b'{"model": "vote", "messages": [{"role": "robot", "content": "x"}]}', "`messages[0].role`"),
    (b'{"model": "vote", "messages": [{"role": "assistant", "content": "x"}]}', "at least one user message"),
    (b'{"model": "vote", "messages": [{"role": "user", "content": "x"}], "n": 0}', "`n`"),
    (b'{"model": "vote", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "`temperature`"),
    (b'{"model": "vote", "messages": [{"role": "user", "content": "x"}], "scaffold": {"paramz": {}}}',
     "`scaffold.paramz`"),
    (b'{"model": "vote", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', "image_url"),
])
def test_malformed_bodies_are_400s_that_name_the_field(server, content, fragment):
    """Bad JSON, missing or mistyped fields, and unsupported content get a 400 naming what is wrong."""
    error = error_of(post(server, content=content), 400)
    assert error["type"] == "invalid_request_error" and fragment in error["message"]


@pytest.mark.parametrize(("change", "fragment", "param"), [
    ({"scaffold": {"params": {"nope": 3}}}, "per request; it takes: n", "scaffold.params"),
    ({"scaffold": {"params": {"n": 7}}}, "could make up to 7 model calls", "scaffold.params"),
    ({"scaffold": {"params": {"n": 9}}}, "scaffold.params.n=9 is more than model 'vote' allows: 8",
     "scaffold.params.n"),
    ({"scaffold": {"params": {"n": "2"}}}, "must be an integer", "scaffold.params.n"),
    ({"scaffold": {"params": {"prompt": "x"}}}, "does not take parameter(s) prompt per request", "scaffold.params"),
    ({"n": 3}, "n=3 is more than", "n"),
    ({"temperature": 0.5}, "does not pass temperature", "temperature"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "does not take tools", "tools"),
    ({"response_format": {"type": "json_object"}}, "unsupported field(s): response_format", "response_format"),
    ({"scaffold": {"timeout": 60}}, "scaffold.timeout=60.0 is more than", "scaffold.timeout"),
    ({"scaffold": {"budget": {"tokens": 10**6}}}, "scaffold.budget.tokens=1000000 is more than",
     "scaffold.budget.tokens"),
])
def test_requests_the_model_cannot_honour_are_400s(server, change, fragment, param):
    """Per-request params, n, sampling fields, tools and limits beyond the config are refused, never dropped."""
    error = error_of(post(server, {**CHAT, **change}), 400)
    assert fragment in error["message"] and error["param"] == param


def test_a_harmless_field_is_accepted(server, upstream):
    """Fields that ask for nothing (user, logprobs=false, response_format text) do not fail a request."""
    response = post(server, {**CHAT, "user": "me", "logprobs": False, "response_format": {"type": "text"}})
    assert response.status_code == 200, response.text


def test_a_server_that_reads_only_the_last_message_refuses_a_conversation_when_told_to(server):
    """context = "refuse": a system message the graph has no input for is a 400, not silently dropped."""
    body = {"model": "strict", "messages": [{"role": "system", "content": "be terse"},
                                            {"role": "user", "content": "2+2?"}]}
    assert "a system message" in error_of(post(server, body), 400)["message"]


def test_keys_are_required_and_checked(server):
    """No key or a wrong key is a 401 in OpenAI's shape; /health stays open; both listed keys work."""
    assert error_of(post(server, CHAT, key=None), 401)["type"] == "authentication_error"
    assert error_of(post(server, CHAT, key="sk-wrong"), 401)["code"] == "invalid_api_key"
    assert error_of(httpx.get(server.base_url + "/models"), 401)
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    assert post(server, CHAT, key="other-key").status_code == 200


def test_unknown_models_and_paths_are_404s(server):
    """An unknown model names the served ones; an unknown path is a 404 in the same shape."""
    error = error_of(post(server, {**CHAT, "model": "gpt-5"}), 404)
    assert error["code"] == "model_not_found" and "served: strict, vote" in error["message"]
    assert error_of(httpx.get(server.base_url + "/models/gpt-5", headers={"authorization": f"Bearer {KEY}"}), 404)
    assert error_of(httpx.get(server.url + "/v2/nothing"), 404)["type"] == "not_found_error"


def test_a_full_queue_is_a_429_with_retry_after(upstream, monkeypatch):
    """With one request running and one queued, a third is refused at once with 429 and Retry-After."""
    monkeypatch.setenv("SCAFFOLD_TEST_SERVE_KEYS", KEY)
    release = threading.Event()

    async def held(request):  # the upstream answers once the test says so
        await asyncio.to_thread(release.wait, 120)
        return ANSWER

    upstream.policy = held
    responses = []

    def queued_metric():
        text = httpx.get(running.url + "/metrics", headers={"authorization": f"Bearer {KEY}"}).text
        return next((line for line in text.splitlines() if line.startswith("scaffold_requests_queued ")), "")

    with ServeThread(app_of(upstream, model_timeout=120)) as running:
        held_request = {**CHAT, "scaffold": {"timeout": 10}}  # the longest the served graph allows
        threads = [threading.Thread(target=lambda: responses.append(post(running, held_request, timeout=120)))
                   for _ in range(2)]
        try:
            threads[0].start()
            wait_until(lambda: upstream.requests, timeout=60, message="the first request never reached the model")
            threads[1].start()
            wait_until(lambda: queued_metric() == "scaffold_requests_queued 1.0", timeout=60,
                       message=lambda: f"the second request was never queued: {queued_metric()!r}")
            third = post(running, CHAT)
        finally:
            release.set()
            for thread in threads:
                thread.join(120)
    error = error_of(third, 429)
    assert error["type"] == "rate_limit_error" and third.headers["retry-after"] == "1"
    assert sorted(r.status_code for r in responses) == [200, 200]


def test_upstream_failures_after_retries_are_502(server, upstream):
    """An upstream model failing every attempt is a 502 upstream_error; the key never appears in it."""
    upstream.inject(Fault.server_error(500), times=10)
    error = error_of(post(server, CHAT), 502)
    assert error["type"] == "upstream_error" and KEY not in error["message"]


def test_an_upstream_timeout_and_a_request_timeout_are_504(server, upstream):
    """Upstream calls slower than the model's timeout, or a run past the request's timeout, answer 504."""
    # Real time: the upstream answers after 60 s, the model's timeout (1 s) fires long before on any load. The
    # request's timeout (0.2 s) is due before the model's (1 s) on the same event loop, which runs due timers in
    # deadline order, so it is always the one that ends the second request.
    upstream.latency = 60
    assert error_of(post(server, CHAT), 504)["type"] == "timeout_error"
    error = error_of(post(server, {**CHAT, "scaffold": {"timeout": 0.2}}), 504)
    assert error["code"] == "timeout"


def test_a_budget_too_small_for_the_graph_is_a_400(server):
    """A per-request budget the graph's calls would pass is refused before they are sent."""
    error = error_of(post(server, {**CHAT, "scaffold": {"budget": {"tokens": 5}}}), 400)
    assert error["code"] == "budget_exceeded"


def test_metrics_count_requests_calls_and_tokens(server):
    """/metrics (Prometheus text) counts answered requests by status, model calls and tokens."""
    post(server, CHAT)
    post(server, {**CHAT, "n": 3})
    text = httpx.get(server.url + "/metrics", headers={"authorization": f"Bearer {KEY}"}).text
    assert 'scaffold_requests_total{endpoint="chat",model="vote",status="200"} 1.0' in text
    assert 'scaffold_requests_total{endpoint="chat",model="vote",status="400"} 1.0' in text
    assert 'scaffold_model_calls_total{alias="solver",model="vote",status="ok"} 2.0' in text
    assert 'scaffold_tokens_total{kind="completion",model="vote"}' in text
    assert "scaffold_request_seconds_bucket" in text and "scaffold_requests_in_flight" in text

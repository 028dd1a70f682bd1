"""`scaffold serve` and `scaffold ui` as a careless client and a hostile page would use them, over real HTTP:
every finding of the hardening review is a regression test here.

Served graphs run on an in-process scripted model (fast, counted) and record into a real SQLite store;
the findings about what reaches an upstream model use the OpenAI-compatible test server over HTTP.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from helpers import wait_until

import scaffold as sf
from scaffold.serve import ServeThread, build_app
from scaffold.serve._guard import default_hosts
from scaffold.testing import OpenAIServer, ScriptedBackend, sample_store
from scaffold.ui import create_ui_app

KEY = "sk-hardening-test-0123456789"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
MiB = 1 << 20


def serve(tmp_path: Any, *, keys: bool = False, server: dict | None = None, served: dict | None = None,
          monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[ServeThread, ScriptedBackend, sf.Store]:
    """A started server of `m` (self-consistency, n=2) on a scripted model, recording into a SQLite store."""
    store = sf.Store(tmp_path / "serve.db")
    config: dict[str, Any] = {"server": {"read_timeout": 1.0, "head_timeout": 1.0, "max_body_bytes": MiB,
                                         **(server or {})},
                              "served": {"m": {"topology": "self_consistency", "params": {"n": 2},
                                               "models": {"solver": "hosted_vllm/x"}, **(served or {})}}}
    if keys:
        assert monkeypatch is not None
        monkeypatch.setenv("SCAFFOLD_HARDENING_KEYS", KEY)
        config["server"]["api_keys_env"] = "SCAFFOLD_HARDENING_KEYS"
    app = build_app(config, store=store)
    backend = ScriptedBackend(lambda r: "so \\boxed{4}")
    app.state.served["m"].models["solver"] = sf.Model(backend)
    return ServeThread(app).start(), backend, store


@pytest.fixture
def server(tmp_path: Any) -> Iterator[tuple[ServeThread, ScriptedBackend, sf.Store]]:
    running, backend, store = serve(tmp_path)
    try:
        yield running, backend, store
    finally:
        running.stop()
        store.close()


def post(server: ServeThread, body: Any = None, *, content: bytes | str | None = None,
         headers: dict[str, str] | None = None, key: str | None = None, timeout: float = 30) -> httpx.Response:
    sent = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {}),
            **(headers or {})}
    data = content if content is not None else json.dumps(body)
    return httpx.post(server.url + "/v1/chat/completions", content=data, headers=sent, timeout=timeout)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def good_request_still_answered(server: ServeThread, store: sf.Store | None = None) -> None:
    response = post(server, CHAT)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "so \\boxed{4}"
    assert httpx.get(server.url + "/health").status_code == 200
    if store is not None:
        store.flush()
        assert store.run(response.headers["x-scaffold-run-id"]).status == "ok"


# -- one request must not break the server ----------------------------------------------------------------------------
def test_a_seed_beyond_64_bits_is_a_400_and_the_server_keeps_answering(server):
    """The review's first finding: `"seed": 9223372036854775808` was a 500 and hung every later request."""
    running, backend, store = server
    error = error_of(post(running, {**CHAT, "seed": 9223372036854775808}), 400)
    assert error["param"] == "seed" and backend.calls == 0
    error = error_of(post(running, {**CHAT, "n": 2, "seed": 2**63 - 1}), 400)  # seed + 1 for the second run
    assert "2**63 - 1" in error["message"]
    good_request_still_answered(running, store)
    assert post(running, {**CHAT, "seed": 2**63 - 1}).status_code == 200


def test_a_record_the_store_refuses_fails_that_request_alone(server, monkeypatch):
    """A request whose run row the database refuses (a value past every check, injected) gets a 500 naming
    the refusal at once; the next requests are answered and recorded."""
    running, backend, store = server
    put = store.writer.put

    def poisoned(record: tuple[Any, ...]) -> None:
        if record[0] == "run" and record[1]["inputs"].get("problem") == "poison":
            record = ("run", {**record[1], "seed": 2**64})
        put(record)

    monkeypatch.setattr(store.writer, "put", poisoned)
    # the client's 20 s timeout is the deadline a request left waiting (for the run's 120 s timeout) would hit
    error = error_of(post(running, {**CHAT, "messages": [{"role": "user", "content": "poison"}]}, timeout=20), 500)
    assert error["code"] == "store_refused" and "runs.seed" in error["message"]
    for _ in range(3):
        good_request_still_answered(running, store)


@contextlib.contextmanager
def served_by_path(tmp_path: Any) -> Iterator[tuple[ServeThread, ScriptedBackend, sf.Store]]:
    """The same server with its store named by a path (opened by the first request, as `scaffold serve` does)."""
    from scaffold.store import resolve_store

    path = str(tmp_path / "by-path.db")
    app = build_app({"served": {"m": {"topology": "self_consistency", "params": {"n": 2},
                                      "models": {"solver": "hosted_vllm/x"}}}}, store=path)
    backend = ScriptedBackend(lambda r: "so \\boxed{4}")
    app.state.served["m"].models["solver"] = sf.Model(backend)
    with ServeThread(app) as running:
        assert post(running, CHAT).status_code == 200
        yield running, backend, resolve_store(path)


@pytest.mark.parametrize("named_by", ["object", "path"])
def test_a_store_that_cannot_write_is_a_503_and_health_says_so_until_it_can(tmp_path, named_by):
    """The database refuses writes: requests are 503 with Retry-After, /health is 503; then it recovers (a store
    given as a Store or by its path alike)."""
    with contextlib.ExitStack() as stack:
        if named_by == "object":
            running, backend, store = serve(tmp_path)
            stack.callback(store.close)
            stack.callback(running.stop)
        else:
            running, backend, store = stack.enter_context(served_by_path(tmp_path))
        cannot_write_then_can(running, backend, store)


def cannot_write_then_can(running: ServeThread, backend: ScriptedBackend, store: sf.Store) -> None:
    good_request_still_answered(running, store)
    state = {"on": True}

    @sa.event.listens_for(store.engine, "begin")
    def _read_only(conn: Any) -> None:
        conn.exec_driver_sql(f"PRAGMA query_only = {1 if state['on'] else 0}")

    first = post(running, CHAT)
    assert first.status_code == 503 and first.json()["error"]["code"] == "store_unavailable", first.text
    health = httpx.get(running.url + "/health")
    assert health.status_code == 503 and health.json()["status"] == "store_unavailable"
    calls = backend.calls
    refused = post(running, CHAT)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1" and backend.calls == calls
    state["on"] = False
    wait_until(lambda: httpx.get(running.url + "/health").status_code == 200, timeout=30, interval=0.1,
               message="the server never noticed the store could write again")
    good_request_still_answered(running, store)


@pytest.mark.parametrize("where", ["messages", "metadata", "params"])
@pytest.mark.parametrize(("depth", "status"), [(3_000, 400), (100_000, 413)])
def test_deeply_nested_json_is_a_client_error(server, where, depth, status):
    """Nesting 3,000 or 100,000 levels deep in a message, metadata or scaffold.params: a 400 (or a 413 for a
    body with more values than the server parses), never a 500 or a RecursionError."""
    running, backend, store = server
    deep = "[" * depth + "]" * depth
    if where == "messages":
        body = '{"model": "m", "messages": [{"role": "user", "content": "x", "name": ' + deep + '}]}'
    elif where == "metadata":
        body = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": ' + deep + '}'
    else:
        body = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "scaffold": {"params": {"n": ' \
               + deep + '}}}'
    error_of(post(running, content=body), status)
    assert backend.calls == 0
    good_request_still_answered(running)


def test_parameters_and_tools_nested_deeper_than_the_store_records_are_400s(server):
    """100 levels parse, but a run's inputs nest at most 64 deep: scaffold.params and tools are refused."""
    running, backend, store = server
    deep = "[" * 100 + "]" * 100
    body = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "scaffold": {"params": {"n": ' + deep + '}}}'
    assert "nested more than 64 levels" in error_of(post(running, content=body), 400)["message"]
    assert backend.calls == 0


def test_a_body_larger_than_max_body_bytes_is_a_413_before_it_is_read(server):
    """A declared length over the limit is refused at once; a chunked body as soon as it passes the limit;
    both close the connection. A body just under the limit is answered."""
    running, backend, store = server
    with connect(running) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: 68000000\r\n\r\n")
        head = receive_until_closed(sock, 10)
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()

    def chunks() -> Iterator[bytes]:
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}]}'

    error = error_of(httpx.post(running.url + "/v1/chat/completions", content=chunks(),
                                headers={"content-type": "application/json"}), 413)
    assert error["code"] == "body_too_large" and backend.calls == 0
    near = {**CHAT, "messages": [{"role": "user", "content": "y" * (MiB - 1000)}]}
    assert post(running, near).status_code == 200


def test_health_is_answered_while_another_body_is_still_arriving(server):
    """A client sends half of a 1 MB body and pauses: /health and other requests are answered meanwhile;
    the body, once complete, is answered too."""
    running, backend, store = server
    body = json.dumps({**CHAT, "messages": [{"role": "user", "content": "z" * (MiB - 200)}]}).encode()
    with connect(running) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
                     + body[:len(body) // 2])
        assert httpx.get(running.url + "/health", timeout=5).status_code == 200
        good_request_still_answered(running)
        sock.sendall(body[len(body) // 2:])
        assert receive_until_closed(sock, 20).startswith(b"HTTP/1.1 200")


def test_a_body_with_more_json_values_than_allowed_is_a_413_before_parsing(server):
    """200,000 numbers in metadata pass the size limit but not the value limit; a long text with many
    commas inside one string does not count as many values."""
    running, backend, store = server
    many = json.dumps({**CHAT, "metadata": {"a": [1] * 200_000}})
    assert error_of(post(running, content=many), 413)["code"] == "body_too_large"
    commas = {**CHAT, "messages": [{"role": "user", "content": "a, " * 200_000}]}
    assert post(running, commas).status_code == 200


@pytest.mark.parametrize(("content_type", "status"), [
    (None, 415), ("text/plain", 415), ("text/plain;charset=UTF-8", 415), ("application/x-www-form-urlencoded", 415),
    ("multipart/form-data; boundary=x", 415), ("application/json", 200), ("application/json; charset=utf-8", 200),
    ("Application/JSON", 200),
])
def test_only_json_bodies_are_read(server, content_type, status):
    """A body sent as text/plain, a form or without a type (what a no-cors cross-origin fetch can send) is a
    415 and starts no run; application/json with or without parameters is answered."""
    running, backend, store = server
    headers = {"content-type": content_type} if content_type else {}
    response = httpx.post(running.url + "/v1/chat/completions", content=json.dumps(CHAT), headers=headers)
    assert response.status_code == status, response.text
    if status == 415:
        assert response.json()["error"]["code"] == "unsupported_media_type" and backend.calls == 0


# -- Host, keys and what is open ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/health", "/v1/models", "/metrics", "/docs"])
def test_a_host_the_server_does_not_answer_for_is_refused(server, path):
    """DNS rebinding: `Host: attacker.example` gets a 400 on every path; the loopback names are answered."""
    running, backend, store = server
    refused = httpx.get(running.url + path, headers={"host": "attacker.example"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_host"
    for host in (f"localhost:{running.port}", f"127.0.0.1:{running.port}", "[::1]"):
        assert httpx.get(running.url + path, headers={"host": host}).status_code == 200, host


def test_allowed_hosts_serve_a_proxys_names_and_only_those(tmp_path):
    """allowed_hosts = ["api.example.com", "*.internal"]: those names are answered, loopback is not."""
    running, backend, store = serve(tmp_path, server={"allowed_hosts": ["api.example.com", "*.internal"]})
    try:
        for host, status in (("api.example.com", 200), ("API.example.com:443", 200), ("a.b.internal", 200),
                             ("internal", 400), ("localhost", 400), ("evil.example.com", 400)):
            assert httpx.get(running.url + "/health", headers={"host": host}).status_code == status, host
    finally:
        running.stop()
        store.close()
    assert default_hosts("0.0.0.0") == ["*"] and "localhost" in default_hosts("127.0.0.1")


def test_with_keys_set_metrics_and_docs_need_one_and_health_names_no_model(tmp_path, monkeypatch):
    """/metrics, /docs, /redoc and /openapi.json answer 401 without the key and 200 with it; /health stays
    open and says nothing of the served models; the 401 hint is printed whole."""
    running, backend, store = serve(tmp_path, keys=True, monkeypatch=monkeypatch)
    try:
        for path in ("/metrics", "/docs", "/redoc", "/openapi.json"):
            assert error_of(httpx.get(running.url + path), 401)["code"] == "invalid_api_key", path
            assert httpx.get(running.url + path, headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        health = httpx.get(running.url + "/health").json()
        assert health == {"status": "ok"}
        message = error_of(post(running, CHAT), 401)["message"]
        assert message == "missing API key: send `Authorization: Bearer KEY`"
    finally:
        running.stop()
        store.close()


def test_without_keys_health_names_the_models_and_the_docs_load_no_cdn(server):
    """The docs pages reference only assets this server ships (fastapi-offline's), each of which loads."""
    running, backend, store = server
    assert httpx.get(running.url + "/health").json() == {"status": "ok", "models": ["m"]}
    for page in ("/docs", "/redoc"):
        html = httpx.get(running.url + page).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources and all(s.startswith("/static-offline-docs/") for s in sources), sources
        assert "cdn" not in html.lower()
        for source in sources:
            assert httpx.get(running.url + source).status_code == 200, source


# -- what a request may ask for ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "param"), [
    ({"n": "3"}, "n"), ({"n": True}, "n"), ({"stream": "yes"}, "stream"), ({"temperature": "0.5"}, "temperature"),
    ({"max_tokens": 2**40}, "max_tokens"), ({"seed": 2**63}, "seed"), ({"seed": 1.5}, "seed"),
    ({"scaffold": {"seed": -(2**63) - 1}}, "scaffold.seed"), ({"scaffold": {"timeout": "5"}}, "scaffold.timeout"),
    ({"scaffold": {"params": {"n": True}}}, "scaffold.params.n"),
    ({"scaffold": {"params": {"n": 1.0}}}, "scaffold.params.n"),
])
def test_wrong_types_and_out_of_range_integers_are_400s_with_no_coercion(server, change, param):
    """Strings and booleans are never read as numbers; integers must fit their use."""
    running, backend, store = server
    error = error_of(post(running, {**CHAT, **change}), 400)
    assert error["param"] == param, error
    assert backend.calls == 0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_400s(server, literal):
    """JSON has no NaN or infinities; a body that sends them (or a number that overflows) is refused."""
    running, backend, store = server
    body = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": ' + literal + "}"
    error_of(post(running, content=body), 400)


def test_a_prompt_that_is_not_valid_unicode_is_a_400_before_any_upstream_call(tmp_path):
    """A lone surrogate (`\\ud800`) in a message used to be forwarded, retried and answered 502 after seconds."""
    with OpenAIServer(policy="\\boxed{4}") as upstream:
        app = build_app({"models": {"up": {"model": "hosted_vllm/m", "api_base": upstream.base_url}},
                         "served": {"m": {"topology": "single_sample", "models": {"solver": "up"}}}}, store="none")
        with ServeThread(app) as running:
            body = b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
            error = error_of(post(running, content=body), 400)
            assert "not valid Unicode" in error["message"]
            assert upstream.requests == []
            assert post(running, CHAT).status_code == 200


def test_request_params_may_lower_the_served_sizes_but_not_raise_them(tmp_path):
    """Served n=4: a request may ask n=1..4, not 5 or 10**8; max_params lets steps rise to 3 and no further;
    the default max_calls (1000) refuses a request of 8 runs of 200 calls."""
    running, backend, store = serve(tmp_path, served={"topology": "rsa", "params": {"n": 4, "k": 2, "steps": 1},
                                                      "max_params": {"steps": 3}})
    try:
        def params(**values: Any) -> httpx.Response:
            return post(running, {**CHAT, "scaffold": {"params": values}})

        assert params(n=2).json()["scaffold"]["calls"] == 4
        for too_many in (5, 10**8):
            assert "is more than model 'm' allows: 4" in error_of(params(n=too_many), 400)["message"]
        assert params(steps=3).json()["scaffold"]["calls"] == 16
        assert "allows: 3, its `max_params` bound" in error_of(params(steps=4), 400)["message"]
    finally:
        running.stop()
        store.close()
    running, backend, store = serve(tmp_path / "big", served={"params": {"n": 200}})
    try:
        error = error_of(post(running, {**CHAT, "n": 8}), 400)
        assert "could make up to 1600 model calls" in error["message"] and "allows 1000" in error["message"]
        assert backend.calls == 0
    finally:
        running.stop()
        store.close()


def test_the_command_line_sets_max_calls_max_params_and_allowed_hosts():
    """`scaffold serve --check` shows the limits given with --max-calls and --max-param; a graph larger than
    its max_calls is refused at start."""
    from scaffold.cli import main

    result = CliRunner().invoke(main, ["--store", "none", "serve", "self_consistency", "-p", "n=4", "--max-calls",
                                       "64", "--max-param", "n=16", "--allowed-host", "api.example.com",
                                       "--model", "hosted_vllm/x", "--check"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.output)["served"]["self_consistency"]
    assert listing["max_calls"] == 64 and listing["max_params"] == {"n": 16}
    result = CliRunner().invoke(main, ["--store", "none", "serve", "self_consistency", "-p", "n=80",
                                       "--max-calls", "64", "--model", "hosted_vllm/x", "--check"])
    assert result.exit_code != 0 and "more than max_calls (64)" in result.output


def test_cancelled_calls_are_counted_in_the_metrics(tmp_path):
    """A client that leaves while its run waits on the model: the cancelled calls appear in
    scaffold_model_calls_total{status="cancelled"}."""
    running, backend, store = serve(tmp_path)
    backend.delay = 60.0  # the client leaves at 0.5 s, long before the model answers on any load
    try:
        with pytest.raises(httpx.TimeoutException):
            post(running, CHAT, timeout=0.5)
        line = 'scaffold_model_calls_total{alias="solver",model="m",status="cancelled"} 2.0'
        wait_until(lambda: line in httpx.get(running.url + "/metrics").text, timeout=30,
                   message=lambda: httpx.get(running.url + "/metrics").text)
    finally:
        running.stop()
        store.close()


# -- slow and idle clients ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def connect(server: ServeThread) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        yield sock
    finally:
        sock.close()


def receive_until_closed(sock: socket.socket, seconds: float) -> bytes:
    """Everything the server sends until it closes the connection (fails the test after ``seconds``)."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {seconds} s; it sent {data[:200]!r}")
    return data


def test_a_body_that_stops_arriving_is_a_408_and_the_connection_is_closed(server):
    """Promised 1,000 bytes, sent 10: answered 408 once read_timeout (1 s) has passed, then closed."""
    running, backend, store = server
    with connect(running) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: 1000\r\n\r\n0123456789")
        answer = receive_until_closed(sock, 10)
    assert answer.startswith(b"HTTP/1.1 408") and backend.calls == 0
    good_request_still_answered(running)


@pytest.mark.parametrize("sent", [b"", b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n", b"GET /hea"])
def test_idle_and_slow_header_connections_are_closed(server, sent):
    """A connection that sends nothing, or a request head that never completes (slowloris), is closed once
    head_timeout has passed, even while it keeps sending header lines."""
    running, backend, store = server
    stop = threading.Event()
    with connect(running) as sock:
        sock.sendall(sent)

        def drip() -> None:
            with contextlib.suppress(OSError):
                while not stop.wait(0.2):
                    sock.sendall(b"x-drip: 1\r\n")

        dripping = threading.Thread(target=drip, daemon=True)
        if sent.endswith(b"\r\n"):
            dripping.start()
        try:
            assert receive_until_closed(sock, 10) == b""
        finally:
            stop.set()
            if dripping.is_alive():
                dripping.join()
    good_request_still_answered(running)


def test_a_request_head_larger_than_allowed_is_a_431(server):
    """A 100 KB header line is refused with 431 and the connection closed."""
    running, backend, store = server
    with connect(running) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n")
        assert receive_until_closed(sock, 10).startswith(b"HTTP/1.1 431")
    good_request_still_answered(running)


# -- scaffold ui ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeThread]:
    sample = sample_store(tmp_path_factory.mktemp("ui-hardening") / "runs.db")
    with ServeThread(create_ui_app(sample.path)) as running:
        yield running


@pytest.mark.parametrize("query", [
    "offset=9223372036854775808", "offset=-1", "offset=1e3", "offset=" + "9" * 5000, "limit=0", "limit=100000",
    "since=nan", "since=inf", "until=-inf", "since=1e400", "since=abc", "graph=a%00b", "status=" + "s" * 2000,
])
def test_the_viewer_answers_bad_query_values_with_a_400(viewer, query):
    """Out-of-range integers, non-finite or unparsable times, and text with NUL are 400s in JSON."""
    response = httpx.get(viewer.url + "/api/runs?" + query)
    assert response.status_code == 400, (query, response.text)
    assert response.json()["error"]


def test_the_viewer_refuses_other_hosts_and_sends_its_security_headers(viewer):
    """`Host: attacker.example` is a 400; every answer carries a CSP without inline script and no framing,
    nosniff and a referrer policy."""
    assert httpx.get(viewer.url + "/api/runs", headers={"host": "attacker.example"}).status_code == 400
    for path in ("/", "/api/runs", "/static/app.js", "/api/runs/nope"):
        headers = httpx.get(viewer.url + path).headers
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
    assert httpx.get(viewer.url + "/api/runs/a%00b").status_code == 400
    assert httpx.get(viewer.url + "/api/runs?model=%ED%A0%80").json()["total"] == 0  # invalid UTF-8: U+FFFD
    assert httpx.get(viewer.url + "/api/training/99999999999999999999").status_code == 404

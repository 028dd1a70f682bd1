"""Fuzz: random request bodies to `scaffold serve` and random query strings to `scaffold ui`, over real HTTP.

Hypothesis draws bodies from the request schema with fields replaced by any JSON value (text with NUL and
lone surrogates, integers of any size, NaN and infinities, nesting), raw bytes, deep nesting and random
content types. Every answer must be a 2xx or a 4xx in the app's error shape — never a 5xx — and arrive
before a deadline that fails the test with the request (never a wall-clock bound on speed). Afterwards the
server still answers ``/health`` and a good request. ``SCAFFOLD_FUZZ_EXAMPLES`` sets the count (default:
CI's quick form); ``benchmarks/serve.py`` runs the same drawing at larger counts.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scaffold as sf
from scaffold.serve import ServeThread, build_app
from scaffold.testing import ScriptedBackend, request_bodies, sample_store, viewer_queries
from scaffold.ui import create_ui_app

EXAMPLES = int(os.environ.get("SCAFFOLD_FUZZ_EXAMPLES", "2000"))
DEADLINE = 20.0
"""Seconds any one answer may take before the request counts as a hang."""


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeThread, sf.Store]]:
    folder = tmp_path_factory.mktemp("serve-fuzz")
    store = sf.Store(folder / "serve.db")
    app = build_app({"server": {"read_timeout": 5.0, "max_body_bytes": 1 << 20},
                     "served": {"m": {"topology": "self_consistency", "params": {"n": 2}, "max_params": {"n": 4},
                                      "models": {"solver": "hosted_vllm/x"}, "max_n": 3,
                                      "sampling": ["temperature", "max_tokens", "stop"], "timeout": 10}}},
                    store=store)
    app.state.served["m"].models["solver"] = sf.Model(ScriptedBackend(lambda r: "so \\boxed{4}"))
    with ServeThread(app) as running:
        yield running, store
    store.close()


def test_no_request_body_gets_a_5xx_or_hangs(fuzzed):
    """Thousands of drawn bodies: each a 2xx or a 4xx with OpenAI's error object; then /health and a good
    request are answered and recorded."""
    running, store = fuzzed
    seen: dict[int, int] = {}
    with httpx.Client(base_url=running.url, timeout=DEADLINE) as client:

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(request=request_bodies())
        def one(request: tuple[str, bytes, str | None]) -> None:
            path, content, content_type = request
            headers = {"content-type": content_type} if content_type is not None else {}
            try:
                response = client.post(path, content=content, headers=headers)
            except httpx.TimeoutException:
                pytest.fail(f"no answer within {DEADLINE} s to {path} {content_type!r} {content[:300]!r}")
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            assert response.status_code < 500, (path, content_type, content[:300], response.text[:300])
            if response.status_code >= 400:
                error = response.json()["error"]
                assert set(error) == {"message", "type", "param", "code"} and error["message"]

        one()
        assert seen.get(200, 0) > 0 and sum(n for code, n in seen.items() if code >= 400) > 0, seen
        assert client.get("/health").json()["status"] == "ok"
        good = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert good.status_code == 200
        store.flush()
        assert store.run(good.headers["x-scaffold-run-id"]).status == "ok"


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeThread]:
    sample = sample_store(tmp_path_factory.mktemp("ui-fuzz") / "runs.db")
    with ServeThread(create_ui_app(sample.path)) as running:
        yield running


def test_no_viewer_query_gets_a_5xx_or_hangs(viewer):
    """Drawn paths and query strings (any text, percent-encoded, NUL and invalid UTF-8 included): a 2xx or a
    4xx with a JSON error, never a 5xx; the runs list still answers afterwards."""
    with httpx.Client(base_url=viewer.url, timeout=DEADLINE) as client:

        @settings(max_examples=max(EXAMPLES // 8, 50), deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(target=viewer_queries())
        def one(target: str) -> None:
            try:
                response = client.get(target)
            except httpx.TimeoutException:
                pytest.fail(f"no answer within {DEADLINE} s to {target[:300]!r}")
            assert response.status_code < 500, (target[:300], response.text[:300])
            if response.status_code >= 400 and response.headers.get("content-type", "").startswith("application/json"):
                assert "error" in response.json()

        one()
        assert client.get("/api/runs").json()["total"] > 0


@given(text=st.text(st.characters(exclude_categories=()), max_size=20))
@settings(max_examples=50, deadline=None, database=None)
def test_drawn_queries_percent_encode_any_text(text: str) -> None:
    """(The drawing itself: any text, lone surrogates included, becomes a valid URL query value.)"""
    quoted = urllib.parse.quote(text, safe="", errors="surrogatepass")
    assert quoted.isascii() and urllib.parse.unquote(quoted, errors="surrogatepass") == text


def test_the_request_drawing_covers_the_findings() -> None:
    """(The drawing reaches what the review found: deep nesting, lone surrogates, huge integers, NaN, wrong
    content types; checked over a fixed sample so a change to the strategies cannot silently drop them.)"""
    found: dict[str, bool] = {"deep": False, "surrogate": False, "huge": False, "nan": False, "type": False}

    @settings(max_examples=400, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(request=request_bodies())
    def look(request: tuple[str, bytes, str | None]) -> None:
        _, content, content_type = request
        found["deep"] |= b"[[[[[[[[[[" in content or b'{"a": {"a": {"a": {"a"' in content
        found["surrogate"] |= b"\\ud8" in content or b"\\udc" in content
        found["huge"] |= any(len(word) > 20 and word.lstrip(b"-").isdigit()
                             for word in content.replace(b",", b" ").replace(b"}", b" ").split())
        found["nan"] |= b"NaN" in content or b"Infinity" in content
        found["type"] |= content_type != "application/json"

    look()
    assert all(found.values()), found

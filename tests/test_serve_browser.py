"""What a hostile web page can do to a server on the user's machine, tried in a real browser (Debian's headless
Chromium): a page on another origin posting to `scaffold serve`, and a DNS-rebound name reading `scaffold ui`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.support.ui import WebDriverWait

import scaffold as sf
from scaffold.serve import ServeThread, build_app
from scaffold.testing import ScriptedBackend, headless_chromium, sample_store
from scaffold.ui import create_ui_app

pytestmark = pytest.mark.slow

ATTACK = """<!doctype html><title>attacker</title><script>
const target = "TARGET/v1/chat/completions";
const body = JSON.stringify({model: "m", messages: [{role: "user", content: "2+2?"}]});
Promise.allSettled([
  fetch(target, {method: "POST", mode: "no-cors", body}),
  fetch(target, {method: "POST", mode: "no-cors", body: new Blob([body])}),
  fetch(target, {method: "POST", mode: "no-cors", body: new URLSearchParams({x: body})}),
  fetch(target, {method: "POST", headers: {"content-type": "application/json"}, body}),
]).then((results) => { document.title = "done " + results.map((r) => r.status).join(" "); });
</script>"""


class Recorder:
    """An ASGI wrapper noting each request's method, path, content type and answer status."""

    def __init__(self, app: Any) -> None:
        self.app, self.state, self.limits = app, app.state, app.limits
        self.seen: list[tuple[str, str, str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        entry = [scope["method"], scope["path"], headers.get(b"content-type", b"").decode(), 0]

        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start":
                entry[3] = message["status"]
            await send(message)

        await self.app(scope, receive, noting)
        self.seen.append(tuple(entry))  # type: ignore[arg-type]


class Page:
    """An ASGI app serving one HTML page (the attacker's site)."""

    def __init__(self, html: str) -> None:
        self.html = html.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html; charset=utf-8")]})
        await send({"type": "http.response.body", "body": self.html})


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium(flags=("--host-resolver-rules=MAP rebind.test 127.0.0.1",)) as driver:
        yield driver


def test_a_page_on_another_origin_cannot_start_a_run(browser: Any) -> None:
    """A page served from another origin posts the chat request as text, as a blob with no type, as a form
    (no-cors: no preflight) and as JSON (preflighted): the server answers the first three 415 and refuses the
    preflight, so no run starts and no model is called."""
    backend = ScriptedBackend(lambda r: "so \\boxed{4}")
    app = build_app({"served": {"m": {"topology": "single_sample", "models": {"solver": "hosted_vllm/x"}}}},
                    store="none")
    app.state.served["m"].models["solver"] = sf.Model(backend)
    recorded = Recorder(app)
    with ServeThread(recorded) as served, ServeThread(Page(ATTACK.replace("TARGET", served.url))) as attacker:
        page = attacker.url.replace("127.0.0.1", "localhost")  # another origin: another host and port
        browser.get(page + "/")
        title = WebDriverWait(browser, 30).until(lambda d: d.title if d.title.startswith("done") else None)
    assert title == "done fulfilled fulfilled fulfilled rejected"
    posts = [(ctype.split(";")[0], status) for method, path, ctype, status in recorded.seen if method == "POST"]
    assert sorted(posts) == sorted([("text/plain", 415), ("", 415), ("application/x-www-form-urlencoded", 415)])
    assert [status for method, _, _, status in recorded.seen if method == "OPTIONS"] == [405]
    assert backend.calls == 0


def test_a_dns_rebound_name_cannot_read_the_viewer(browser: Any, tmp_path: Any) -> None:
    """A page reaching the viewer through a name of its own (rebind.test, resolved to 127.0.0.1 as a
    rebinding attack would) gets a 400 and no run; the same page through 127.0.0.1 lists the runs."""
    sample = sample_store(tmp_path / "runs.db")
    with ServeThread(create_ui_app(sample.path)) as viewer:
        browser.get(viewer.url.replace("127.0.0.1", "rebind.test") + "/api/runs")
        refused = browser.find_element("tag name", "body").text
        browser.get(viewer.url + "/api/runs")
        listed = json.loads(browser.find_element("tag name", "body").text)
    assert "does not answer for that Host" in refused and "rsa-0" not in refused
    assert listed["total"] > 0 and any(run["id"].startswith("rsa-") for run in listed["runs"])

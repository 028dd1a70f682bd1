"""`scaffold ui` in a real browser (Debian's headless Chromium through Selenium): pages, the DAG, clicks, filters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import console_errors, non_blank_share

import scaffold as sf
from scaffold.serve import ServeThread
from scaffold.testing import SampleStore, headless_chromium, open_page, sample_store
from scaffold.ui import create_ui_app

pytestmark = pytest.mark.slow
PAGES = ("#/runs", "#/run/rsa-0", "#/evaluations", "#/compare/rsa/vote", "#/training")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeThread, SampleStore]]:
    """The viewer over a recorded RSA evaluation (N=16, K=4, T=10), a vote evaluation and a training log."""
    folder = tmp_path_factory.mktemp("ui-browser")
    sample = sample_store(folder / "runs.db")
    log = folder / "log.jsonl"
    log.write_text("".join(json.dumps({"step": i, "loss": 1 / i, "reward_mean": 0.3 + i / 100, "accuracy": 0.3,
                                       "advantage_mean": 0.0, "advantage_std": 0.2, "advantage_abs_max": 0.7,
                                       "entropy": 0.9, "kl": i / 1000, "clip_fraction": 0.0, "tokens": 512,
                                       "tokens_per_s": 800.0}) + "\n" for i in range(1, 16)))
    with ServeThread(create_ui_app(sample.path, training_logs=[log])) as server:
        yield server, sample


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def test_every_page_loads_without_console_errors_and_draws_something(site: tuple[ServeThread, SampleStore],
                                                                       browser: Any, tmp_path: Path) -> None:
    """Runs, a run, evaluations, a comparison and training: no console error, no error message, a screenshot
    of each (under this test's directory) with at least 3% non-background pixels."""
    server, _ = site
    console_errors(browser)
    for page in PAGES:
        drawn = open_page(browser, server.url + "/" + page)
        assert drawn == page.split("/")[1]
        assert browser.find_elements("css selector", "[data-error]") == []
        assert console_errors(browser) == [], page
        shot = tmp_path / f"{drawn}.png"
        assert browser.save_screenshot(str(shot))
        assert non_blank_share(shot) > 0.03, page


def test_the_run_page_draws_every_trace_and_edge_and_shows_a_clicked_traces_text(
        site: tuple[ServeThread, SampleStore], browser: Any) -> None:
    """All 177 traces and every lineage edge of the run are in the DOM; a click shows that trace's text; a
    collapsed node expands on click."""
    server, sample = site
    with sf.Store(sample.path) as store:
        traces = store.traces("rsa-0")
    open_page(browser, server.url + "/#/run/rsa-0")
    drawn = {el.get_attribute("data-trace") for el in browser.find_elements("css selector", "g.trace")}
    assert drawn == {t.id for t in traces}
    edges = {el.get_attribute("data-edge") for el in browser.find_elements("css selector", "path.edge")}
    assert edges == {f"{source}->{t.id}" for t in traces for source in t.inputs}
    chosen = next(t for t in traces if t.node == "step5" and t.index == 3)
    browser.find_element("css selector", f'g.trace[data-trace="{chosen.id}"]').click()
    assert browser.find_element("css selector", "#details pre[data-text]").text == chosen.text.strip()
    hot = {el.get_attribute("data-from") for el in browser.find_elements("css selector", "path.edge.hot")
           if el.get_attribute("data-to") == chosen.id}
    assert hot == set(chosen.inputs)
    assert len(browser.find_elements("css selector", "[data-rollup] tbody tr")) >= 12
    # a node with more than 24 traces starts collapsed (the vote evaluation's 32 samples); a click expands it
    open_page(browser, server.url + "/#/run/vote-0")
    assert len(browser.find_elements("css selector", "g.trace")) == 1  # the vote; its samples are one box
    browser.find_element("css selector", 'g.collapsed[data-node="samples"]').click()
    assert len(browser.find_elements("css selector", "g.trace")) == 33
    assert console_errors(browser) == []


def test_filters_and_paging_of_the_runs_page(site: tuple[ServeThread, SampleStore], browser: Any) -> None:
    """Choosing graph=vote keeps the 12 vote runs; paging by 5 walks through them; clearing shows all 24."""
    from selenium.webdriver.support.ui import Select

    server, _ = site
    open_page(browser, server.url + "/#/runs")
    assert len(browser.find_elements("css selector", "#runs tbody tr")) == 24
    Select(browser.find_element("css selector", "select[data-filter=graph]")).select_by_value("vote")
    browser.find_element("css selector", "[data-apply]").click()
    open_page(browser, browser.current_url)
    rows = browser.find_elements("css selector", "#runs tbody tr")
    assert len(rows) == 12 and all(r.get_attribute("data-run").startswith("vote-") for r in rows)
    open_page(browser, server.url + "/#/runs?graph=vote&limit=5")
    seen = []
    for _ in range(3):
        seen += [r.get_attribute("data-run") for r in browser.find_elements("css selector", "#runs tbody tr")]
        button = browser.find_element("css selector", "[data-page=next]")
        if not button.is_enabled():
            break
        button.click()
        open_page(browser, browser.current_url)
    assert len(seen) == len(set(seen)) == 12
    assert console_errors(browser) == []


def test_two_evaluations_compare_problem_by_problem(site: tuple[ServeThread, SampleStore], browser: Any) -> None:
    """Ticking both evaluations opens their comparison; by default only the problems they disagree on, with links
    to both runs; unticking shows every problem."""
    server, _ = site
    open_page(browser, server.url + "/#/evaluations")
    for name in ("rsa", "vote"):
        browser.find_element("css selector", f'input[data-pick="{name}"]').click()
    browser.find_element("css selector", "[data-compare]").click()
    assert open_page(browser, browser.current_url) == "compare"
    differing = browser.find_elements("css selector", "#compare tbody tr")
    assert differing and all("differs" in r.get_attribute("class") for r in differing)
    links = {a.get_attribute("href").rsplit("/", 1)[1] for a in browser.find_elements("css selector", "#compare a")}
    assert any(link.startswith("rsa-") for link in links) and any(link.startswith("vote-") for link in links)
    browser.find_element("css selector", "[data-only-differing]").click()
    assert len(browser.find_elements("css selector", "#compare tbody tr")) == 12
    assert console_errors(browser) == []


def test_an_agents_turns_and_tool_calls_are_drawn_in_the_runs_dag(browser: Any, tmp_path: Path) -> None:
    """An agent's turns, its tool calls and its answer each have a column; every trace and lineage edge is drawn,
    and a clicked tool call shows its result."""
    from scaffold.testing import ScriptedBackend

    @sf.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    def script(request: sf.Request) -> sf.Completion:
        results = [m[1] for m in request.messages if m[0] == "tool"]
        if len(results) == 2:
            return sf.Completion(text=rf"\boxed{{{results[-1]}}}")
        call = sf.ToolCall(f"c{len(results)}", "add", json.dumps({"a": len(results), "b": 40}))
        return sf.Completion(text="", tool_calls=(call,))

    @sf.graph
    def solve(problem):
        return sf.vote(sf.agent("{problem}", model="m", tools=[add], n=2))

    path = tmp_path / "agents.db"
    with sf.Store(path) as store:
        solve.run_sync({"problem": "p"}, models={"m": ScriptedBackend(script)}, store=store, run_id="agent-run")
        traces = store.traces("agent-run")
    assert len([t for t in traces if t.kind is sf.TraceKind.TOOL]) == 4
    with ServeThread(create_ui_app(path)) as server:
        console_errors(browser)
        open_page(browser, server.url + "/#/run/agent-run")
        labels = [el.text for el in browser.find_elements("css selector", "text.node-label")]
        assert labels == ["agent · turns (4)", "agent · tool calls (4)", "agent (2)", "vote (1)"]
        drawn = {el.get_attribute("data-trace") for el in browser.find_elements("css selector", "g.trace")}
        assert drawn == {t.id for t in traces}
        edges = {el.get_attribute("data-edge") for el in browser.find_elements("css selector", "path.edge")}
        assert edges == {f"{source}->{t.id}" for t in traces for source in t.inputs}
        tool = next(t for t in traces if t.id == "agent-run/agent#1.1.0")
        browser.find_element("css selector", f'g.trace[data-trace="{tool.id}"]').click()
        assert browser.find_element("css selector", "#details pre[data-text]").text == "41"
        assert console_errors(browser) == []

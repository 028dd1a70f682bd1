"""UI benchmark: how fast ``scaffold ui`` draws a whole RSA run, and answers the runs list over 10,000 runs.

Protocol (one run, this machine, the viewer served in this process by uvicorn on a free port):

- **run_page_ms_176**: a store holding one RSA run, N=16, K=4, T=10 (176 calls and the vote: 177 traces,
  656 lineage edges; ``scaffold.testing.sample_store``). Headless Chromium (Debian's, through Selenium)
  loads ``#/run/rsa-0`` ``--loads`` times (a fresh navigation each); the figure is the median time from
  the page's route starting to the DAG, the details panel and the rollups being in the DOM (``window.__renderMs``:
  the API request, JSON parsing and drawing every SVG element), with the first load left out (the browser's
  own start). Baseline: the median time of the ``/api/runs/rsa-0`` request alone from this process.
  Target: under 1,000 ms.
- **runs_list_ms_10k**: a SQLite store of 10,000 recorded runs (a one-call graph, four graph names and two
  statuses among them, recorded through ``Graph.map``). The figure is the median wall time of
  ``GET /api/runs`` for 50 runs from this process (HTTP keep-alive off), over ``--requests`` requests spread
  over the first, a middle and the last page, unfiltered and filtered by graph and by status; the count,
  totals and filter choices are part of every answer. Baseline: ``Store.runs(limit=50)`` called directly.
  Target: under 200 ms.

The last line is one JSON object: ``bench`` ("ui"), ``run_page_ms_176``, ``runs_list_ms_10k`` and more.

Usage: python benchmarks/ui.py [--runs 10000] [--loads 6] [--requests 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import scaffold as sf  # noqa: E402
from scaffold.serve import ServeThread  # noqa: E402
from scaffold.testing import ScriptedBackend, headless_chromium, open_page, sample_store  # noqa: E402
from scaffold.ui import create_ui_app  # noqa: E402


def timed_get(url: str) -> tuple[float, Any]:
    started = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        body = json.load(response)
    return (time.perf_counter() - started) * 1000, body


def run_page(folder: Path, loads: int) -> dict[str, Any]:
    sample = sample_store(folder / "rsa.db", problems=1)
    with ServeThread(create_ui_app(sample.path)) as server, headless_chromium() as driver:
        fetch = [timed_get(server.url + "/api/runs/rsa-0")[0] for _ in range(loads)]
        drawn, counts = [], None
        for _ in range(loads + 1):
            driver.get("about:blank")
            open_page(driver, server.url + "/#/run/rsa-0")
            drawn.append(driver.execute_script("return window.__renderMs"))
            counts = driver.execute_script("return [document.querySelectorAll('g.trace').length, "
                                           "document.querySelectorAll('path.edge').length]")
    return {"run_page_ms_176": round(statistics.median(drawn[1:]), 1), "run_page_ms_all": [round(x, 1) for x in drawn],
            "run_api_ms": round(statistics.median(fetch), 2), "traces_drawn": counts[0], "edges_drawn": counts[1]}


def runs_list(folder: Path, runs: int, requests: int) -> dict[str, Any]:
    @sf.graph
    def one_call(problem: Any) -> Any:
        return sf.generate("{problem}", model="m")

    path = folder / "10k.db"
    started = time.perf_counter()
    graphs = [one_call.build() for _ in range(4)]
    for i, graph in enumerate(graphs):
        graph.name = f"graph{i}"
    failing = ScriptedBackend(lambda request: ValueError("scripted failure") if (request.seed or 0) % 10 == 0
                              else "\\boxed{1}")
    for i, graph in enumerate(graphs):
        rows = [{"problem": f"{j} + {j}"} for j in range(runs // len(graphs))]
        graph.map_sync(rows, models={"m": failing}, store=path, concurrency=256, seed=i * runs)
    build_s = time.perf_counter() - started
    with sf.Store(path) as store:
        total = store.count_runs()[0]
        direct = []
        for _ in range(20):
            t0 = time.perf_counter()
            store.runs(limit=50)
            direct.append((time.perf_counter() - t0) * 1000)
    queries = ["offset=0", f"offset={total // 2}", f"offset={total - 50}", "graph=graph2&offset=100",
               "status=error", "status=ok&graph=graph1&offset=1000"]
    with ServeThread(create_ui_app(path)) as server:
        timed_get(server.url + "/api/runs")  # the first request opens the store's connections
        times = []
        for i in range(requests):
            ms, body = timed_get(f"{server.url}/api/runs?limit=50&{queries[i % len(queries)]}")
            assert len(body["runs"]) == min(50, max(0, body["total"] - body["offset"]))
            times.append(ms)
    return {"runs_list_ms_10k": round(statistics.median(times), 2),
            "runs_list_ms_p95": round(sorted(times)[int(0.95 * len(times)) - 1], 2),
            "runs_list_direct_ms": round(statistics.median(direct), 2), "runs": total,
            "store_build_s": round(build_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=6)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="scaffold-ui-bench-"))
    figures: dict[str, Any] = {"bench": "ui"}
    figures.update(run_page(folder, args.loads))
    print(f"run page (177 traces, {figures['edges_drawn']} edges): {figures['run_page_ms_176']} ms median "
          f"(loads {figures['run_page_ms_all']}); its API request alone {figures['run_api_ms']} ms")
    figures.update(runs_list(folder, args.runs, args.requests))
    print(f"runs list over {figures['runs']:,} runs: {figures['runs_list_ms_10k']} ms median, "
          f"{figures['runs_list_ms_p95']} ms p95; Store.runs(limit=50) alone {figures['runs_list_direct_ms']} ms")
    figures["run_page_ratio_to_api"] = round(figures["run_page_ms_176"] / figures["run_api_ms"], 2)
    figures["runs_list_ratio_to_direct"] = round(figures["runs_list_ms_10k"] / figures["runs_list_direct_ms"], 2)
    figures["meets_targets"] = figures["run_page_ms_176"] < 1000 and figures["runs_list_ms_10k"] < 200
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

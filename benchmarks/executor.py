"""Executor benchmark: RSA (N=16, K=4, T=10: 176 calls per problem) on simulated latency.

Prints, in one run:
  - our wall time divided by the exact critical-path bound of the DAG, at 1, 16 and 64
    concurrent problems (lognormal latency, median 50 ms, sigma 0.5). The bound is
    recomputed from the latencies every call actually drew: finish(t) = latency(t) + max
    finish(inputs of t); a batch's bound is the latest finish over its problems;
  - the same ratio for a plain asyncio implementation that gathers each step before the
    next (same requests, same latencies, same subsets), at 64 problems;
  - CPU microseconds per model call at zero latency (no recording), median and best of several batches
    of 64 problems (measured inside the event loop: ``asyncio.run``'s own teardown is not the executor's);
  - as a diagnostic, the 64-problem ratio with the cyclic garbage collector paused;
  - what the cyclic garbage collector sees of a 64-problem batch at zero latency (deterministic): objects
    that only it can free once the batch is over (reference cycles; 0 when reference counting frees
    everything), container objects the results keep per call, and collections per 1,000 calls with the
    default thresholds (each one is triggered by 700 more container objects allocated than freed); and
    the full collections (the longest pauses) during a 64-problem batch with latency, median over reps;
  - peak RSS of a 10,000-problem ``Graph.map`` (and of a 1,000-problem one, in a separate
    process each, to show memory does not grow with the number of finished problems).
The last line is one JSON object with the figures.

Usage: python benchmarks/executor.py [--quick] [--map-rows 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import time

import graphs
import scaffold as sf
from scaffold._types import Message, Request, Trace
from scaffold.testing import SimulatedBackend

MEDIAN, SIGMA = 0.05, 0.5
TARGET_RATIO, TARGET_CPU_US = 1.03, 40.0

GRAPH = graphs.rsa.build(n=16, k=4, steps=10)
"""The paper's RSA (``step0`` samples, ``step1`` … ``step10`` aggregations, ``vote``)."""


def critical_path(traces: list[Trace]) -> float:
    """Latest finish time if every call started the instant its own inputs existed."""
    finish: dict[str, float] = {}
    for t in sorted(traces, key=lambda t: GRAPH_ORDER[t.node]):
        start = max((finish[i] for i in t.inputs), default=0.0)
        finish[t.id] = start + float(t.metadata.get("simulated_latency", 0.0))
    return max(finish.values())


GRAPH_ORDER = {node.name: node.id for node in GRAPH.nodes}


async def run_batch(problems: int, backend: SimulatedBackend, seed0: int) -> tuple[float, list[sf.RunResult]]:
    models = {"solver": backend}
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *[GRAPH.run({"problem": f"problem {i}"}, models=models, seed=seed0 + i, store=None) for i in range(problems)]
    )
    return time.perf_counter() - t0, list(results)


async def gather_per_step(results: list[sf.RunResult], backend: SimulatedBackend) -> float:
    """Replays the same requests (same seeds, so same latencies) step by step with asyncio.gather."""
    steps_per_problem = []
    for r in results:
        by_node: dict[str, list[Trace]] = {}
        for t in r.traces:
            if t.kind is sf.TraceKind.MODEL:
                by_node.setdefault(t.node, []).append(t)
        ordered = sorted(by_node, key=lambda name: GRAPH_ORDER[name])
        steps_per_problem.append([[t.request.seed for t in by_node[name]] for name in ordered])

    async def one(steps: list[list[int | None]]) -> None:
        for seeds in steps:
            await asyncio.gather(*[
                backend.complete(Request(messages=(Message("user", "..."),), seed=s)) for s in seeds
            ])

    t0 = time.perf_counter()
    await asyncio.gather(*[one(s) for s in steps_per_problem])
    return time.perf_counter() - t0


def full_collections() -> int:
    return int(gc.get_stats()[-1]["collections"])


def latency_ratios(batches: list[int], repeats: int) -> tuple[dict[int, float], float, float]:
    """Our median ratio per batch size; the gather-per-step ratio and the full collections per batch, at the
    largest size."""
    ours: dict[int, float] = {}
    gather_ratio = fulls_median = 0.0
    for b in batches:
        ratios, gathers, fulls = [], [], []
        for rep in range(repeats):
            gc.collect()  # every measurement starts from the same heap, not the previous one's garbage
            backend = SimulatedBackend(median=MEDIAN, sigma=SIGMA)
            before = full_collections()
            wall, results = asyncio.run(run_batch(b, backend, seed0=1000 * rep))
            fulls.append(full_collections() - before)
            bound = max(critical_path(r.traces) for r in results)
            ratios.append(wall / bound)
            if b == max(batches):
                gathers.append(asyncio.run(gather_per_step(results, backend)) / bound)
            print(f"  problems={b:3d} rep={rep} wall={wall:.3f}s bound={bound:.3f}s ratio={wall / bound:.3f}"
                  + (f" gather-per-step={gathers[-1]:.3f}" if gathers and b == max(batches) else "")
                  + f" full-collections={fulls[-1]}", flush=True)
            del results
        ours[b] = statistics.median(ratios)
        if gathers:
            gather_ratio, fulls_median = statistics.median(gathers), statistics.median(fulls)
    return ours, gather_ratio, fulls_median


def ratio_without_gc(repeats: int) -> float:
    """Diagnostic: the 64-problem ratio with Python's cyclic garbage collector paused (refcounting still frees)."""
    ratios = []
    for rep in range(repeats):
        gc.collect()
        gc.disable()
        try:
            backend = SimulatedBackend(median=MEDIAN, sigma=SIGMA)
            wall, results = asyncio.run(run_batch(64, backend, seed0=1000 * rep))
        finally:
            gc.enable()
        ratios.append(wall / max(critical_path(r.traces) for r in results))
        del results
    print(f"  problems= 64 with the cyclic GC paused: ratios {[round(r, 3) for r in ratios]}", flush=True)
    return statistics.median(ratios)


def model_calls(results: list[sf.RunResult]) -> int:
    return sum(1 for r in results for t in r.traces if t.kind is sf.TraceKind.MODEL)


async def cpu_batch(problems: int, seed0: int) -> tuple[float, int]:
    """CPU seconds of a zero-latency batch and its number of model calls.

    Timed inside the loop and returning no results: at its end ``asyncio.run`` looks up the SIGINT
    handler, whose failed enum conversion formats the main task's result (every RunResult) into a message.
    """
    backend = SimulatedBackend(median=0.0)
    c0 = time.process_time()
    _, results = await run_batch(problems, backend, seed0)
    return time.process_time() - c0, model_calls(results)


def cpu_per_call(repeats: int) -> tuple[float, float]:
    samples = []
    for rep in range(repeats):
        gc.collect()
        cpu, calls = asyncio.run(cpu_batch(64, seed0=rep))
        samples.append(cpu / calls * 1e6)
    print(f"  cpu µs/call at zero latency: {[round(s, 1) for s in samples]}", flush=True)
    return statistics.median(samples), min(samples)


def collector_figures(problems: int = 64) -> dict[str, float]:
    """What the cyclic collector sees of a zero-latency batch (deterministic figures)."""

    results: list[sf.RunResult] = []

    async def batch() -> None:  # returns nothing, for the reason cpu_batch gives
        results.extend((await run_batch(problems, SimulatedBackend(median=0.0), seed0=0))[1])

    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        asyncio.run(batch())
        retained = gc.get_count()[0] - before  # with the collector off, this only counts up and down
        calls = model_calls(results)
        results.clear()
        cyclic = gc.collect()  # what reference counting did not free
    finally:
        gc.enable()
    gc.collect()
    stats = [g["collections"] for g in gc.get_stats()]
    asyncio.run(batch())
    results.clear()
    collections = sum(after["collections"] for after in gc.get_stats()) - sum(stats)
    figures = {
        "cyclic_objects_per_call": round(cyclic / calls, 3),
        "retained_objects_per_call": round(retained / calls, 2),
        "gc_collections_per_1k_calls": round(collections / calls * 1000, 2),
    }
    print(f"  collector at zero latency: {figures}", flush=True)
    return figures


def map_child(rows: int) -> None:
    """Runs in a subprocess: a map over ``rows`` problems, printing peak RSS in MB."""

    async def main() -> int:
        backend = SimulatedBackend(median=0.0)
        dataset = ({"problem": f"problem {i}"} for i in range(rows))
        correct = 0
        async for result in GRAPH.map(dataset, models={"solver": backend}, concurrency=64, seed=0, store=None):
            correct += result.answer == "42"
        return correct

    t0 = time.perf_counter()
    correct = asyncio.run(main())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": rows, "correct": correct, "peak_rss_mb": round(peak_mb, 1),
                      "seconds": round(time.perf_counter() - t0, 1)}))


def map_rss(rows: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--map-child", str(rows)], capture_output=True, text=True,
                         check=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["correct"] == rows, figures
    print(f"  map over {rows} problems: peak RSS {figures['peak_rss_mb']} MB in {figures['seconds']} s", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one repeat of each measurement (a smoke test)")
    parser.add_argument("--map-rows", type=int, default=10_000, help="rows of the large map (default 10,000)")
    parser.add_argument("--map-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.map_child:
        map_child(args.map_child)
        return
    repeats = 1 if args.quick else 5
    calls = sum(GRAPH.count_calls().values())
    print(f"RSA N=16 K=4 T=10: {calls} calls per problem; lognormal latency median {MEDIAN:.2f} s sigma {SIGMA}")
    ours, gather, fulls = latency_ratios([1, 16, 64], repeats)
    no_gc = ratio_without_gc(repeats)
    cpu, cpu_min = cpu_per_call(3 if args.quick else 7)
    collector = collector_figures()
    small = map_rss(max(1, args.map_rows // 10))
    big = map_rss(args.map_rows)
    figures = {
        "bench": "executor",
        "calls_per_problem": calls,
        "wall_over_bound_b1": round(ours[1], 4),
        "wall_over_bound_b16": round(ours[16], 4),
        "wall_over_bound_b64": round(ours[64], 4),
        "gather_over_bound_b64": round(gather, 4),
        "wall_over_bound_b64_gc_paused": round(no_gc, 4),
        "gc_full_collections_b64": fulls,
        "cpu_us_per_call": round(cpu, 1),
        "cpu_us_per_call_min": round(cpu_min, 1),
        **collector,
        "map1k_peak_rss_mb": small["peak_rss_mb"],
        "map10k_peak_rss_mb": big["peak_rss_mb"],
        "map_rows": [small["rows"], big["rows"]],
        "target_wall_over_bound_b64": TARGET_RATIO,
        "target_cpu_us_per_call": TARGET_CPU_US,
        "meets_targets": ours[64] <= TARGET_RATIO and cpu <= TARGET_CPU_US,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

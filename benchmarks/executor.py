"""Executor benchmark: RSA (N=16, K=4, T=10: 176 calls per problem) on simulated latency.

Prints, in one run:
  - our wall time divided by the exact critical-path bound of the DAG, at 1, 16 and 64
    concurrent problems (lognormal latency, median 50 ms, sigma 0.5). The bound is
    recomputed from the latencies every call actually drew: finish(t) = latency(t) + max
    finish(inputs of t); a batch's bound is the latest finish over its problems;
  - the same ratio for a plain asyncio implementation that gathers each step before the
    next (same requests, same latencies, same subsets), at 64 problems;
  - CPU microseconds per model call at zero latency (no recording), median and best of several batches
    of 64 problems;
  - as a diagnostic, the 64-problem ratio with the cyclic garbage collector paused;
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
TARGET_RATIO, TARGET_CPU_US = 1.05, 60.0

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


def latency_ratios(batches: list[int], repeats: int) -> tuple[dict[int, float], float]:
    ours: dict[int, float] = {}
    gather_ratio = 0.0
    for b in batches:
        ratios, gathers = [], []
        for rep in range(repeats):
            gc.collect()  # every measurement starts from the same heap, not the previous one's garbage
            backend = SimulatedBackend(median=MEDIAN, sigma=SIGMA)
            wall, results = asyncio.run(run_batch(b, backend, seed0=1000 * rep))
            bound = max(critical_path(r.traces) for r in results)
            ratios.append(wall / bound)
            if b == max(batches):
                gathers.append(asyncio.run(gather_per_step(results, backend)) / bound)
            print(f"  problems={b:3d} rep={rep} wall={wall:.3f}s bound={bound:.3f}s ratio={wall / bound:.3f}"
                  + (f" gather-per-step={gathers[-1]:.3f}" if gathers and b == max(batches) else ""), flush=True)
            del results
        ours[b] = statistics.median(ratios)
        if gathers:
            gather_ratio = statistics.median(gathers)
    return ours, gather_ratio


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


def cpu_per_call(repeats: int) -> tuple[float, float]:
    samples = []
    for rep in range(repeats):
        gc.collect()
        backend = SimulatedBackend(median=0.0)
        c0 = time.process_time()
        _, results = asyncio.run(run_batch(64, backend, seed0=rep))
        cpu = time.process_time() - c0
        calls = sum(1 for r in results for t in r.traces if t.kind is sf.TraceKind.MODEL)
        samples.append(cpu / calls * 1e6)
    print(f"  cpu µs/call at zero latency: {[round(s, 1) for s in samples]}", flush=True)
    return statistics.median(samples), min(samples)


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
    ours, gather = latency_ratios([1, 16, 64], repeats)
    no_gc = ratio_without_gc(repeats)
    cpu, cpu_min = cpu_per_call(3 if args.quick else 7)
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
        "cpu_us_per_call": round(cpu, 1),
        "cpu_us_per_call_min": round(cpu_min, 1),
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

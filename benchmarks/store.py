"""Store benchmark: what recording costs per model call, and whether memory stays flat while recording.

Workload: RSA (N=16, K=4, T=10: 176 model calls per run) over a zero-latency ``ScriptedBackend``
whose every reply is unique (so every aggregation request is a new ``requests`` row), run with
``Graph.map(rows, concurrency=64)``. Prints, in one run:
  - recording CPU per call: (process CPU time of a batch with ``store=`` minus that of the same
    batch with ``store=None``) / model calls. ``time.process_time()`` counts every thread, so the
    writer thread is included; the store's time ends after a final ``store.flush()``. Baseline and
    store batches are interleaved, several repeats; each repeat's difference is one sample (median
    and min reported), for a SQLite file in a temporary directory and for a throwaway PostgreSQL
    cluster (``scaffold.testing.PostgresServer``; null, with the reason, if it cannot start; only
    our process is counted, not the PostgreSQL server's). The baseline (executor CPU per call) and
    the ratio with/without store are printed too.
    Target: at most 150 µs of recording CPU per call on SQLite;
  - memory: 100,000+ calls (570 runs) streamed into SQLite in a fresh process, results not kept,
    RSS sampled every few runs; growth from the end of a warm-up to the end must stay under 30 MB
    (flat). The warm-up is 20,000 calls because the executor alone steps up ~17 MB around 12,000
    calls: the same map without a store runs in another process for comparison. The peak RSS and
    the writer queue's largest depth are reported.
``--profile`` adds a cProfile (per-thread CPU time) of one SQLite batch: the writer thread's top
functions and the store's functions on the event loop. The last line is one JSON object with the figures.

Usage: python benchmarks/store.py [--quick] [--skip-postgres] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import itertools
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

import graphs
import scaffold as sf
from scaffold.testing import PostgresServer, ScriptedBackend

TARGET_US = 150.0
FLAT_MB = 30.0
WARMUP_CALLS = 20_000

GRAPH = graphs.rsa.build(n=16, k=4, steps=10)
CALLS = sum(GRAPH.count_calls().values())


def backend() -> ScriptedBackend:
    counter = itertools.count()
    return ScriptedBackend(lambda request: f"draft {next(counter)}: so the answer is \\boxed{{42}}")


async def drain(runs: int, store: Any, seed: int, on_result: Any = None) -> int:
    """Runs RSA ``runs`` times through ``Graph.map``; nothing is kept (the backend's request log is cleared)."""
    scripted = backend()
    rows = ({"problem": f"problem {seed}-{i}"} for i in range(runs))
    done = 0
    async for result in GRAPH.map(rows, models={"solver": scripted}, concurrency=64, store=store, seed=seed):
        assert result.status == "ok", result.error
        done += 1
        scripted.requests.clear()
        if on_result is not None:
            on_result(done)
    return done


def cpu_us_per_call(runs: int, store: Any, seed: int) -> float:
    gc.collect()
    c0 = time.process_time()
    assert asyncio.run(drain(runs, store, seed)) == runs
    if store is not None:
        store.flush()
    return (time.process_time() - c0) / (runs * CALLS) * 1e6


def recording_cost(stores: dict[str, Any], runs: int, repeats: int) -> dict[str, list[float]]:
    """CPU µs per call for the baseline and each store, interleaved repeat by repeat."""
    samples: dict[str, list[float]] = {"baseline": [], **{name: [] for name in stores}}
    for store in stores.values():  # warm-up: imports, compiled statements, connection pools
        cpu_us_per_call(max(2, runs // 8), store, seed=10_000)
    for rep in range(repeats):
        for name, store in [("baseline", None), *stores.items()]:
            samples[name].append(cpu_us_per_call(runs, store, seed=rep * runs))
        print(f"  repeat {rep}: " + "  ".join(f"{n}={s[-1]:.1f}" for n, s in samples.items()) + " µs/call",
              flush=True)
    return samples


def start_postgres() -> tuple[PostgresServer | None, Any, str | None]:
    server = PostgresServer()
    try:
        server.start()
        return server, sf.Store(server.url), None
    except Exception as exc:  # no binaries, cannot bind, cannot connect: report it, measure the rest
        server.stop()
        return None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def memory_child(runs: int, record: bool) -> None:
    """In a fresh process: ``runs`` RSA runs, recorded into SQLite or not, RSS sampled; prints one JSON line."""
    process, samples, queue_max = psutil.Process(), list[tuple[int, float]](), 0
    every, warm_runs = max(1, runs // 60), min(runs - 1, -(-WARMUP_CALLS // CALLS))
    with tempfile.TemporaryDirectory() as tmp:
        store = sf.Store(Path(tmp) / "runs.db") if record else None

        def sample(done: int) -> None:
            nonlocal queue_max
            queue_max = max(queue_max, store.writer.pending) if store is not None else 0  # records not yet taken
            if done % every == 0 or done in (warm_runs, runs):
                samples.append((done, process.memory_info().rss / 2**20))

        t0 = time.perf_counter()
        asyncio.run(drain(runs, store, seed=0, on_result=sample))
        if store is not None:
            store.close()  # writes what is queued first
        written = store.writer.written if store is not None else 0
    warm = next(mb for done, mb in samples if done >= warm_runs)
    print(json.dumps({
        "runs": runs, "calls": runs * CALLS, "rows_written": written, "seconds": round(time.perf_counter() - t0, 1),
        "warm_calls": warm_runs * CALLS, "rss_warm_mb": round(warm, 1), "rss_end_mb": round(samples[-1][1], 1),
        "rss_peak_mb": round(max(mb for _, mb in samples), 1), "queue_max": queue_max,
        "curve": [(done, round(mb, 1)) for done, mb in samples[:: max(1, len(samples) // 12)]],
    }))


def memory(runs: int, record: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--memory-child", str(runs), *([] if record else ["--no-store"])]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the memory child failed:\n{out.stderr}")
    mem = json.loads(out.stdout.strip().splitlines()[-1])
    mem["growth"] = mem["rss_end_mb"] - mem["rss_warm_mb"]
    print(f"  {'into SQLite' if record else 'no store':<12}{mem['calls']} calls ({mem['runs']} runs) in "
          f"{mem['seconds']} s; RSS {mem['rss_warm_mb']} MB after {mem['warm_calls']} calls -> {mem['rss_end_mb']} MB "
          f"(growth {mem['growth']:+.1f} MB, peak {mem['rss_peak_mb']} MB)"
          + (f"; writer queue max depth {mem['queue_max']}" if record else ""), flush=True)
    print("    RSS curve (runs:MB): " + " ".join(f"{d}:{mb}" for d, mb in mem["curve"]))
    return mem


def profile(runs: int) -> None:
    """cProfile (per-thread CPU time) of one SQLite batch: the writer thread's top functions, and the store's
    share of the event loop's time (one profiler per thread; the writer thread starts with the store)."""
    profilers: dict[str, cProfile.Profile] = {}

    def start_in_thread(*_: Any) -> None:
        sys.setprofile(None)
        profilers["writer"] = profiler = cProfile.Profile(time.thread_time)
        profiler.enable()

    threading.setprofile(start_in_thread)
    with tempfile.TemporaryDirectory() as tmp:
        store = sf.Store(Path(tmp) / "runs.db")
        threading.setprofile(None)  # type: ignore[arg-type]  # only the writer thread is started here
        cpu_us_per_call(2, store, seed=1)  # warm-up outside the event loop's profile
        profilers["event loop"] = loop = cProfile.Profile(time.thread_time)
        loop.enable()
        cpu_us_per_call(runs, store, seed=2)
        loop.disable()
        store.close()  # ends the writer thread, so its profile is complete
    for name, restriction in (("writer", 20), ("event loop", "scaffold/store")):
        stats = pstats.Stats(profilers[name])
        calls = (runs + 2 if name == "writer" else runs) * CALLS  # the writer also saw the warm-up
        print(f"\n--- profile: {name} thread, {stats.total_tt * 1e6 / calls:.1f} µs CPU/call (profiled) ---")
        stats.sort_stats("tottime").print_stats(restriction)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test, under 20 s)")
    parser.add_argument("--skip-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of recording into SQLite")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-store", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, record=not args.no_store)
        return
    runs, repeats, memory_runs = (8, 2, 70) if args.quick else (128, 7, 570)
    print(f"RSA N=16 K=4 T=10: {CALLS} calls per run, zero latency, map concurrency 64; "
          f"{repeats} repeats of {runs} runs ({runs * CALLS} calls) per configuration")
    tmp = tempfile.TemporaryDirectory()
    stores: dict[str, Any] = {"sqlite": sf.Store(Path(tmp.name) / "runs.db")}
    server, postgres_error = None, "skipped (--skip-postgres)" if args.skip_postgres else None
    if not args.skip_postgres:
        server, pg_store, postgres_error = start_postgres()
        if pg_store is not None:
            stores["postgres"] = pg_store
        else:
            print(f"  PostgreSQL not measured: {postgres_error}")
    try:
        samples = recording_cost(stores, runs, repeats)
    finally:
        for store in stores.values():
            store.close()
        if server is not None:
            server.stop()
        tmp.cleanup()
    base = samples["baseline"]
    cost = {name: [s - b for s, b in zip(samples[name], base, strict=True)] for name in stores}
    print(f"\n{'configuration':<14}{'CPU µs/call':>13}{'min':>9}{'recording µs/call':>19}{'min':>9}{'ratio':>8}")
    print(f"{'no store':<14}{statistics.median(base):>13.1f}{min(base):>9.1f}{'-':>19}{'-':>9}{1.0:>8.2f}")
    for name in stores:
        print(f"{name:<14}{statistics.median(samples[name]):>13.1f}{min(samples[name]):>9.1f}"
              f"{statistics.median(cost[name]):>19.1f}{min(cost[name]):>9.1f}"
              f"{statistics.median(samples[name]) / statistics.median(base):>8.2f}")

    print("\nmemory while recording (a fresh process each; results not kept):")
    mem, bare = memory(memory_runs, record=True), memory(memory_runs, record=False)
    if args.profile:
        profile(runs)

    def stat(name: str, fn: Any) -> float | None:
        return round(fn(cost[name]), 1) if name in cost else None

    def ratio(name: str) -> float | None:
        return round(statistics.median(samples[name]) / statistics.median(base), 3) if name in samples else None

    figures = {
        "bench": "store", "calls_per_run": CALLS, "runs_per_sample": runs, "repeats": repeats,
        "sqlite_us_per_call": stat("sqlite", statistics.median), "sqlite_us_per_call_min": stat("sqlite", min),
        "postgres_us_per_call": stat("postgres", statistics.median), "postgres_us_per_call_min": stat("postgres", min),
        "postgres_error": postgres_error,
        "baseline_us_per_call": round(statistics.median(base), 1), "baseline_us_per_call_min": round(min(base), 1),
        "sqlite_ratio": ratio("sqlite"), "postgres_ratio": ratio("postgres"),
        "rss_growth_mb_100k": round(mem["growth"], 1), "rss_growth_mb_no_store": round(bare["growth"], 1),
        "rss_warm_mb": mem["rss_warm_mb"], "rss_peak_mb": mem["rss_peak_mb"],
        "rss_peak_mb_no_store": bare["rss_peak_mb"], "warmup_calls": mem["warm_calls"],
        "calls_recorded": mem["calls"], "rows_written": mem["rows_written"], "writer_queue_max": mem["queue_max"],
        "target_us_per_call": TARGET_US, "flat_memory_limit_mb": FLAT_MB, "memory_flat": mem["growth"] < FLAT_MB,
        "meets_target": statistics.median(cost["sqlite"]) <= TARGET_US and mem["growth"] < FLAT_MB,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

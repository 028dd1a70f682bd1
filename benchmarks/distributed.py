"""Distributed benchmark: an RSA map on 1, 2 and 4 Ray workers against the single-process executor.

Protocol (all in one run, on one machine, on a local Ray cluster this script starts):

- **throughput**: ``graphs.rsa`` (N=16, K=4, T=10: 176 calls a row; ``--quick``: N=4, K=2, T=2) over
  ``--rows`` problems (2,000) on ``scaffold.testing.SimulatedBackend`` (lognormal latency, median
  ``--median`` s, sigma 0.5, drawn from each request's seed), no store. ``rows_per_s_local`` is
  ``Graph.map`` in this process with ``--concurrency`` rows in flight; ``rows_per_s_wN`` is the same map
  with ``cluster=Cluster(workers=N)``, each worker with ``--concurrency`` rows in flight. Wall time runs
  from the call to the last result, so it includes starting the workers (``startup_s`` says how long
  that took on its own). ``lost`` counts rows without a result and ``duplicated`` rows with more than
  one, over every map of the run (target 0 and 0).
- **overhead_ms_per_row**: a one-call graph with zero latency, one worker against the local map at the
  same concurrency. Each is timed over all ``--rows`` rows and over the first quarter; the difference is
  what the last three quarters cost with start-up cancelled, and (cluster - local) / those rows is what
  shipping a row to a worker and its result back costs the job.
- **limiter_us_per_call**: a worker's cluster-wide limits (``max_in_flight=64`` and 6,000,000 requests
  a minute, leased from a real coordinator actor) acquired and released ``--limiter-calls`` times by 64
  concurrent tasks, minus the same with no limit, per call (target <= 200 us). The local limiter's
  figure is printed beside it.

The machine has as many cores as ``env`` says; with 2 cores, workers beyond 2 share them. The last
line is one JSON object with the keys the issue names.

Usage: python benchmarks/distributed.py [--quick] [--rows 2000] [--concurrency 64] [--median 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import graphs  # noqa: E402
import scaffold as sf  # noqa: E402
from scaffold.cluster import Cluster  # noqa: E402
from scaffold.testing import SimulatedBackend  # noqa: E402


@sf.graph
def one_call(problem: Any) -> Any:
    """One model call: what a row costs beyond its calls, with a model that answers at once."""
    return sf.generate("{problem}", model="solver")


def timed_map(graph: sf.Graph, rows: list[dict[str, Any]], model: Any, concurrency: int,
              cluster: Cluster | None, seen: Counter[int]) -> float:
    """Seconds for one map; every result's row index is counted in ``seen``."""

    async def main() -> None:
        async for result in graph.map(rows, models={"solver": model}, concurrency=concurrency, seed=0,
                                      store=None, cluster=cluster):
            seen[result.index or 0] += 1

    start = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - start


def limiter_us(calls: int) -> tuple[float, float]:
    """µs per acquire+release of leased (cluster) and local limits, beyond no limit at all."""
    import ray

    from scaffold._limits import InFlightLimit, RateLimit
    from scaffold.cluster._limits import LeasedPlaces, LeasedRate, LimitsCoordinator, LimitSpec

    coordinator = ray.remote(LimitsCoordinator).options(num_cpus=0).remote(
        {"p": LimitSpec("in_flight", 64), "r": LimitSpec("rate", 6_000_000)})

    async def run(places: Any, rate: Any) -> float:
        async def task(count: int) -> None:
            for _ in range(count):
                if places is not None:
                    await places.acquire()
                    await rate.acquire()
                await asyncio.sleep(0)
                if places is not None:
                    places.release()

        start = time.perf_counter()
        await asyncio.gather(*(task(calls // 64) for _ in range(64)))
        return (time.perf_counter() - start) / calls * 1e6

    async def measure() -> tuple[float, float, float]:
        bare = await run(None, None)
        leased = await run(LeasedPlaces(coordinator, "p", 0, 64, keep=64),
                           LeasedRate(coordinator, "r", 6_000_000, batch=50_000 / 2))
        local = await run(InFlightLimit(64), RateLimit(6_000_000))
        return bare, leased, local

    bare, leased, local = asyncio.run(measure())
    ray.kill(coordinator)
    return leased - bare, local - bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 rows of a small RSA (a smoke run, seconds)")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--median", type=float, default=0.05)
    parser.add_argument("--limiter-calls", type=int, default=64_000)
    args = parser.parse_args()
    rows_count = args.rows or (200 if args.quick else 2000)
    shape = {"n": 4, "k": 2, "steps": 2} if args.quick else {"n": 16, "k": 4, "steps": 10}
    graph = graphs.rsa.build(**shape)
    calls = sum(graph.count_calls().values())
    rows = [{"problem": f"problem {i}"} for i in range(rows_count)]
    import ray

    ray.init(num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}})
    print(f"RSA {shape} ({calls} calls a row) x {rows_count} rows, latency median {args.median}s, "
          f"concurrency {args.concurrency} per process, {os.cpu_count()} cores", flush=True)
    seen: Counter[int] = Counter()
    maps = 0
    simulated = SimulatedBackend(median=args.median, sigma=0.5)

    start = time.perf_counter()
    timed_map(one_call.build(), rows[:8],
              SimulatedBackend(median=0), args.concurrency, Cluster(workers=1), Counter())
    startup = time.perf_counter() - start  # one worker started and torn down, with 8 trivial rows

    figures: dict[str, float] = {}
    for label, cluster in (("local", None), ("w1", Cluster(workers=1)), ("w2", Cluster(workers=2)),
                           ("w4", Cluster(workers=4))):
        wall = timed_map(graph, rows, simulated, args.concurrency, cluster, seen)
        maps += 1
        figures[label] = rows_count / wall
        print(f"  {label:>5}: {wall:7.2f} s  {rows_count / wall:8.1f} rows/s  "
              f"({rows_count * calls / wall:,.0f} calls/s)", flush=True)

    single = one_call.build()
    instant = SimulatedBackend(median=0)
    quarter = rows_count // 4
    walls = {}
    for label, cluster in (("local", None), ("w1", Cluster(workers=1))):
        part = timed_map(single, rows[:quarter], instant, args.concurrency, cluster, Counter())
        walls[label] = timed_map(single, rows, instant, args.concurrency, cluster, seen) - part
    maps += 2
    # the difference of a full and a quarter map: what the last 3/4 of the rows cost, start-up cancelled
    overhead_ms = (walls["w1"] - walls["local"]) / (rows_count - quarter) * 1000
    print(f"  one-call rows, the last {rows_count - quarter}: local {walls['local']:.3f} s, 1 worker "
          f"{walls['w1']:.3f} s (a worker's start-up alone: {startup:.2f} s)", flush=True)
    leased_us, local_us = limiter_us(args.limiter_calls)
    print(f"  limiter: leased {leased_us:.1f} us per call, local {local_us:.1f} us per call", flush=True)
    lost = sum(maps - seen[i] for i in range(rows_count) if seen[i] < maps)
    duplicated = sum(seen[i] - maps for i in range(rows_count) if seen[i] > maps)
    ray.shutdown()
    print(json.dumps({
        "bench": "distributed",
        "rows_per_s_local": round(figures["local"], 2),
        "rows_per_s_w1": round(figures["w1"], 2),
        "rows_per_s_w2": round(figures["w2"], 2),
        "rows_per_s_w4": round(figures["w4"], 2),
        "speedup_w2": round(figures["w2"] / figures["local"], 3),
        "speedup_w4": round(figures["w4"] / figures["local"], 3),
        "overhead_ms_per_row": round(overhead_ms, 3),
        "limiter_us_per_call": round(leased_us, 2),
        "local_limiter_us_per_call": round(local_us, 2),
        "startup_s": round(startup, 2),
        "rows": rows_count, "calls_per_row": calls, "cores": os.cpu_count(),
        "lost": lost, "duplicated": duplicated,
    }))


if __name__ == "__main__":
    main()

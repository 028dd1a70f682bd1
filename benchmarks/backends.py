"""Backend benchmark: client time per call, and throughput under rate limits and random faults.

Prints, in one run, against the project's own OpenAI-compatible test server (``scaffold.testing``),
every regime through the public API (``sf.Model(backend, max_in_flight=32, retry=sf.Retry(attempts=8))``,
no configured rate: whatever pace holds is the :class:`~scaffold.Throttle`'s):

- **client time per call** (ms) over sequential calls to an instant server, for ``sf.OpenAIBackend``
  and ``sf.LiteLLMBackend`` (each through ``Model.complete``) and the raw ``openai`` async client:
  the latency the client measures minus the time the server spent (median of interleaved batches);
- **(a) a rate limit**: a server allowing ``RATE`` requests/s (429 with ``Retry-After`` beyond it);
  goodput = accepted requests per second over the run, from the first request to the last accepted
  one, less the bucket's initial burst, as a share of the rate (target >= 0.95);
- **(b) random faults, no limit**: ``scaffold.testing.SPORADIC_FAULTS`` (8% 429 with ``Retry-After: 1``,
  4% 500, 3% 503, 3% truncated bodies, 2% dropped connections: 20% in all, drawn per request whatever
  the rate), on RSA N=8, K=4, T=3 over many problems with a server latency of ``LATENCY`` s (faults
  answer at once); throughput (model calls recorded per second) as a share of the same workload
  without faults (target >= 0.60);
- **(c) a limit that moves**: 40 -> 10 -> 40 requests/s, ``PHASE`` s each; for each change, the
  seconds until the rate the client sends (every request the server sees, refused ones included)
  stays within 20% of the new limit over 1 s windows for the rest of the phase (target <= 5 s);
- ``lost`` and ``duplicated`` over all three regimes: every expected trace must arrive exactly
  once, and no answer the server served may be recorded twice.

The last line is one JSON object with the figures.

Usage: python benchmarks/backends.py [--quick] [--backend openai|litellm]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import threading
import time
from typing import Any

import graphs
import scaffold as sf
from scaffold._types import Request
from scaffold.testing import SPORADIC_FAULTS, OpenAIServer, ServerRequest, random_faults

RATE = 40.0
IN_FLIGHT = 32
ATTEMPTS = 8
LATENCY = 0.25
PHASE = 8.0
TARGETS = {"goodput_share": 0.95, "faults_throughput_share": 0.60, "adapt_seconds": 5.0, "openai_ratio": 1.2}

_ANSWERS = itertools.count()


def reply(request: ServerRequest) -> str:
    """A text no other request gets, so a result delivered twice or lost can be counted."""
    return f"answer {next(_ANSWERS)} to {request.last_content[:40]}: \\boxed{{1}}"


@sf.graph
def proposals(problem, *, n: int = 8):
    return sf.vote(sf.sample("Solve {problem}", model="m", n=n))


def make_backend(kind: str, server: OpenAIServer) -> Any:
    if kind == "litellm":
        return sf.LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key="sk-bench", supports_n=False)
    return sf.OpenAIBackend("test-model", base_url=server.base_url, api_key="sk-bench", supports_n=False)


def make_model(backend: Any) -> sf.Model:
    return sf.Model(backend, max_in_flight=IN_FLIGHT, retry=sf.Retry(attempts=ATTEMPTS))


def run_map(graph: sf.Graph, backend: Any, model: sf.Model, problems: int) -> tuple[list[sf.RunResult], float]:
    async def main() -> list[sf.RunResult]:
        try:
            rows = [{"problem": f"problem {i}"} for i in range(problems)]
            return [r async for r in graph.map(rows, models={"m": model}, concurrency=problems, store=None)]
        finally:
            await backend.release_loop()

    t0 = time.perf_counter()
    results = asyncio.run(main())
    return results, time.perf_counter() - t0


def integrity(results: list[sf.RunResult], server: OpenAIServer, expected: int) -> dict[str, int]:
    """Traces lost (expected model traces without an answer) and duplicated (an answer recorded twice)."""
    texts = [t.text for r in results for t in r.traces if t.kind is sf.TraceKind.MODEL and t.ok]
    served = server.choices_served
    return {"lost": expected - len(set(texts)),
            "duplicated": (len(texts) - len(set(texts))) + (len(served) - len(set(served))),
            "failed_runs": sum(r.status != "ok" for r in results)}


# -- client time per call -----------------------------------------------------------------------------
def server_ms(server: OpenAIServer, first: int) -> float:
    """Mean milliseconds the server spent per request, from its own timestamps."""
    done = [r for r in server.requests[first:] if r.finished_at is not None]
    return statistics.fmean(r.finished_at - r.arrived_at for r in done) * 1000  # type: ignore[operator]


async def client_ms_model(server: OpenAIServer, kind: str, calls: int) -> float:
    backend = make_backend(kind, server)
    model = sf.Model(backend, max_in_flight=64, retry=sf.Retry(attempts=3))
    request = Request(messages=(("user", "What is 2+2?"),), params={"max_tokens": 16})
    await model.complete(request)  # warm up: the first call imports and connects
    try:
        first, t0 = len(server.requests), time.perf_counter()
        for _ in range(calls):
            await model.complete(request)
        return (time.perf_counter() - t0) / calls * 1000 - server_ms(server, first)
    finally:
        await backend.release_loop()


async def client_ms_raw(server: OpenAIServer, calls: int) -> float:
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)
    messages: Any = [{"role": "user", "content": "What is 2+2?"}]
    await client.chat.completions.create(model="test-model", messages=messages, max_tokens=16)
    try:
        first, t0 = len(server.requests), time.perf_counter()
        for _ in range(calls):
            await client.chat.completions.create(model="test-model", messages=messages, max_tokens=16)
        return (time.perf_counter() - t0) / calls * 1000 - server_ms(server, first)
    finally:
        await client.close()


def measure_client_time(calls: int, batches: int) -> dict[str, float]:
    figures: dict[str, list[float]] = {"openai_backend_ms_per_call": [], "litellm_ms_per_call": [],
                                       "raw_openai_ms_per_call": []}
    with OpenAIServer(policy=reply, api_key="sk-bench") as server:
        for _ in range(batches):  # interleaved, so machine noise hits all alike
            figures["openai_backend_ms_per_call"].append(asyncio.run(client_ms_model(server, "openai", calls)))
            figures["litellm_ms_per_call"].append(asyncio.run(client_ms_model(server, "litellm", calls)))
            figures["raw_openai_ms_per_call"].append(asyncio.run(client_ms_raw(server, calls)))
    return {key: statistics.median(values) for key, values in figures.items()}


# -- (a) a rate limit ---------------------------------------------------------------------------------
def measure_rate_limit(kind: str, problems: int, samples: int, burst: int = 4) -> dict[str, Any]:
    with OpenAIServer(policy=reply, api_key="sk-bench", allowed_rate=RATE, burst=burst) as server:
        backend = make_backend(kind, server)
        model = make_model(backend)
        results, wall = run_map(proposals.build(n=samples), backend, model, problems)
        start = min(r.arrived_at for r in server.requests)
        answered = sorted(r.arrived_at for r in server.requests if r.status == 200)
        goodput = (len(answered) - burst) / (answered[-1] - start)  # the bucket starts full: discount its burst
        return {"goodput_share": goodput / RATE, "requests_sent": len(server.requests),
                "rate_limited": server.status_counts.get(429, 0), "wall_s": wall,
                **integrity(results, server, problems * samples)}


# -- (b) random faults, no limit ----------------------------------------------------------------------
def measure_faults(kind: str, problems: int, seed: int = 0) -> dict[str, Any]:
    graph = graphs.rsa.build(n=8, k=4, steps=3, model="m")
    calls = sum(graph.count_calls().values()) * problems
    out: dict[str, Any] = {}
    for label, rule in (("clean", None), ("faults", random_faults(SPORADIC_FAULTS, seed=seed))):
        with OpenAIServer(policy=reply, api_key="sk-bench", latency=LATENCY, faults=rule) as server:
            backend = make_backend(kind, server)
            model = make_model(backend)
            results, wall = run_map(graph, backend, model, problems)
            found = integrity(results, server, calls)
            out[label] = {"calls_per_s": calls / wall, "wall_s": wall, "requests_sent": len(server.requests),
                          "faults": sum(r.fault is not None for r in server.requests), **found,
                          "throttle_limited": model.throttle.limited}
    out["faults_throughput_share"] = out["faults"]["calls_per_s"] / out["clean"]["calls_per_s"]
    return out


# -- (c) a limit that moves ---------------------------------------------------------------------------
def adapt_seconds(arrivals: list[float], change: float, end: float, limit: float, window: float = 1.0) -> float:
    """Seconds after ``change`` from which every ``window``-second send rate until ``end`` stays within 20% of
    ``limit`` (windows start every 0.1 s)."""
    ordered = sorted(arrivals)
    starts = [change + i * 0.1 for i in range(int((end - window - change) / 0.1) + 1)]
    last_bad = None
    for s in starts:
        count = sum(1 for a in ordered if s <= a < s + window)
        if abs(count / window - limit) > 0.2 * limit:
            last_bad = s
    if last_bad is None:
        return 0.0
    return min(end - change, last_bad + 0.1 - change)


def measure_moving_limit(kind: str, phase: float, rates: tuple[float, ...] = (40.0, 10.0, 40.0)) -> dict[str, Any]:
    samples = 16
    problems = int(sum(rates) * phase * 1.6 / samples) + 8  # more demand than the limits allow, all along
    with OpenAIServer(policy=reply, api_key="sk-bench", allowed_rate=rates[0], burst=4) as server:
        backend = make_backend(kind, server)
        model = make_model(backend)
        changes: list[float] = []

        def schedule() -> None:
            t0 = time.monotonic()
            for i, rate in enumerate(rates):
                if i:
                    server.allowed_rate = rate
                changes.append(time.monotonic())
                time.sleep(max(0.0, t0 + (i + 1) * phase - time.monotonic()))
            changes.append(time.monotonic())

        timer = threading.Thread(target=schedule, daemon=True)
        timer.start()
        results, wall = run_map(proposals.build(n=samples), backend, model, problems)
        timer.join()
        arrivals = [r.arrived_at for r in server.requests]
        assert arrivals[-1] > changes[-1], "demand ran out before the last phase ended: raise `problems`"
        per_phase = [adapt_seconds(arrivals, changes[i], changes[i + 1], rates[i]) for i in range(len(rates))]
        return {"adapt_seconds_down": per_phase[1], "adapt_seconds_up": per_phase[2],
                "adapt_seconds_start": per_phase[0], "requests_sent": len(server.requests),
                "rate_limited": server.status_counts.get(429, 0), "wall_s": wall,
                **integrity(results, server, problems * samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and shorter phases (a smoke run)")
    parser.add_argument("--backend", choices=("openai", "litellm"), default="openai",
                        help="the backend of the three regimes (default: openai, the one OpenAI-compatible specs get)")
    args = parser.parse_args()
    calls, batches = (50, 3) if args.quick else (200, 5)
    limit_problems, fault_problems, phase = (16, 32, 3.0) if args.quick else (32, 96, PHASE)

    client = measure_client_time(calls, batches)
    ratio = client["openai_backend_ms_per_call"] / client["raw_openai_ms_per_call"]
    print(f"client time per call: OpenAIBackend {client['openai_backend_ms_per_call']:.2f} ms, LiteLLMBackend "
          f"{client['litellm_ms_per_call']:.2f} ms, raw openai client {client['raw_openai_ms_per_call']:.2f} ms "
          f"(OpenAIBackend / raw {ratio:.2f}, target <= {TARGETS['openai_ratio']})", flush=True)
    a = measure_rate_limit(args.backend, limit_problems, 16)
    print(f"(a) {RATE:.0f} req/s allowed: goodput {a['goodput_share']:.1%} of the rate ({a['requests_sent']} requests, "
          f"{a['rate_limited']} answered 429, {a['wall_s']:.1f} s); lost {a['lost']}, duplicated {a['duplicated']} "
          f"(target >= {TARGETS['goodput_share']:.0%})", flush=True)
    b = measure_faults(args.backend, fault_problems)
    print(f"(b) 20% random faults: {b['faults']['calls_per_s']:.0f} calls/s against {b['clean']['calls_per_s']:.0f} "
          f"without faults = {b['faults_throughput_share']:.1%} ({b['faults']['faults']} faults in "
          f"{b['faults']['requests_sent']} requests; throttle engaged {b['faults']['throttle_limited']} times); lost "
          f"{b['faults']['lost']}, duplicated {b['faults']['duplicated']} "
          f"(target >= {TARGETS['faults_throughput_share']:.0%})", flush=True)
    c = measure_moving_limit(args.backend, phase)
    print(f"(c) 40 -> 10 -> 40 req/s, {phase:.0f} s each: within 20% of the new limit {c['adapt_seconds_down']:.1f} s "
          f"after the drop, {c['adapt_seconds_up']:.1f} s after the rise ({c['rate_limited']} answered 429 of "
          f"{c['requests_sent']}); lost {c['lost']}, duplicated {c['duplicated']} "
          f"(target <= {TARGETS['adapt_seconds']:.0f} s)", flush=True)
    lost = a["lost"] + b["faults"]["lost"] + b["clean"]["lost"] + c["lost"]
    duplicated = a["duplicated"] + b["faults"]["duplicated"] + b["clean"]["duplicated"] + c["duplicated"]
    figures = {
        "bench": "backends",
        "goodput_share": round(a["goodput_share"], 4),
        "faults_throughput_share": round(b["faults_throughput_share"], 4),
        "adapt_seconds_down": round(c["adapt_seconds_down"], 2),
        "adapt_seconds_up": round(c["adapt_seconds_up"], 2),
        "lost": lost,
        "duplicated": duplicated,
        **{key: round(value, 3) for key, value in client.items()},
        "openai_over_raw": round(ratio, 3),
        "litellm_overhead_ms": round(client["litellm_ms_per_call"], 3),  # the names issue 3 gave them
        "raw_openai_overhead_ms": round(client["raw_openai_ms_per_call"], 3),
        "faults_calls_per_s": round(b["faults"]["calls_per_s"], 1),
        "clean_calls_per_s": round(b["clean"]["calls_per_s"], 1),
        "backend": args.backend,
        "quick": args.quick,
    }
    figures["meets_targets"] = (
        figures["goodput_share"] >= TARGETS["goodput_share"]
        and figures["faults_throughput_share"] >= TARGETS["faults_throughput_share"]
        and max(figures["adapt_seconds_down"], figures["adapt_seconds_up"]) <= TARGETS["adapt_seconds"]
        and lost == 0 and duplicated == 0 and ratio <= TARGETS["openai_ratio"]
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

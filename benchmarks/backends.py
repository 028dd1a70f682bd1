"""Backend benchmark: client overhead through litellm, and goodput under a rate-limiting server.

Prints, in one run, against the local OpenAI-compatible test server (``scaffold.testing``):
  - our overhead per call through ``LiteLLMBackend`` (with ``Model``'s limits and retry
    machinery) versus the raw ``openai`` async client (and, to separate litellm's share from
    ours, plain ``litellm.acompletion``), all as milliseconds of client time
    per call: the latency the client measures minus the time the server spent on the request,
    over sequential calls to an instant server (median of several batches);
  - against a server that accepts ``RATE`` requests per second and answers 429 with
    ``Retry-After`` beyond it, goodput (answered requests per second over the steady state,
    from the first request to the last accepted one, less the bucket's initial burst) as a
    share of that rate, with many concurrent runs, an in-flight limit of 16 and no configured
    rate limit (the pace is learned from the 429s), and the number of results lost or
    duplicated (every expected trace must arrive exactly once).
The last line is one JSON object with the figures.

Usage: python benchmarks/backends.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time

import scaffold as sf
from scaffold._types import Request
from scaffold.backends import Retry
from scaffold.testing import OpenAIServer, ServerRequest

RATE = 40.0
IN_FLIGHT = 16
TARGET_GOODPUT = 0.90


_ANSWERS = itertools.count()


def reply(request: ServerRequest) -> str:
    """A text no other request gets, so a result delivered twice or lost can be counted."""
    return f"answer {next(_ANSWERS)} to {request.last_content}: \\boxed{{1}}"


@sf.graph
def proposals(problem, *, n: int = 8):
    return sf.vote(sf.sample("Solve {problem}", model="m", n=n))


def server_ms(server: OpenAIServer, first: int) -> float:
    """Mean milliseconds the server spent per request, from its own timestamps."""
    done = [r for r in server.requests[first:] if r.finished_at is not None]
    return statistics.fmean(r.finished_at - r.arrived_at for r in done) * 1000  # type: ignore[operator]


async def overhead_litellm(server: OpenAIServer, calls: int) -> float:
    backend = sf.LiteLLMBackend("hosted_vllm/test-model", api_base=server.base_url, api_key="sk-bench")
    model = sf.Model(backend, max_in_flight=64, retry=Retry(attempts=3))
    request = Request(messages=(("user", "What is 2+2?"),), params={"max_tokens": 16})
    await model.complete(request)  # warm up: first call imports and connects
    try:
        first = len(server.requests)
        t0 = time.perf_counter()
        for _ in range(calls):
            await model.complete(request)
        per_call = (time.perf_counter() - t0) / calls * 1000
        return per_call - server_ms(server, first)
    finally:
        await backend.release_loop()


async def overhead_plain_litellm(server: OpenAIServer, calls: int) -> float:
    from scaffold.backends._litellm import import_litellm, release_litellm_loop

    litellm = import_litellm()
    kwargs = {"model": "hosted_vllm/test-model", "api_base": server.base_url, "api_key": "sk-bench",
              "messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 16}
    await litellm.acompletion(**kwargs)
    try:
        first = len(server.requests)
        t0 = time.perf_counter()
        for _ in range(calls):
            await litellm.acompletion(**kwargs)
        per_call = (time.perf_counter() - t0) / calls * 1000
        return per_call - server_ms(server, first)
    finally:
        await release_litellm_loop()


async def overhead_raw(server: OpenAIServer, calls: int) -> float:
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    await client.chat.completions.create(model="test-model", messages=messages, max_tokens=16)  # type: ignore[arg-type]
    try:
        first = len(server.requests)
        t0 = time.perf_counter()
        for _ in range(calls):
            await client.chat.completions.create(model="test-model", messages=messages, max_tokens=16)  # type: ignore[arg-type]
        per_call = (time.perf_counter() - t0) / calls * 1000
        return per_call - server_ms(server, first)
    finally:
        await client.close()


def measure_overhead(calls: int, batches: int) -> tuple[float, float, float]:
    with OpenAIServer(policy=reply, api_key="sk-bench") as server:
        ours, plain, raw = [], [], []
        for _ in range(batches):  # interleaved, so machine noise hits all alike
            ours.append(asyncio.run(overhead_litellm(server, calls)))
            plain.append(asyncio.run(overhead_plain_litellm(server, calls)))
            raw.append(asyncio.run(overhead_raw(server, calls)))
    return statistics.median(ours), statistics.median(plain), statistics.median(raw)


def measure_goodput(problems: int, samples: int, burst: int) -> dict[str, float | int]:
    with OpenAIServer(policy=reply, api_key="sk-bench", allowed_rate=RATE, burst=burst) as server:
        backend = sf.LiteLLMBackend("openai/test-model", api_base=server.base_url, api_key="sk-bench",
                                    supports_n=False)
        model = sf.Model(backend, max_in_flight=IN_FLIGHT, retry=Retry(attempts=100, initial_delay=0.05, max_delay=2.0))
        graph = proposals.build(n=samples)

        async def main() -> list[sf.RunResult]:
            try:
                rows = [{"problem": f"problem {i}"} for i in range(problems)]
                return [r async for r in graph.map(rows, models={"m": model}, concurrency=problems, store=None)]
            finally:
                await backend.release_loop()

        t0 = time.perf_counter()
        results = asyncio.run(main())
        wall = time.perf_counter() - t0
        start = min(r.arrived_at for r in server.requests)
        answered = sorted(r.arrived_at for r in server.requests if r.status == 200)
        goodput = (len(answered) - burst) / (answered[-1] - start)  # the bucket starts full: discount its burst
        expected = problems * samples
        texts = [t.text for r in results for t in r.traces if t.node == "sample" and t.ok]
        served = server.choices_served
        answered_texts = server.answered
        return {
            "goodput_share": goodput / RATE,
            "allowed_rate": RATE,
            "requests_sent": len(server.requests),
            "rate_limited": server.status_counts.get(429, 0),
            "lost": expected - len(set(texts)),
            "answered_by_server": answered_texts,
            "duplicated": (len(texts) - len(set(texts))) + (len(served) - len(set(served))),
            "failed_runs": sum(r.status != "ok" for r in results),
            "goodput_wall_s": wall,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    args = parser.parse_args()
    calls, batches = (50, 3) if args.quick else (200, 5)
    problems, samples = (16, 8) if args.quick else (32, 16)

    ours, plain, raw = measure_overhead(calls, batches)
    print(f"client overhead per call: our litellm backend {ours:.2f} ms, litellm.acompletion alone {plain:.2f} ms, "
          f"raw openai client {raw:.2f} ms (ratio to raw {ours / raw:.2f})")
    good = measure_goodput(problems, samples, burst=4)
    print(f"goodput at {RATE:.0f} req/s allowed: {good['goodput_share']:.1%} of the rate "
          f"({good['requests_sent']} requests, {good['rate_limited']} answered 429, {good['goodput_wall_s']:.1f} s); "
          f"lost {good['lost']}, duplicated {good['duplicated']} (target goodput >= {TARGET_GOODPUT:.0%})")
    print(json.dumps({
        "bench": "backends",
        "litellm_overhead_ms": round(ours, 3),
        "raw_openai_overhead_ms": round(raw, 3),
        "plain_litellm_overhead_ms": round(plain, 3),
        "overhead_ratio": round(ours / raw, 3),
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in good.items()},
        "target_goodput_share": TARGET_GOODPUT,
        "quick": args.quick,
    }))


if __name__ == "__main__":
    main()

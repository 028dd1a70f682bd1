"""Every topology example runs on the pocket model and, over HTTP, on a local OpenAI-compatible server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import scaffold as sf
from scaffold.testing import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples" / "topologies").glob("*.py") if p.name != "common.py")
ROW = re.compile(r"^(\S+)\s+([01]\.\d\d)\s+([\d,]+)\s+(\d+)\s+([\d.]+)$")
PROBLEMS = 3


def run_example(script: Path, *args: str, env: dict[str, str] | None = None) -> list[tuple[str, str, int, int]]:
    """Run an example on PROBLEMS problems; return its table rows as (topology, accuracy as printed, tokens, calls)."""
    done = subprocess.run([sys.executable, str(script), "--problems", str(PROBLEMS), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [m.groups() for line in done.stdout.splitlines() if (m := ROW.match(line.strip()))]
    assert rows, done.stdout
    return [(name, accuracy, int(tokens.replace(",", "")), int(calls)) for name, accuracy, tokens, calls, _wall in rows]


def recount(rows: list[tuple[str, str, int, int]], store_path: Path, problems: list[dict[str, str]]) -> None:
    """Each table row equals the same figures recounted from the runs the example recorded (dataset
    ``example-NAME``, one run per problem): the accuracy against the problems' answers, the tokens and the calls.
    This holds on every CPU, whatever accuracy the model reaches there."""
    with sf.Store(store_path) as store:
        for name, accuracy, tokens, calls in rows:
            runs = store.runs(dataset=f"example-{name}")
            assert sorted(run.item for run in runs) == list(range(len(problems))), name
            right = sum(sf.equivalent(run.answer, problems[run.item]["answer"]) for run in runs)
            assert accuracy == f"{right / len(problems):.2f}", (name, right)
            assert tokens == sum(run.prompt_tokens + run.completion_tokens for run in runs), name
            assert calls == sum(run.calls for run in runs) > 0, name


def answer_anything(request: Any) -> str:
    """A stand-in API model: judges score 7 and prefer the first candidate, everything else sums the problem."""
    text = request.last_content
    if "Score:" in text:
        return "Looks right.\nScore: 7"
    if "Winner:" in text:
        return "The first is better.\nWinner: 1"
    numbers = re.search(r"\d+(?:\+\d+)+", text)
    total = sum(map(int, numbers.group(0).split("+"))) if numbers else 0
    return f"Adding up: \\boxed{{{total}}}"


def test_there_is_an_example_per_topology() -> None:
    """examples/topologies/ holds one script per ready-made topology family."""
    assert [p.stem for p in EXAMPLES] == ["agglm", "aggregation_tree", "best_of_n", "evolve", "mixture_of_agents",
                                          "pairwise_ranking", "rsa", "self_consistency"]


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_the_pocket_model(script: Path, pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    """On the quick pocket model: the example prints a table row per topology, and each row's accuracy, tokens and
    calls are what its recorded runs give (the accuracy itself depends on the CPU's arithmetic)."""
    from scaffold.pocket import pocket_task

    path, _ = pocket_quick
    rows = run_example(script, "--pocket-dir", str(path), env={"SCAFFOLD_STORE": str(tmp_path / "runs.db")})
    recount(rows, tmp_path / "runs.db", pocket_task(path).problems(PROBLEMS, seed=0, split="test"))


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_an_api_model_over_http(script: Path, tmp_path: Path) -> None:
    """--model/--api-base: the example's calls go over HTTP to a local server; a perfect model scores 1.0."""
    from scaffold.pocket import PocketTask

    with OpenAIServer(policy=answer_anything) as server:
        rows = run_example(script, "--model", "openai/stand-in", "--api-base", server.base_url,
                           env={"OPENAI_API_KEY": "sk-stand-in", "SCAFFOLD_STORE": str(tmp_path / "runs.db")})
        served = len(server.choices_served)
    assert all(accuracy == "1.00" for _, accuracy, _, _ in rows), rows
    assert served == sum(calls for *_, calls in rows)  # every model call of the table went over HTTP
    recount(rows, tmp_path / "runs.db", PocketTask().problems(PROBLEMS, seed=0, split="test"))


@pytest.mark.slow
def test_topologies_benchmark_ends_with_its_json_keys(pocket_quick: tuple[Path, Any]) -> None:
    """benchmarks/topologies.py on 2 problems: one JSON line, every topology of its SIZES with its five figures.

    It records nothing (store=None), so what is checked is what holds on every CPU: the accuracy is a whole number
    of the 2 problems, and no more than the runs that did not fail; a topology with no failed run made exactly the
    calls its graph plans (``count_calls``) for each problem, one with a failed run (a prompt past the model's
    context, which depends on the text the CPU's arithmetic produced) no more than that."""
    import importlib.util
    import json

    path, _ = pocket_quick
    problems = 2
    done = subprocess.run([sys.executable, "benchmarks/topologies.py", "--pocket-dir", str(path), "--problems",
                           str(problems)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert (figures["bench"], figures["problems"], figures["model"]) == ("topologies", problems, f"pocket:{path.name}")
    spec = importlib.util.spec_from_file_location("benchmark_topologies", ROOT / "benchmarks" / "topologies.py")
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    planned = {name: sum(graph.count_calls().values()) for name, graph in benchmark.topologies(path).items()}
    assert set(figures["results"]) == set(planned) == set(benchmark.SIZES)
    for name, row in figures["results"].items():
        assert set(row) == {"accuracy", "tokens", "calls", "wall_s", "failed_runs"}, name
        assert isinstance(row["tokens"], int) and isinstance(row["calls"], int), name
        assert isinstance(row["failed_runs"], int) and 0 <= row["failed_runs"] <= problems, name
        assert isinstance(row["wall_s"], float | int) and row["wall_s"] >= 0, name
        right = round(row["accuracy"] * problems)
        assert row["accuracy"] == round(right / problems, 4) and 0 <= right <= problems - row["failed_runs"], name
        if row["failed_runs"] == 0:
            assert row["calls"] == problems * planned[name], name
        else:
            assert 0 < row["calls"] <= problems * planned[name], name
        assert row["tokens"] > 0, name

"""Every topology example runs on the pocket model and, over HTTP, on a local OpenAI-compatible server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scaffold.testing import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples" / "topologies").glob("*.py") if p.name != "common.py")
ROW = re.compile(r"^(\S+)\s+([01]\.\d\d)\s+([\d,]+)\s+(\d+)\s+([\d.]+)$")


def run_example(script: Path, *args: str, env: dict[str, str] | None = None) -> list[tuple[str, float, int]]:
    """Run an example; return its table rows as (topology, accuracy, calls)."""
    done = subprocess.run([sys.executable, str(script), "--problems", "3", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [m.groups() for line in done.stdout.splitlines() if (m := ROW.match(line.strip()))]
    assert rows, done.stdout
    return [(name, float(acc), int(calls)) for name, acc, _tokens, calls, _wall in rows]


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
    names = {p.stem for p in EXAMPLES}
    assert {"rsa", "self_consistency"} <= names
    assert len(names) >= 8, names


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_the_pocket_model(script: Path, pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    """On the quick pocket model: the example prints a table row per topology with an accuracy in [0, 1]."""
    path, _ = pocket_quick
    rows = run_example(script, "--pocket-dir", str(path), env={"SCAFFOLD_STORE": str(tmp_path / "runs.db")})
    assert all(0.0 <= accuracy <= 1.0 and calls > 0 for _, accuracy, calls in rows)


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_an_api_model_over_http(script: Path, tmp_path: Path) -> None:
    """--model/--api-base: the example's calls go over HTTP to a local server; a perfect model scores 1.0."""
    with OpenAIServer(policy=answer_anything) as server:
        rows = run_example(script, "--model", "openai/stand-in", "--api-base", server.base_url,
                           env={"OPENAI_API_KEY": "sk-stand-in", "SCAFFOLD_STORE": str(tmp_path / "runs.db")})
        served = len(server.choices_served)
    assert all(accuracy == 1.0 for _, accuracy, _ in rows), rows
    assert served == sum(calls for _, _, calls in rows)  # every model call of the table went over HTTP


@pytest.mark.slow
def test_topologies_benchmark_ends_with_its_json_keys(pocket_quick: tuple[Path, Any]) -> None:
    """benchmarks/topologies.py on a few problems: one JSON line, every topology with its four figures."""
    import json

    path, _ = pocket_quick
    done = subprocess.run([sys.executable, "benchmarks/topologies.py", "--pocket-dir", str(path), "--problems", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "topologies" and figures["problems"] == 2
    import graphs

    assert {"self_consistency", "rsa", "best_of_n", "pairwise_ranking", "aggregation_tree"} <= set(figures["results"])
    assert len(figures["results"]) >= len([n for n in graphs.__all__ if not n.isupper() and n[0].islower()]) // 2
    for name, row in figures["results"].items():
        assert {"accuracy", "tokens", "calls", "wall_s"} <= set(row), name
        assert 0.0 <= row["accuracy"] <= 1.0 and row["tokens"] > 0 and row["calls"] >= 2 and row["wall_s"] > 0

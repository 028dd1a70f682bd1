"""``scaffold eval`` and ``scaffold compare`` end to end, in subprocesses: the pocket model, an API model over HTTP,
a kill and a resume, and the one-line errors."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

import scaffold as sf
from scaffold.evaluation import EVAL_SOURCE
from scaffold.testing import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-stand-in-key-0123456789"
PNG = b"\x89PNG\r\n\x1a\n"


def scaffold(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m scaffold ARGS`` at the repository root; OPENAI_API_KEY only when ``env`` gives it."""
    base = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run([sys.executable, "-m", "scaffold", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})})


def write_problems(path: Path, count: int) -> Path:
    rows = [{"id": f"p{i}", "problem": f"{i + 10}+{2 * i + 1}", "answer": str(3 * i + 11)} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def adder(request: Any) -> str:
    """A stand-in API model: sums the first 'a+b' in the prompt; its second choice of a request is off by one."""
    numbers = re.search(r"\d+(?:\+\d+)+", request.last_content)
    total = sum(map(int, numbers.group(0).split("+"))) if numbers else 0
    return f"Adding up: \\boxed{{{total + (1 if request.choice == 1 else 0)}}}"


def evaluations(db: Path) -> dict[str, int]:
    with sf.Store(str(db)) as store:
        return {e.name: e.problems for e in store.evaluations()}


@pytest.mark.slow
def test_eval_sweep_and_compare_on_the_pocket_model(pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    """A sweep n=1,4 of self-consistency on the quick pocket model: two evaluations, their table, files and plots;
    then `compare` reads them back from the store alone, with their paired difference."""
    model, _ = pocket_quick
    db, out = tmp_path / "runs.db", tmp_path / "out"
    done = scaffold("--store", str(db), "eval", "self_consistency", "-p", "n=1,4", "--model", f"pocket:{model}",
                    "--limit", "6", "--name", "sc", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert evaluations(db) == {"sc.n=1": 6, "sc.n=4": 6}
    assert re.search(r"sc\.n=4 .*accuracy", done.stdout, re.S) and "pass@4" in done.stdout
    written = {p.name for p in out.iterdir()}
    assert {"report.json", "problems.csv", "compare.md", "compare.csv", "accuracy_vs_tokens.png",
            "pass_at_k.png"} <= written
    assert (out / "accuracy_vs_tokens.png").read_bytes().startswith(PNG)
    summaries = json.loads((out / "report.json").read_text())
    assert [s["calls_per_problem"] for s in summaries] == [1.0, 4.0]
    with sf.Store(str(db)) as store:
        runs = store.evaluation_runs("sc.n=4")
        assert [r.item for r in runs] == list(range(6)) and all(r.calls == 4 for r in runs)
    compared = scaffold("--store", str(db), "compare", "sc.n=4", "sc.n=1", "--format", "json")
    assert compared.returncode == 0, compared.stderr
    table = json.loads(compared.stdout)
    assert [row["evaluation"] for row in table["rows"]] == ["sc.n=1", "sc.n=4"]
    assert table["paired"]["problems"] == 6
    by_name = {s["name"]: s for s in summaries}
    expected = by_name["sc.n=4"]["accuracy"]["value"] - by_name["sc.n=1"]["accuracy"]["value"]
    assert table["paired"]["difference"]["value"] == pytest.approx(expected)
    prefix = scaffold("--store", str(db), "compare", "sc", "--format", "markdown")
    assert prefix.returncode == 0 and prefix.stdout.count("| sc.n=") == 2


@pytest.mark.slow
def test_eval_reports_rsa_steps_and_the_aggregation_gain(pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    """RSA on the pocket model: per-step accuracy, AggLM gain rows, and the majority-gain plot."""
    model, _ = pocket_quick
    db, out = tmp_path / "runs.db", tmp_path / "out"
    done = scaffold("--store", str(db), "eval", "rsa", "-p", "n=4", "-p", "k=2", "-p", "steps=2",
                    "--model", f"pocket:{model}", "--limit", "4", "--out", str(out), "--json", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert list(report["node_accuracy"]) == ["step0", "step1", "step2"]
    assert sum(b["problems"] for b in report["gain"]) == 4 * 4 * 2  # every aggregation call is one row
    assert report["finished"] == 4 and report["settings"]["params"] == {"n": "4", "k": "2", "steps": "2"}
    assert (out / "majority_gain.png").read_bytes().startswith(PNG)


@pytest.mark.slow
def test_eval_of_an_api_model_over_http_records_dollars_and_never_the_key(tmp_path: Path) -> None:
    """The native backend over real HTTP to the stand-in server named gpt-4o-mini: every call served once, priced
    at the --price given (a server of one's own is never priced by its model's name: without --price its cost is
    unknown); the key appears in no output, no file and not in the store."""
    data, db, out = write_problems(tmp_path / "p.jsonl", 5), tmp_path / "runs.db", tmp_path / "out"
    with OpenAIServer(policy=adder) as server:
        unpriced = scaffold("--store", str(tmp_path / "other.db"), "eval", "self_consistency", "-p", "n=2", "--data",
                            str(data), "--model", "openai/gpt-4o-mini", "--api-base", server.base_url, "--json",
                            "--no-progress", env={"OPENAI_API_KEY": KEY})
        done = scaffold("--store", str(db), "eval", "self_consistency", "-p", "n=2", "--data", str(data),
                        "--model", "openai/gpt-4o-mini", "--api-base", server.base_url, "--price", "0.15,0.6",
                        "--out", str(out), "--json", "--no-progress", env={"OPENAI_API_KEY": KEY})
        served = len(server.choices_served) - 10
    assert unpriced.returncode == 0, unpriced.stderr[-3000:]
    assert json.loads(unpriced.stdout)["cost_per_problem"] is None
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert served == 10 and report["calls_per_problem"] == 2.0
    assert report["accuracy"]["value"] == 1.0  # the vote's tie goes to the first (right) choice
    assert report["pass_at_k"]["1"]["value"] == pytest.approx(0.5)
    assert report["cost_per_problem"] is not None and report["cost_per_problem"]["value"] > 0
    assert report["settings"]["price"] == [0.15, 0.6]
    assert (out / "accuracy_vs_cost.png").read_bytes().startswith(PNG)
    assert report["dataset"] == "p" and report["settings"]["models"] == {"solver": "openai/gpt-4o-mini"}
    blobs = [done.stdout, done.stderr, db.read_bytes().decode("latin-1")]
    blobs += [p.read_bytes().decode("latin-1") for p in out.iterdir()]
    assert not any(KEY in blob for blob in blobs)


@pytest.mark.slow
def test_a_killed_eval_resumes_without_sending_finished_problems_again(tmp_path: Path) -> None:
    """SIGKILL mid-way, then the same command: it finishes, every problem is scored once, finished ones not re-sent."""
    data, db = write_problems(tmp_path / "p.jsonl", 12), tmp_path / "runs.db"
    command = ["--store", str(db), "eval", "self_consistency", "-p", "n=2", "--data", str(data), "--model",
               "openai/stand-in", "--concurrency", "2", "--name", "killed", "--no-progress"]
    with OpenAIServer(policy=adder, latency=0.4) as server:
        env = {**os.environ, "OPENAI_API_KEY": KEY}
        process = subprocess.Popen([sys.executable, "-m", "scaffold", *command, "--api-base", server.base_url],
                                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while scored_runs(db) < 3:
                assert process.poll() is None and time.monotonic() < deadline, "the eval ended before it was killed"
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        before = scored_runs(db)
        # requests the killed process had in flight are still answered (and counted) by the server: wait for them
        wait_until(lambda: all(r.finished_at is not None for r in server.requests), timeout=60,
                   message="the server never finished the killed process's requests")
        first = len(server.choices_served)
        assert 3 <= before < 12
        done = scaffold(*command, "--api-base", server.base_url, "--json", env={"OPENAI_API_KEY": KEY})
        second = len(server.choices_served) - first
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["finished"] == 12 and report["accuracy"]["value"] == 1.0
    assert second <= 2 * (12 - before)  # nothing of a scored problem was sent again
    with sqlite3.connect(db) as conn:
        per_run = conn.execute("SELECT run_id, count(*) FROM rewards WHERE call_id IS NULL AND source = ? "
                               "GROUP BY run_id", (EVAL_SOURCE,)).fetchall()
    assert len(per_run) == 12 and all(count == 1 for _, count in per_run)


def scored_runs(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM rewards WHERE call_id IS NULL").fetchone()[0])
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0


def test_a_bad_dataset_row_names_its_file_and_line(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "p.jsonl", 3)
    data.write_text(data.read_text() + '{"problem": "1+1"}\n')
    done = scaffold("--store", str(tmp_path / "r.db"), "eval", "single_sample", "--data", str(data), "--model",
                    "openai/stand-in", "--api-base", "http://127.0.0.1:9/v1", env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 1
    assert f"{data}:4: the row has no 'answer'" in done.stderr and "Traceback" not in done.stderr


def test_a_missing_api_key_is_named_before_anything_runs(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "p.jsonl", 2)
    done = scaffold("--store", str(tmp_path / "r.db"), "eval", "single_sample", "--data", str(data), "--model",
                    "openai/gpt-4o-mini")
    assert done.returncode == 2 and "OPENAI_API_KEY" in done.stderr and "Traceback" not in done.stderr
    assert evaluations(tmp_path / "r.db") == {}


@pytest.mark.parametrize("args, message", [
    (["rsa", "--model", "judge=openai/x"], "no model alias 'judge'; its aliases: solver"),
    (["rsa", "--model", "nonsense-model"], "unknown model 'nonsense-model'"),
    (["tree_of_thought"], "unknown topology 'tree_of_thought'"),
    (["rsa", "-p", "populaton=4"], "has no parameter 'populaton'"),
    (["rsa", "-p", "n"], "is not KEY=VALUE"),
    (["--resume", "never-ran"], "no evaluation 'never-ran'"),
    (["rsa", "--k", "0"], "positive integers"),
])
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = scaffold("--store", str(tmp_path / "r.db"), "eval", *args, env={"OPENAI_API_KEY": KEY})
    assert done.returncode in (1, 2) and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_compare_names_what_it_cannot_find(tmp_path: Path) -> None:
    sf.Store(str(tmp_path / "r.db")).close()
    done = scaffold("--store", str(tmp_path / "r.db"), "compare", "nothing-here")
    assert done.returncode == 2 and "no evaluation named 'nothing-here'" in done.stderr


def test_a_local_hugging_face_dataset_directory_loads_through_datasets(tmp_path: Path) -> None:
    """hf:DIR:SPLIT goes through datasets.load_dataset (the hub path, offline); a hub name offline is one line."""
    from scaffold.cli._evaluate import load_rows

    folder = tmp_path / "hubset"
    folder.mkdir()
    (folder / "test.jsonl").write_text('{"question": "1+1", "solution": "2"}\n{"question": "2+3", "solution": "5"}\n')
    rows, dataset, source = load_rows(f"hf:{folder}:test", None, 0, None, "question", "solution")
    assert [(r["problem"], r["answer"]) for r in rows] == [("1+1", "2"), ("2+3", "5")]
    assert source == f"hf:{folder}:test" and dataset.endswith("-test")
    done = scaffold("--store", str(tmp_path / "r.db"), "eval", "single_sample", "--data", "hf:no-such-org/no-such-set",
                    env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "SCAFFOLD_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 1 and "no-such-org/no-such-set: cannot load split 'test'" in done.stderr
    assert "pocket:" not in done.stdout and not (tmp_path / "cache" / "pocket").exists()  # failed before any build


@pytest.mark.slow
def test_the_readme_comparison_script_runs_and_writes_its_table(pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    """examples/compare_topologies.sh (the README's table) on the quick model and 2 problems: 7 rows and the plots."""
    model, _ = pocket_quick
    out = tmp_path / "out"
    env = {**os.environ, "PROBLEMS": "2", "MODEL": f"pocket:{model}", "OUT": str(out),
           "SCAFFOLD": f"{sys.executable} -m scaffold"}
    done = subprocess.run(["bash", "examples/compare_topologies.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in (out / "compare.md").read_text().splitlines() if line.startswith("| cmp-")]
    assert len(rows) == 7 and all("2/2" in row for row in rows)
    assert {"accuracy_vs_tokens.png", "pass_at_k.png", "majority_gain.png"} <= {p.name for p in out.iterdir()}


def test_a_dry_run_counts_the_calls_and_runs_nothing(tmp_path: Path) -> None:
    data, db = write_problems(tmp_path / "p.jsonl", 5), tmp_path / "r.db"
    done = scaffold("--store", str(db), "eval", "rsa", "-p", "n=4", "-p", "steps=1,2", "--data", str(data),
                    "--model", "openai/stand-in", "--api-base", "http://127.0.0.1:9/v1", "--dry-run",
                    env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 0, done.stderr
    assert "5 problems x (solver=8) = 40 model calls" in done.stdout
    assert "5 problems x (solver=12) = 60 model calls" in done.stdout
    assert evaluations(db) == {}


@pytest.mark.slow
def test_a_token_budget_refuses_calls_and_the_problems_resume_later(tmp_path: Path) -> None:
    """--max-total-tokens stops spending (refused calls are never sent); `--resume NAME` finishes the rest."""
    data, db = write_problems(tmp_path / "p.jsonl", 6), tmp_path / "r.db"
    command = ["--store", str(db), "eval", "single_sample", "--data", str(data), "--model", "openai/stand-in",
               "--concurrency", "1", "--name", "budgeted", "--no-progress", "--json", "--max-tokens", "16"]
    with OpenAIServer(policy=adder) as server:
        limited = scaffold(*command, "--api-base", server.base_url, "--max-total-tokens", "250",
                           env={"OPENAI_API_KEY": KEY})
        sent = len(server.choices_served)
        rest = scaffold("--store", str(db), "eval", "--resume", "budgeted", "--json", "--no-progress",
                        env={"OPENAI_API_KEY": KEY})  # every setting, the server's address too, from the store
        total = len(server.choices_served)
    assert limited.returncode == 1 and "the budget refused" in limited.stderr
    first = json.loads(limited.stdout)
    assert 0 < first["finished"] < 6 and first["failed"] == 6 - first["finished"] == 6 - sent
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert json.loads(rest.stdout)["finished"] == 6 and total == 6


@pytest.mark.slow
def test_eval_and_graph_show_take_your_own_graph_from_a_file(tmp_path: Path) -> None:
    """TOPOLOGY may be FILE.py:NAME: a graph written by the user is drawn, evaluated over HTTP and recorded."""
    source = tmp_path / "mine.py"
    source.write_text("import scaffold as sf\n\n@sf.graph\ndef twice(problem, *, n: int = 2):\n"
                      "    return sf.vote(sf.sample('Solve: {problem}', model='solver', n=n, name='samples'))\n")
    shown = scaffold("graph", "show", f"{source}:twice", "-p", "n=3")
    assert shown.returncode == 0 and "%% calls: solver=3" in shown.stdout, shown.stderr
    data, db = write_problems(tmp_path / "p.jsonl", 3), tmp_path / "r.db"
    with OpenAIServer(policy=adder) as server:
        done = scaffold("--store", str(db), "eval", f"{source}:twice", "--data", str(data), "--model",
                        "openai/stand-in", "--api-base", server.base_url, "--json", "--no-progress",
                        env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["graph"] == "twice" and report["finished"] == 3 and report["calls_per_problem"] == 2.0

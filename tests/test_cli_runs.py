"""The ``scaffold runs`` command line: list, show and export via ``python -m scaffold``, errors via CliRunner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from helpers import boxed, chain, rsa

from scaffold._types import Completion, Trace, Usage
from scaffold.cli import main
from scaffold.store import Store
from scaffold.testing import ScriptedBackend

LONG = "a very long derivation " * 40


@pytest.fixture
def recorded(tmp_path: Path) -> dict[str, Any]:
    """A SQLite store with an RSA run (priced, rewarded), an unpriced chain run with a long text, and a failed run."""
    path = tmp_path / "runs.db"
    store = Store(path)
    counter = iter(range(1000))

    def priced(request: Any) -> Completion:
        i = next(counter)
        return Completion(text=f"draft {i} {boxed(7)}", token_ids=(i, i + 1), logprobs=(-0.5, -0.25),
                          usage=Usage(10, 4), cost=0.002)

    rsa.build(n=3, k=2, steps=1).run_sync({"problem": "3+4"}, models={"solver": ScriptedBackend(priced)},
                                          store=store, run_id="rsa0001abc", seed=1)
    chain.build(steps=2).run_sync({"problem": "1+1"}, models={"m": ScriptedBackend(lambda r: LONG + boxed(2))},
                                  store=store, run_id="chain0002", seed=2)
    chain.build(steps=2).run_sync({"problem": "1+1"}, models={"m": ScriptedBackend(lambda r: ValueError("boom"))},
                                  store=store, run_id="fail0003", seed=3, raise_on_error=False)
    store.add_reward(1.0, run_id="rsa0001abc", call_id="rsa0001abc/vote#0")
    store.add_reward(0.5, run_id="rsa0001abc")
    store.flush()
    traces = {run: store.traces(run) for run in ("rsa0001abc", "chain0002", "fail0003")}
    store.close()
    return {"path": str(path), "traces": traces}


def scaffold(store: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m scaffold --store STORE ARGS...`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "scaffold", "--store", store, *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """The CLI in process; an exception other than the CLI's own exit would be a traceback for the user."""
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def test_list_prints_one_row_per_run_newest_first(recorded: dict[str, Any], tmp_path: Path) -> None:
    """``runs list`` prints a row per run, newest first, with calls, tokens, cost ("?" when unknown) and answer."""
    out = scaffold(recorded["path"], "runs", "list", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["ID", "GRAPH", "STATUS", "CALLS", "TOKENS", "COST", "WALL", "ANSWER", "STARTED"]
    assert [row.split()[0] for row in rows] == ["fail0003", "chain0002", "rsa0001abc"]
    rsa_row, chain_row, fail_row = rows[2].split(), rows[1].split(), rows[0].split()
    assert rsa_row[1:7] == ["rsa", "ok", "6", "84", "$0.0120", rsa_row[6]] and rsa_row[7] == "7"
    assert chain_row[1:6] == ["chain", "ok", "2", chain_row[4], "?"]
    assert fail_row[1:3] == ["chain", "error"]
    assert not (tmp_path / "scaffold.db").exists()


def test_list_json_applies_filters_and_limit(recorded: dict[str, Any]) -> None:
    """``runs list --json`` returns run summaries selected by graph, status, model, time and limit."""
    def ids(*args: str) -> list[str]:
        result = invoke("--store", recorded["path"], "runs", "list", "--json", *args)
        assert result.exit_code == 0, result.output
        return [run["id"] for run in json.loads(result.output)]

    out = scaffold(recorded["path"], "runs", "list", "--json")
    assert out.returncode == 0, out.stderr
    assert [run["id"] for run in json.loads(out.stdout)] == ["fail0003", "chain0002", "rsa0001abc"]
    assert ids("--graph", "chain") == ["fail0003", "chain0002"]
    assert ids("--status", "error") == ["fail0003"]
    assert ids("--model", "solver") == ["rsa0001abc"]
    assert ids("--since", "1h", "--limit", "2") == ["fail0003", "chain0002"]
    assert ids("--until", "2000-01-01") == []
    assert ids("--since", "2000-01-01T00:00:00+00:00", "--until", "now", "--graph", "rsa") == ["rsa0001abc"]
    summary = json.loads(invoke("--store", recorded["path"], "runs", "list", "--json", "--graph", "rsa").output)[0]
    assert (summary["calls"], summary["total_tokens"], summary["seed"], summary["answer"]) == (6, 84, 1, "7")


def test_show_prints_the_execution_tree_with_lineage_and_rollups(recorded: dict[str, Any]) -> None:
    """``runs show PREFIX`` prints the header, nodes in execution order with traces, lineage, rewards and rollups."""
    out = scaffold(recorded["path"], "runs", "show", "rsa0")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("run rsa0001abc   graph rsa   status ok")
    for expected in ("seed    1", "params  n=3, k=2, steps=1", "inputs  problem='3+4'", "solver: ? (ScriptedBackend)",
                     "6 model calls, 84 tokens (60 prompt + 24 completion), cost $0.0120", "reward  0.5"):
        assert expected in text
    assert text.index("\nstep0 ") < text.index("\nstep1 ") < text.index("\nvote ") < text.index("per node")
    lines = text.splitlines()
    for trace in recorded["traces"]["rsa0001abc"]:
        line = next(ln for ln in lines[lines.index(next(ln for ln in lines if ln.startswith(trace.node + " "))):]
                    if ln.startswith(f"  #{trace.index} "))
        assert " ok " in line and "answer 7" in line
        if trace.inputs:
            assert line.endswith("reads " + ", ".join(i.split("/", 1)[1] for i in trace.inputs))
        if trace.node == "vote":
            assert "reward 1 " in line
        else:
            assert "tokens 10+4  cost $0.0020" in line
    node_table = lines[lines.index("per node") + 1:lines.index("per model") - 1]
    assert [row.split()[:2] for row in node_table] == [["NODE", "CALLS"], ["step0", "3"], ["step1", "3"]]
    assert lines[lines.index("per model") + 2].split()[:2] == ["?", "6"]


def test_show_json_matches_the_store(recorded: dict[str, Any]) -> None:
    """``runs show --json`` gives the run, every trace with its inputs and reward, and the rollups."""
    out = scaffold(recorded["path"], "runs", "show", "rsa0001abc", "--json", "--full")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    traces: list[Trace] = recorded["traces"]["rsa0001abc"]
    assert data["run"]["id"] == "rsa0001abc" and data["run_reward"] == 0.5
    assert [(t["id"], t["inputs"]) for t in data["traces"]] == [(t.id, list(t.inputs)) for t in traces]
    assert [t["token_ids"] for t in data["traces"]] == [list(t.token_ids) if t.token_ids else None for t in traces]
    assert {t["id"]: t["reward"] for t in data["traces"] if t["reward"] is not None} == {"rsa0001abc/vote#0": 1.0}
    assert {r["key"]: r["calls"] for r in data["rollups"]["node"]} == {"step0": 3, "step1": 3}
    assert data["totals"]["total_tokens"] == 84


def test_show_truncates_texts_unless_full(recorded: dict[str, Any]) -> None:
    """Long texts are cut to one line in ``runs show`` and printed whole (with the prompts) under ``--full``."""
    short = invoke("--store", recorded["path"], "runs", "show", "chain0002")
    full = invoke("--store", recorded["path"], "runs", "show", "chain0002", "--full")
    assert short.exit_code == full.exit_code == 0
    assert LONG.strip() not in short.output and "..." in short.output
    assert LONG.strip() in full.output and "[user]" in full.output and "Solve 1+1" in full.output


def test_show_of_a_failed_run_prints_the_errors(recorded: dict[str, Any]) -> None:
    """A failed run shows its error and each failed trace's error."""
    result = invoke("--store", recorded["path"], "runs", "show", "fail")
    assert result.exit_code == 0
    assert "status error" in result.output and "ValueError: boom" in result.output and "1 failed" in result.output


def test_export_writes_the_selected_runs(recorded: dict[str, Any], tmp_path: Path) -> None:
    """``runs export`` writes one row per trace of the chosen runs and prints how many."""
    out = scaffold(recorded["path"], "runs", "export", "--out", str(tmp_path / "rsa.jsonl"), "--run", "rsa0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"wrote 7 rows to {tmp_path / 'rsa.jsonl'}"
    rows = [json.loads(line) for line in (tmp_path / "rsa.jsonl").read_text().splitlines()]
    assert [row["trace_id"] for row in rows] == [t.id for t in recorded["traces"]["rsa0001abc"]]
    assert rows[0]["token_ids"] == [0, 1]

    out = scaffold(recorded["path"], "runs", "export", "--format", "parquet", "--out", str(tmp_path / "chains.pq"),
                   "--graph", "chain", "--status", "ok")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("wrote 2 rows")
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "chains.pq").column("run_id").to_pylist() == ["chain0002"] * 2


def test_help_has_examples() -> None:
    """``--help`` of every command explains it with examples; ``python -m scaffold`` is the same CLI."""
    for args in ([], ["runs"], ["runs", "list"], ["runs", "show"], ["runs", "export"]):
        result = invoke(*args, "--help")
        assert result.exit_code == 0 and "Examples:" in result.output
    assert "scaffold-sdk[parquet]" in invoke("runs", "export", "--help").output
    out = subprocess.run([sys.executable, "-m", "scaffold", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("Usage: scaffold ")


def test_unknown_run_fails_naming_it(recorded: dict[str, Any], tmp_path: Path) -> None:
    """An unknown run (show or export) exits non-zero with a message naming it, not a traceback."""
    result = invoke("--store", recorded["path"], "runs", "show", "nosuchrun")
    assert result.exit_code == 1
    assert "no run 'nosuchrun'" in result.output
    result = invoke("--store", recorded["path"], "runs", "export", "--out", str(tmp_path / "x.jsonl"),
                    "--run", "rsa0", "--run", "nosuchrun")
    assert result.exit_code == 1 and "nosuchrun" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_ambiguous_prefix_lists_the_candidates(recorded: dict[str, Any]) -> None:
    """A prefix of several run ids is refused and the message lists them."""
    result = invoke("--store", recorded["path"], "runs", "show", "c")  # chain0002 only: unique
    assert result.exit_code == 0
    store = Store(recorded["path"])
    chain.build(steps=1).run_sync({"problem": "2"}, models={"m": ScriptedBackend(lambda r: boxed(2))}, store=store,
                                  run_id="chain0009")
    store.close()
    result = invoke("--store", recorded["path"], "runs", "show", "chain000")
    assert result.exit_code == 1
    assert "ambiguous" in result.output and "chain0002" in result.output and "chain0009" in result.output


def test_bad_time_is_a_usage_error(recorded: dict[str, Any]) -> None:
    """A ``--since`` that is neither an ISO time nor a time ago is a usage error that says what is accepted."""
    result = invoke("--store", recorded["path"], "runs", "list", "--since", "yesterday")
    assert result.exit_code == 2
    assert "'yesterday' is not a time" in result.output and "2h" in result.output


def test_bad_export_suffix_is_a_usage_error(recorded: dict[str, Any], tmp_path: Path) -> None:
    """An export path whose suffix names no format, without ``--format``, is refused before anything is written."""
    result = invoke("--store", recorded["path"], "runs", "export", "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2 and ".jsonl or .parquet" in result.output
    assert not (tmp_path / "x.csv").exists()


def test_store_that_cannot_be_opened_never_shows_the_password() -> None:
    """A store URL whose server refuses the connection is a one-line error without its password."""
    result = invoke("--store", "postgresql://bob:hunter2@127.0.0.1:1/db", "runs", "list")
    assert result.exit_code == 1
    assert "hunter2" not in result.output and "***" in result.output
    assert result.output.startswith("Error: cannot open the store")


def test_malformed_store_url_never_shows_the_password() -> None:
    """A malformed store URL is a one-line error that says what a URL looks like, without echoing the password."""
    result = invoke("--store", "postgresql://bob:hunter2@127.0.0.1:1:/db", "runs", "list")
    assert result.exit_code == 1
    assert "hunter2" not in result.output
    assert result.output.startswith("Error: not a valid store path or database URL")


def test_missing_store_file_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    """A store path that does not exist is reported, not silently created empty."""
    result = invoke("--store", str(tmp_path / "nope.db"), "runs", "list")
    assert result.exit_code == 1 and "no store at" in result.output
    assert not (tmp_path / "nope.db").exists()


def test_default_store_comes_from_the_environment(recorded: dict[str, Any]) -> None:
    """Without ``--store`` the CLI reads ``$SCAFFOLD_STORE``; ``off`` there is an error asking for ``--store``."""
    result = invoke("runs", "list", "--json", env={"SCAFFOLD_STORE": recorded["path"]})
    assert result.exit_code == 0
    assert len(json.loads(result.output)) == 3
    result = invoke("runs", "list", env={"SCAFFOLD_STORE": "off"})
    assert result.exit_code == 1 and "--store" in result.output

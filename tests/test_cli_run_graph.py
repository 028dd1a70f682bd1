"""``scaffold graph`` and ``scaffold run`` through ``python -m scaffold``: topologies, usage errors, real runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphs.registry import TOPOLOGIES, build_topology
from scaffold.store import Store
from scaffold.testing import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
FAKE_KEY = "sk-fake-cli-key-5f3a9c0d"


def scaffold(*args: str, store: Path | None = None, env: dict[str, str] | None = None, drop: tuple[str, ...] = (),
             stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m scaffold ARGS...`` from the repository root, recording into ``store`` (a throwaway file)."""
    environment = {k: v for k, v in os.environ.items() if k not in drop}
    environment.update(env or {})
    if store is not None:
        environment["SCAFFOLD_STORE"] = str(store)
    return subprocess.run([sys.executable, "-m", "scaffold", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=environment, input=stdin)


def usage_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``Error:`` line of a click usage error (exit status 2, no traceback)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def sum_policy(request: Any) -> str:
    """A stand-in API model that adds up the first ``a+b+...`` in its prompt and boxes the total."""
    numbers = re.search(r"\d+(?:\+\d+)+", request.last_content)
    total = sum(map(int, numbers.group(0).split("+"))) if numbers else 0
    return f"Adding up: \\boxed{{{total}}}"


# -- graph ------------------------------------------------------------------------------------
def test_graph_list_names_every_topology_with_a_description(tmp_path: Path) -> None:
    """``graph list`` prints one row per registered topology with a one-line description; --params adds defaults."""
    done = scaffold("graph", "list", store=tmp_path / "runs.db")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["TOPOLOGY", "DESCRIPTION"]
    assert [row.split()[0] for row in rows] == list(TOPOLOGIES)
    assert all(len(row.split()) > 2 for row in rows)
    with_params = scaffold("graph", "list", "--params", store=tmp_path / "runs.db")
    assert with_params.returncode == 0, with_params.stderr
    assert "rsa: " in with_params.stdout and "  n = 16" in with_params.stdout
    params = scaffold("graph", "params", "rsa", store=tmp_path / "runs.db")
    assert params.returncode == 0 and params.stdout.splitlines()[0] == "n = 16"
    assert not (tmp_path / "runs.db").exists()  # nothing to record


def test_graph_show_prints_mermaid_with_the_dry_run_call_count(tmp_path: Path) -> None:
    """``graph show rsa`` prints a Mermaid flowchart of every step and ends with a ``%% calls`` comment."""
    done = scaffold("graph", "show", "rsa", "-p", "n=4", "-p", "steps=2", store=tmp_path / "runs.db")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("flowchart")
    assert all(line.startswith("    ") for line in lines[1:-1])  # nodes and edges, nothing else
    for node in ("step0", "step1", "step2"):
        assert f'["{node}<br/>' in done.stdout
    expected = build_topology("rsa", {"n": "4", "steps": "2"}).count_calls()
    assert expected == {"solver": 12}
    assert lines[-1] == "%% calls: solver=12"


def test_graph_show_text_and_json_formats(tmp_path: Path) -> None:
    """``--format text`` prints the node table with its call count; ``--format json`` prints the spec."""
    text = scaffold("graph", "show", "self_consistency", "-p", "n=5", "--format", "text")
    assert text.returncode == 0, text.stderr
    assert "samples" in text.stdout and text.stdout.rstrip().endswith("solver: 5")
    done = scaffold("graph", "show", "best_of_n", "-p", "n=3", "--prompts", "pocket", "--format", "json")
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout)
    assert spec["name"] == "best_of_n" and spec["params"]["n"] == 3
    assert [node["name"] for node in spec["nodes"]] == ["samples", "best"]


@pytest.mark.parametrize(("args", "named"), [
    (("graph", "show", "rsb"), "unknown topology 'rsb'"),
    (("graph", "show", "rsa", "-p", "populaton=4"), "no parameter 'populaton'"),
    (("graph", "show", "rsa", "-p", "n"), "'n' is not KEY=VALUE"),
    (("graph", "show", "rsa", "-p", "n=0"), "got 0"),
    (("graph", "params", "rsb"), "unknown topology 'rsb'"),
    (("run", "rsb", "--problem", "1+1"), "unknown topology 'rsb'"),
    (("run", "rsa", "-p", "stepz=1", "--problem", "1+1"), "no parameter 'stepz'"),
], ids=["topology", "parameter", "syntax", "value", "params-topology", "run-topology", "run-parameter"])
def test_mistakes_are_one_line_usage_errors(args: tuple[str, ...], named: str, tmp_path: Path) -> None:
    """An unknown topology or parameter, or a bad -p, exits 2 with one line naming the problem; no model is built."""
    line = usage_error(scaffold(*args, store=tmp_path / "runs.db"))
    assert named in line


def test_run_rejects_an_alias_the_topology_does_not_have(tmp_path: Path) -> None:
    """``--model judge=pocket`` on rsa (whose only alias is solver) is a usage error naming ``judge``."""
    line = usage_error(scaffold("run", "rsa", "--model", "judge=pocket", "--problem", "1+1",
                                store=tmp_path / "runs.db"))
    assert "'judge'" in line and "solver" in line


def test_run_without_an_api_key_names_the_variable(tmp_path: Path) -> None:
    """An API model without its key fails before any call, naming OPENAI_API_KEY; nothing is recorded."""
    done = scaffold("run", "single_sample", "--model", "openai/gpt-4o-mini", "--problem", "1+1",
                    store=tmp_path / "runs.db", drop=("OPENAI_API_KEY",))
    assert done.returncode != 0
    assert "OPENAI_API_KEY" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs.db").exists()


# -- run: real models -------------------------------------------------------------------------
@pytest.mark.slow
def test_run_on_the_pocket_model_reports_and_records(pocket_quick: tuple[Path, Any], tmp_path: Path) -> None:
    """self_consistency n=4 on the quick pocket model: JSON report, and the store holds the run with 4 calls."""
    from scaffold.pocket import pocket_task

    path, _ = pocket_quick
    row = pocket_task(path).problems(1, seed=0, split="test")[0]
    store = tmp_path / "runs.db"
    done = scaffold("run", "self_consistency", "-p", "n=4", "--model", f"pocket:{path}", "--problem", row["problem"],
                    "--answer", row["answer"], "--seed", "3", "--run-id", "cli-pocket-1", "--json", store=store)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert (report["run_id"], report["graph"], report["status"], report["seed"]) == ("cli-pocket-1",
                                                                                      "self_consistency", "ok", 3)
    assert report["calls"] == {"solver": 4} and report["models"] == {"solver": f"pocket:{path}"}
    assert report["reference"] == row["answer"] and isinstance(report["correct"], bool)
    assert report["total_tokens"] == report["prompt_tokens"] + report["completion_tokens"] > 0
    assert report["wall_time"] > 0 and report["error"] is None and report["store"] == str(store)
    recorded = Store(store)
    try:
        info = recorded.run("cli-pocket-1")
        assert (info.status, info.calls, info.seed, info.answer) == ("ok", 4, 3, report["answer"])
    finally:
        recorded.close()


@pytest.mark.slow
def test_run_on_an_api_model_over_http(tmp_path: Path) -> None:
    """--model/--api-base through the native backend to a stand-in server: right answer, one choice per call, key
    never shown."""
    graph = build_topology("self_consistency", {"n": "3"})
    with OpenAIServer(policy=sum_policy, api_key=FAKE_KEY) as server:
        done = scaffold("run", "self_consistency", "-p", "n=3", "--model", "openai/stand-in", "--api-base",
                        server.base_url, "--problem", "-", "--answer", "49", "--run-id", "cli-api-1",
                        store=tmp_path / "runs.db", env={"OPENAI_API_KEY": FAKE_KEY}, stdin="12+7+30\n")
        served = len(server.choices_served)
    assert done.returncode == 0, done.stderr[-3000:]
    fields = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert fields["answer"] == "49   (right: reference 49)"
    assert fields["calls"] == "solver=3" and fields["cost"] in ("?", "$0.0000")
    assert fields["run"] == "cli-api-1   (scaffold runs show cli-api-1)"
    assert served == graph.count_calls()["solver"] == 3
    assert FAKE_KEY not in done.stdout + done.stderr


@pytest.mark.slow
def test_a_failed_run_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    """A run whose calls are refused (401) reports what it spent, then its error in one line; exit status 1."""
    with OpenAIServer(policy=sum_policy, api_key="sk-the-right-key") as server:
        args = ("run", "single_sample", "--model", "openai/stand-in", "--api-base", server.base_url, "--problem", "1+2")
        done = scaffold(*args, "--run-id", "cli-fail-1", store=tmp_path / "runs.db", env={"OPENAI_API_KEY": FAKE_KEY})
        as_json = scaffold(*args, "--json", store=tmp_path / "runs.db", env={"OPENAI_API_KEY": FAKE_KEY})
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "status  error" in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error: run cli-fail-1 failed: "), done.stderr
    assert as_json.returncode == 1, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["status"] == "error" and report["error"] and "\n" not in report["error"]
    for output in (done, as_json):
        assert FAKE_KEY not in output.stdout + output.stderr


def test_a_renamed_parameter_still_works_and_the_command_line_says_so():
    """``-p population=4`` builds RSA with n=4 and prints the deprecation on stderr (not a traceback)."""
    import warnings

    from click.testing import CliRunner

    from scaffold.cli import main

    with warnings.catch_warnings():
        result = CliRunner().invoke(main, ["graph", "show", "rsa", "-p", "population=4", "-p", "k=2", "-p", "steps=1",
                                           "--format", "text"])
    assert result.exit_code == 0, result.output
    assert "parameter 'population' of 'rsa' is deprecated; use 'n'" in result.stderr
    new = CliRunner().invoke(main, ["graph", "show", "rsa", "-p", "n=4", "-p", "k=2", "-p", "steps=1",
                                    "--format", "text"])
    assert new.exit_code == 0 and "deprecated" not in new.stderr
    assert result.stdout == new.stdout

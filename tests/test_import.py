"""Importing outputs collected elsewhere: JSONL, CSV and Parquet files become recorded runs (a real SQLite file) that
are voted, scored, reported, replayed, browsed and exported; bad rows stop the import with nothing recorded."""

from __future__ import annotations

import csv
import json
import math
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

import scaffold as sf
from scaffold.evaluation import load_report

ROWS = [
    {"problem": "2+2", "answer": "4", "source": "batch-7",
     "outputs": [{"text": "so \\boxed{4}", "model": "m1", "completion_tokens": 12, "cost": 2e-5,
                  "logprobs": [math.log(0.9)] * 3, "reasoning": "add"},
                 {"text": "\\boxed{5}", "model": "m2", "completion_tokens": 8, "cost": 1e-5},
                 "\\boxed{4}"]},
    {"problem": "3+3", "answer": "6", "outputs": ["\\boxed{7}", "\\boxed{7}", "\\boxed{6}"]},
    {"problem": "4+4", "outputs": ["\\boxed{8}"]},  # no reference: recorded and voted, not scored
]


def write(tmp_path: Path, kind: str, rows: list[dict] = ROWS) -> Path:
    path = tmp_path / f"outputs.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif kind == "csv":
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["problem", "answer", "outputs"])
            writer.writeheader()
            for row in rows:
                writer.writerow({"problem": row["problem"], "answer": row.get("answer", ""),
                                 "outputs": json.dumps(row["outputs"])})
    else:
        pyarrow = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        texts = [[o if isinstance(o, str) else o["text"] for o in row["outputs"]] for row in rows]
        pq.write_table(pyarrow.table({"problem": [r["problem"] for r in rows],
                                      "answer": [r.get("answer") for r in rows], "outputs": texts}), path)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_a_file_of_outputs_becomes_scored_runs(tmp_path, kind):
    store = sf.Store(str(tmp_path / "runs.db"))
    done = sf.import_outputs(write(tmp_path, kind), store=store, name="elsewhere")
    assert (done.rows, done.outputs, done.scored) == (3, 7, 2)
    report = load_report(store, "elsewhere")
    assert [o.correct for o in report.outcomes] == [True, False, None]  # 4 wins 2-1; 7 wins 2-1; no reference
    assert report.pass_at_k[1].value == pytest.approx((2 / 3 + 1 / 3) / 2)
    run = store.run("elsewhere-0")
    assert run.graph == "imported" and run.answer == "4" and run.calls == 0
    assert store.run("elsewhere-2").answer == "8"
    outputs = [t for t in store.traces("elsewhere-0") if t.kind is sf.TraceKind.EXTERNAL]
    assert [t.answer for t in outputs] == ["4", "5", "4"]
    vote = next(t for t in store.traces("elsewhere-0") if t.kind is sf.TraceKind.RULE)
    assert list(vote.inputs) == [t.id for t in outputs]  # lineage: the vote read the imported outputs
    if kind == "jsonl":  # the file's other fields are kept: tokens, cost, logprobs, model, reasoning, row keys
        first = outputs[0]
        assert (first.model, first.usage.completion_tokens, first.cost) == ("m1", 12, 2e-5)
        assert first.logprobs == pytest.approx((math.log(0.9),) * 3) and first.metadata["reasoning"] == "add"
        assert run.completion_tokens == 20 and run.cost is None  # the third output's cost is unknown
        assert store.item("elsewhere", 0)["source"] == "batch-7"  # kept with the dataset row
    store.close()


def test_imported_runs_are_replayed_compared_exported_and_browsed(tmp_path):
    store = sf.Store(str(tmp_path / "runs.db"))
    sf.import_outputs(write(tmp_path, "jsonl"), store=store, name="elsewhere")
    replayed = sf.replay(store, "elsewhere", ks=[1, 3])
    assert replayed.samples_node == "outputs" and replayed.calls == 0 and replayed.problems == 2
    assert replayed.at("vote", 3).accuracy.value == pytest.approx(0.5)
    exported = tmp_path / "calls.jsonl"
    store.export(exported)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert sum(line.get("kind") == "external" for line in lines) == 7
    store.close()
    pytest.importorskip("starlette")
    from scaffold.serve import ServeThread
    from scaffold.ui import create_ui_app

    with ServeThread(create_ui_app(str(tmp_path / "runs.db"))) as server:
        page = json.load(urllib.request.urlopen(server.url + "/api/runs"))
        shown = json.load(urllib.request.urlopen(server.url + "/api/runs/elsewhere-0"))
    assert page["total"] == 3
    assert "outputs" in json.dumps(shown) and "4" in json.dumps(shown)


@pytest.mark.parametrize(("row", "message"), [
    ({"answer": "4", "outputs": ["x"]}, "no 'problem'"),
    ({"problem": "2+2", "outputs": []}, "outputs"),
    ({"problem": "2+2", "outputs": [{"model": "m"}]}, "text"),
    ({"problem": "2+2", "outputs": [{"text": "x", "completion_tokens": -3}]}, "completion_tokens"),
    ({"problem": "2+2", "outputs": [{"text": "x", "cost": "cheap"}]}, "cost"),
])
def test_a_bad_row_names_its_file_and_line_and_nothing_is_recorded(tmp_path, row, message):
    rows = [ROWS[0], ROWS[1], row]
    path = write(tmp_path, "jsonl", rows)
    store = sf.Store(str(tmp_path / "runs.db"))
    with pytest.raises(sf.DatasetError, match=rf"outputs\.jsonl:3: .*{message}"):
        sf.import_outputs(path, store=store, name="elsewhere")
    assert store.runs() == [] and store.evaluations() == []  # all or nothing: no row of the file was recorded
    store.close()


def test_importing_again_resumes_and_never_doubles(tmp_path):
    path = write(tmp_path, "jsonl")
    store = sf.Store(str(tmp_path / "runs.db"))
    sf.import_outputs(path, store=store, name="elsewhere")
    sf.import_outputs(path, store=store, name="elsewhere")
    assert len(store.runs()) == 3
    assert len([r for r in store.rewards("elsewhere-0") if r["call_id"] is None]) == 1
    with pytest.raises(sf.EvaluationError, match="other settings"):
        sf.import_outputs(write(tmp_path, "csv"), store=store, name="elsewhere")  # another file, same name
    store.close()


def test_policy_gradient_training_refuses_imported_runs(tmp_path):
    from trainers.loop import LoopConfig, train_offline

    store = sf.Store(str(tmp_path / "runs.db"))
    sf.import_outputs(write(tmp_path, "jsonl"), store=store, name="elsewhere")
    with pytest.raises(sf.InputError, match="no policy token ids"):
        train_offline(object(), store, LoopConfig(steps=1, problems_per_step=1), progress=False)  # type: ignore[arg-type]
    store.close()


def test_the_command_line_imports_then_compares_and_replays(tmp_path):
    from scaffold.cli._main import main

    db = str(tmp_path / "runs.db")
    runner = CliRunner()
    done = runner.invoke(main, ["--store", db, "runs", "import", str(write(tmp_path, "csv")), "--name", "csv-in"])
    assert done.exit_code == 0, done.output
    assert "imported 3 rows (7 outputs, 2 with a reference)" in done.output
    compared = runner.invoke(main, ["--store", db, "compare", "csv-in"])
    assert compared.exit_code == 0 and "csv-in" in compared.output
    replayed = runner.invoke(main, ["--store", db, "replay", "--from", "csv-in", "--format", "json"])
    assert replayed.exit_code == 0 and json.loads(replayed.output)["calls"] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1", "outputs": ["2"]}\nnot json\n')
    refused = runner.invoke(main, ["--store", db, "runs", "import", str(bad), "--name", "bad"])
    assert refused.exit_code != 0 and "bad.jsonl:2" in refused.output

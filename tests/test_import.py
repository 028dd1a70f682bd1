"""Importing outputs collected elsewhere: JSONL, CSV and Parquet files become recorded runs (a real SQLite file) that
are voted, scored, reported, replayed, browsed and exported; bad rows stop the import with nothing recorded."""

from __future__ import annotations

import csv
import gc
import json
import math
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    ({"problem": "2+2", "outputs": [{"text": "x", "cost": float("inf")}]}, "cost: Input should be a finite number"),
    ({"problem": "2+2", "outputs": [{"text": "x", "logprobs": [-0.1, float("nan")]}]}, "logprobs.1: .*finite"),
    ({"problem": "2+2", "outputs": [{"text": "x", "prompt_tokens": 2**40}]}, "prompt_tokens: .*less than"),
])
def test_a_bad_row_names_its_file_and_line_and_nothing_is_recorded(tmp_path, row, message):
    rows = [ROWS[0], ROWS[1], row]
    path = write(tmp_path, "jsonl", rows)
    store = sf.Store(str(tmp_path / "runs.db"))
    with pytest.raises(sf.DatasetError, match=rf"outputs\.jsonl:3: .*{message}"):
        sf.import_outputs(path, store=store, name="elsewhere")
    assert store.runs() == [] and store.evaluations() == []  # all or nothing: no row of the file was recorded
    store.close()


def test_a_row_nested_too_deeply_to_read_is_a_dataset_error_naming_its_line(tmp_path):
    path = tmp_path / "outputs.jsonl"
    deep = '{"problem": "p", "outputs": ["x"], "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(json.dumps(ROWS[0]) + "\n" + deep + "\n")
    store = sf.Store(str(tmp_path / "runs.db"))
    with pytest.raises(sf.DatasetError, match=r"outputs\.jsonl:2: nested too deeply"):
        sf.import_outputs(path, store=store, name="elsewhere")
    assert store.runs() == []
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


def test_numbered_options_are_read_recorded_and_scored_alike_later(tmp_path):
    """`--answer-kind choice --numbered`: answers stated as option numbers are read as their letters, the kind's
    options are recorded with the evaluation, and a report or replay read later (a new store object) scores by
    them; without --numbered the same numbers are no choice, and --numbered needs the choice kind."""
    from scaffold.answers import ChoiceAnswer
    from scaffold.answers._kind import recorded_kind
    from scaffold.cli._main import main

    rows = [{"problem": "Q1", "answer": "3", "outputs": ["정답: 3", "Answer: 3", "Answer: 1"]},
            {"problem": "Q2", "answer": "B", "outputs": ['{"answer": 1}']}]
    path = tmp_path / "numbered.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    db = str(tmp_path / "runs.db")
    runner = CliRunner()
    for name, flags in (("numbered", ["--numbered"]), ("plain", [])):
        done = runner.invoke(main, ["--store", db, "runs", "import", str(path), "--name", name, "--answer-kind",
                                    "choice", *flags])
        assert done.exit_code == 0, done.output
    with sf.Store(db) as store:
        settings = store.evaluation("numbered").settings
        assert settings["answer_kind_options"] == {"numbered": True}
        assert recorded_kind(settings) == ChoiceAnswer(numbered=True)  # what a report or a replay reads by
        assert "answer_kind_options" not in store.evaluation("plain").settings
        report = load_report(store, "numbered")
        assert [o.correct for o in report.outcomes] == [True, False]
        assert report.pass_at_k[1].value == pytest.approx((2 / 3 + 0) / 2)  # the samples scored by the same kind
        assert [o.correct for o in load_report(store, "plain").outcomes] == [False, False]
        assert [r["value"] for r in sorted(store.rewards("numbered-0"), key=lambda r: r["call_id"] or "")] == [
            1.0, 1.0, 1.0, 0.0]  # the run, then its three outputs
    replayed = runner.invoke(main, ["--store", db, "replay", "--from", "numbered", "--format", "json", "--k", "3"])
    assert replayed.exit_code == 0, replayed.output
    votes = json.loads(replayed.output)["points"]  # re-voted from the store: C, C, A against the reference "3"
    assert [p["accuracy"]["value"] for p in votes if p["k"] == 3] == [0.5]
    refused = runner.invoke(main, ["--store", db, "runs", "import", str(path), "--name", "x", "--numbered"])
    assert refused.exit_code != 0 and "--numbered" in refused.output


CHOICE_ROWS = [
    {"problem": "Which is a prime?", "choices": ["4", "7", "9"], "answer": "B",
     "outputs": ["The answer is (B).", {"text": "**C**", "model": "m1", "cost": 0.0, "note": "é"}, "Answer: 7"]},
    {"problem": "Pick one", "choices": ["red", "blue"], "answer": "A", "outputs": ["no idea"]},
]


def _table_rows(path: Path, ignore: frozenset[str] = frozenset()) -> dict[str, list[dict]]:
    """Every row of every table of the store at ``path``, times, reward ids and ``ignore`` left out, in a stable
    order."""
    import sqlite3

    times = {"created_at", "started_at", "finished_at", "id", *ignore}
    tables = {}
    with sqlite3.connect(path) as conn:
        for table in ("datasets", "evaluations", "items", "runs", "requests", "calls", "edges", "rewards"):
            cursor = conn.execute(f"select * from {table}")
            columns = [c[0] for c in cursor.description]
            found = [{k: v for k, v in zip(columns, row) if k not in times or (table, k) in
                      {("runs", "id"), ("calls", "id")} or (table == "calls" and k == "started_at" and v == 0.0)}
                     for row in cursor.fetchall()]
            tables[table] = sorted(found, key=lambda r: json.dumps(r, sort_keys=True, default=repr))
    return tables


@pytest.mark.parametrize(("rows", "answer_kind"), [(ROWS, None), (CHOICE_ROWS, "choice")])
def test_an_import_records_exactly_what_a_run_of_the_imported_graph_records(tmp_path, rows, answer_kind):
    """The bulk import writes, field by field, the records that running ``IMPORTED`` over the same rows writes."""
    from scaffold.evaluation import IMPORTED
    from scaffold.store._import import IMPORTED_SPEC

    assert IMPORTED.spec() == IMPORTED_SPEC
    imported, run = imported_and_run(tmp_path, rows, answer_kind)
    assert imported == run


def imported_and_run(folder: Path, rows: list[dict], answer_kind: str | None) -> tuple[dict, dict]:
    """The tables (:func:`_table_rows`) of importing ``rows``, and of running ``IMPORTED`` over the same rows."""
    from scaffold._sync import run_released
    from scaffold.evaluation import IMPORTED
    from scaffold.evaluation._harness import record_evaluation
    from scaffold.store._import import _checked

    fast = sf.Store(str(folder / "fast.db"))
    fast.import_outputs(rows, name="elsewhere", answer_kind=answer_kind)
    fast.close()
    checked = [_checked(f"row {i}", row, "problem", "answer", "outputs") for i, row in enumerate(rows)]
    settings_ = {"graph": "imported", "imported_from": "rows", "rows": len(rows)}
    slow = sf.Store(str(folder / "slow.db"))
    run_released(record_evaluation(IMPORTED, checked, {}, name="elsewhere", store=slow, dataset="elsewhere",
                                   answer_kind=answer_kind, require_answers=False, settings=settings_), {})
    slow.close()
    return _table_rows(folder / "fast.db"), _table_rows(folder / "slow.db")


def test_an_import_stopped_part_way_resumes_after_the_last_row_recorded(tmp_path, monkeypatch):
    """Stopped while recording its third row, the same import again records the rest, no row or score twice."""
    import scaffold.store._import as importing

    recorded = importing._run_records

    def stop_at_third(run_id, item, *args):
        if item == 2:
            raise KeyboardInterrupt
        return recorded(run_id, item, *args)

    rows = [*ROWS, *[{"problem": f"{i}+0", "answer": str(i), "outputs": [f"\\boxed{{{i}}}"] * 2} for i in range(3)]]
    store = sf.Store(str(tmp_path / "runs.db"), batch_size=4)  # small transactions: rows 0 and 1 are committed
    monkeypatch.setattr(importing, "_run_records", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        store.import_outputs(rows, name="elsewhere")
    assert gc.isenabled()  # the import pauses the garbage collector while it writes, and restores it when stopped
    store.flush()
    assert [r.id for r in store.runs()] and len(store.runs()) == 2
    monkeypatch.setattr(importing, "_run_records", recorded)
    store.import_outputs(rows, name="elsewhere")
    assert len(store.runs()) == len(rows)
    for item, row in enumerate(rows):
        rewards = store.rewards(f"elsewhere-{item}")
        assert len(rewards) == (len(row["outputs"]) + 1 if "answer" in row else 0)
    store.close()
    whole = sf.Store(str(tmp_path / "whole.db"))
    whole.import_outputs(rows, name="elsewhere")
    whole.close()
    # as if never stopped, but for the attempts of a run whose records were cut by the stop (it started again)
    assert _table_rows(tmp_path / "runs.db", frozenset({"attempts"})) == _table_rows(tmp_path / "whole.db",
                                                                                    frozenset({"attempts"}))


def test_an_import_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    """An import pauses the collector while it writes: a caller's collector that was off stays off."""
    store = sf.Store(str(tmp_path / "runs.db"))
    gc.disable()
    try:
        store.import_outputs(ROWS, name="elsewhere")
        assert not gc.isenabled()
    finally:
        gc.enable()
    store.import_outputs(ROWS, name="again")
    assert gc.isenabled() and len(store.runs()) == 2 * len(ROWS)
    store.close()


def test_an_import_stopped_inside_a_row_records_that_row_once_when_resumed(tmp_path, monkeypatch):
    """Stopped after a row's run and outputs were recorded (no vote, no scores yet), the import again finishes
    that row: one score per output and one for the run, the run ``ok``."""
    import scaffold.store._import as importing

    recorded = importing._run_records

    def stop_inside_second(run_id, item, *args):
        for number, record in enumerate(recorded(run_id, item, *args)):
            if item == 1 and number == 2:
                raise KeyboardInterrupt
            yield record

    store = sf.Store(str(tmp_path / "runs.db"), batch_size=1)  # a transaction a record: part of row 1 is committed
    monkeypatch.setattr(importing, "_run_records", stop_inside_second)
    with pytest.raises(KeyboardInterrupt):
        store.import_outputs(ROWS, name="elsewhere")
    store.flush()
    assert store.run("elsewhere-1").status == "running" and len(store.traces("elsewhere-1")) == 3
    monkeypatch.setattr(importing, "_run_records", recorded)
    store.import_outputs(ROWS, name="elsewhere")
    assert store.run("elsewhere-1").status == "ok" and len(store.traces("elsewhere-1")) == 4
    assert len(store.rewards("elsewhere-1")) == 4 and len(store.runs()) == 3
    assert [o.correct for o in load_report(store, "elsewhere").outcomes] == [True, False, None]
    store.close()


def test_an_import_is_recorded_alike_on_sqlite_and_postgresql(store_url):
    """The bulk path writes runs, traces, lineage and scores through each database's own bulk statements."""
    store = sf.Store(store_url, batch_size=7)  # several transactions, a row's records split between them
    done = store.import_outputs(ROWS, name="elsewhere")
    assert (done.rows, done.outputs, done.scored) == (3, 7, 2)
    report = load_report(store, "elsewhere")
    assert [o.correct for o in report.outcomes] == [True, False, None]
    rewards = store.rewards("elsewhere-0")
    assert sorted((r["call_id"] or "", r["value"]) for r in rewards) == [
        ("", 1.0), ("elsewhere-0/outputs#0", 1.0), ("elsewhere-0/outputs#1", 0.0), ("elsewhere-0/outputs#2", 1.0)]
    assert next(r for r in rewards if r["call_id"] is None)["metadata"] == {"reference": "4"}
    vote = next(t for t in store.traces("elsewhere-1") if t.kind is sf.TraceKind.RULE)
    assert vote.answer == "7" and len(vote.inputs) == 3 and vote.metadata["counts"][0] == ["7", 2.0, 2]
    store.close()


def test_an_import_killed_mid_way_resumes_to_the_same_records(tmp_path):
    """A real process importing a file is killed (SIGKILL) once part of it is committed; the same import again, in
    another process, ends with the records of an import never stopped."""
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    rows = [{"problem": f"{i}+1", "answer": str(i + 1), "outputs": [f"\\boxed{{{i + 1}}}", f"\\boxed{{{i}}}"] * 3}
            for i in range(3000)]
    path = write(tmp_path, "jsonl", rows)
    db = tmp_path / "runs.db"
    script = ("import sys, scaffold as sf\n"
              "store = sf.Store(sys.argv[1], batch_size=40)\n"
              "store.import_outputs(sys.argv[2], name='elsewhere')\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(db), str(path)])
    deadline = time.monotonic() + 120
    committed = 0
    while time.monotonic() < deadline and child.poll() is None:
        try:
            with sqlite3.connect(db) as conn:
                committed = conn.execute("select count(*) from rewards where call_id is null").fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not there yet
            committed = 0
        if committed >= 20:
            break
        time.sleep(0.01)
    assert child.poll() is None, "the import finished before it could be killed: give it more rows"
    child.send_signal(signal.SIGKILL)
    child.wait()
    store = sf.Store(str(db))
    assert 20 <= len([r for r in store.runs() if r.status == "ok"]) < len(rows)
    store.import_outputs(path, name="elsewhere")
    store.close()
    whole = sf.Store(str(tmp_path / "whole.db"))
    whole.import_outputs(path, name="elsewhere")
    whole.close()
    assert _table_rows(db, frozenset({"attempts"})) == _table_rows(tmp_path / "whole.db", frozenset({"attempts"}))


def test_a_long_csv_cell_is_read_and_unreadable_files_are_dataset_errors(tmp_path):
    """A CSV cell longer than the csv module's default limit (131,072 characters) is an output like any other;
    text that is not UTF-8 is a DatasetError naming the file, for imports and for datasets alike."""
    long = tmp_path / "long.csv"
    long.write_text('problem,outputs\n2+2,"[""' + "x" * 200_000 + ' \\\\boxed{4}""]"\n')
    store = sf.Store(str(tmp_path / "runs.db"))
    assert sf.import_outputs(long, store=store, name="long").outputs == 1
    assert len(next(t for t in store.traces("long-0") if t.node == "outputs").text) > 200_000
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"problem": "caf\xe9", "answer": "4", "outputs": ["x"]}\n')
    with pytest.raises(sf.DatasetError, match=r"latin\.jsonl: not UTF-8 text"):
        sf.import_outputs(latin, store=store, name="latin")
    with pytest.raises(sf.DatasetError, match=r"latin\.jsonl: not UTF-8 text"):
        sf.load_problems(str(latin))
    store.close()


_TEXTS = st.text(st.characters(codec="utf-8"), max_size=30) | st.sampled_from(["\\boxed{4}", "so (B)", ""])
_OUTPUT = st.fixed_dictionaries({"text": _TEXTS}, optional={
    "answer": _TEXTS | st.integers(), "model": _TEXTS, "prompt_tokens": st.integers(0, 2**31 - 1),
    "completion_tokens": st.integers(0, 2**31 - 1),
    "cost": st.floats(0, 1e3, allow_nan=False) | st.integers(0, 5),
    "logprobs": st.lists(st.floats(-50, 0), max_size=4), "reasoning": _TEXTS, "finish_reason": _TEXTS,
    "note": st.none() | st.integers() | st.lists(_TEXTS, max_size=2) | st.dictionaries(_TEXTS, _TEXTS, max_size=2)})


@given(output=_OUTPUT, index=st.integers(0, 100))
def test_an_imported_output_row_is_the_row_of_its_external_trace(output, index):
    """An import writes each output's ``calls`` row without making its trace: the row is the one the writer makes
    from that trace, whatever the output holds (given or extracted answer, finish reason, metadata...)."""
    from scaffold._external import external_trace
    from scaffold.answers import answer_kind
    from scaffold.store import _codec as codec
    from scaffold.store._import import ImportedOutput, _output, output_row

    checked = _output(ImportedOutput.model_validate(output).model_dump(exclude_none=True))
    extract = answer_kind("choice").bind({"problem": "p", "choices": ["a", "b"]}).extract
    trace = external_trace("imported-3", "outputs", index, checked, extract)
    row, expected = output_row("imported-3", "outputs", index, checked, extract), codec.call_values(trace, None, None)
    assert row == expected and [type(v) for v in row] == [type(v) for v in expected]


def test_a_row_the_database_refuses_fails_the_import_by_name_and_importing_again_records_it(store, monkeypatch):
    """The database refuses one output of row 1 (past the sanitiser): the import raises a RecordError naming the row,
    rows 0 and 2 are recorded, row 1 ends as ``error`` keeping the outputs that fit; importing again records row 1
    whole, each output and the run scored once."""
    from scaffold.store._codec import CALL_COLUMNS

    add_calls = store.writer._add_calls
    position = CALL_COLUMNS.index("index")

    def tampered(batch, rows):
        add_calls(batch, rows)
        row = batch.calls.get("elsewhere-1/outputs#1")
        if row is not None:
            batch.calls[row[0]] = (*row[:position], 2**70, *row[position + 1:])

    monkeypatch.setattr(store.writer, "_add_calls", tampered)
    with pytest.raises(sf.RecordError) as refused:
        store.import_outputs(ROWS, name="elsewhere")
    assert "refused 1 of 3 rows" in str(refused.value) and "row 1" in str(refused.value)
    assert "calls.index" in str(refused.value)
    assert [store.run(f"elsewhere-{i}").status for i in range(3)] == ["ok", "error", "ok"]
    assert sorted(t.id for t in store.traces("elsewhere-1")) == ["elsewhere-1/outputs#0", "elsewhere-1/outputs#2",
                                                                 "elsewhere-1/vote#0"]
    monkeypatch.undo()
    done = store.import_outputs(ROWS, name="elsewhere")
    assert done.rows == 3 and store.run("elsewhere-1").status == "ok" and len(store.traces("elsewhere-1")) == 4
    for item in (0, 1):
        rewards = store.rewards(f"elsewhere-{item}")
        assert sorted(r["call_id"] or "" for r in rewards) == ["", *(f"elsewhere-{item}/outputs#{i}" for i in range(3))]
    assert [o.correct for o in load_report(store, "elsewhere").outcomes] == [True, False, None]


def test_an_import_counts_every_refused_row_beyond_what_the_writer_remembers(store, monkeypatch):
    """The writer remembers only its latest refusals (``_REFUSED_KEPT``); the import counts the refused rows from the
    store, so with room for one it still reports both refused rows, the first by name."""
    from scaffold.store import _writer
    from scaffold.store._codec import CALL_COLUMNS

    add_calls = store.writer._add_calls
    position = CALL_COLUMNS.index("index")

    def tampered(batch, rows):
        add_calls(batch, rows)
        for run in ("many-0", "many-2"):
            row = batch.calls.get(f"{run}/outputs#0")
            if row is not None:
                batch.calls[row[0]] = (*row[:position], 2**70, *row[position + 1:])

    monkeypatch.setattr(store.writer, "_add_calls", tampered)
    monkeypatch.setattr(_writer, "_REFUSED_KEPT", 1)
    with pytest.raises(sf.RecordError) as refused:
        store.import_outputs(ROWS, name="many")
    assert "refused 2 of 3 rows" in str(refused.value) and "the first, row 0" in str(refused.value)
    assert [store.run(f"many-{i}").status for i in range(3)] == ["error", "ok", "error"]


_ROW = st.fixed_dictionaries(
    {"problem": st.text(min_size=1, max_size=20).filter(str.strip),
     "outputs": st.lists(_OUTPUT | _TEXTS, min_size=1, max_size=4)},
    optional={"answer": st.sampled_from(["4", "B", "(A)", "blue"]) | _TEXTS, "source": _TEXTS})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_ROW, min_size=1, max_size=3), kind=st.sampled_from([None, "choice", "text"]))
def test_any_import_records_exactly_what_a_run_of_the_imported_graph_records(tmp_path_factory, rows, kind):
    """The field-by-field comparison above, over generated rows: outputs of every shape (given or extracted
    answers, tokens, costs, logprobs, finish reasons, metadata), references or none, extra row keys."""
    rows = [{**row, "choices": ["red", "blue"]} if kind == "choice" else row for row in rows]
    imported, run = imported_and_run(tmp_path_factory.mktemp("generated"), rows, kind)
    assert imported == run

"""Exporting recorded calls to JSONL and Parquet, read back with Hugging Face ``datasets``, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import chain, rsa
from sqlalchemy import update

import scaffold.store._export as export_module
from scaffold._errors import StoreError
from scaffold._types import Completion, Trace, Usage
from scaffold.store import Store
from scaffold.store._export import COLUMNS, export, parquet_schema
from scaffold.store._schema import RUNS
from scaffold.testing import ScriptedBackend


class TokenBackend(ScriptedBackend):
    """Replies with distinct texts carrying token ids and logprobs, and remembers each completion by its text."""

    def __init__(self, text_size: int = 0) -> None:
        self.returned: dict[str, Completion] = {}
        counter = itertools.count()

        def reply(request: Any) -> Completion:
            i = next(counter)
            completion = Completion(
                text=f"draft {i} " + "x" * text_size + r" \boxed{7}",
                token_ids=(i, 1000 + i, 2**31 - 1 - i),
                logprobs=(-i / 3, -1e-300, -0.1 * i - 1e-9, -123.456789012345678),
                usage=Usage(5, 3), cost=0.001 * (i + 1),
            )
            self.returned[completion.text] = completion
            return completion

        super().__init__(reply)


def record_runs(store: Store) -> TokenBackend:
    """An RSA run (7 traces, with call and run rewards) and a chain run (2 traces) recorded in ``store``."""
    backend = TokenBackend()
    rsa.build(n=3, k=2, steps=1).run_sync({"problem": "3+4"}, models={"solver": backend}, store=store,
                                          run_id="rsa-a", seed=1)
    chain.build(steps=2).run_sync({"problem": "1+1"}, models={"m": backend}, store=store, run_id="chain-b", seed=2)
    store.add_reward(1.0, run_id="rsa-a", call_id="rsa-a/vote#0")
    store.add_reward(0.25, run_id="rsa-a", call_id="rsa-a/vote#0")
    store.add_reward(2.0, run_id="rsa-a")
    store.flush()
    return backend


@pytest.fixture
def load_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, Path], list[dict[str, Any]]]:
    """Loads an exported file with ``datasets.load_dataset``, offline, caching only under ``tmp_path``."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)

    def load(kind: str, path: Path) -> list[dict[str, Any]]:
        loaded = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
        return list(loaded)

    return load


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_loads_in_datasets_with_exact_tokens_logprobs_and_lineage(
        store: Store, load_hf: Callable[[str, Path], list[dict[str, Any]]], tmp_path: Path, fmt: str) -> None:
    """Each trace is one row that ``datasets`` loads with exact token ids, logprobs, request, inputs and rewards."""
    backend = record_runs(store)
    traces: dict[str, Trace] = {t.id: t for run in ("rsa-a", "chain-b") for t in store.traces(run)}
    path = tmp_path / f"calls.{fmt}"

    assert export(store, path) == len(traces) == 9
    rows = load_hf("json" if fmt == "jsonl" else "parquet", path)

    assert len(rows) == 9
    assert list(rows[0]) == list(COLUMNS)
    assert {row["trace_id"] for row in rows} == set(traces)
    assert [row["run_id"] for row in rows] == ["rsa-a"] * 7 + ["chain-b"] * 2  # runs in start order
    for row in rows:
        trace = traces[row["trace_id"]]
        assert (row["node"], row["index"], row["kind"], row["status"]) == (trace.node, trace.index,
                                                                          trace.kind.value, "ok")
        assert row["inputs"] == list(trace.inputs)
        assert row["text"] == trace.text and row["answer"] == "7"
        assert json.loads(row["params"]) == (dict(trace.request.params) if trace.request else {})
        if trace.kind.value == "model":
            sent = backend.returned[row["text"]]
            assert row["token_ids"] == list(sent.token_ids or ())
            assert row["logprobs"] == list(sent.logprobs or ())
            assert (row["prompt_tokens"], row["completion_tokens"], row["cost"]) == (5, 3, sent.cost)
            assert trace.request is not None
            assert row["messages"] == [{"role": r, "content": c} for r, c in trace.request.messages]
            assert row["backend"] == "TokenBackend"
        else:
            assert row["token_ids"] is None and row["logprobs"] is None and row["messages"] == []
    by_id = {row["trace_id"]: row for row in rows}
    aggregates = [by_id[f"rsa-a/step1#{i}"] for i in range(3)]
    assert all(len(a["inputs"]) == 2 and all(i.startswith("rsa-a/step0#") for i in a["inputs"]) for a in aggregates)
    assert by_id["rsa-a/vote#0"]["inputs"] == [f"rsa-a/step1#{i}" for i in range(3)]
    assert by_id["chain-b/aggregate#0"]["inputs"] == ["chain-b/generate#0"]
    assert by_id["rsa-a/vote#0"]["rewards"] == 1.25
    assert [row["rewards"] for row in rows if row["trace_id"] != "rsa-a/vote#0"] == [None] * 8
    assert {row["run_id"]: row["run_reward"] for row in rows} == {"rsa-a": 2.0, "chain-b": None}
    assert {row["run_id"]: (row["graph"], row["run_seed"], row["run_status"]) for row in rows} == {
        "rsa-a": ("rsa", 1, "ok"), "chain-b": ("chain", 2, "ok")}


def test_filters_and_run_ids_select_the_runs(store: Store, tmp_path: Path) -> None:
    """Filters and explicit run ids choose the exported runs; both given, a run must be listed and match."""
    record_runs(store)
    path = tmp_path / "out.jsonl"

    def exported(**selection: Any) -> list[str]:
        count = export(store, path, **selection)
        ids = [json.loads(line)["trace_id"] for line in path.read_text().splitlines()]
        assert count == len(ids)
        return sorted({trace_id.split("/")[0] for trace_id in ids})

    assert exported() == ["chain-b", "rsa-a"]
    assert exported(graph="chain") == ["chain-b"]
    assert exported(model="solver") == ["rsa-a"]
    assert exported(status="ok") == ["chain-b", "rsa-a"]
    assert exported(status="error") == []
    assert exported(since=store.run("chain-b").started_at) == ["chain-b"]
    assert exported(until=store.run("chain-b").started_at) == ["rsa-a"]
    assert exported(run_ids=["rsa-a"]) == ["rsa-a"]
    assert exported(run_ids=["rsa-a", "chain-b", "rsa-a"]) == ["chain-b", "rsa-a"]
    assert exported(run_ids=["rsa-a"], graph="chain") == []
    assert path.read_text() == ""


def test_unknown_run_id_raises_store_error_naming_it(store: Store, tmp_path: Path) -> None:
    """An unknown listed run id raises ``StoreError`` naming it and leaves an earlier file untouched, no partial."""
    record_runs(store)
    (tmp_path / "out.jsonl").write_text("earlier export\n")
    with pytest.raises(StoreError, match="no-such-run"):
        export(store, tmp_path / "out.jsonl", run_ids=["rsa-a", "no-such-run"])
    assert (tmp_path / "out.jsonl").read_text() == "earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if "out" in p.name) == ["out.jsonl"]


def test_pages_of_runs_with_equal_start_times_export_each_run_once(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of runs with equal start times export each run once, in (start, id) order, traces in execution order."""
    backend = TokenBackend()
    ids = [f"run-{i}" for i in (4, 0, 3, 1, 2)]
    for seed, run_id in enumerate(ids):
        chain.build(steps=3).run_sync({"problem": "1+1"}, models={"m": backend}, store=store, run_id=run_id,
                                      seed=seed)
    with store.engine.begin() as conn:
        conn.execute(update(RUNS).where(RUNS.c.id.in_(ids[:4])).values(started_at=1000.0))
    monkeypatch.setattr(export_module, "RUN_PAGE", 2)
    monkeypatch.setattr(export_module, "YIELD_PER", 1)
    path = tmp_path / "paged.jsonl"

    assert export(store, path) == 15
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    order = ["run-0", "run-1", "run-3", "run-4", "run-2"]
    assert [row["trace_id"] for row in rows] == [f"{r}/{n}" for r in order for n in
                                                 ("generate#0", "aggregate#0", "aggregate_2#0")]
    assert [row["inputs"] for row in rows[:3]] == [[], ["run-0/generate#0"], ["run-0/aggregate#0"]]


def test_parquet_has_a_fixed_schema_and_row_groups(store: Store, tmp_path: Path) -> None:
    """Parquet is written in row groups with the fixed schema (params a JSON string, token ids int32), even empty."""
    import pyarrow.parquet as pq

    record_runs(store)
    path = tmp_path / "out.parquet"

    assert export(store, path, row_group_rows=2) == 9
    file = pq.ParquetFile(path)
    assert file.num_row_groups == 5
    assert file.schema_arrow == parquet_schema()
    assert str(file.schema_arrow.field("token_ids").type.value_type) == "int32"
    assert str(file.schema_arrow.field("params").type) == "string"
    assert export(store, tmp_path / "none.parquet", graph="nothing") == 0
    assert pq.read_table(tmp_path / "none.parquet").schema == parquet_schema()


def test_format_comes_from_the_suffix_unless_given(store: Store, tmp_path: Path) -> None:
    """``.jsonl`` and ``.parquet`` pick the format; ``format=`` overrides; anything else is refused."""
    record_runs(store)
    assert export(store, tmp_path / "rows.data", format="jsonl", graph="chain") == 2
    assert len((tmp_path / "rows.data").read_text().splitlines()) == 2
    assert export(store, tmp_path / "rows.PARQUET", graph="chain") == 2
    assert (tmp_path / "rows.PARQUET").read_bytes()[:4] == b"PAR1"
    with pytest.raises(ValueError, match=r"\.jsonl or \.parquet"):
        export(store, tmp_path / "rows.csv")
    with pytest.raises(ValueError, match="format must be one of"):
        export(store, tmp_path / "rows.jsonl", format="csv")
    with pytest.raises(TypeError, match="colour"):
        export(store, tmp_path / "rows.jsonl", colour="red")


def test_parquet_without_pyarrow_names_the_extra(store: Store, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyarrow, a Parquet export raises ``StoreError`` saying which extra to install, and writes nothing."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(StoreError, match=r"pip install 'scaffold-sdk\[parquet\]'"):
        export(store, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_non_finite_floats_are_null_in_jsonl(store: Store, tmp_path: Path) -> None:
    """JSON has no infinity: a -inf logprob is written as null in JSONL, so strict readers can parse every line."""
    backend = ScriptedBackend(lambda r: Completion(text=r"\boxed{1}", token_ids=(1, 2), logprobs=(float("-inf"), -1.5)))
    chain.build(steps=1).run_sync({"problem": "p"}, models={"m": backend}, store=store, run_id="inf")
    path = tmp_path / "inf.jsonl"
    assert export(store, path) == 1
    row = json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}"))
    assert (row["token_ids"], row["logprobs"]) == ([1, 2], [None, -1.5])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_memory_stays_flat_in_the_store_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     fmt: str) -> None:
    """Exporting a store of ~40 MB of rows holds a small, bounded part of it in Python memory at any time."""
    store = Store(tmp_path / "big.db")
    backend = TokenBackend(text_size=20_000)
    for i in range(40):
        rsa.build(n=3, k=2, steps=1).run_sync({"problem": "p"}, models={"solver": backend}, store=store,
                                              run_id=f"big-{i}", seed=i)
    store.flush()
    monkeypatch.setattr(export_module, "RUN_PAGE", 4)
    monkeypatch.setattr(export_module, "YIELD_PER", 10)
    path = tmp_path / f"big.{fmt}"
    export(store, tmp_path / f"warm-up.{fmt}", run_ids=["big-0"])  # modules imported on first use are not rows
    tracemalloc.start()
    try:
        written = export(store, path, row_group_rows=20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        store.close()
    assert written == 280
    exported = 280 * 20_000 + 120 * 2 * 20_000  # texts, plus the candidates quoted in aggregation prompts
    assert exported > 10_000_000
    assert peak < exported / 4, f"peak {peak / 1e6:.1f} MB for {exported / 1e6:.1f} MB exported"

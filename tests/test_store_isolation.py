"""One refused record costs only its own run, on SQLite and on a real PostgreSQL server.

The database refuses for real here: values the store's own checks did not foresee are injected past them
(a writer that alters one run's row, one trace's row), a database made read-only under the store. Each test
then checks that every other run was kept and that the next run records and reads back.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import scaffold as sf
from scaffold._types import Completion, Usage
from scaffold.store import Store
from scaffold.testing import ScriptedBackend

BOXED = "so \\boxed{1}"


@sf.graph
def solo(problem):
    return sf.generate("Solve {problem}", model="m")


@sf.graph
def three(problem):
    return sf.sample("Solve {problem}", model="m", n=3)


def dialect(store: Store) -> str:
    return store.url.get_backend_name()


def then_a_normal_run_is_recorded(store: Store, run_id: str = "after") -> None:
    solo.run_sync({"problem": "after"}, models={"m": ScriptedBackend(lambda r: "\\boxed{5}")}, store=store,
                  run_id=run_id)
    assert store.run(run_id).status == "ok" and [t.answer for t in store.traces(run_id)] == ["5"]


def tamper_run_row(monkeypatch: pytest.MonkeyPatch, store: Store, run_id: str, **values: Any) -> None:
    """Let ``run_id``'s row reach the writer with ``values`` in it, past the run's own checks."""
    put = store.writer.put

    def altered(record: tuple[Any, ...]) -> None:
        if record[0] == "run" and record[1]["id"] == run_id:
            record = ("run", {**record[1], **values})
        put(record)

    monkeypatch.setattr(store.writer, "put", altered)


def tamper_call_row(monkeypatch: pytest.MonkeyPatch, store: Store, trace_id: str, column: str, value: Any) -> None:
    """Let the row of trace ``trace_id`` reach the database with ``column = value``, past the sanitiser."""
    from scaffold.store._codec import CALL_COLUMNS

    call_row = store.writer._call_row
    position = CALL_COLUMNS.index(column)

    def altered(trace: Any, key: Any, backend: Any) -> tuple[Any, ...]:
        row = call_row(trace, key, backend)
        return (*row[:position], value, *row[position + 1:]) if trace.id == trace_id else row

    monkeypatch.setattr(store.writer, "_call_row", altered)


def test_a_refused_run_fails_alone_and_the_other_runs_of_its_batch_are_kept(store, monkeypatch):
    """Three runs written in one batch, one with a seed no column holds: that run raises a RecordError
    naming the run and the field, the other two are recorded whole, and the store keeps recording."""
    tamper_run_row(monkeypatch, store, "bad", seed=2**64)
    backend = ScriptedBackend(lambda r: BOXED)

    async def main() -> list[Any]:
        return await asyncio.gather(*[solo.run({"problem": f"p{i}"}, models={"m": backend}, store=store, run_id=rid)
                                      for i, rid in enumerate(["a", "bad", "c"])], return_exceptions=True)

    first, refused, third = asyncio.run(main())
    assert isinstance(refused, sf.RecordError) and isinstance(refused, sf.StoreError)
    assert "run 'bad'" in str(refused) and "runs.seed" in str(refused) and "outside the column" in str(refused)
    assert first.answer == third.answer == "1"
    assert [store.run(r).status for r in ("a", "c")] == ["ok", "ok"]
    assert [t.answer for t in store.traces("a")] == ["1"] and [t.answer for t in store.traces("c")] == ["1"]
    with pytest.raises(sf.StoreError, match="no run 'bad'"):
        store.run("bad")
    assert store.write_error is None
    then_a_normal_run_is_recorded(store)


def test_a_trace_refused_after_its_run_was_committed_ends_the_run_as_error_and_keeps_its_other_traces(
        store, monkeypatch):
    """The run's row is committed first; later one of its three traces is refused: the run raises a
    RecordError naming the trace and the column, ends as `error` with that reason (never left `running`),
    and keeps the two traces that fit."""
    tamper_call_row(monkeypatch, store, "late/sample#1", "index", 2**70)
    backend = ScriptedBackend(lambda r: BOXED, delay=0.3)  # the run's row is written before any trace
    with pytest.raises(sf.RecordError) as refused:
        three.run_sync({"problem": "p"}, models={"m": backend}, store=store, run_id="late")
    message = str(refused.value)
    assert "trace 'late/sample#1'" in message and "run 'late'" in message and "calls.index" in message
    info = store.run("late")
    assert info.status == "error" and "late/sample#1" in (info.error or "")
    assert sorted(t.id for t in store.traces("late")) == ["late/sample#0", "late/sample#2"]
    monkeypatch.undo()
    then_a_normal_run_is_recorded(store)


def test_a_closed_store_fails_the_run_at_once_instead_of_hanging_it(tmp_path):
    """A run into a store that was closed raises StoreError (no durability wait left unsettled)."""
    store = Store(tmp_path / "runs.db")
    store.close()
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: BOXED)}, store=store)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the outcome is what this test reports
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "Graph.run into a closed store never returned"
    assert isinstance(outcome[0], sf.ScaffoldError) and "closed" in str(outcome[0])


def test_waiting_for_the_record_is_bounded_by_the_runs_timeout(tmp_path, monkeypatch):
    """A database that stalls until the test releases it: a run with timeout=0.5 raises StoreError once its
    timeout (and one more second) has passed, while the database is still stalled, instead of waiting for it."""
    store = Store(tmp_path / "runs.db")
    release = threading.Event()
    committed = threading.Event()
    commit = store.writer._commit

    def stalled(batch: Any) -> Any:
        release.wait(120)  # only a deadline: the test releases it once the run has raised
        try:
            return commit(batch)
        finally:
            committed.set()

    monkeypatch.setattr(store.writer, "_commit", stalled)
    try:
        with pytest.raises(sf.StoreError, match="did not confirm this run's record within"):
            solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: BOXED)}, store=store,
                          timeout=0.5)
        assert not committed.is_set(), "the run waited for the stalled database"
    finally:
        release.set()
        store.close()


@contextlib.contextmanager
def read_only(store: Store) -> Iterator[None]:
    """Make the store's real database refuse writes until the block ends (SQLite: query_only on every
    transaction; PostgreSQL: default_transaction_read_only for the database, existing sessions ended)."""
    if dialect(store) == "sqlite":
        state = {"on": True}

        @sa.event.listens_for(store.engine, "begin")
        def _pragma(conn: Any) -> None:
            conn.exec_driver_sql(f"PRAGMA query_only = {1 if state['on'] else 0}")

        try:
            yield
        finally:
            state["on"] = False
        return
    name = store.url.database
    admin = sa.create_engine(store.url.set(database="postgres"), isolation_level="AUTOCOMMIT")

    def switch(on: bool) -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if on else "off"}')
            conn.exec_driver_sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")

    switch(True)
    try:
        yield
    finally:
        switch(False)
        admin.dispose()


def test_a_database_that_cannot_be_written_refuses_new_runs_until_it_can(store):
    """While the database refuses every write: the run in flight raises StoreError, the store says why
    (write_error), and a new run is refused before any model call; once writes work again the store
    notices within seconds and records again."""
    then_a_normal_run_is_recorded(store, "before")
    with read_only(store):
        with pytest.raises(sf.StoreError):
            solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: BOXED)}, store=store,
                          run_id="during")
        assert store.write_error is not None and "cannot write" in str(store.write_error)
        unpaid = ScriptedBackend(lambda r: BOXED)
        with pytest.raises(sf.StoreError):
            solo.run_sync({"problem": "p"}, models={"m": unpaid}, store=store, run_id="refused")
        assert unpaid.calls == 0
    deadline = time.monotonic() + 30
    while store.write_error is not None:
        assert time.monotonic() < deadline, f"the store never noticed the database was writable: {store.write_error}"
        time.sleep(0.1)
    then_a_normal_run_is_recorded(store)
    assert store.run("before").status == "ok"


class Hostile:
    """A backend answering with everything a misbehaving server could send back."""

    capabilities = sf.Capabilities()

    def __init__(self, completion: Completion) -> None:
        self.completion = completion

    async def complete(self, request: Any) -> list[Completion]:
        return [self.completion] * request.n


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_model_output_no_column_holds_is_recorded_sanitised_field_by_field(store):
    """Text with NUL and a lone surrogate, token counts past 32 bits, a 100-character finish reason, token ids
    past int32, a missing logprob, a NaN cost and metadata with infinities nested 5,000 deep are recorded
    (each changed field listed under metadata["sanitised"]); the run ends ok."""
    completion = Completion(
        text="a\x00b\ud800c \\boxed{1}", usage=Usage(2**40, 7), finish_reason="x" * 100, token_ids=(1, 2**40),
        logprobs=(-0.5, None), cost=float("nan"),  # type: ignore[arg-type]
        metadata={"deep": nested(5000), "inf": float("inf"), "ok": 1})
    result = solo.run_sync({"problem": "p"}, models={"m": Hostile(completion)}, store=store, run_id="hostile")
    assert result.answer == "1" and result.output.text == "a\x00b\ufffdc \\boxed{1}"  # cleaned at the call
    (trace,) = store.traces("hostile")
    postgres = dialect(store) == "postgresql"
    assert trace.text == ("a\ufffdb\ufffdc \\boxed{1}" if postgres else "a\x00b\ufffdc \\boxed{1}")
    assert trace.usage == Usage(2**31 - 1 if postgres else 2**40, 7)
    assert trace.metadata["finish_reason"] == "x" * 40
    assert trace.token_ids is None and trace.cost is None
    assert trace.logprobs is not None and trace.logprobs[0] == -0.5 and math.isnan(trace.logprobs[1])
    assert trace.metadata["inf"] is None and trace.metadata["ok"] == 1
    depth, value = 0, trace.metadata["deep"]
    while isinstance(value, list):
        depth, value = depth + 1, value[0]
    assert value == "…" and depth < 5000
    expected = {"cost", "finish_reason", "logprobs", "metadata", "token_ids"}
    expected |= {"prompt_tokens", "text"} if postgres else set()
    assert set(trace.metadata["sanitised"]) == expected
    assert store.run("hostile").status == "ok"
    assert store.run("hostile").prompt_tokens == (2**31 - 1 if postgres else 2**40)
    then_a_normal_run_is_recorded(store)


@pytest.mark.parametrize(("change", "fragment"), [
    ({"seed": 2**64}, "does not fit in 64 bits"),
    ({"seed": -(2**63) - 1}, "does not fit in 64 bits"),
    ({"seed": "7"}, "must be an integer"),
    ({"seed": True}, "must be an integer"),
    ({"run_id": "a\x00b"}, "NUL character"),
    ({"run_id": ""}, "non-empty"),
    ({"inputs": {"problem": "x\ud800y"}}, "inputs.problem holds a lone surrogate"),
    ({"inputs": {"problem": nested(70)}}, "nested more than 64 levels"),
    ({"dataset": "rows\x00"}, "dataset must be a name"),
])
def test_caller_values_no_store_can_hold_are_refused_before_the_run(store, change, fragment):
    """A seed beyond 64 bits, a run id with NUL, inputs that are not valid Unicode or nest too deeply: an
    InputError before any model call, and nothing recorded."""
    backend = ScriptedBackend(lambda r: BOXED)
    kwargs = {"run_id": "caller", **{k: v for k, v in change.items() if k != "inputs"}}
    with pytest.raises(sf.InputError, match=fragment):
        solo.run_sync(change.get("inputs", {"problem": "p"}), models={"m": backend}, store=store, **kwargs)
    assert backend.calls == 0 and store.runs() == []


def test_rewards_and_dataset_rows_no_store_can_hold_are_refused_when_given(store):
    """A NaN or infinite reward, a reward source longer than its column, a dataset row that is not valid
    Unicode, an evaluation name with NUL or settings nested too deep are RecordErrors at the call; a reward
    for a call the store does not have is dropped."""
    solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: BOXED)}, store=store, run_id="rated")
    for value in (float("nan"), float("inf"), "1"):
        with pytest.raises(sf.RecordError, match="finite number"):
            store.add_reward(value, run_id="rated")  # type: ignore[arg-type]
    with pytest.raises(sf.RecordError, match="at most 100 characters"):
        store.add_reward(1.0, run_id="rated", source="s" * 101)
    with pytest.raises(sf.RecordError, match="lone surrogate"):
        store.add_dataset("rows", [{"problem": "ok"}, {"problem": "\udc80"}])
    with pytest.raises(sf.RecordError, match="evaluation name"):
        store.save_evaluation("eval\x00", graph="g", dataset=None, settings={}, problems=1)
    with pytest.raises(sf.RecordError, match="nested more than 64 levels"):
        store.save_evaluation("eval", graph="g", dataset=None, settings={"deep": nested(80)}, problems=1)
    assert store.evaluations() == []
    store.add_reward(1.0, run_id="rated", call_id="rated/typo#0")
    store.add_reward(0.5, run_id="rated", call_id="rated/generate#0")
    store.flush()
    assert [r["value"] for r in store.rewards("rated")] == [0.5]
    assert store.item("rows", 0) is None
    then_a_normal_run_is_recorded(store)


def test_a_refused_run_that_is_resumed_gets_a_new_chance(store, monkeypatch):
    """After its row was refused, the same run id started again (the fault gone) is recorded ok."""
    tamper_run_row(monkeypatch, store, "again", seed=2**64)
    with pytest.raises(sf.RecordError):
        solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: BOXED)}, store=store, run_id="again")
    monkeypatch.undo()
    solo.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: BOXED)}, store=store, run_id="again")
    assert store.run("again").status == "ok"

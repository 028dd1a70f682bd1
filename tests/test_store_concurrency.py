"""Many runs writing to one store at once lose nothing and duplicate nothing (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import rsa

from scaffold.store import Store
from scaffold.store._schema import CALLS, EDGES, RUNS
from scaffold.testing import ScriptedBackend

TESTS = Path(__file__).resolve().parent
CALLS_PER_RUN = 16 + 10 * 16  # RSA defaults: N=16, K=4, T=10
EDGES_PER_RUN = 10 * 16 * 4 + 16  # every aggregation reads 4 members; the vote reads the last 16


def reply(request) -> str:
    return f"draft {request.seed} \\boxed{{{request.seed % 3}}}"


def counts(store, run_prefix: str = "") -> dict[str, int]:
    """Row counts (and distinct-id counts) of the store's tables, restricted to runs whose id starts with the prefix."""
    c, e, r = CALLS.c, EDGES.c, RUNS.c
    mine = c.run_id.like(f"{run_prefix}%")
    with store.engine.connect() as conn:
        one = conn.execute
        return {
            "runs": one(sa.select(sa.func.count()).where(r.id.like(f"{run_prefix}%"))).scalar_one(),
            "model": one(sa.select(sa.func.count()).where(mine, c.kind == "model")).scalar_one(),
            "rule": one(sa.select(sa.func.count()).where(mine, c.kind == "rule")).scalar_one(),
            "calls": one(sa.select(sa.func.count()).where(mine)).scalar_one(),
            "distinct_calls": one(sa.select(sa.func.count(sa.distinct(c.id))).where(mine)).scalar_one(),
            "edges": one(sa.select(sa.func.count()).select_from(EDGES.join(CALLS, c.id == e.call_id))
                         .where(mine)).scalar_one(),
            "distinct_edges": one(sa.select(sa.func.count()).select_from(
                sa.select(e.call_id, e.position).distinct().join(CALLS, c.id == e.call_id).where(mine).subquery()
            )).scalar_one(),
            "aggregation_edges": one(sa.select(sa.func.count()).select_from(EDGES.join(CALLS, c.id == e.call_id))
                                     .where(mine, c.node.like("step%"))).scalar_one(),
        }


@pytest.mark.slow
def test_64_concurrent_runs_record_every_call_once(store):
    """64 RSA runs (176 calls each) mapped 64 at a time record exactly 64 runs, 64*176 calls and every edge."""
    rows = [{"problem": f"problem {i}"} for i in range(64)]
    backend = ScriptedBackend(reply)
    results = rsa.build().map_sync(rows, models={"solver": backend}, store=store, concurrency=64, run_id="c", seed=1)
    assert [r.status for r in results] == ["ok"] * 64
    assert backend.calls == 64 * CALLS_PER_RUN
    got = counts(store)
    assert got == {
        "runs": 64, "model": 64 * CALLS_PER_RUN, "rule": 64, "calls": 64 * (CALLS_PER_RUN + 1),
        "distinct_calls": 64 * (CALLS_PER_RUN + 1), "edges": 64 * EDGES_PER_RUN, "distinct_edges": 64 * EDGES_PER_RUN,
        "aggregation_edges": 64 * 10 * 16 * 4,
    }
    runs = store.runs()
    assert sorted(r.id for r in runs) == sorted(f"c-{i}" for i in range(64))
    assert all((r.status, r.calls, r.attempts) == ("ok", CALLS_PER_RUN, 1) for r in runs)
    by_id = {r.run_id: r for r in results}
    assert all(r.answer == by_id[r.id].answer and r.finished_at is not None for r in runs)
    per_run = store.rollup("run")
    assert len(per_run) == 64 and {t.calls for t in per_run.values()} == {CALLS_PER_RUN}
    assert store.writer.written >= 64 * (CALLS_PER_RUN + 1)


WRITER = textwrap.dedent(r"""
    import sys
    url, prefix, tests = sys.argv[1:4]
    sys.path.insert(0, tests)
    import scaffold as sf
    from helpers import rsa
    from scaffold.testing import ScriptedBackend

    def reply(request):
        return f"draft {request.seed} \\boxed{{{request.seed % 3}}}"

    rows = [{"problem": f"{prefix} {i}"} for i in range(16)]
    with sf.Store(url) as store:
        results = rsa.build().map_sync(rows, models={"solver": ScriptedBackend(reply, delay=0.001)}, store=store,
                                       concurrency=16, run_id=prefix, seed=7)
    assert all(r.status == "ok" for r in results), [str(r.error) for r in results if r.error]
    print("wrote", len(results))
""")


@pytest.mark.slow
def test_two_processes_writing_to_one_store_at_once_lose_nothing(store_url, tmp_path):
    """Two processes creating the same new store and each recording 16 RSA runs into it at once lose nothing."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    children = []
    for prefix in ("a", "b"):  # output to files, not pipes: a full pipe would block a child
        with open(tmp_path / f"{prefix}.log", "wb") as log:
            children.append(subprocess.Popen([sys.executable, str(script), store_url, prefix, str(TESTS)],
                                             cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
    for prefix, child in zip(("a", "b"), children):
        child.wait(timeout=120)
        output = (tmp_path / f"{prefix}.log").read_text(errors="replace")
        assert child.returncode == 0, output[-3000:]
        assert output.strip() == "wrote 16"
    with Store(store_url) as store:
        check_two_writers(store)


def check_two_writers(store: Store) -> None:
    for prefix in ("a", "b"):
        got = counts(store, f"{prefix}-")
        assert got == {
            "runs": 16, "model": 16 * CALLS_PER_RUN, "rule": 16, "calls": 16 * (CALLS_PER_RUN + 1),
            "distinct_calls": 16 * (CALLS_PER_RUN + 1), "edges": 16 * EDGES_PER_RUN,
            "distinct_edges": 16 * EDGES_PER_RUN, "aggregation_edges": 16 * 10 * 16 * 4,
        }, prefix
    runs = store.runs()
    assert len(runs) == 32
    assert all((r.status, r.calls, r.attempts) == ("ok", CALLS_PER_RUN, 1) for r in runs)


def test_a_database_with_foreign_tables_is_still_refused_after_the_race_retries(tmp_path: Path) -> None:
    """A `runs` table with no scaffold version is retried (a racing creator may be mid-way), then refused, typed."""
    import sqlite3

    from scaffold._errors import SchemaVersionError

    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, note TEXT)")
        connection.execute("INSERT INTO runs (note) VALUES ('theirs')")
    with pytest.raises(SchemaVersionError, match="not made by scaffold"):
        Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as connection:  # nothing of theirs was touched
        assert connection.execute("SELECT note FROM runs").fetchall() == [("theirs",)]

"""Credentials never reach the store: not the database files, not any column, not errors about the store.

Runs go through the real litellm backend over HTTP to the local OpenAI-compatible server, with keys
from the environment, from model params and from secret headers, including failing calls whose
error text is recorded. Then every byte the store holds is searched for the keys.
"""

from __future__ import annotations

import itertools
import os
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import scaffold as sf
from scaffold._errors import StoreError
from scaffold._types import Status
from scaffold.backends import Retry
from scaffold.store._store import normalise_url
from scaffold.testing import ScriptedBackend
from scaffold.testing._server import Fault, OpenAIServer, ServerRequest

ENV_KEY = "sk-test-SECRET-env-7c1d2e3f4a5b6978"
PARAM_KEY = "sk-test-SECRET-param-9a8b7c6d5e4f3021"
HEADER_KEY = "sk-test-SECRET-header-1122334455667788"
WRONG_KEY = "sk-test-SECRET-wrong-aabbccddeeff0099"
SECRETS = (ENV_KEY, PARAM_KEY, HEADER_KEY, WRONG_KEY)
FAST = Retry(attempts=3, initial_delay=0.01, max_delay=0.05)


def numbered(request: ServerRequest) -> str:
    return f"draft {request.choice} \\boxed{{{request.choice % 2}}}"


@sf.graph
def two_models(problem):
    pop = sf.sample("Solve {problem}", model="env", n=2, logprobs=True)
    return sf.aggregate(pop, model="param")


@sf.graph
def one_call(problem):
    return sf.generate("Solve {problem}", model="m")


@pytest.fixture(autouse=True)
def collect_garbage_after() -> Iterator[None]:
    """Run the garbage collector after each test, so an unclosed connection is blamed on its own test."""
    yield
    import gc

    gc.collect()


def leaks(text: str) -> list[str]:
    """The secrets (or their distinctive part without the ``sk-`` prefix) found in ``text``."""
    return [s for s in SECRETS if s in text or s.removeprefix("sk-") in text or s[-16:] in text]


def database_text(store: sf.Store, store_url: str) -> str:
    """Everything the store holds: the raw SQLite files (database, WAL, shared memory), or every row of every
    PostgreSQL table (text, JSON and bytea columns alike)."""
    store.flush()
    if store.url.get_backend_name() == "sqlite":
        path = Path(store.url.database or "")
        files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
        assert path in files
        return "".join(p.read_bytes().decode("latin-1") for p in files)
    parts = []
    with store.engine.connect() as conn:
        tables = sa.inspect(conn).get_table_names()
        assert {"runs", "calls", "requests", "edges", "rewards"} <= set(tables)
        for table in tables:
            for row in conn.execute(sa.text(f'SELECT * FROM "{table}"')):
                for value in row:
                    if isinstance(value, memoryview):
                        value = bytes(value)
                    parts.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
    return "\n".join(parts)


def exported_text(store: sf.Store, folder: Path) -> str:
    """The store exported to JSONL and to Parquet: raw bytes of both files, and every Parquet value read back
    (Parquet pages are compressed, so their raw bytes alone prove nothing)."""
    import pyarrow.parquet as pq

    from scaffold.store._export import export

    jsonl, parquet = folder / "calls.jsonl", folder / "calls.parquet"
    assert export(store, jsonl) == export(store, parquet) > 0
    rows = pq.read_table(parquet).to_pylist()
    return jsonl.read_bytes().decode("utf-8") + parquet.read_bytes().decode("latin-1") + repr(rows)


def test_api_keys_never_reach_the_store(store, store_url, monkeypatch, tmp_path):
    """Keys from the environment, model params and secret headers appear in no byte of the store or its exports."""
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    with OpenAIServer(policy=numbered, api_key=ENV_KEY) as env_server, \
            OpenAIServer(policy=numbered, api_key=PARAM_KEY) as param_server:
        from_env = sf.Model(sf.LiteLLMBackend("openai/test-model", api_base=env_server.base_url, supports_n=False),
                            retry=FAST)
        from_params = sf.Model(sf.LiteLLMBackend("hosted_vllm/test-model", api_base=param_server.base_url),
                               params={"api_key": PARAM_KEY, "temperature": 0.3,
                                       "extra_headers": {"X-Api-Key": HEADER_KEY}}, retry=FAST)
        models = {"env": from_env, "param": from_params}
        ok = two_models.run_sync({"problem": "2+2"}, models=models, store=store, run_id="ok")
        assert ok.status == "ok"
        assert {r.status for r in env_server.requests} == {200} and {r.status for r in param_server.requests} == {200}

        param_server.inject(Fault.server_error(400))  # the aggregation is refused: recorded with its error text
        with pytest.raises(sf.CallError):
            two_models.run_sync({"problem": "3+3"}, models=models, store=store, run_id="bad-request")

        wrong = sf.Model(sf.LiteLLMBackend("hosted_vllm/test-model", api_base=param_server.base_url),
                         params={"api_key": WRONG_KEY}, retry=FAST)
        with pytest.raises(sf.CallError) as refused:
            one_call.run_sync({"problem": "4+4"}, models={"m": wrong}, store=store, run_id="unauthorised")
        assert isinstance(refused.value.__cause__, sf.AuthenticationError)
        assert param_server.status_counts[401] == 1

    failed = {t.id: t for t in store.traces("bad-request") if t.status is Status.ERROR}
    assert list(failed) == ["bad-request/aggregate#0"]
    assert "BadRequestError" in failed["bad-request/aggregate#0"].error and "injected fault" in failed[
        "bad-request/aggregate#0"].error
    (unauthorised,) = store.traces("unauthorised")
    assert unauthorised.status is Status.ERROR and "Authentication" in (unauthorised.error or "")
    assert store.run("unauthorised").error
    aggregate = next(t for t in store.traces("ok") if t.node == "aggregate")
    assert aggregate.request is not None and aggregate.request.params == {"temperature": 0.3}
    assert store.run("ok").models["param"] == {"model": "hosted_vllm/test-model", "backend": "LiteLLMBackend"}

    dumped = database_text(store, store_url)
    assert "Solve 2+2" in dumped and "draft 0" in dumped  # the search does see what was recorded
    assert leaks(dumped) == []
    exported = exported_text(store, tmp_path)
    assert "Solve 2+2" in exported and "injected fault" in exported
    assert leaks(exported) == []
    everything_read = repr([store.traces(r.id) for r in store.runs()]) + repr(store.runs())
    everything_read += repr([store.rollup(by) for by in ("node", "model", "alias", "run", "status")])
    assert leaks(everything_read) == []


_databases = itertools.count()


@pytest.fixture
def postgres_url_with_password(postgres_server: Any) -> str:
    """A fresh database on the test server, its URL carrying a password (the server trusts local users)."""
    import psycopg

    base = os.environ.get("SCAFFOLD_TEST_POSTGRES_URL") or postgres_server.url
    admin = base.replace("postgresql+psycopg://", "postgresql://", 1)
    name = f"secret{os.getpid()}_{next(_databases)}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    url = sa.make_url(base.rsplit("/", 1)[0] + "/" + name)
    return url.set(password=WRONG_KEY).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_a_store_never_shows_the_password_of_its_url(postgres_url_with_password):
    """repr/str of a Store (and of its URL and engine) opened on a URL with a password hide the password."""
    assert WRONG_KEY in postgres_url_with_password
    url = normalise_url(postgres_url_with_password)
    assert url.password == WRONG_KEY and url.drivername == "postgresql+psycopg"
    assert leaks(repr(url)) == []
    with sf.Store(postgres_url_with_password) as store:
        one_call.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "\\boxed{1}")},
                          store=store, run_id="pw")
        shown = repr(store) + str(store) + repr(store.url) + str(store.url) + repr(store.engine)
        assert "127.0.0.1" in shown
        assert leaks(shown) == []
        assert leaks(repr(store.runs()) + repr(store.traces("pw"))) == []


def test_an_unreachable_postgres_url_never_quotes_its_password():
    """The StoreError for a PostgreSQL URL that cannot be reached names the store but not its password."""
    url = f"postgresql://scaffold:{WRONG_KEY}@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError) as info:
        sf.Store(url)
    message = str(info.value)
    assert "cannot open the store" in message and "127.0.0.1" in message
    assert leaks(message) == []
    assert leaks("".join(traceback.format_exception(info.value))) == []
    assert leaks(repr(info.value)) == []

"""PostgresServer: a real throwaway PostgreSQL cluster that serves SQL and leaves nothing behind."""

from __future__ import annotations

import psycopg
import pytest

from scaffold.testing import PostgresServer

pytestmark = pytest.mark.postgres


def conninfo(server: PostgresServer) -> str:
    """The server's SQLAlchemy URL as a plain libpq URL (psycopg does not take the ``+psycopg`` driver suffix)."""
    return server.url.replace("postgresql+psycopg://", "postgresql://", 1)


def test_server_serves_sql_then_stop_kills_it_and_removes_its_directory():
    """A started server accepts SQL on its URL; stop() shuts it down (connections fail) and deletes its directory."""
    server = PostgresServer()
    server.start()
    try:
        directory = server.directory
        assert directory is not None and (directory / "data" / "PG_VERSION").is_file()
        assert server.url == f"postgresql+psycopg://scaffold@127.0.0.1:{server.port}/scaffold"
        with psycopg.connect(conninfo(server), autocommit=True) as connection:
            connection.execute("CREATE TABLE runs (id integer PRIMARY KEY, name text NOT NULL)")
            connection.execute("INSERT INTO runs VALUES (%s, %s)", (1, "first"))
            assert connection.execute("SELECT id, name FROM runs").fetchall() == [(1, "first")]
            assert connection.execute("SELECT current_database(), current_user").fetchone() == ("scaffold", "scaffold")
        url = conninfo(server)
    finally:
        server.stop()
    assert not server.running
    assert not directory.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2).close()
    server.stop()  # a second stop is a no-op


def test_fast_mode_turns_fsync_off_and_context_manager_cleans_up():
    """The default (durable=False) runs with fsync off; leaving the ``with`` block stops the server."""
    with PostgresServer() as server:
        with psycopg.connect(conninfo(server)) as connection:
            assert connection.execute("SHOW fsync").fetchone() == ("off",)
            assert connection.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        directory = server.directory
    assert directory is not None and not directory.exists()
    assert not server.running

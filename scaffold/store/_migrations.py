"""Schema versions and the upgrade path.

A new database gets every table and ``schema_info.version = SCHEMA_VERSION``. An older
one is upgraded on open by applying, in order and in one transaction, the migration of
each version above its own: ``MIGRATIONS[v]`` takes a database from ``v - 1`` to ``v``.
A database newer than this code is refused (:class:`~scaffold._errors.SchemaVersionError`)
rather than written with a schema it does not know.

Adding a column in version 2, for example::

    def _v2(conn: Connection) -> None:
        conn.execute(text("ALTER TABLE calls ADD COLUMN judge TEXT"))

    MIGRATIONS[2] = _v2   # and SCHEMA_VERSION = 2 in schema.py
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from sqlalchemy import Connection, Engine, insert, inspect, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from scaffold._errors import SchemaVersionError
from scaffold.store._schema import SCHEMA_VERSION, Base, SchemaInfo

Migration = Callable[[Connection], None]

def _v2(conn: Connection) -> None:
    """Version 2 adds the ``evaluations`` table, which ``create_all`` makes after the steps run."""


MIGRATIONS: dict[int, Migration] = {2: _v2}
"""``version -> function`` upgrading a database from ``version - 1``."""


def schema_version(conn: Connection) -> int | None:
    """The version recorded in the database, ``None`` for an empty database."""
    if not inspect(conn).has_table(SchemaInfo.__tablename__):
        return None
    return conn.execute(select(SchemaInfo.version).where(SchemaInfo.id == 1)).scalar_one_or_none()


def upgrade(engine: Engine, *, target: int = SCHEMA_VERSION, migrations: Mapping[int, Migration] | None = None,
            attempts: int = 5) -> int:
    """Create or upgrade the schema to ``target``; returns the version found before (0 when new).

    Several processes may open a new database at once; whoever loses the race to create
    it retries and finds it made (SQLite's driver commits each ``CREATE TABLE`` on its own, so
    a loser can even see the tables before the version row: that too is retried before the
    database is refused as not scaffold's).
    """
    steps = MIGRATIONS if migrations is None else migrations
    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                return _upgrade(conn, target, steps)
        except (IntegrityError, OperationalError, ProgrammingError, _Unversioned):
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


class _Unversioned(SchemaVersionError):
    """Tables but no version row: another process may be creating the schema right now, so it is retried."""


def _upgrade(conn: Connection, target: int, steps: Mapping[int, Migration]) -> int:
    found = schema_version(conn)
    if found is None:
        if inspect(conn).has_table("runs"):
            raise _Unversioned("this database has a `runs` table but no scaffold schema version; "
                               "it was not made by scaffold")
        Base.metadata.create_all(conn)
        conn.execute(insert(SchemaInfo).values(id=1, version=target))
        return 0
    if found > target:
        raise SchemaVersionError(f"the store's schema is version {found}, newer than this scaffold ({target}); "
                                 "upgrade scaffold to open it")
    for version in range(found + 1, target + 1):
        step = steps.get(version)
        if step is None:
            raise SchemaVersionError(f"no migration to schema version {version}")
        step(conn)
    if found < target:
        Base.metadata.create_all(conn)  # tables that are new in the target version
        conn.execute(update(SchemaInfo).where(SchemaInfo.id == 1).values(version=target))
    return found

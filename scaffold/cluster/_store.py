"""Where a cluster's workers record: one store for the whole job, chosen by its kind.

- **PostgreSQL** (or any server database): every worker opens the store's URL itself and
  writes directly; the server serialises them. This is the store for multi-machine jobs.
- **SQLite**: one file must never be written by processes on several machines (file locks do
  not hold over network filesystems), so workers never open it. One :class:`StoreWriter` actor,
  pinned to the caller's machine, owns the file; workers send it their records
  (:class:`RemoteStore`), batched per event-loop turn. SQLite is refused when the cluster has
  more than one machine (:func:`store_plan`).

A run's records reach the writer in the order they were made (Ray keeps one caller's actor calls
in order), and ``Graph.run`` returns only once the writer has the run's end written.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from scaffold._errors import ClusterError, StoreError
from scaffold.store._recorder import Recorder
from scaffold.store._store import Store


def store_plan(store: Store | None, nodes: int) -> tuple[str, Any]:
    """How workers reach ``store`` on a cluster of ``nodes`` machines: ``("none", None)``,
    ``("url", URL)`` (they open it) or ``("writer", PATH)`` (through one writer actor here).

    Examples:
        >>> store_plan(None, 3)
        ('none', None)
    """
    if store is None:
        return "none", None
    if store.url.get_backend_name() == "sqlite":
        if nodes > 1:
            raise ClusterError(
                f"the store {store!r} is a SQLite file and this cluster has {nodes} machines: workers on other "
                "machines cannot write one SQLite file safely; record into PostgreSQL "
                "(store='postgresql+psycopg://...') for multi-machine jobs")
        return "writer", store.url.render_as_string(hide_password=False)
    return "url", store.url.render_as_string(hide_password=False)


class StoreWriter:
    """The one process writing a job's SQLite store (run as a Ray actor on the caller's machine; internal).

    Examples:
        >>> StoreWriter.__mro__[0].__name__
        'StoreWriter'
    """

    def __init__(self, target: str) -> None:
        self.store = Store(target)

    def put(self, records: list[tuple[Any, ...]]) -> None:
        """Queue records in order; an ``("end", row)`` record returns only once it is written."""
        for record in records:
            if record[0] == "end":
                written = threading.Event()
                failure: list[BaseException | None] = [None]

                def done(exc: BaseException | None, written: threading.Event = written,
                         failure: list[BaseException | None] = failure) -> None:
                    failure[0] = exc
                    written.set()

                self.store.writer.put(("end", record[1], done))
                written.wait()
                if failure[0] is not None:
                    raise StoreError(f"the run's end was not written: {failure[0]}")
            else:
                self.store.writer.put(record)

    def replay_for(self, run_id: str, graph: str, spec: Mapping[str, Any], inputs: Mapping[str, Any],
                   seed: int | None) -> Any:
        """The store's :meth:`~scaffold.Store.replay_for` (everything queued is written first)."""
        return self.store.replay_for(run_id, graph, spec, inputs, seed)

    def flush(self) -> None:
        """Wait until everything sent so far is written."""
        self.store.flush()

    def close(self) -> None:
        """Write what is queued and release the file."""
        self.store.close()


class _RemoteWriter:
    """The recorder's writer on a worker: records go to the :class:`StoreWriter`, one batch per loop turn."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self._batch: list[tuple[Any, ...]] = []
        self._scheduled = False

    def put(self, record: tuple[Any, ...]) -> None:
        if record[0] == "end":
            batch, self._batch = [*self._batch, (record[0], record[1])], []
            done = record[2]
            future = self.actor.put.remote(batch).future()
            future.add_done_callback(lambda f: done(f.exception()))
            return
        self._batch.append(record)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.send)

    def send(self) -> None:
        self._scheduled = False
        if self._batch:
            batch, self._batch = self._batch, []
            self.actor.put.remote(batch)


class RemoteStore:
    """What a worker's runs record into when the job's store is SQLite: the caller's :class:`StoreWriter`.

    It has the part of :class:`~scaffold.Store` that ``Graph.run`` uses: ``recorder`` and ``replay_for``.

    Examples:
        >>> RemoteStore.__mro__[0].__name__
        'RemoteStore'
    """

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self._writer = _RemoteWriter(actor)

    def __repr__(self) -> str:
        return "RemoteStore(the caller's SQLite writer)"

    def recorder(self, models: Mapping[str, Any], *, dataset: str | None = None, item: int | None = None,
                 source: str | None = None) -> Recorder:
        """A subscriber recording one run through the writer actor."""
        return Recorder(self._writer, models, dataset=dataset, item=item, source=source)  # type: ignore[arg-type]

    def replay_for(self, run_id: str, graph: str, spec: Mapping[str, Any], inputs: Mapping[str, Any],
                   seed: int | None) -> Any:
        """The writer's :meth:`~scaffold.Store.replay_for` (blocking: ``Graph.run`` calls it in a thread)."""

        return self.actor.replay_for.remote(run_id, graph, spec, inputs, seed).future().result()

    def cache(self) -> Any:
        raise StoreError("cache=True is not available on a cluster with a SQLite store; use PostgreSQL")

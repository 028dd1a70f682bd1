"""``Store``: where runs are recorded (SQLite file by default, PostgreSQL by URL) and read back."""

from __future__ import annotations

import atexit
import math
import os
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, make_url, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from scaffold._errors import RecordError, ResumeError, StoreError
from scaffold._json import to_json
from scaffold._types import Status, Trace, TraceKind
from scaffold._values import check_value, has_lone_surrogate
from scaffold.store import _codec as codec
from scaffold.store import _query as query
from scaffold.store._migrations import upgrade
from scaffold.store._recorder import Recorder
from scaffold.store._reuse import Replay, ResponseCache
from scaffold.store._schema import RUNS
from scaffold.store._writer import Writer

if TYPE_CHECKING:
    import networkx

    from scaffold.answers import AnswerKind
    from scaffold.backends._model import Model
    from scaffold.store._evaluations import EvaluationInfo
    from scaffold.store._import import Imported

_OPEN: weakref.WeakSet[Store] = weakref.WeakSet()


def normalise_url(target: str | os.PathLike[str]) -> URL:
    """A SQLAlchemy URL from a URL or a file path; ``postgresql://`` gets the psycopg driver."""
    text = os.fspath(target)
    if "://" not in text:
        if text in ("", ":memory:"):
            raise StoreError("an in-memory store cannot be shared with the writer thread; give a file path")
        return URL.create("sqlite", database=str(Path(text).expanduser()))
    try:
        url = make_url(text)
    except (ValueError, ArgumentError):  # never echo the text: it may hold a password
        raise StoreError("not a valid store path or database URL (e.g. runs.db, sqlite:///runs.db, "
                         "postgresql://user@host/db)") from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        raise StoreError("an in-memory store cannot be shared with the writer thread; give a file path")
    return url


class Store:
    """A trajectory store: every call of every run, with lineage, rewards and datasets.

    ``target`` is a file path or a SQLAlchemy URL: ``"runs.db"``, ``"sqlite:///runs.db"``,
    ``"postgresql://user@host/db"``. SQLite files are opened in WAL mode (readers never block
    the writer; a killed process loses only what was not yet committed). The schema is
    created or upgraded on open. Writes go through one background thread in batches.

    Examples:
        >>> import scaffold as sf, tempfile, os
        >>> from scaffold.testing import ScriptedBackend
        >>> @sf.graph
        ... def solve(problem):
        ...     return sf.generate("Solve {problem}", model="m")
        >>> store = sf.Store(os.path.join(tempfile.mkdtemp(), "runs.db"))
        >>> result = solve.run_sync({"problem": "1+1"}, models={"m": ScriptedBackend(lambda r: r"\\boxed{2}")},
        ...                         store=store, run_id="demo")
        >>> [run.answer for run in store.runs()]
        ['2']
        >>> {node: totals.calls for node, totals in store.rollup("node", run_id="demo").items()}
        {'generate': 1}
        >>> store.close()
    """

    def __init__(self, target: str | os.PathLike[str] = "scaffold.db", *, max_queue: int = 20_000,
                 batch_size: int = 2_000, pool_size: int = 5) -> None:
        self.url = normalise_url(target)
        try:
            self.engine = self._engine(pool_size)
            try:
                upgrade(self.engine)
            except BaseException:
                self.engine.dispose()  # a refused store (newer schema, foreign database) keeps no connection
                raise
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store {self}: {type(exc).__name__}: "
                             f"{str(getattr(exc, 'orig', exc)).splitlines()[0]}") from None
        self.writer = Writer(self.engine, max_queue=max_queue, batch_size=batch_size)
        _OPEN.add(self)

    def _engine(self, pool_size: int) -> Engine:
        if self.url.get_backend_name() == "sqlite":
            if self.url.database:
                Path(self.url.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(self.url, connect_args={"timeout": 60, "check_same_thread": False},
                                   json_serializer=codec.dumps)

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_connection: Any, _record: Any) -> None:
                cursor = dbapi_connection.cursor()
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA synchronous=NORMAL")
                # checkpoint the log every 4,000 pages (16 MB), not 1,000: a bulk write (an import) syncs the disk
                # a quarter as often, which cost it up to a third of its time on a busy disk
                cursor.execute("PRAGMA wal_autocheckpoint=4000")
                cursor.execute("PRAGMA foreign_keys=ON")
                cursor.close()

            return engine
        return create_engine(self.url, pool_size=pool_size, pool_pre_ping=True, json_serializer=codec.dumps)

    def __repr__(self) -> str:
        return f"Store({self.url.render_as_string(hide_password=True)!r})"

    __str__ = __repr__

    # -- writing ------------------------------------------------------------------------------
    def recorder(self, models: Mapping[str, Model], *, dataset: str | None = None, item: int | None = None,
                 source: str | None = None) -> Recorder:
        """A subscriber recording one run into this store (``Graph.run`` makes it)."""
        return Recorder(self.writer, models, dataset=dataset, item=item, source=source)

    def add_reward(self, value: float, *, run_id: str, call_id: str | None = None, source: str = "user",
                   metadata: Mapping[str, Any] | None = None) -> None:
        """Record a reward for a call (``call_id``, a trace id) or for the whole run (written in order with
        the run's calls; call :meth:`flush` to wait for it). A reward whose run or call the store does not
        have is dropped with a warning in the ``scaffold.store`` log.

        Raises :class:`~scaffold.RecordError` at once for what no store can hold: a value that is not a
        finite number, a ``source`` longer than 100 characters, text that is not valid Unicode, metadata
        nested more than 64 levels deep."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RecordError(f"a reward must be a finite number, not {value!r}")
        if not isinstance(source, str) or len(source) > 100:
            raise RecordError("a reward's source must be a string of at most 100 characters")
        for text, what in ((run_id, "reward's run_id"), (call_id, "reward's call_id"), (source, "reward's source")):
            _check_text(text, what)
        _check_record(metadata or {}, "the reward's metadata")
        self.writer.put(("reward", {"run_id": run_id, "call_id": call_id, "value": float(value), "source": source,
                                    "created_at": time.time(), "metadata": to_json(metadata or {})}))

    def import_outputs(self, source: str | os.PathLike[str] | Iterable[Mapping[str, Any]], *, name: str,
                       answer_kind: AnswerKind | str | None = None, problem_key: str = "problem",
                       answer_key: str = "answer", outputs_key: str = "outputs",
                       dataset: str | None = None) -> Imported:
        """Record outputs collected elsewhere, a file (JSONL, CSV or Parquet) or rows, as evaluation ``name``: one
        run per row of the graph ``imported`` (its outputs as external traces, then their vote by the answer kind),
        scored when rows have references; returns what was recorded (:class:`~scaffold.evaluation.Imported`).
        ``load_report(store, name)`` reports it as an evaluation; it is voted, replayed, browsed and exported like
        any run (:mod:`scaffold.store._import`).

        A row has a problem (``problem_key``), optionally a reference answer (``answer_key``) and a list of outputs
        (``outputs_key``): strings, or objects with ``text`` and any of ``answer``, ``model``, ``prompt_tokens``,
        ``completion_tokens``, ``cost``, ``logprobs`` and ``reasoning`` (other keys are kept as metadata). In CSV,
        the outputs cell holds that list as JSON. A row's other keys are kept with it in the dataset
        (``store.item``).

        Every row is checked first: a bad one is a :class:`~scaffold.DatasetError` naming its file and line, and
        nothing is recorded. Stopped part way, the same call again resumes after the last row recorded.

        Examples:
            >>> import os, tempfile
            >>> import scaffold as sf
            >>> rows = [{"problem": "2+2", "answer": "4", "outputs": [r"\\boxed{4}", r"\\boxed{5}", r"\\boxed{4}"]},
            ...         {"problem": "3+3", "answer": "6", "outputs": [{"text": r"\\boxed{7}", "model": "m1"}]}]
            >>> store = sf.Store(os.path.join(tempfile.mkdtemp(), "imported.db"))
            >>> store.import_outputs(rows, name="elsewhere")
            Imported(name='elsewhere', rows=2, outputs=4, scored=2, source='rows')
            >>> store.run("elsewhere-0").answer
            '4'
            >>> store.close()
        """
        from scaffold.store._import import import_rows

        return import_rows(self, source, name=name, answer_kind=answer_kind, problem_key=problem_key,
                           answer_key=answer_key, outputs_key=outputs_key, dataset=dataset)

    def add_dataset(self, name: str, rows: Iterable[Mapping[str, Any]] = (), *, source: str | None = None) -> None:
        """Register a dataset and its rows (``Graph.map(dataset=...)`` registers the rows it runs).

        Raises :class:`~scaffold.RecordError` before writing anything if a name or row cannot be recorded
        as given (text that is not valid Unicode, a NUL in the name, rows nested more than 64 levels)."""
        data = self.dataset_rows(name, rows)
        _check_text(source, "dataset source")
        self.writer.put(("dataset", {"name": name, "source": source, "created_at": time.time()}))
        for position, row in enumerate(data):
            self.writer.put(("item", {"dataset": name, "position": position, "data": row}))

    @staticmethod
    def dataset_rows(name: str, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` of dataset ``name`` as they are recorded (JSON data), each checked first: a
        :class:`~scaffold.RecordError` naming the row for one no store can hold (see :meth:`add_dataset`)."""
        _check_text(name, "dataset name")
        rows = list(rows)
        for position, row in enumerate(rows):
            _check_record(row, f"row {position} of dataset {name!r}")
        return [to_json(row) for row in rows]

    @property
    def write_error(self) -> StoreError | None:
        """Why this store cannot write now (its database unreachable, read-only or full; checked again every
        second), or ``None`` while it can. New runs are refused with this error while it is set."""
        return self.writer.error

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything recorded so far is written."""
        self.writer.flush(timeout)

    def close(self) -> None:
        """Write what is queued and release the database."""
        self.writer.close()
        failure = self.writer.failure
        self.engine.dispose()
        _OPEN.discard(self)
        if failure is not None:
            raise failure

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------------
    def runs(self, *, limit: int | None = None, offset: int = 0, newest_first: bool = True,
             **filters: Any) -> list[query.RunInfo]:
        """Stored runs, newest first; filters: ``graph``, ``dataset``, ``model``, ``status``, ``since``, ``until``."""
        with self.engine.connect() as conn:
            return query.list_runs(conn, limit=limit, offset=offset, newest_first=newest_first, **filters)

    def count_runs(self, **filters: Any) -> tuple[int, query.Totals]:
        """How many runs the filters (as :meth:`runs`) select, and their calls, tokens and cost in all
        (``Totals.errors`` counts the runs that ended in error, timeout or cancellation)."""
        with self.engine.connect() as conn:
            return query.count_runs(conn, **filters)

    def item(self, dataset: str, position: int) -> dict[str, Any] | None:
        """Row ``position`` of a dataset recorded with the runs (``map(..., dataset=...)``), or ``None``."""
        with self.engine.connect() as conn:
            return query.dataset_item(conn, dataset, position)

    def distinct_values(self) -> dict[str, list[str]]:
        """What the runs' filters can take here: ``graph``, ``dataset``, ``status`` and ``model`` values."""
        with self.engine.connect() as conn:
            return query.distinct_values(conn)

    def run(self, run_id: str) -> query.RunInfo:
        """One run's summary; raises :class:`StoreError` if the store has no such run."""
        with self.engine.connect() as conn:
            info = query.get_run(conn, run_id)
        if info is None:
            raise StoreError(f"no run {run_id!r} in {self}")
        return info

    def traces(self, run_id: str) -> list[Trace]:
        """Every recorded trace of a run (model calls, rules, external inputs), with requests and lineage."""
        self.run(run_id)
        with self.engine.connect() as conn:
            return list(query.load_traces(conn, [run_id]))

    def rewards(self, run_id: str) -> list[dict[str, Any]]:
        """A run's rewards as dicts (``call_id`` is ``None`` for a whole-run reward)."""
        with self.engine.connect() as conn:
            return query.rewards_of(conn, run_id)

    def dag(self, run_id: str) -> networkx.DiGraph:
        """The run as a ``networkx.DiGraph`` of traces (see :func:`scaffold.store._query.dag`)."""
        return query.dag(self.traces(run_id), self.rewards(run_id))

    def rollup(self, by: str, *, run_id: str | None = None, **filters: Any) -> dict[str | None, query.Totals]:
        """Tokens, cost and latency of model calls per ``node``, ``model``, ``alias``, ``run``, ``graph``,
        ``dataset`` or ``status``, over one run or over the runs the filters select."""
        with self.engine.connect() as conn:
            return query.rollup(conn, by, run_id=run_id, **filters)

    # -- evaluations ------------------------------------------------------------------------------
    def save_evaluation(self, name: str, *, graph: str, dataset: str | None, settings: Mapping[str, Any],
                        problems: int) -> EvaluationInfo:
        """Record evaluation ``name`` (``scaffold eval``); an existing one is returned unchanged. A name or
        settings no store can hold (a NUL, text that is not valid Unicode, nesting past 64 levels) are a
        :class:`~scaffold.RecordError` before anything is written."""
        from scaffold.store import _evaluations as evaluations

        for text, what in ((name, "evaluation name"), (graph, "graph name"), (dataset, "dataset name")):
            _check_text(text, what)
        _check_record(settings, "the evaluation's settings")

        with self.engine.begin() as conn:
            found = evaluations.get(conn, name)
            if found is None:
                evaluations.save(conn, name, graph=graph, dataset=dataset, settings=settings, problems=problems)
                found = evaluations.get(conn, name)
        assert found is not None
        return found

    def evaluation(self, name: str) -> EvaluationInfo:
        """A stored evaluation; raises :class:`StoreError` if there is none by that name."""
        from scaffold.store import _evaluations as evaluations

        with self.engine.connect() as conn:
            found = evaluations.get(conn, name)
        if found is None:
            raise StoreError(f"no evaluation {name!r} in {self}")
        return found

    def evaluations(self, *, prefix: str | None = None) -> list[EvaluationInfo]:
        """Stored evaluations, oldest first; only names starting with ``prefix`` when given."""
        from scaffold.store import _evaluations as evaluations

        with self.engine.connect() as conn:
            return evaluations.listed(conn, prefix)

    def evaluation_runs(self, name: str) -> list[query.RunInfo]:
        """The runs of evaluation ``name`` (ids ``{name}-{item}``), by item."""
        from scaffold.store import _evaluations as evaluations

        self.flush()
        with self.engine.connect() as conn:
            return evaluations.runs_of(conn, name)

    def answer_traces(self, run_ids: Sequence[str]) -> dict[str, list[Trace]]:
        """Each run's traces, light: id, node, index, kind, answer, status and lineage (no requests or texts)."""
        from scaffold.store import _evaluations as evaluations

        with self.engine.connect() as conn:
            return evaluations.answer_traces(conn, run_ids)

    def node_traces(self, run_ids: Sequence[str], node: str, *, texts: bool = False,
                    logprobs: bool = False) -> dict[str, list[Trace]]:
        """Each run's finished model traces of ``node`` by index: answers, usage, cost and metadata (texts and
        logprobs when asked), for replaying rules over recorded samples (:func:`scaffold.replay`)."""
        from scaffold.store import _evaluations as evaluations

        self.flush()
        with self.engine.connect() as conn:
            return evaluations.node_traces(conn, run_ids, node, texts=texts, logprobs=logprobs)

    def rewards_of(self, run_ids: Sequence[str], *, source: str) -> list[dict[str, Any]]:
        """The rewards given by ``source`` to the runs in ``run_ids`` and their calls."""
        from scaffold.store import _evaluations as evaluations

        self.flush()
        with self.engine.connect() as conn:
            return evaluations.rewards_of(conn, run_ids, source)

    # -- resuming and caching --------------------------------------------------------------------
    def replay_for(self, run_id: str, graph: str, spec: Mapping[str, Any], inputs: Mapping[str, Any],
                   seed: int | None) -> tuple[Replay, int] | None:
        """If ``run_id`` is recorded, check it is the same run and return its finished calls and seed."""
        self.flush()
        with self.engine.connect() as conn:
            info = query.get_run(conn, run_id)
            if info is None:
                return None
            if info.graph != graph or to_json(spec) != _spec_of(conn, run_id):
                raise ResumeError(f"run {run_id!r} was recorded for graph {info.graph!r} with another structure; "
                                  f"it cannot be resumed as {graph!r}; use a new run id")
            if to_json(inputs) != info.inputs:
                raise ResumeError(f"run {run_id!r} was recorded with other inputs; use a new run id")
            if seed is not None and seed != info.seed:
                raise ResumeError(f"run {run_id!r} was recorded with seed {info.seed}, not {seed}")
            traces = {t.id: t for t in query.load_traces(conn, [run_id]) if _replayable(t)}
        return Replay(traces), info.seed

    def export(self, path: str | os.PathLike[str], format: str | None = None, *,
               run_ids: Sequence[str] | None = None, **filters: Any) -> int:
        """Write the calls of the selected runs to ``.jsonl`` or ``.parquet``, one row per trace, with token ids,
        logprobs, lineage and rewards; returns the rows written. Filters as :meth:`runs`; see
        :func:`scaffold.store._export.export`."""
        from scaffold.store._export import export

        return export(self, path, format=format, run_ids=run_ids, **filters)

    def cache(self) -> ResponseCache:
        """A response cache over this store's finished calls (see :mod:`scaffold.store._reuse`)."""
        return ResponseCache(self)


def _replayable(trace: Trace) -> bool:
    """What a resumed run reuses: finished model calls, and tool calls that answered the model (a failed one
    too: its error was the model's answer)."""
    if trace.kind is TraceKind.MODEL:
        return trace.status is Status.OK
    return trace.kind is TraceKind.TOOL and trace.status in (Status.OK, Status.ERROR)


def _check_text(text: Any, what: str) -> None:
    if text is not None and (not isinstance(text, str) or "\x00" in text or has_lone_surrogate(text)):
        raise RecordError(f"the {what} must be text without NUL characters or lone surrogates")


def _check_record(value: Any, where: str) -> None:
    problem = check_value(value, where)
    if problem is not None:
        raise RecordError(problem)


def _spec_of(conn: Any, run_id: str) -> Any:
    return conn.execute(select(RUNS.c.spec).where(RUNS.c.id == run_id)).scalar_one()


@atexit.register
def _close_all() -> None:
    for store in list(_OPEN):
        try:
            store.writer.close(timeout=30)
        except Exception:
            pass

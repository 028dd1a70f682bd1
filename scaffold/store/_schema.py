"""The trajectory store's tables, as SQLAlchemy 2 typed models (one module, one place).

One row per trace, not per state snapshot::

    runs ─┬─< calls >── requests        a call row is one trace: a model choice, a rule
          │     │                       aggregation or an external input; identical
          │     └─< edges               requests (prompt + params) are stored once
          ├─< rewards                   edges: which traces a call read, in order
          └── items >── datasets        runs made by ``Graph.map(dataset=...)``

Token ids and logprobs are stored as packed little-endian arrays (int32 and float64),
exact and ~8x smaller than JSON; :mod:`scaffold.store._codec` converts them.
Times are Unix seconds (``time.time()``), so filters and rollups are plain comparisons
on every database.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Table, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = 2
"""The version this code writes. Older stores are upgraded on open (:mod:`scaffold.store._migrations`)."""


class Base(DeclarativeBase):
    """Declarative base of every store table."""

    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class SchemaInfo(Base):
    """One row: the schema version of this database."""

    __tablename__ = "schema_info"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class Dataset(Base):
    """A named dataset whose rows were run (``Graph.map(..., dataset="aime24")``)."""

    __tablename__ = "datasets"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    source: Mapped[str | None] = mapped_column(Text)
    """Where the rows came from (a path or a hub name), when known."""
    created_at: Mapped[float] = mapped_column(Float)


class Evaluation(Base):
    """A named evaluation (``scaffold eval``): one topology over one dataset; its runs are ``{name}-{item}``."""

    __tablename__ = "evaluations"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    graph: Mapped[str] = mapped_column(String, index=True)
    dataset: Mapped[str | None] = mapped_column(String)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    """What reproduces it: topology, parameters, model specs (never keys), data source, limit, seed, sampling."""
    problems: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class Item(Base):
    """One row of a dataset, as it was given to the graph."""

    __tablename__ = "items"

    dataset: Mapped[str] = mapped_column(ForeignKey("datasets.name"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class RunRow(Base):
    """One execution of a graph on one input."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    graph: Mapped[str] = mapped_column(String, index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The graph's structure (``Graph.spec()``)."""
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Build parameters (``n``, ``k``, ``steps``...)."""
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    models: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Alias -> ``{"model": concrete name, "backend": backend class}``."""
    seed: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(20), index=True)
    """``running``, ``ok``, ``error``, ``timeout`` or ``cancelled``."""
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float] = mapped_column(Float, index=True)
    finished_at: Mapped[float | None] = mapped_column(Float)
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    """The output's shape with trace ids in place of traces."""
    answer: Mapped[str | None] = mapped_column(Text)
    dataset: Mapped[str | None] = mapped_column(ForeignKey("datasets.name"), index=True)
    item: Mapped[int | None] = mapped_column(Integer)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    """Model traces recorded for the run (set when it ends)."""
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float | None] = mapped_column(Float)
    """Dollars; ``None`` when any call's price is unknown."""
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    """How many times the run was started (more than one after a resume)."""


class RequestRow(Base):
    """What was sent: messages (or a prompt) and sampling parameters, stored once per distinct request."""

    __tablename__ = "requests"

    key: Mapped[str] = mapped_column(String(32), primary_key=True)
    """Hash of model, messages, prompt, parameters and the logprobs flag (not the seed)."""
    model: Mapped[str | None] = mapped_column(String)
    messages: Mapped[list[Any]] = mapped_column(JSON)
    prompt: Mapped[str | None] = mapped_column(Text)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    logprobs: Mapped[bool] = mapped_column(Boolean, default=False)


class CallRow(Base):
    """One trace: a model choice, a rule aggregation or an external input."""

    __tablename__ = "calls"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    """The trace id, ``{run_id}/{node}#{index}``."""
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    node: Mapped[str] = mapped_column(String)
    index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(10))
    alias: Mapped[str | None] = mapped_column(String)
    model: Mapped[str | None] = mapped_column(String)
    """The concrete model the alias was bound to."""
    backend: Mapped[str | None] = mapped_column(String(100))
    request_key: Mapped[str | None] = mapped_column(ForeignKey("requests.key"))
    n: Mapped[int] = mapped_column(Integer, default=1)
    """Choices the request asked for (its traces share the request and its seed)."""
    seed: Mapped[int | None] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)
    token_ids: Mapped[bytes | None] = mapped_column(LargeBinary)
    logprobs: Mapped[bytes | None] = mapped_column(LargeBinary)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float | None] = mapped_column(Float)
    latency: Mapped[float] = mapped_column(Float, default=0.0)
    started_at: Mapped[float] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(20))
    error: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(40))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)

    __table_args__ = (Index("ix_calls_request", "request_key", "node", "index"),)


class Edge(Base):
    """Lineage: call ``call_id`` read trace ``input_id`` as its ``position``-th input."""

    __tablename__ = "edges"

    call_id: Mapped[str] = mapped_column(ForeignKey("calls.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    input_id: Mapped[str] = mapped_column(String)

    # small rows looked up by their key: no separate rowid tree on SQLite (a third of the cost of a write)
    __table_args__ = {"sqlite_with_rowid": False}


class Reward(Base):
    """A reward given to a call or to a whole run, with where it came from."""

    __tablename__ = "rewards"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    call_id: Mapped[str | None] = mapped_column(ForeignKey("calls.id"), index=True)
    """``None`` for a reward of the whole run."""
    value: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(100))
    """Who gave it: ``"math_verify"``, ``"user"``, a judge alias..."""
    created_at: Mapped[float] = mapped_column(Float)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)


def _table(model: type[Base]) -> Table:
    return cast(Table, model.__table__)


# The tables themselves, for Core statements (the writer and the queries use these).
RUNS = _table(RunRow)
CALLS = _table(CallRow)
EDGES = _table(Edge)
REQUESTS = _table(RequestRow)
REWARDS = _table(Reward)
DATASETS = _table(Dataset)
ITEMS = _table(Item)
EVALUATIONS = _table(Evaluation)

"""Plugins: the packages built on scaffold add topologies and commands through entry points.

Imports point one way (scaffold ← graphs ← trainers), so neither the command line nor the server
imports ``graphs`` or ``trainers``. Each package instead declares an entry point in the
``scaffold.cli`` group, a function that takes the :class:`Registry` and fills it::

    [project.entry-points."scaffold.cli"]
    graphs = "graphs.cli:register"        # the topology catalogue: run, eval, graph list/params/show
    trainers = "trainers.cli:register"    # the train command

The entry points are read once, on first use (the command line reads them when it is assembled). A
plugin that fails to load is remembered, not raised: what does not need it keeps working, and what
does raises :class:`~scaffold.CatalogueError` saying which plugin failed and why, in one line.
The group keeps its name, ``scaffold.cli``, for the plugins already written against it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from scaffold._errors import CatalogueError

if TYPE_CHECKING:
    import click

    from scaffold._graph import Graph, GraphFunction

ENTRY_POINT_GROUP = "scaffold.cli"
"""The entry-point group plugins declare their ``register(registry)`` function in."""


class Topologies(Protocol):
    """A catalogue of topologies by name, as ``scaffold run``, ``eval`` and ``graph`` use it.

    ``graphs.registry`` is one (the module itself satisfies the protocol).
    """

    @property
    def TOPOLOGIES(self) -> Mapping[str, GraphFunction]:
        """The ready-made topologies, in the order ``scaffold graph list`` shows them."""
        ...

    def topology(self, name: str) -> GraphFunction:
        """The graph function ``name`` (a ready-made one, ``FILE.py:NAME`` or ``MODULE:NAME``); unknown: GraphError."""
        ...

    def build_topology(self, name: str, params: Mapping[str, Any] | None = None, *, prompts: str = "generic",
                       model_dir: str | Path | None = None) -> Graph:
        """Topology ``name`` built with ``params`` given as text; a mistake raises a GraphError."""
        ...

    def describe_parameters(self, name: str) -> str:
        """One line per build parameter of ``name`` with its default."""
        ...


class Registry:
    """What the installed plugins added to the command line: commands and a topology catalogue."""

    def __init__(self) -> None:
        self.commands: dict[str, click.Command] = {}
        """Extra commands of the command line by name (``train``)."""
        self.topologies: Topologies | None = None
        """The topology catalogue, if a plugin supplied one."""
        self.failed: dict[str, str] = {}
        """Plugins that could not be loaded: entry-point name -> the error, in one line."""

    def add_command(self, command: click.Command) -> None:
        """Add ``command`` to ``scaffold`` (a name already taken is an error)."""
        if command.name is None or command.name in self.commands:
            raise ValueError(f"a plugin command needs a name of its own, got {command.name!r}")
        self.commands[command.name] = command

    def add_topologies(self, catalogue: Topologies) -> None:
        """Make ``catalogue`` the topologies the commands can name (one catalogue per installation)."""
        if self.topologies is not None and self.topologies is not catalogue:
            raise ValueError("a topology catalogue is already registered")
        self.topologies = catalogue

    def load(self, entry_points: Iterable[importlib.metadata.EntryPoint]) -> Registry:
        """Call each entry point's ``register(self)``; a failure is recorded in :attr:`failed`."""
        for entry_point in entry_points:
            try:
                entry_point.load()(self)
            except Exception as exc:  # a broken plugin must not take the other commands down
                message = f"{type(exc).__name__}: {exc}".splitlines()[0]
                self.failed[entry_point.name] = message
        return self


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The plugins installed in this environment, loaded on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry().load(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    return _REGISTRY


def topologies() -> Topologies:
    """The installed topology catalogue; without one, a one-line error saying how to get it."""
    found = registry().topologies
    if found is not None:
        return found
    failed = "; ".join(f"plugin {name!r} failed to load ({why})" for name, why in registry().failed.items())
    raise CatalogueError(
        (failed + "; " if failed else "") + "no topologies are installed: the `graphs` package provides them "
        f"through the {ENTRY_POINT_GROUP!r} entry point; install the project with `pip install -e .`"
    )

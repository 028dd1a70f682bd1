"""``graphs`` in the ``scaffold`` command line: the topologies ``scaffold run``, ``eval`` and ``graph`` can name.

The ``scaffold.cli`` entry point ``graphs = "graphs.cli:register"`` hands :mod:`graphs.registry`
(names, builds from text, parameter listings) to the command line, which never imports ``graphs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphs import registry as catalogue

if TYPE_CHECKING:
    from scaffold.cli import Registry


def register(registry: Registry) -> None:
    """The ``scaffold.cli`` entry point: make :mod:`graphs.registry` the command line's topology catalogue."""
    registry.add_topologies(catalogue)

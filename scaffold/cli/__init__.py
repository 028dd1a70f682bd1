"""The ``scaffold`` command line (``scaffold --help``; also ``python -m scaffold``).

The commands are assembled in :mod:`scaffold.cli._main`; topologies and the ``train`` command come
from the packages built on scaffold (``graphs``, ``trainers``), which register themselves as plugins:
an entry point in the ``scaffold.cli`` group names a ``register(registry: Registry)`` function that
adds commands or a :class:`Topologies` catalogue (:mod:`scaffold.catalogue`).
"""

from scaffold.catalogue import Registry, Topologies
from scaffold.cli._main import main

__all__ = ["main", "Registry", "Topologies"]

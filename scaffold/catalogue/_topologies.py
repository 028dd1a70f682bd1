"""Topologies by name: built from the installed catalogue with parameters given as text.

The command line (``run``, ``eval``, ``graph``) and the server (``scaffold serve``) build topologies
here. A renamed parameter (``-p population=8``) still works; its deprecation goes to ``warn`` (the
command line prints it as one ``warning:`` line), and a mistake raises a :class:`~scaffold.GraphError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from scaffold._graph import Graph
from scaffold.catalogue._plugins import topologies


def build(name: str, params: Mapping[str, str], *, warn: Callable[[str], None] | None = None, **options: Any) \
        -> Graph:
    """Topology ``name`` built by the installed catalogue with ``params`` (text values); each deprecation it
    raises goes to ``warn`` (``None``: dropped). ``options`` are the catalogue's (``prompts=``, ``model_dir=``).

    Examples:
        >>> build("self_consistency", {"n": "4"}).name
        'self_consistency'
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        graph = topologies().build_topology(name, params, **options)
    for warning in caught:
        if warn is not None and issubclass(warning.category, DeprecationWarning):
            warn(str(warning.message))
    return graph


def topology_aliases(name: str, params: Mapping[str, str]) -> list[str]:
    """The model aliases topology ``name`` uses with ``params`` (built with generic prompts: no model needed).

    Examples:
        >>> topology_aliases("rsa", {})
        ['solver']
    """
    return sorted(build(name, params).aliases)

"""The catalogue: topologies by name and models by spec, shared by the command line and the server.

Topologies come from plugins (:class:`Registry`, the ``scaffold.cli`` entry-point group: ``graphs``
supplies the ready-made ones) and are built from parameters given as text (:func:`build`). Models come
from specs (``pocket``, a model directory, ``hosted_vllm/NAME``, ``openai/gpt-4o-mini``...), each
alias of a topology bound to one (:func:`bind_specs`). Mistakes raise Scaffold's own errors
(:class:`~scaffold.GraphError`, :class:`~scaffold.ModelSpecError`, :class:`~scaffold.CatalogueError`,
:class:`~scaffold.MissingDependencyError`); the command line turns them into its messages, the server
into configuration errors.

Examples:
    >>> from scaffold.catalogue import build, parse_model_specs, topology_aliases
    >>> topology_aliases("rsa", {"n": "4"})
    ['solver']
    >>> parse_model_specs(["solver=hosted_vllm/pocket"])
    {'solver': 'hosted_vllm/pocket'}
"""

from scaffold.catalogue._plugins import ENTRY_POINT_GROUP, Registry, Topologies, registry, topologies
from scaffold.catalogue._specs import (
    DEFAULT_SPEC,
    POCKET_MAX_TOKENS,
    Bound,
    backend_for_spec,
    bind_specs,
    parse_model_specs,
    pocket_dir_of,
)
from scaffold.catalogue._topologies import build, topology_aliases

__all__ = [
    # topologies, from plugins
    "ENTRY_POINT_GROUP",
    "Registry",
    "Topologies",
    "registry",
    "topologies",
    "build",
    "topology_aliases",
    # models, from specs
    "DEFAULT_SPEC",
    "POCKET_MAX_TOKENS",
    "Bound",
    "parse_model_specs",
    "bind_specs",
    "backend_for_spec",
    "pocket_dir_of",
]

"""Node kinds at run time: one module per kind, holding how it expands into slots and how its jobs fire.

==================  =======================================  ==============================
module              node data (:mod:`scaffold._nodes`)       built by
==================  =======================================  ==============================
``call``            ``CallNode``                             ``generate``, ``sample``, ``aggregate``
``external``        ``InputNode``, ``ConstNode``             ``Input`` sets, ``candidates``
``rule``            ``RuleNode``                             ``vote``, ``best_of``, ``rule``...
``judged``          ``JudgedVoteNode``                       ``vote(..., equivalence=judge(...))``
``map``             ``MapNode``                              ``map_traces``
``select``          ``SelectNode``                           ``top_k``, ``select``
``concat``          ``ConcatNode``                           ``concat``
``loop``            ``GateNode``, ``LoopResultNode``         ``loop``
==================  =======================================  ==============================

A new kind is one module here: a :class:`~scaffold._nodes.Node` subclass (what it reads, its
size, its calls) and a function decorated ``@expands(ThatNode)``; import the module below.
"""

from scaffold._kinds import call, concat, external, judged, loop, map, rule, select  # noqa: F401  (they register)
from scaffold._kinds.registry import expander, expands

__all__ = ["expander", "expands"]

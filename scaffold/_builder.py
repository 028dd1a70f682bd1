"""The build context: while a ``@graph`` function runs, primitives add nodes here.

Nothing in this module calls a model. It holds the node list, unique names,
name scopes (sub-graphs, loop iterations), the variables a template may use,
and the loop gate that controls the nodes being created.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaffold._errors import GraphDefinitionError

if TYPE_CHECKING:
    from scaffold._nodes import GateNode, InputNode, Node

ANSWER_FORMAT = "answer_format"
"""The template variable every prompt may use: how to state the answer, as the node's (or run's) answer kind
words it (``AnswerKind.instruction``), unless a graph input or binding has that name."""


class Input:
    """Symbol for a graph input while the graph is built.

    Use it in a template (``"Solve {problem}"`` or ``TEMPLATE.format(problem=problem)``)
    or pass it where a set is expected to read candidates supplied at run time.

    Examples:
        >>> f"{Input('problem')}"
        '{problem}'
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __format__(self, spec: str) -> str:
        return "{" + self.name + "}"

    def __str__(self) -> str:
        return "{" + self.name + "}"

    __repr__ = __str__


@dataclass
class _Scope:
    prefix: str
    bindings: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Builder:
    """Collects the nodes of one graph while its function runs."""

    input_names: tuple[str, ...]
    nodes: list[Node] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    scopes: list[_Scope] = field(default_factory=list)
    controls: list[GateNode] = field(default_factory=list)
    input_nodes: dict[str, InputNode] = field(default_factory=dict)

    def unique_name(self, base: str) -> str:
        """Return ``base`` under the current scope, suffixed ``_2``, ``_3``... if taken."""
        if not base or any(c in base for c in "#\n"):
            raise GraphDefinitionError(f"invalid node name {base!r}")
        prefix = "/".join(s.prefix for s in self.scopes if s.prefix)
        full = f"{prefix}/{base}" if prefix else base
        name, i = full, 2
        while name in self.names:
            name, i = f"{full}_{i}", i + 1
        self.names.add(name)
        return name

    def add(self, node: Node) -> Node:
        node.id = len(self.nodes)
        node.control = self.controls[-1] if self.controls else None
        self.nodes.append(node)
        return node

    def resolve_var(self, name: str) -> tuple[str, Any]:
        """Where template variable ``name`` comes from: ``("input", root_name)`` or ``("const", value)``."""
        for scope in reversed(self.scopes):
            if name in scope.bindings:
                value = scope.bindings[name]
                if isinstance(value, Input):
                    return ("input", value.name)
                if _is_node(value):  # a set bound to a sub-graph input is data, not text
                    raise KeyError(name)
                return ("const", value)
        if name in self.input_names:
            return ("input", name)
        if name == ANSWER_FORMAT:
            return ("answer_format", None)
        raise KeyError(name)

    def available_vars(self) -> set[str]:
        out = set(self.input_names)  # {answer_format} resolves too (resolve_var), but is not listed
        for scope in self.scopes:
            out.update(k for k, v in scope.bindings.items() if not _is_node(v))
        return out

    @contextmanager
    def scope(self, prefix: str, bindings: Mapping[str, Any] | None = None) -> Iterator[None]:
        self.scopes.append(_Scope(prefix, dict(bindings or {})))
        try:
            yield
        finally:
            self.scopes.pop()

    @contextmanager
    def control(self, gate: GateNode) -> Iterator[None]:
        self.controls.append(gate)
        try:
            yield
        finally:
            self.controls.pop()


def _is_node(value: Any) -> bool:
    from scaffold._nodes import Node

    return isinstance(value, Node)


_current: contextvars.ContextVar[Builder | None] = contextvars.ContextVar("scaffold_builder", default=None)


def current_builder(what: str) -> Builder:
    """The builder of the graph being built, or a clear error when there is none."""
    builder = _current.get()
    if builder is None:
        raise GraphDefinitionError(
            f"sf.{what}() must be called while a graph is built: inside a function decorated with @sf.graph"
        )
    return builder


@contextmanager
def building(builder: Builder) -> Iterator[Builder]:
    token = _current.set(builder)
    try:
        yield builder
    finally:
        _current.reset(token)


def in_build() -> bool:
    return _current.get() is not None

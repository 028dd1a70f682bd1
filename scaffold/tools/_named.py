"""Tools by name, for configuration files and the command line (``scaffold serve``'s ``tools`` parameter).

- ``"calculator"``, ``"python"``: the built-in tools;
- ``"candidates"``: the tools that read an aggregating agent's candidates (:func:`~scaffold.tools.candidate_tools`);
- ``"mcp:<command>"``: every tool of the MCP server that command starts (over stdio), listed when named;
- ``"mcp+http://..."`` / ``"mcp+https://..."``: every tool of a streamable HTTP MCP server;
- ``"module:attribute"``: a :class:`~scaffold.Tool`, a function (made a tool), or a list of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from scaffold._errors import GraphDefinitionError
from scaffold._tools import Tool, tool
from scaffold.tools._calculator import calculator
from scaffold.tools._candidates import candidate_tools
from scaffold.tools._mcp import MCPServer
from scaffold.tools._python import python_executor

__all__ = ["named_tools"]


def named_tools(names: Iterable[str]) -> list[Tool]:
    """The tools ``names`` name (see the module docstring); an unknown name: :class:`~scaffold.GraphDefinitionError`.

    Examples:
        >>> [t.name for t in named_tools(["calculator", "python"])]
        ['calculator', 'python']
    """
    found: list[Tool] = []
    for name in names:
        found.extend(_named(str(name).strip()))
    return found


def _named(name: str) -> list[Tool]:
    if name == "calculator":
        return [calculator]
    if name == "python":
        return [python_executor()]
    if name == "candidates":
        return candidate_tools()
    if name.startswith("mcp:"):
        return list(MCPServer(name.removeprefix("mcp:")).tools())
    if name.startswith(("mcp+http://", "mcp+https://")):
        return list(MCPServer(url=name.removeprefix("mcp+")).tools())
    module, _, attribute = name.partition(":")
    if not module or not attribute:
        raise GraphDefinitionError(f"unknown tool {name!r}: use calculator, python, candidates, mcp:<command>, "
                                   f"mcp+http(s)://<url> or module:attribute")
    try:
        value = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise GraphDefinitionError(f"tool {name!r} cannot be imported: {exc}") from None
    values = value if isinstance(value, (list, tuple)) else [value]
    return [item if isinstance(item, Tool) else tool(item) for item in values]

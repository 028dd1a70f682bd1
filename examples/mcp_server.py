"""A small MCP server, for the agents guide and the tests: unit conversions and a word count.

Run it over stdio (what an agent's ``MCPServer(["python", "examples/mcp_server.py"])`` does) or over
streamable HTTP::

    python examples/mcp_server.py                 # stdio
    python examples/mcp_server.py --http 8765     # http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("units")

_METRES = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "mile": 1609.344, "ft": 0.3048, "in": 0.0254}


@server.tool()
def convert_length(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length between m, km, cm, mm, mile, ft and in."""
    for unit in (from_unit, to_unit):
        if unit not in _METRES:
            raise ValueError(f"unknown unit {unit!r}; known: {', '.join(_METRES)}")
    return value * _METRES[from_unit] / _METRES[to_unit]


@server.tool()
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()

"""Tools of an MCP server, through the official ``mcp`` SDK: a command started over stdio, or a streamable HTTP URL.

:class:`MCPServer` holds one connection per event loop, opened on first use by a task of its own
(the SDK's connection must be entered and left by one task) and closed by :meth:`MCPServer.aclose`,
by leaving ``async with server``, or when its event loop ends (``run_sync`` ends its loop after each
run: the server process is stopped with it). :meth:`MCPServer.tools` lists the server's tools as
:class:`~scaffold.Tool` objects for ``sf.agent(tools=...)``; their schemas are the server's, and the
server validates the arguments.

Examples:
    >>> server = MCPServer(["python", "my_server.py"])  # doctest: +SKIP
    >>> tools = server.tools()  # lists them once, at build time  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._errors import MissingDependencyError, ToolFailed
from scaffold._extras import install_hint
from scaffold._tools import DEFAULT_MAX_RESULT_CHARS, Tool

__all__ = ["MCPServer", "MCPTool"]


class _Connection:
    """One open connection on one event loop, owned by one task."""

    def __init__(self) -> None:
        self.ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class MCPServer:
    """An MCP server whose tools agents may call.

    ``command`` (a list of arguments, or one string split as a shell would) starts the server over stdio,
    with ``env`` added to a minimal environment and ``cwd``; ``url`` connects to a streamable HTTP server
    instead (``headers`` go with every request). ``timeout`` bounds each call (seconds). ``prefix`` is put
    before every tool's name (two servers may both have a ``search``).
    """

    def __init__(self, command: str | Sequence[str] | None = None, *, url: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float = 60.0, prefix: str = "",
                 max_result_chars: int = DEFAULT_MAX_RESULT_CHARS) -> None:
        if (command is None) == (url is None):
            raise ValueError("MCPServer takes a command (stdio) or a url (streamable HTTP), exactly one")
        self.command = shlex.split(command) if isinstance(command, str) else list(command or [])
        if command is not None and not self.command:
            raise ValueError("MCPServer: the command is empty")
        self.url = url
        self.env = dict(env or {})
        self.cwd = cwd
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.prefix = prefix
        self.max_result_chars = max_result_chars
        self._connections: dict[asyncio.AbstractEventLoop, _Connection] = {}

    def __repr__(self) -> str:
        return f"MCPServer({self.url or self.command[0]!r})"

    # -- the connection ------------------------------------------------------------------------------
    def _client(self) -> Any:
        try:
            from mcp import Client, StdioServerParameters
        except ImportError as exc:
            raise MissingDependencyError(f"MCP tools need the mcp SDK: {install_hint('mcp')}") from exc
        if self.url is not None:
            if self.headers:
                from mcp.client.streamable_http import streamable_http_client
                from mcp.shared._httpx_utils import create_mcp_http_client

                return Client(streamable_http_client(self.url, http_client=create_mcp_http_client(
                    headers=self.headers)))
            return Client(self.url)
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env or None,
                                       cwd=self.cwd)
        return Client(params, read_timeout_seconds=self.timeout)

    async def session(self) -> Any:
        """This event loop's connected client (opened on first use)."""
        loop = asyncio.get_running_loop()
        connection = self._connections.get(loop)
        if connection is None or (connection.task is not None and connection.task.done()
                                  and not connection.ready.done()):
            connection = self._connections[loop] = _Connection()
            connection.task = loop.create_task(self._own(connection), name=f"scaffold-mcp {self!r}")
        return await asyncio.shield(connection.ready)

    async def _own(self, connection: _Connection) -> None:
        try:
            async with self._client() as client:
                connection.ready.set_result(client)
                await connection.closing.wait()
        except BaseException as exc:
            if not connection.ready.done():
                connection.ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
        finally:
            self._connections.pop(asyncio.get_running_loop(), None)

    async def aclose(self) -> None:
        """Close this event loop's connection (and stop a stdio server's process)."""
        connection = self._connections.pop(asyncio.get_running_loop(), None)
        if connection is not None and connection.task is not None:
            connection.closing.set()
            await asyncio.gather(connection.task, return_exceptions=True)

    async def __aenter__(self) -> MCPServer:
        await self.session()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- tools ------------------------------------------------------------------------------------------
    async def list_tools(self) -> list[MCPTool]:
        """The server's tools, as :class:`~scaffold.Tool` objects."""
        client = await self.session()
        listed = await client.list_tools()
        return [MCPTool(self, item.name, item.description or "", dict(item.input_schema or {"type": "object"}))
                for item in listed.tools]

    def tools(self, names: Sequence[str] | None = None) -> list[MCPTool]:
        """The server's tools (only ``names``, if given), listed on a connection of their own that is closed
        after: call it while building a graph, outside any event loop (inside one, use :meth:`list_tools`)."""

        async def listed() -> list[MCPTool]:
            try:
                return await self.list_tools()
            finally:
                await self.aclose()

        found = asyncio.run(listed())
        if names is None:
            return found
        by_name = {t.remote_name: t for t in found}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise LookupError(f"{self!r} has no tool {', '.join(map(repr, missing))}; it has "
                              f"{', '.join(sorted(by_name)) or 'none'}")
        return [by_name[n] for n in names]


class MCPTool(Tool):
    """One tool of an :class:`MCPServer`: called over the server's connection on the running event loop."""

    def __init__(self, server: MCPServer, name: str, description: str, schema: Mapping[str, Any]) -> None:
        super().__init__(_tool_name(server.prefix + name), description, schema, timeout=server.timeout,
                         max_result_chars=server.max_result_chars)
        self.server = server
        self.remote_name = name

    async def invoke(self, arguments: dict[str, Any]) -> str:
        client = await self.server.session()
        result = await client.call_tool(self.remote_name, arguments)
        text = _content_text(result)
        if getattr(result, "is_error", False):
            raise ToolFailed(f"{self.name}: the server answered with an error: {text[:2000]}", "MCPError")
        return text


def _content_text(result: Any) -> str:
    """A tool result's content blocks as text: text blocks as they are, others as JSON; the structured content when
    there are no blocks."""
    parts = []
    for block in getattr(result, "content", None) or ():
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            dump = getattr(block, "model_dump", None)
            parts.append(json.dumps(dump(mode="json", exclude_none=True)) if dump is not None else str(block))
    if not parts and getattr(result, "structured_content", None) is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


def _tool_name(name: str) -> str:
    """A name the model APIs take (letters, digits, ``_`` and ``-``, at most 64)."""
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)
    return cleaned[:64] or "tool"

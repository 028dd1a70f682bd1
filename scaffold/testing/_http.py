"""The minimal HTTP/1.1 that :class:`~scaffold.testing._server.OpenAIServer` speaks, on asyncio streams.

Enough for ``httpx``, ``aiohttp``, ``openai`` and ``litellm``: keep-alive, ``Content-Length`` and
chunked request bodies; answers with a ``Content-Length`` (:class:`HTTPResponse`, JSON unless said
otherwise, optionally cut short) or written as they are produced with chunked transfer encoding
(:class:`StreamedResponse`, server-sent events). What the answers say is up to the ``respond``
callback of :func:`serve_connection`. Standard library only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

__all__ = ["BadHTTP", "CutStream", "HTTPResponse", "Responder", "StreamedResponse", "phrase", "read_request",
           "serve_connection", "write_stream"]

Responder = Callable[[str, str, Mapping[str, str], bytes], Awaitable["HTTPResponse | StreamedResponse | None"]]
"""``respond(method, target, headers, body)``: the answer to send, or ``None`` to drop the connection."""


@dataclass(frozen=True, slots=True)
class HTTPResponse:
    """One HTTP answer (JSON unless said otherwise)."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    cut_at: int | None = None
    """Send only this many bytes of the body (the ``Content-Length`` still promising all), then close."""

    def encode(self, keep_alive: bool) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {phrase(self.status)}", "Content-Type: application/json"]
        lines += [f"Content-Length: {len(self.body)}", f"Connection: {'keep-alive' if keep_alive else 'close'}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        body = self.body if self.cut_at is None else self.body[: self.cut_at]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class CutStream(Exception):
    """Raised by a :class:`StreamedResponse`'s chunks to drop the connection mid-body (no final chunk)."""


@dataclass(frozen=True, slots=True)
class StreamedResponse:
    """An answer written piece by piece as ``chunks`` yields them (``Transfer-Encoding: chunked``).

    ``chunks`` raising :class:`CutStream` closes the connection without the terminating chunk, as a
    server that died mid-answer would.
    """

    chunks: AsyncIterator[bytes]
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "text/event-stream"

    def head(self, keep_alive: bool) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {phrase(self.status)}", f"Content-Type: {self.content_type}",
                 "Cache-Control: no-cache", "Transfer-Encoding: chunked",
                 f"Connection: {'keep-alive' if keep_alive else 'close'}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def write_stream(writer: asyncio.StreamWriter, response: StreamedResponse, keep_alive: bool) -> bool:
    """Write ``response`` chunk by chunk; ``False`` when it was cut (the connection must then close)."""
    writer.write(response.head(keep_alive))
    chunks = response.chunks
    try:
        async for piece in chunks:
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
    except CutStream:
        await writer.drain()
        return False
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


class BadHTTP(Exception):
    """The bytes received are not an HTTP/1.1 request this server understands."""


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    respond: Responder,
    bad_request: Callable[[str], HTTPResponse],
) -> None:
    """Answer requests on one connection in turn until the client closes it, asks to, or a fault drops it.

    ``bad_request(message)`` is the answer sent, before closing, to bytes that are not HTTP.
    """
    try:
        while True:
            request = await read_request(reader)
            if request is None:
                return
            method, target, headers, body = request
            keep_alive = headers.get("connection", "").lower() != "close"
            response = await respond(method, target, headers, body)
            if response is None:
                return
            if isinstance(response, StreamedResponse):
                if not await write_stream(writer, response, keep_alive):
                    return
            else:
                writer.write(response.encode(keep_alive))
                await writer.drain()
                if response.cut_at is not None:
                    return
            if not keep_alive:
                return
    except (BadHTTP, asyncio.LimitOverrunError) as exc:
        writer.write(bad_request(f"Bad HTTP request: {exc}").encode(keep_alive=False))
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """``(method, target, headers, body)`` of the next request; ``None`` when the client closed the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadHTTP("incomplete request head") from None
        return None
    request_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadHTTP(f"bad request line {request_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadHTTP(f"bad header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if parts[2] == "HTTP/1.0" and "connection" not in headers:
        headers["connection"] = "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return parts[0], parts[1], headers, await _read_chunked(reader)
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise BadHTTP(f"bad Content-Length {length[:20]!r}")
    return parts[0], parts[1], headers, await reader.readexactly(int(length))


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise BadHTTP(f"bad chunk size {size_line[:20]!r}") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


def phrase(status: int) -> str:
    """The reason phrase of an HTTP status (``"Error"`` for codes the standard library does not know)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"

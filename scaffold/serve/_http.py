"""The HTTP server under ``scaffold serve`` and ``scaffold ui``: uvicorn, with limits fit for the open network.

uvicorn bounds idle kept-alive connections and, with ``limit_concurrency``, open connections; it has no
deadline for a request's head and no cap on its size. :class:`HttpLimits` says all of it in one place, and
:func:`uvicorn_config` applies it: a connection must send a complete request head within ``head_timeout``
seconds of opening (or of its previous answer) and in at most ``max_head_bytes``, else it is closed (431 for
a head too large). The body's own limits (size, deadline, structure) are the app's: :mod:`scaffold.serve._body`.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["HttpLimits", "is_loopback", "uvicorn_config"]

MiB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    """What one client may cost the server: sizes, deadlines and connections.

    Example:
        >>> HttpLimits(max_body_bytes=1 << 20).head_timeout
        10.0
    """

    max_body_bytes: int = 8 * MiB
    """Largest request body (413 beyond)."""
    max_json_values: int = 100_000
    """Most JSON values in one body (413 beyond), checked before it is parsed."""
    head_timeout: float = 10.0
    """Seconds a connection has to send a request's head, from its opening or its previous answer (else it is
    closed: idle and slow-header connections do not pile up)."""
    read_timeout: float = 30.0
    """Seconds a request has to send its whole body once its head arrived (else 408)."""
    max_head_bytes: int = 64 * 1024
    """Largest request line and headers together (431 beyond)."""
    keep_alive_timeout: int = 5
    """Seconds an idle kept-alive connection stays open."""
    max_connections: int | None = 1024
    """Open connections or tasks beyond which uvicorn answers 503 (``None``: no limit)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0"), is_loopback("localhost")
        (True, True, False, True)
    """
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def uvicorn_config(app: Any, *, host: str, port: int, limits: HttpLimits, shutdown_timeout: float,
                   log_level: str = "warning", lifespan: Literal["auto", "on", "off"] = "auto") -> Any:
    """A ``uvicorn.Config`` for ``app`` with ``limits`` applied (see the module docstring)."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, lifespan=lifespan,
                          timeout_graceful_shutdown=max(int(shutdown_timeout), 1),
                          timeout_keep_alive=limits.keep_alive_timeout, limit_concurrency=limits.max_connections,
                          h11_max_incomplete_event_size=limits.max_head_bytes, http=_protocol(limits))


def _protocol(limits: HttpLimits) -> Any:
    """uvicorn's httptools protocol with a deadline and a size cap on each request head (``"h11"`` without
    httptools: uvicorn's own, whose ``h11_max_incomplete_event_size`` caps the head but sets no deadline)."""
    if _GuardedProtocol is None:  # pragma: no cover - httptools comes with the serve extra
        return "h11"
    return type("GuardedProtocol", (_GuardedProtocol,), {"limits": limits})


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpTools
except ImportError:  # pragma: no cover
    _GuardedProtocol: Any = None
else:
    class _GuardedProtocol(_HttpTools):  # type: ignore[no-redef]
        """Closes a connection whose request head does not arrive whole within ``limits.head_timeout``, and
        answers 431 to one whose head passes ``limits.max_head_bytes``."""

        limits: HttpLimits = HttpLimits()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._head_bytes = 0
            self._head_size = 0
            self._head_timer: asyncio.TimerHandle | None = None
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._head_bytes = 0
            self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_late)

        def _disarm(self) -> None:
            timer = getattr(self, "_head_timer", None)
            if timer is not None:
                timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is not None:  # still reading a head (one header line too long to be parsed yet)
                self._head_bytes += len(data)
                if self._head_bytes > self.limits.max_head_bytes + MiB:
                    self._refuse_head()
                    return
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_size = 0

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            self._grow(len(url))

        def on_header(self, name: bytes, value: bytes) -> None:
            super().on_header(name, value)
            self._grow(len(name) + len(value) + 4)

        def _grow(self, size: int) -> None:
            self._head_size += size
            if self._head_size > self.limits.max_head_bytes:
                self._refuse_head()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _refuse_head(self) -> None:
            if self.transport.is_closing():
                return
            self._disarm()
            message = b"request head too large"
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
                                 b"content-length: " + str(len(message)).encode() + b"\r\nconnection: close\r\n\r\n"
                                 + message)
            self.transport.close()

"""The HTTP server under ``scaffold serve`` and ``scaffold ui``: uvicorn, with limits fit for the open network.

uvicorn bounds idle kept-alive connections and, with ``limit_concurrency``, open connections; it has no
deadline for a request's head or body and no cap on a head's size. :class:`HttpLimits` says all of it in one
place, and :func:`uvicorn_config` applies it: a connection must send a complete request head within
``head_timeout`` seconds of opening (or of its previous answer) and in at most ``max_head_bytes`` (else it is
closed; 431 for a head too large), and the body within ``read_timeout`` of its head (else 408). The app reads
the body's size and structure limits (:mod:`scaffold.serve._body`), and keeps its own body deadline when it is
served some other way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["HttpLimits", "is_loopback", "uvicorn_config"]

MiB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    """What one client may cost the server: sizes, deadlines and connections.

    Examples:
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

    Examples:
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
        """uvicorn's protocol with deadlines: a connection's request head must arrive whole within
        ``limits.head_timeout`` (else the connection closes) and in ``limits.max_head_bytes`` (else 431), the
        body within ``limits.read_timeout`` of its head (else 408). Timers are armed only while something is
        late to arrive: a request that comes in one piece, as most do, costs none."""

        limits: HttpLimits = HttpLimits()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._phase = "idle"
            """``idle`` (no request yet, or the last answered), ``head`` or ``body`` (arriving), ``app`` (with the
            app), or ``refused`` (answered 431 and closing)."""
            self._head_bytes = 0
            self._timer: asyncio.TimerHandle | None = None
            self._arm(self.limits.head_timeout)  # a connection that never sends anything

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, self._late)

        def _disarm(self) -> None:
            timer = getattr(self, "_timer", None)
            if timer is not None:
                timer.cancel()
                self._timer = None

        def data_received(self, data: bytes) -> None:
            if self._phase == "idle":
                self._phase, self._head_bytes = "head", 0
            if self._phase == "head":  # one header line too long to be parsed yet counts too
                self._head_bytes += len(data)
                if self._head_bytes > self.limits.max_head_bytes + MiB:
                    self._refuse_head()
                    return
            super().data_received(data)
            if self._phase == "head" and self._head_bytes > self.limits.max_head_bytes:
                self._refuse_head()  # still no end of the head in this many bytes
            elif self._timer is None and not self.transport.is_closing():
                if self._phase == "head":
                    self._arm(self.limits.head_timeout)
                elif self._phase == "body":
                    self._arm(self.limits.read_timeout)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._phase = "head"
            self.scope["extensions"] = {"scaffold.read_timeout": {"seconds": self.limits.read_timeout}}

        def on_headers_complete(self) -> None:
            self._disarm()
            self._phase = "body"
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > self.limits.max_head_bytes:  # a head that came whole in one piece (a slower one was
                self._refuse_head()                # counted as it arrived, in data_received)
                return
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self._phase != "refused":
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._phase == "refused":  # what the parser still finds of a refused request is dropped
                return
            self._disarm()
            self._phase = "app"
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._phase == "app":
                self._phase = "idle"  # uvicorn's keep-alive timer closes it if nothing more comes

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _late(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if self._phase == "body" and cycle is not None and not cycle.response_started:
                self._answer_and_close(408, "Request Timeout", "the body did not arrive within "
                                       f"{self.limits.read_timeout:g} seconds", "timeout")
                cycle.disconnected = True  # the app's next receive() says so, and its answer goes nowhere
                cycle.message_event.set()
            elif self._phase in ("idle", "head") and (cycle is None or cycle.response_complete):
                self.transport.close()

        def _refuse_head(self) -> None:
            self._phase = "refused"
            if not self.transport.is_closing():
                self._disarm()
                self._answer_and_close(431, "Request Header Fields Too Large", "the request head is larger than "
                                       f"{self.limits.max_head_bytes} bytes", "head_too_large")

        def _answer_and_close(self, status: int, reason: str, message: str, code: str) -> None:
            body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                         "code": code}}).encode()
            self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: "
                                 f"{len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
            self.transport.close()

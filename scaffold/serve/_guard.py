"""What every request to ``scaffold serve`` or ``scaffold ui`` passes first: the ``Host`` check, keys on the
pages that need them, and response headers (a pure ASGI middleware, so it costs a few microseconds).

- **Host allow-list.** A page on another site can make a browser talk to a server on the user's own
  machine by pointing its own DNS name at 127.0.0.1 (DNS rebinding); the browser then sends that name as
  ``Host``. Answering only the names this server is known by defeats it: by default the loopback names,
  when the server is bound to loopback. A 400 for anything else.
- **Keys on every page that tells or costs something** (``protected``), when keys are set: a 401 in
  the app's error shape.
- **Headers** added to every response (``headers``): the UI's Content-Security-Policy and friends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["Guard", "HostCheck", "LOOPBACK_HOSTS", "default_hosts"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
"""The names a server bound to loopback answers to by default."""

ErrorBody = Callable[[int, str, str | None], dict[str, Any]]
"""``(status, message, code) -> body``: an app's own error shape."""


def default_hosts(bound: str) -> list[str]:
    """The ``Host`` names a server bound to ``bound`` accepts when not told: the loopback names when it is
    bound to loopback (nothing else can reach it honestly), any host otherwise.

    Examples:
        >>> default_hosts("127.0.0.1"), default_hosts("0.0.0.0")
        (['localhost', '127.0.0.1', '::1'], ['*'])
    """
    from scaffold.serve._http import is_loopback

    return list(LOOPBACK_HOSTS) if is_loopback(bound) else ["*"]


class HostCheck:
    """Which ``Host`` header values are accepted: exact names, ``*.domain`` suffixes, or ``*`` (any).

    Ports are ignored, names compared without case; an IPv6 address may come in brackets.

    Examples:
        >>> check = HostCheck(["localhost", "*.example.com"])
        >>> check(b"localhost:8000"), check(b"api.example.com"), check(b"example.com"), check(b"evil.test")
        (True, True, False, False)
        >>> HostCheck(["::1"])(b"[::1]:8000"), HostCheck(["*"])(b"anything")
        (True, True)
    """

    def __init__(self, allowed: Iterable[str]) -> None:
        names = [a.strip().lower() for a in allowed if a.strip()]
        self.any = "*" in names
        self.exact = {_bare(name.encode()) for name in names if not name.startswith("*")}
        self.suffixes = tuple(name[1:].encode() for name in names if name.startswith("*."))

    def __call__(self, host: bytes | None) -> bool:
        if self.any:
            return True
        if not host:
            return False
        name = _bare(host.lower())
        return name in self.exact or (bool(self.suffixes) and name.endswith(self.suffixes))


def _bare(host: bytes) -> bytes:
    """``host`` without its port and IPv6 brackets."""
    if host.startswith(b"["):
        return host[1:host.find(b"]")] if b"]" in host else host[1:]
    if host.count(b":") == 1:
        return host.split(b":", 1)[0]
    return host


class Guard:
    """The middleware: ``Host`` check, then keys for ``protected`` paths, then the app with ``headers`` added."""

    def __init__(self, app: Any, *, hosts: HostCheck, error: ErrorBody, keys: Any = None,
                 protected: Callable[[str], bool] = lambda path: False,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        self.app = app
        self.hosts = hosts
        self.error = error
        self.keys = keys
        self.protected = protected
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
                break
        if not self.hosts(host):
            await self._refuse(send, 400, "this server does not answer for that Host header (set allowed_hosts to "
                                          "serve other names)", "invalid_host")
            return
        if self.keys and self.protected(scope["path"]):
            from scaffold.serve._errors import ApiError

            authorization = next((value for name, value in scope["headers"] if name == b"authorization"), None)
            try:
                self.keys.check(authorization.decode("latin-1") if authorization else None)
            except ApiError as exc:
                await self._refuse(send, exc.status, exc.message, exc.code)
                return
        if not self.headers:
            await self.app(scope, receive, send)
            return
        extra = self.headers

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _refuse(self, send: Any, status: int, message: str, code: str | None) -> None:
        body = json.dumps(self.error(status, message, code)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *self.headers]})
        await send({"type": "http.response.body", "body": body})

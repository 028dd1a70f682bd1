"""Serving an app from a background thread: for tests, notebooks and benchmarks that must keep their own loop."""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["ServeThread"]


class ServeThread:
    """Runs an ASGI app under uvicorn on 127.0.0.1 in a daemon thread (``port=0``: a free port), with the
    app's :class:`~scaffold.serve.HttpLimits` (``app.limits``) applied.

    Examples:
        >>> from scaffold.serve import load_server, create_app
        >>> import json, urllib.request
        >>> app = create_app(load_server({"served": {"m": {"topology": "single_sample",
        ...                                                 "models": {"solver": "hosted_vllm/x"}}}}, store="none"))
        >>> with ServeThread(app) as server:
        ...     json.load(urllib.request.urlopen(server.url + "/health"))["status"]
        'ok'
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, shutdown_timeout: float = 10.0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.shutdown_timeout = shutdown_timeout
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: :attr:`url` + ``/v1``."""
        return self.url + "/v1"

    def start(self) -> ServeThread:
        import uvicorn

        from scaffold.serve._http import HttpLimits, uvicorn_config

        limits = getattr(self.app, "limits", None) or HttpLimits()
        config = uvicorn_config(self.app, host=self.host, port=self.port, limits=limits,
                                shutdown_timeout=self.shutdown_timeout, lifespan="on")
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # not the main thread
        self._thread = threading.Thread(target=self._server.run, name="scaffold-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        if self.port == 0:
            self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (up to ``shutdown_timeout``), and join the thread."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(self.shutdown_timeout + 10)
            self._server = self._thread = None

    def __enter__(self) -> ServeThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

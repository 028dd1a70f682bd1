"""The viewer's web app: a JSON API over the store and one page that draws it, every asset served from the package.

Routes (all ``GET``):

- ``/`` — the page (``_static/index.html``; it loads ``/static/app.js`` and ``/static/app.css``; no CDN);
- ``/api/runs?graph=&dataset=&model=&status=&since=&until=&offset=&limit=`` — a page of runs;
- ``/api/runs/{run_id}`` — one run's executed DAG (404 for an unknown run);
- ``/api/evaluations?names=a,b`` — the comparison table and its plots' points;
- ``/api/compare?a=&b=&differing=1`` — two evaluations problem by problem;
- ``/api/training`` and ``/api/training/{i}`` — the training logs given to :func:`create_ui_app`;
- ``/health``.

Handlers are plain functions (Starlette runs them in its thread pool, off the event loop, since the store
is synchronous). Mistakes come back as JSON ``{"error": ...}`` with 400 or 404, never as a 500: query
values are checked (integers in range, finite times, text without NUL characters, at most 1,000 characters).

Every response carries a Content-Security-Policy that allows only this server's own scripts and styles (no
inline script, no framing: ``frame-ancestors 'none'``), ``X-Content-Type-Options: nosniff`` and a
``Referrer-Policy``; requests whose ``Host`` is not one this server answers for are refused (DNS rebinding):
the loopback names by default (:mod:`scaffold.serve._guard`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaffold._errors import EvaluationError, StoreError
from scaffold._values import has_lone_surrogate, json_data
from scaffold.store._store import Store
from scaffold.ui import _data

STATIC = Path(__file__).resolve().parent / "_static"


SECURITY_HEADERS = (
    ("content-security-policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-resource-policy", "same-origin"),
)
"""Headers on every response of the viewer."""
MAX_TEXT = 1000
MAX_OFFSET = 2**62


def create_ui_app(store: Store | str | os.PathLike[str], *,
                  training_logs: Sequence[str | os.PathLike[str]] = (),
                  allowed_hosts: Sequence[str] | None = None) -> Any:
    """The viewer as an ASGI app over ``store`` (a :class:`~scaffold.Store` or its URL/path) and training logs.

    ``allowed_hosts``: the ``Host`` names it answers (default: the loopback names; see
    :func:`scaffold.serve._guard.default_hosts` for a server bound elsewhere).

    Example (served on a free port, over an empty store):
        >>> import json, tempfile, urllib.request
        >>> import scaffold as sf
        >>> from scaffold.serve import ServeThread
        >>> with tempfile.TemporaryDirectory() as folder, sf.Store(f"{folder}/runs.db") as store:
        ...     with ServeThread(create_ui_app(store)) as ui:
        ...         json.load(urllib.request.urlopen(ui.url + "/api/runs"))["total"]
        0
    """
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    pages = _Handlers(store if isinstance(store, Store) else Store(store), [Path(p) for p in training_logs])
    routes = [
        Route("/", pages.index), Route("/health", pages.health),
        Route("/api/runs", pages.runs), Route("/api/runs/{run_id:path}", pages.run),
        Route("/api/evaluations", pages.evaluations), Route("/api/compare", pages.compare),
        Route("/api/training", pages.trainings), Route("/api/training/{index}", pages.training),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    async def unexpected(request: Any, exc: Exception) -> Any:
        return _Handlers.error(f"internal error: {type(exc).__name__}", 500)

    app = Starlette(routes=routes, exception_handlers={Exception: unexpected})
    app.state.store = pages.store
    from scaffold.serve._guard import LOOPBACK_HOSTS, Guard, HostCheck
    from scaffold.serve._http import HttpLimits

    guarded = Guard(app, hosts=HostCheck(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts),
                    error=lambda status, message, code: {"error": message}, headers=SECURITY_HEADERS)
    guarded.state = app.state  # type: ignore[attr-defined]
    guarded.limits = HttpLimits(max_body_bytes=64 * 1024, max_connections=256)  # type: ignore[attr-defined]
    return guarded


class BadQuery(ValueError):
    """A query value the viewer refuses (answered 400)."""


def _text(query: Any, key: str) -> str | None:
    """Query value ``key`` as text: at most :data:`MAX_TEXT` characters, no NUL (a 400 otherwise)."""
    value = query.get(key)
    if value is None or value == "":
        return None
    if len(value) > MAX_TEXT or "\x00" in value or has_lone_surrogate(value):
        raise BadQuery(f"{key} must be text of at most {MAX_TEXT} characters, without NUL characters")
    return value  # type: ignore[no-any-return]


def _integer(query: Any, key: str, default: int, low: int, high: int) -> int:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    if not raw.lstrip("-").isdigit() or len(raw) > 20 or not low <= int(raw) <= high:
        raise BadQuery(f"{key} must be an integer from {low} to {high}")
    return int(raw)


def _time(query: Any, key: str) -> float | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadQuery(f"{key} must be seconds since the epoch (a finite number)") from None
    if not math.isfinite(value):
        raise BadQuery(f"{key} must be a finite number of seconds since the epoch")
    return value


class _Handlers:
    """The routes' handlers over one store and the training logs."""

    def __init__(self, store: Store, logs: list[Path]) -> None:
        self.store, self.logs = store, logs

    @staticmethod
    def error(message: str, status: int) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"error": message}, status_code=status)

    @staticmethod
    def json(data: Any) -> Any:
        """``data`` as a JSON response; values JSON or UTF-8 cannot carry (NaN, a lone surrogate from an old
        store) are shown as ``null`` and U+FFFD instead of failing the page."""
        from starlette.responses import Response

        try:
            body = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        except (ValueError, UnicodeEncodeError):
            body = json.dumps(json_data(data), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        return Response(body, media_type="application/json")

    def index(self, request: Any) -> Any:
        from starlette.responses import FileResponse

        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    def health(self, request: Any) -> Any:
        return self.json({"status": "ok"})

    def runs(self, request: Any) -> Any:
        query = request.query_params
        try:
            offset = _integer(query, "offset", 0, 0, MAX_OFFSET)
            limit = _integer(query, "limit", _data.PAGE_SIZE, 1, _data.MAX_PAGE_SIZE)
            times = {key: value for key in ("since", "until") if (value := _time(query, key)) is not None}
            filters = {key: _text(query, key) for key in ("graph", "dataset", "model", "status")}
        except BadQuery as exc:
            return self.error(str(exc), 400)
        return self.json(_data.runs_page(self.store, offset=offset, limit=limit, **filters, **times))

    def run(self, request: Any) -> Any:
        run_id = request.path_params["run_id"]
        if len(run_id) > MAX_TEXT or "\x00" in run_id or has_lone_surrogate(run_id):
            return self.error("not a run id this store could hold", 400)
        try:
            return self.json(_data.run_view(self.store, run_id))
        except StoreError:
            return self.error(f"no run {run_id!r} in this store", 404)

    def evaluations(self, request: Any) -> Any:
        try:
            names = [n for n in (_text(request.query_params, "names") or "").split(",") if n]
        except BadQuery as exc:
            return self.error(str(exc), 400)
        try:
            return self.json(_data.evaluations_view(self.store, names))
        except (EvaluationError, StoreError) as exc:
            return self.error(str(exc), 404)

    def compare(self, request: Any) -> Any:
        try:
            first, second = _text(request.query_params, "a"), _text(request.query_params, "b")
        except BadQuery as exc:
            return self.error(str(exc), 400)
        if not first or not second:
            return self.error("name two evaluations: ?a=NAME&b=NAME", 400)
        differing = request.query_params.get("differing") in ("1", "true", "yes")
        try:
            return self.json(_data.compare_view(self.store, first, second, differing=differing))
        except (EvaluationError, StoreError, ValueError) as exc:
            return self.error(str(exc), 404)

    def trainings(self, request: Any) -> Any:
        return self.json({"logs": [{"index": i, "name": p.stem, "path": str(p)} for i, p in enumerate(self.logs)]})

    def training(self, request: Any) -> Any:
        index = request.path_params["index"]
        if not index.isdigit() or len(index) > 9 or int(index) >= len(self.logs):
            return self.error("no such training log", 404)
        path = self.logs[int(index)]
        try:
            return self.json(_data.training_view(path))
        except OSError as exc:
            return self.error(f"cannot read {path}: {exc.strerror}", 404)

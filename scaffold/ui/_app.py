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
is synchronous). Mistakes come back as JSON ``{"error": ...}`` with 400 or 404, never as a 500.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaffold._errors import EvaluationError, StoreError
from scaffold.store._store import Store
from scaffold.ui import _data

STATIC = Path(__file__).resolve().parent / "_static"


def create_ui_app(store: Store | str | os.PathLike[str], *,
                  training_logs: Sequence[str | os.PathLike[str]] = ()) -> Any:
    """The viewer as an ASGI app over ``store`` (a :class:`~scaffold.Store` or its URL/path) and training logs.

    Example:
        >>> from scaffold.ui import create_ui_app  # doctest: +SKIP
        >>> from scaffold.serve import ServeThread  # doctest: +SKIP
        >>> with ServeThread(create_ui_app("runs.db")) as ui:  # doctest: +SKIP
        ...     print(ui.url)
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
    app = Starlette(routes=routes)
    app.state.store = pages.store
    return app


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
        from starlette.responses import JSONResponse

        return JSONResponse(data)

    def index(self, request: Any) -> Any:
        from starlette.responses import FileResponse

        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    def health(self, request: Any) -> Any:
        return self.json({"status": "ok"})

    def runs(self, request: Any) -> Any:
        query = request.query_params
        try:
            offset, limit = int(query.get("offset", 0)), int(query.get("limit", _data.PAGE_SIZE))
            times: dict[str, Any] = {key: float(query[key]) for key in ("since", "until") if query.get(key)}
        except ValueError:
            return self.error("offset and limit are integers; since and until seconds since the epoch", 400)
        filters = {key: query.get(key) for key in ("graph", "dataset", "model", "status")}
        return self.json(_data.runs_page(self.store, offset=offset, limit=limit, **filters, **times))

    def run(self, request: Any) -> Any:
        run_id = request.path_params["run_id"]
        try:
            return self.json(_data.run_view(self.store, run_id))
        except StoreError:
            return self.error(f"no run {run_id!r} in this store", 404)

    def evaluations(self, request: Any) -> Any:
        names = [n for n in request.query_params.get("names", "").split(",") if n]
        try:
            return self.json(_data.evaluations_view(self.store, names))
        except (EvaluationError, StoreError) as exc:
            return self.error(str(exc), 404)

    def compare(self, request: Any) -> Any:
        first, second = request.query_params.get("a"), request.query_params.get("b")
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
        try:
            path = self.logs[int(request.path_params["index"])]
        except (ValueError, IndexError):
            return self.error("no such training log", 404)
        try:
            return self.json(_data.training_view(path))
        except OSError as exc:
            return self.error(f"cannot read {path}: {exc.strerror}", 404)

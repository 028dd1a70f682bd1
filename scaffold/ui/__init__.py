"""A local web viewer of recorded runs: ``scaffold ui``.

Pages: **Runs** (filtered by graph, dataset, model, status and time; paged in SQL; totals), **one run**
(its *executed* DAG: traces grouped by node, lineage edges, coloured by reward or by right/wrong against
the reference, failed, cancelled and retried calls marked; click a trace for its prompt, text, answer,
tokens, cost, latency and the traces it read; large nodes collapse; per-node and per-model rollups),
**Evaluations** (the ``scaffold compare`` table with intervals, accuracy against tokens and pass@k
plots, two evaluations problem by problem) and **Training** (per-step curves of a training log).

Every asset ships in the package (no CDN). Needs the ``serve`` extra (Starlette, uvicorn).

Examples:
    >>> from scaffold.ui import create_ui_app
    >>> from scaffold.serve import ServeThread
    >>> import json, os, tempfile, urllib.request
    >>> app = create_ui_app(os.path.join(tempfile.mkdtemp(), "runs.db"))
    >>> with ServeThread(app) as server:
    ...     json.load(urllib.request.urlopen(server.url + "/api/runs"))["total"]
    0
"""

from scaffold.ui._app import create_ui_app
from scaffold.ui._data import compare_view, evaluations_view, run_view, runs_page, training_view

__all__ = [
    "create_ui_app",
    # the pages' data, as JSON-ready dicts
    "runs_page",
    "run_view",
    "evaluations_view",
    "compare_view",
    "training_view",
]

"""``scaffold serve``: any graph as an OpenAI-compatible model, so every existing client gets test-time compute.

Change a client's base URL and model name, and its requests run a graph — RSA, MoA, self-consistency,
your own — over any backend, recorded in the store like every other run::

    scaffold serve rsa --model solver=openai/gpt-4o-mini -p n=8 --name rsa-mini
    scaffold serve --config serve.toml

- :class:`ServerConfig` (TOML; :mod:`scaffold.serve._config` documents the file) names each served model:
  topology, build parameters, model bindings (the model registry's format) and limits.
- :func:`load_server` builds the served graphs, :func:`build_app` / :func:`create_app` the ASGI app
  (FastAPI), :func:`serve` runs it under uvicorn with graceful shutdown, :class:`ServeThread` in a
  background thread (tests, notebooks).
- Endpoints: ``/v1/chat/completions``, ``/v1/completions`` (streamed or not), ``/v1/models``, ``/health``,
  ``/metrics`` (Prometheus). Errors are OpenAI's error JSON (:class:`ApiError`).

Examples:
    >>> from fastapi.testclient import TestClient
    >>> from scaffold.testing import ScriptedBackend
    >>> import scaffold as sf
    >>> served = load_server({"served": {"mini": {"topology": "self_consistency", "params": {"n": 3},
    ...                                            "models": {"solver": "hosted_vllm/x"}}}}, store="none")
    >>> served["mini"].models["solver"] = sf.Model(ScriptedBackend(lambda r: r"so \\boxed{4}"))
    >>> with TestClient(create_app(served), base_url="http://localhost") as client:  # a name it answers to
    ...     reply = client.post("/v1/chat/completions", json={"model": "mini",
    ...                         "messages": [{"role": "user", "content": "2+2?"}]}).json()
    >>> reply["choices"][0]["message"]["content"], reply["scaffold"]["calls"]
    ('so \\\\boxed{4}', 3)
"""

from scaffold.serve._app import create_app
from scaffold.serve._config import BudgetSettings, ConfigError, ServedModelConfig, ServerConfig, ServerSettings
from scaffold.serve._errors import ApiError
from scaffold.serve._http import HttpLimits
from scaffold.serve._metrics import Metrics
from scaffold.serve._served import Plan, ServedGraph
from scaffold.serve._server import api_keys, build_app, http_limits, load_server, serve
from scaffold.serve._thread import ServeThread
from scaffold.serve._wire import ChatMessage, ChatRequest, CompletionRequest, ScaffoldOptions

__all__ = [
    # configuration
    "ServerConfig",
    "ServerSettings",
    "ServedModelConfig",
    "BudgetSettings",
    "ConfigError",
    # serving
    "load_server",
    "build_app",
    "create_app",
    "serve",
    "ServeThread",
    "HttpLimits",
    "http_limits",
    "api_keys",
    "ServedGraph",
    "Plan",
    "Metrics",
    # wire formats
    "ChatRequest",
    "CompletionRequest",
    "ChatMessage",
    "ScaffoldOptions",
    "ApiError",
]

"""Loading a server config into served graphs, reading API keys, and running the app under uvicorn."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaffold.serve._config import ConfigError, ServerConfig, ServerSettings
from scaffold.serve._guard import default_hosts
from scaffold.serve._http import HttpLimits, is_loopback, uvicorn_config

if TYPE_CHECKING:
    from scaffold.serve._app import ServerApp
    from scaffold.serve._served import ServedGraph

__all__ = ["api_keys", "build_app", "http_limits", "load_server", "serve"]


def _config(source: ServerConfig | str | PathLike[str] | Mapping[str, Any]) -> ServerConfig:
    if isinstance(source, ServerConfig):
        return source
    if isinstance(source, Mapping):
        return ServerConfig.parse(source)
    return ServerConfig.load(source)


def load_server(source: ServerConfig | str | PathLike[str] | Mapping[str, Any], *, store: Any = None,
                defaults: Mapping[str | None, str] | None = None,
                api_base: str | None = None) -> dict[str, ServedGraph]:
    """Build every served model of a config (a :class:`ServerConfig`, a TOML path or a mapping).

    ``store`` is where requests are recorded (a :class:`~scaffold.Store`, URL or path; ``None``: the config's
    ``server.store``, else ``$SCAFFOLD_STORE`` / ``./scaffold.db``). ``defaults`` binds aliases the config
    leaves unbound (``{None: spec}`` every alias, ``{alias: spec}`` one). Mistakes raise :class:`ConfigError`.

    Examples:
        >>> served = load_server({"served": {"mini": {"topology": "self_consistency", "params": {"n": 4},
        ...                                            "models": {"solver": "hosted_vllm/x"}}}}, store="none")
        >>> served["mini"].graph.count_calls()
        {'solver': 4}
    """
    from scaffold.backends._load import model_from_config
    from scaffold.serve._served import bind_served, served_aliases

    config = _config(source)
    used = {alias for name, served in config.served.items() for alias in served_aliases(name, served)}
    unknown = sorted(str(alias) for alias in (defaults or {}) if alias is not None and alias not in used)
    if unknown:
        raise ConfigError(f"no served model has the model alias {', '.join(unknown)}; their aliases: "
                          f"{', '.join(sorted(used))}")
    target = _store(store if store is not None else config.server.store)
    shared = {name: model_from_config(name, entry) for name, entry in config.models.items()}
    made: dict[str, Any] = {}
    return {name: bind_served(name, served, shared, made, defaults=defaults, api_base=api_base, store=target)
            for name, served in config.served.items()}


def _store(target: Any) -> Any:
    """``"none"`` records nothing; ``None`` is the default store; anything else as given."""
    from scaffold.store._default import DEFAULT

    if isinstance(target, str) and target.lower() == "none":
        return None
    return DEFAULT if target is None else target


def api_keys(settings_env: str | None = None, settings_file: str | PathLike[str] | None = None) -> list[str]:
    """The accepted API keys: comma-separated in ``$settings_env``, one per line in ``settings_file``.

    A variable named but unset, or a file that cannot be read, is a :class:`ConfigError` (a server meant to
    be closed must not start open). Keys are never logged or recorded.
    """
    keys: list[str] = []
    if settings_env:
        value = os.environ.get(settings_env)
        if value is None:
            raise ConfigError(f"api_keys_env names ${settings_env}, which is not set")
        keys += [k.strip() for k in value.split(",") if k.strip()]
    if settings_file:
        path = Path(settings_file).expanduser()
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the API key file {path}: {exc.strerror or exc}") from None
        keys += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if (settings_env or settings_file) and not keys:
        raise ConfigError("the API key settings name no key")
    return keys


def build_app(source: ServerConfig | str | PathLike[str] | Mapping[str, Any], *, store: Any = None,
              defaults: Mapping[str | None, str] | None = None, api_base: str | None = None,
              keys: Sequence[str] | None = None) -> ServerApp:
    """The ASGI app of a config (served graphs, keys, allowed hosts and limits from it). ``keys`` overrides the
    config's. Unless the config names ``allowed_hosts``, the app answers the loopback names when the config's
    host is a loopback address, any name otherwise."""
    from scaffold.serve._app import create_app

    config = _config(source)
    settings = config.server
    served = load_server(config, store=store, defaults=defaults, api_base=api_base)
    chosen = list(keys) if keys is not None else api_keys(settings.api_keys_env, settings.api_keys_file)
    hosts = settings.allowed_hosts if settings.allowed_hosts is not None else default_hosts(settings.host)
    return create_app(served, api_keys=chosen, max_concurrent_requests=settings.max_concurrent_requests,
                      max_queued_requests=settings.max_queued_requests, allowed_hosts=hosts,
                      limits=http_limits(settings))


def http_limits(settings: ServerSettings) -> HttpLimits:
    """The HTTP limits of a ``[server]`` table."""
    connections = settings.max_connections or settings.max_concurrent_requests + settings.max_queued_requests + 256
    return HttpLimits(max_body_bytes=settings.max_body_bytes, max_json_values=settings.max_json_values,
                      head_timeout=settings.head_timeout, read_timeout=settings.read_timeout,
                      keep_alive_timeout=settings.keep_alive_timeout,
                      max_connections=connections)


def serve(source: ServerConfig | str | PathLike[str] | Mapping[str, Any], *, host: str | None = None,
          port: int | None = None, store: Any = None, defaults: Mapping[str | None, str] | None = None,
          api_base: str | None = None, log_level: str = "info") -> None:
    """Serve a config with uvicorn until SIGINT/SIGTERM; in-flight requests get ``shutdown_timeout`` to finish.

    Example (blocks, so not run here)::

        serve({"served": {"rsa": {"topology": "rsa", "models": {"solver": "openai/gpt-4o-mini"}}}}, port=8000)
    """
    config = _config(source)
    if host is not None:
        config = config.model_copy(update={"server": config.server.model_copy(update={"host": host})})
    app = build_app(config, store=store, defaults=defaults, api_base=api_base)
    if not is_loopback(config.server.host) and not app.state.handlers.keys:
        warn_open("scaffold serve", config.server.host, "run its graphs and spend on its models")
    run_app(app, host=config.server.host, port=config.server.port if port is None else port,
            shutdown_timeout=config.server.shutdown_timeout, log_level=log_level)


def run_app(app: Any, *, host: str, port: int, shutdown_timeout: float, log_level: str = "info") -> None:
    """Run an app under uvicorn until SIGINT/SIGTERM, letting in-flight requests finish first, with the app's
    :class:`HttpLimits` (``app.limits``) applied."""
    import uvicorn

    limits = getattr(app, "limits", None) or HttpLimits()
    uvicorn.Server(uvicorn_config(app, host=host, port=port, limits=limits, shutdown_timeout=shutdown_timeout,
                                  log_level=log_level)).run()


def warn_open(what: str, host: str, can: str) -> None:
    """Say, at startup, that a server bound beyond loopback with no key lets anyone who reaches it ``can``."""
    import logging

    logging.getLogger("scaffold.serve").warning(
        "%s listens on %s with no API key: anyone who can reach this port can %s. Set api_keys_env or "
        "api_keys_file (--api-keys-env), or bind to 127.0.0.1 behind a proxy that authenticates.", what, host, can)

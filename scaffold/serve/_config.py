"""The server config: which graphs ``scaffold serve`` serves under which model names, with what limits.

A TOML file (every table but ``[served.NAME]`` is optional)::

    [server]
    host = "127.0.0.1"
    port = 8000
    api_keys_env = "SCAFFOLD_API_KEYS"     # comma-separated keys; or api_keys_file = "keys.txt" (one per line)
    max_concurrent_requests = 64          # requests running graphs at once
    max_queued_requests = 256             # waiting beyond those: refused with 429
    shutdown_timeout = 30                 # seconds in-flight requests get to finish on SIGTERM
    allowed_hosts = ["api.example.com"]   # Host headers accepted (default: loopback names on loopback, else any)
    max_body_bytes = 8388608              # larger bodies: 413, before they are read
    max_json_values = 100000              # more values (objects, arrays, items) in one body: 413, before parsing
    head_timeout = 10                     # seconds a connection has to send a request's head (else closed)
    read_timeout = 30                     # seconds to receive a request's body once its head arrived (else 408)
    keep_alive_timeout = 5                # an idle kept-alive connection is closed after this
    max_connections = 1024                # open connections beyond this are answered 503

    [models.mini]                          # shared by every served graph that names it: one set of limits
    model = "openai/gpt-4o-mini"
    api_key_env = "OPENAI_API_KEY"
    max_in_flight = 32

    [served.rsa-mini]
    topology = "rsa"                       # a ready-made topology, FILE.py:NAME or MODULE:NAME
    params = { n = 8, k = 4, steps = 2 }
    models = { solver = "mini" }           # an alias -> a [models] name, a spec ("pocket", "openai/gpt-4o") or a table
    request_params = ["n", "steps"]        # build parameters a request may set (default: every plain one)
    sampling = ["temperature", "max_tokens"]  # request fields handed to every model call (default: none)
    timeout = 120                          # seconds per request; a request may ask for less...
    max_timeout = 600                      # ...or more, up to this
    budget = { tokens = 200000, dollars = 0.50 }       # per request; a request may lower it...
    max_budget = { tokens = 1000000, dollars = 2.0 }   # ...or raise it up to this
    max_calls = 200                        # refuse requests that could make more model calls (default 1000)
    max_params = { n = 16 }                # a request may raise these parameters up to this (others: only lower)

Every table is a pydantic model with strict types and no unknown keys; an alias's table is the model
registry's own :class:`~scaffold.backends._entry.ModelEntry`. Errors name the field
(``served.rsa-mini.timeout: Input should be greater than 0``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scaffold._errors import GraphDefinitionError
from scaffold._validation import describe_errors
from scaffold.backends._entry import ModelEntry

__all__ = ["BudgetSettings", "ConfigError", "ServedModelConfig", "ServerConfig", "ServerSettings", "SAMPLING_FIELDS",
           "DEFAULT_MAX_CALLS"]

SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "presence_penalty",
                   "frequency_penalty")
"""Request fields a served graph may hand to its model calls (``sampling = [...]``)."""

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
DEFAULT_MAX_CALLS = 1000
"""``max_calls`` when a served model does not set it."""
MiB = 1 << 20


class ConfigError(GraphDefinitionError):
    """A server config that cannot be served: bad TOML, a wrong type, an unknown topology or model."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class BudgetSettings(_Strict):
    """Most tokens and/or dollars one request may spend over all its model calls."""

    tokens: Annotated[int, Field(ge=1)] | None = None
    dollars: Annotated[float, Field(gt=0)] | None = None


class ServedModelConfig(_Strict):
    """One served model: a topology built with parameters, its aliases bound, its limits."""

    topology: str
    """A ready-made topology (``scaffold graph list``), ``FILE.py:NAME`` or ``MODULE:NAME``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Build parameters (``n``, ``k``, ``steps``, prompts...)."""
    models: dict[str, str | ModelEntry] = Field(default_factory=dict)
    """Alias -> a name from the config's ``[models]``, a model spec, or a registry table. Unbound aliases
    get the ``--model`` default of the command line (the pocket model)."""
    prompts: Literal["pocket", "generic"] | None = None
    """The pocket model's prompts or the topology's own (default: pocket when every alias is a pocket model)."""
    description: str | None = None
    request_params: list[str] | Literal[True, False] = True
    """Build parameters a request may set in ``scaffold.params``: a list, ``true`` (every parameter whose
    default is a number or a boolean: sizes, steps, temperatures, not prompts or aliases) or ``false``.
    An integer parameter (a size: ``n``, ``k``, ``steps``...) may only be lowered from its configured value
    (``params``, else the topology's default), unless ``max_params`` lets it be raised."""
    max_params: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    """The highest value a request may give each integer parameter named here (above its configured value)."""
    sampling: list[str] = Field(default_factory=list)
    """Request fields (of :data:`SAMPLING_FIELDS`) handed to every model call of the run."""
    timeout: Seconds | None = None
    max_timeout: Seconds | None = None
    budget: BudgetSettings | None = None
    max_budget: BudgetSettings | None = None
    max_calls: Annotated[int, Field(ge=1)] = DEFAULT_MAX_CALLS
    """Most model calls one request may make (``n`` runs of the graph, loops counted at their bound); a
    request whose graph could make more is a 400 before anything runs."""
    max_n: Annotated[int, Field(ge=1)] = 8
    """Largest ``n`` (independent runs) one request may ask for."""
    tools: bool = False
    """The request's ``tools`` are taken: as the graph's ``tools`` input when it declares one, and offered to its
    output node when that is an agent (the client runs them: see the serving guide); otherwise a request with
    tools is a 400."""
    context: Literal["fold", "refuse", "ignore"] = "fold"
    """A system message and earlier turns the graph has no input for (``system``, ``history``, ``messages``):
    folded into the problem as a short transcript, refused with a 400, or ignored."""
    progress: bool = False
    """Send progress events in streams unless the request says otherwise."""

    @model_validator(mode="after")
    def _consistent(self) -> ServedModelConfig:
        unknown = sorted(set(self.sampling) - set(SAMPLING_FIELDS))
        if unknown:
            raise ValueError(f"`sampling` names unknown field(s) {', '.join(unknown)}; known: "
                             f"{', '.join(SAMPLING_FIELDS)}")
        if self.timeout is not None and self.max_timeout is not None and self.timeout > self.max_timeout:
            raise ValueError("`timeout` is larger than `max_timeout`")
        if self.max_params and self.request_params is False:
            raise ValueError("`max_params` names parameters, but `request_params = false` lets a request set none")
        return self


class ServerSettings(_Strict):
    """The ``[server]`` table: where to listen, who may call, how much at once."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    api_keys_env: str | None = None
    """An environment variable holding the accepted API keys, comma-separated."""
    api_keys_file: str | None = None
    """A file of accepted API keys, one per line (``#`` comments allowed)."""
    max_concurrent_requests: Annotated[int, Field(ge=1)] = 64
    max_queued_requests: Annotated[int, Field(ge=0)] = 256
    shutdown_timeout: Seconds = 30.0
    store: str | None = None
    """Where requests are recorded (default: the command line's ``--store``, ``$SCAFFOLD_STORE`` or
    ``./scaffold.db``); ``"none"`` records nothing."""
    allowed_hosts: list[str] | None = None
    """``Host`` header values accepted (``"api.example.com"``, ``"*.example.com"``, ``"*"`` for any; ports
    are ignored). Default: the loopback names (``localhost``, ``127.0.0.1``, ``::1``) when bound to a
    loopback address, which defeats DNS rebinding; any host when bound beyond loopback."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 8 * MiB
    """Largest request body; a larger one is answered 413 without being read (or as soon as it passes)."""
    max_json_values: Annotated[int, Field(ge=100)] = 100_000
    """Most JSON values (objects, arrays and their items) in one body; more is a 413 before parsing, which
    bounds how long one body can hold the event loop."""
    head_timeout: Seconds = 10.0
    """Seconds a connection has to send a request's head, from its opening or its previous answer (else the
    connection is closed: idle and slow-header connections do not pile up)."""
    read_timeout: Seconds = 30.0
    """Seconds a request has to send its whole body once its head arrived (else 408, connection closed)."""
    keep_alive_timeout: Annotated[int, Field(ge=1)] = 5
    """Seconds an idle kept-alive connection stays open."""
    max_connections: Annotated[int, Field(ge=1)] | None = None
    """Open connections (and tasks) beyond which new requests are answered 503 by the HTTP server;
    default ``max_concurrent_requests + max_queued_requests + 256``."""


class ServerConfig(_Strict):
    """A whole server config (see the module docstring for the file).

    Examples:
        >>> config = ServerConfig.parse({"served": {"rsa-mini": {"topology": "rsa", "params": {"n": 4}}}})
        >>> config.served["rsa-mini"].params
        {'n': 4}
        >>> ServerConfig.parse({"served": {"x": {"topology": "rsa", "timeout": -1}}})
        Traceback (most recent call last):
        ...
        scaffold.serve._config.ConfigError: server config: `served.x.timeout`: Input should be greater than 0
    """

    server: ServerSettings = Field(default_factory=ServerSettings)
    models: dict[str, ModelEntry] = Field(default_factory=dict)
    served: dict[str, ServedModelConfig]

    @model_validator(mode="after")
    def _something_served(self) -> ServerConfig:
        if not self.served:
            raise ValueError("`served` needs at least one model")
        return self

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ServerConfig:
        """Validate an already parsed config; a mistake is a :class:`ConfigError` naming the field."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise ConfigError(f"server config: {describe_errors(exc.errors())}") from None

    @classmethod
    def load(cls, path: str | PathLike[str]) -> ServerConfig:
        """Read and validate a TOML config file."""
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read the server config {file}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file}: not valid TOML: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{file}: {describe_errors(exc.errors())}") from None

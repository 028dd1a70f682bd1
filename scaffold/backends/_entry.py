"""One model alias's registry entry as a pydantic model: the schema of ``models.toml`` and of the server config.

:class:`ModelEntry` is what a ``[models.ALIAS]`` table may hold (see :mod:`scaffold.backends._registry`).
Types are strict — a quoted number, ``true`` for a count or ``2.5`` for a whole number is refused rather
than coerced — and each backend kind accepts only its own settings, so a misspelt or misplaced key is an
error that names it and lists what the backend allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scaffold._errors import ModelAliasError
from scaffold._validation import describe_errors
from scaffold.backends._registry import BACKENDS, default_kind

MODEL_KEYS = frozenset({"name", "params", "max_in_flight", "requests_per_minute", "tokens_per_minute", "timeout",
                        "retry", "price"})
"""Settings of the :class:`~scaffold.Model` itself, allowed whatever the backend."""

def backend_keys(kind: str) -> frozenset[str]:
    """The settings backend ``kind`` takes (handed to its constructor): what its class declares (``settings``).

    Examples:
        >>> sorted(backend_keys("transformers"))[:2]
        ['batch_window', 'device']
    """
    return frozenset(getattr(BACKENDS[kind], "settings", ()))

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
PositiveNumber = Annotated[float, Field(gt=0)]


class RetrySettings(BaseModel):
    """A ``retry`` table: :class:`~scaffold.Retry`'s fields (checked again by ``Retry`` itself)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    attempts: PositiveInt | None = None
    initial_delay: float | None = None
    multiplier: float | None = None
    max_delay: float | None = None
    jitter: float | None = None
    max_retry_after: float | None = None


class PriceSettings(BaseModel):
    """A ``price`` table: :class:`~scaffold.Price`'s fields, dollars per token or per second."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: Annotated[float, Field(ge=0)] = 0.0
    output: Annotated[float, Field(ge=0)] = 0.0
    cached_input: Annotated[float, Field(ge=0)] | None = None
    per_second: Annotated[float, Field(ge=0)] = 0.0


class ModelEntry(BaseModel):
    """What one alias of a model registry may say (TOML ``[models.ALIAS]``, YAML, or a server config).

    Examples:
        >>> entry = ModelEntry.parse("judge", {"model": "hosted_vllm/x", "max_in_flight": 4})
        >>> entry.backend_kind, entry.max_in_flight
        ('openai', 4)
        >>> ModelEntry.parse("judge", {"model": "hosted_vllm/x", "max_in_flight": "4"})
        Traceback (most recent call last):
        ...
        scaffold._errors.ModelAliasError: model alias 'judge': `max_in_flight`: Input should be a valid integer
    """

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    """Keys beyond the fields below are a backend's own settings: allowed only when its class declares them
    (checked before the fields are read), so a backend added to the registry needs no field here."""

    model: str
    """The model: a litellm name, a name on an OpenAI-compatible server, or a local directory."""
    backend: str | None = None
    """One of :data:`BACKENDS`; default chosen from the name (:func:`~scaffold.backends._registry.default_kind`)."""
    name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    max_in_flight: PositiveInt | None = None
    requests_per_minute: PositiveNumber | None = None
    tokens_per_minute: PositiveNumber | None = None
    timeout: PositiveNumber | None = None
    retry: PositiveInt | RetrySettings | None = None
    price: PriceSettings | None = None
    """What every call costs (a local engine, a self-hosted server): ``price = {input = 1e-7, output = 4e-7}``."""
    # backend settings (which ones a kind accepts: backend_keys)
    api_base: str | None = None
    api_key_env: str | None = None
    supports_n: bool | None = None
    max_n: PositiveInt | None = None
    token_ids: bool | None = None
    input_cost_per_token: Annotated[float, Field(ge=0)] | None = None
    output_cost_per_token: Annotated[float, Field(ge=0)] | None = None
    price_by_name: bool | None = None
    headers: dict[str, str] | None = None
    extra_body: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    device: str | None = None
    dtype: str | None = None
    max_batch_size: PositiveInt | None = None
    max_new_tokens: PositiveInt | None = None
    batch_window: Annotated[float, Field(ge=0)] | None = None
    enable_lora: bool | None = None
    max_lora_rank: PositiveInt | None = None
    enable_prefix_caching: bool | None = None
    max_model_len: PositiveInt | None = None
    engine_kwargs: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_settings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a table of settings, got {type(data).__name__}")
        if "api_key" in data:
            raise ValueError("do not write API keys in a registry; name the variable with `api_key_env`")
        if "model" not in data:
            raise ValueError("`model` is required")
        kind = data.get("backend")
        if kind is None:
            kind = default_kind(str(data["model"]), data.get("api_base"))
        if kind not in BACKENDS:
            raise ValueError(f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}")
        allowed = MODEL_KEYS | backend_keys(kind) | {"backend", "model"}
        unknown = sorted(set(map(str, data)) - allowed)
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}; allowed for backend {kind!r}: "
                             f"{', '.join(sorted(allowed))}")
        return {**data, "backend": kind}

    @classmethod
    def parse(cls, alias: str, entry: Any) -> ModelEntry:
        """Validate ``entry`` (a mapping) for ``alias``; a mistake is a :class:`~scaffold.ModelAliasError`."""
        try:
            return cls.model_validate(entry)
        except ValidationError as exc:
            raise ModelAliasError(f"model alias {alias!r}: {describe_errors(exc.errors())}") from None

    @property
    def backend_kind(self) -> str:
        """The backend kind this entry builds (always set once validated)."""
        assert self.backend is not None
        return self.backend

    def model_settings(self) -> dict[str, Any]:
        """The :class:`~scaffold.Model` keyword arguments this entry sets (``retry`` still as written)."""
        return {key: getattr(self, key) for key in sorted(MODEL_KEYS & self.model_fields_set)}

    def backend_options(self) -> dict[str, Any]:
        """The backend constructor's keyword arguments this entry sets."""
        given = {key: getattr(self, key) for key in self.model_fields_set if key in type(self).model_fields}
        given.update(self.model_extra or {})
        return {key: given[key] for key in sorted(backend_keys(self.backend_kind) & given.keys())}

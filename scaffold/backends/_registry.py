"""The model registry: aliases bound to backends, models, defaults and limits, from Python or a file.

One mapping points a graph at API models, a vLLM server, an in-process vLLM engine or a
local transformers model. In a TOML file (YAML has the same shape)::

    [models.proposer]
    model = "openai/gpt-4o-mini"          # any litellm model; backend = "litellm" is the default
    api_key_env = "OPENAI_API_KEY"
    params = { temperature = 0.7, max_tokens = 1024 }
    max_in_flight = 32
    requests_per_minute = 500
    tokens_per_minute = 200000

    [models.aggregator]
    backend = "litellm"
    model = "hosted_vllm/pocket"          # a running `vllm serve`
    api_base = "http://127.0.0.1:8000/v1"

    [models.policy]
    backend = "transformers"              # or "vllm" for the in-process engine
    model = "/path/to/model"

Keys are never read from the file itself: name the environment variable (``api_key_env``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from scaffold._errors import ModelAliasError
from scaffold.backends._base import Backend
from scaffold.backends._model import Model
from scaffold.backends._retry import Retry

BACKENDS = ("litellm", "transformers", "vllm")
"""Backend kinds a registry entry or a ``"kind:model"`` string may name."""

_MODEL_KEYS = {"name", "params", "max_in_flight", "requests_per_minute", "tokens_per_minute", "timeout", "retry"}
_BACKEND_KEYS = {
    "litellm": {"api_base", "api_key_env", "supports_n", "max_n", "token_ids", "input_cost_per_token",
                "output_cost_per_token", "extra"},
    "transformers": {"device", "dtype", "max_batch_size", "max_new_tokens", "batch_window"},
    "vllm": {"enable_lora", "max_lora_rank", "enable_prefix_caching", "dtype", "max_model_len", "engine_kwargs"},
}


def backend_from_spec(spec: str, **options: Any) -> Backend:
    """Build a backend from a string: ``"transformers:/path"``, ``"vllm:/path"``, or any litellm model.

    Example:
        >>> backend_from_spec("hosted_vllm/tiny", api_base="http://127.0.0.1:8000/v1").capabilities.supports_n
        True
    """
    kind, _, rest = spec.partition(":")
    if rest and kind in ("transformers", "vllm") and not rest.startswith("//"):
        return make_backend(kind, rest, options)
    return make_backend("litellm", spec, options)


def make_backend(kind: str, model: str, options: Mapping[str, Any]) -> Backend:
    """Build a backend of ``kind`` (one of :data:`BACKENDS`) for ``model`` with keyword ``options``."""
    if kind == "litellm":
        from scaffold.backends._litellm import LiteLLMBackend

        return LiteLLMBackend(model, **options)
    if kind == "transformers":
        from scaffold.backends._transformers import TransformersBackend

        return TransformersBackend(model, **options)  # type: ignore[return-value]
    if kind == "vllm":
        from scaffold.backends._vllm import VLLMBackend

        return VLLMBackend(model, **options)  # type: ignore[return-value]
    raise ModelAliasError(f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}")


def model_from_config(alias: str, entry: Mapping[str, Any]) -> Model:
    """Build the :class:`Model` an alias's registry entry describes (see the module docstring)."""
    if not isinstance(entry, Mapping):
        raise ModelAliasError(f"model alias {alias!r}: expected a table of settings, got {entry!r}")
    entry = dict(entry)
    kind = entry.pop("backend", "litellm")
    if kind not in BACKENDS:
        raise ModelAliasError(f"model alias {alias!r}: unknown backend {kind!r}; known: {', '.join(BACKENDS)}")
    if "model" not in entry:
        raise ModelAliasError(f"model alias {alias!r}: `model` is required")
    if "api_key" in entry:
        raise ModelAliasError(
            f"model alias {alias!r}: do not write API keys in a registry; name the variable with `api_key_env`"
        )
    model = str(entry.pop("model"))
    unknown = set(entry) - _MODEL_KEYS - _BACKEND_KEYS[kind]
    if unknown:
        allowed = ", ".join(sorted(_MODEL_KEYS | _BACKEND_KEYS[kind] | {"backend", "model"}))
        raise ModelAliasError(f"model alias {alias!r}: unknown setting(s) {', '.join(sorted(unknown))}; "
                              f"allowed for backend {kind!r}: {allowed}")
    model_settings = {key: entry.pop(key) for key in list(entry) if key in _MODEL_KEYS}
    _check_types(alias, model_settings)
    try:
        retry = model_settings.pop("retry", None)
        if isinstance(retry, Mapping):
            model_settings["retry"] = Retry(**retry)
        elif retry is not None:
            model_settings["retry"] = Retry(attempts=retry)
        return Model(make_backend(kind, model, entry), **model_settings)
    except ModelAliasError:
        raise
    except (TypeError, ValueError) as exc:  # Retry(attemps=3), max_in_flight = 0...
        raise ModelAliasError(f"model alias {alias!r}: {exc}") from None


def _check_types(alias: str, settings: Mapping[str, Any]) -> None:
    """Refuse settings of the wrong type (a quoted number, ``retry = true``): they would fail late or silently."""
    for key, value in settings.items():
        if key == "retry" and isinstance(value, Mapping):
            continue  # checked by Retry itself
        if key in ("max_in_flight", "retry"):
            ok, wanted = isinstance(value, int) and not isinstance(value, bool), "a whole number"
        elif key in ("requests_per_minute", "tokens_per_minute", "timeout"):
            ok, wanted = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
        elif key == "params":
            ok, wanted = isinstance(value, Mapping), "a table"
        elif key == "name":
            ok, wanted = isinstance(value, str), "a string"
        else:
            continue
        if not ok:
            raise ModelAliasError(f"model alias {alias!r}: `{key}` must be {wanted}, got {value!r}")


def load_models(source: str | PathLike[str] | Mapping[str, Any]) -> dict[str, Model]:
    """Load aliases from a TOML or YAML file (or an already parsed mapping) into :class:`Model` objects.

    The result goes straight into ``graph.run(..., models=...)``; reuse it across runs so
    limits are shared.

    Example:
        >>> models = load_models({"models": {"judge": {"model": "hosted_vllm/tiny", "max_in_flight": 4,
        ...                                             "api_base": "http://127.0.0.1:8000/v1"}}})
        >>> models["judge"].limit.limit
        4
    """
    if isinstance(source, Mapping):
        data: Any = source
    else:
        path = Path(source)
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise ModelAliasError(f"{path}: not valid TOML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ModelAliasError(f"a model registry must be a mapping, got {type(data).__name__}")
    table = data.get("models", data)
    if not isinstance(table, Mapping) or not table:
        raise ModelAliasError("a model registry needs a `models` table with at least one alias")
    return {str(alias): model_from_config(str(alias), entry) for alias, entry in table.items()}

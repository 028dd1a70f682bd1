"""Model aliases from a file or a mapping: aliases bound to backends, models, defaults and limits.

One mapping points a graph at API models, a vLLM server, an in-process vLLM engine or a
local transformers model. In a TOML file (YAML has the same shape)::

    [models.proposer]
    model = "openai/gpt-4o-mini"          # any litellm model
    api_key_env = "OPENAI_API_KEY"
    params = { temperature = 0.7, max_tokens = 1024 }
    max_in_flight = 32
    requests_per_minute = 500
    tokens_per_minute = 200000

    [models.aggregator]
    model = "hosted_vllm/pocket"          # a running `vllm serve`: the native OpenAI-compatible backend
    api_base = "http://127.0.0.1:8000/v1"

    [models.policy]
    backend = "transformers"              # or "vllm" for the in-process engine
    model = "/path/to/model"

Which backend an entry without ``backend`` gets is the registry's rule (:mod:`scaffold.backends._registry`).
Keys are never read from the file itself: name the environment variable (``api_key_env``).
The schema of an entry is :class:`~scaffold.backends._entry.ModelEntry` (pydantic), shared with the
server config of ``scaffold serve``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaffold._errors import ModelAliasError
from scaffold.backends._model import Model
from scaffold.backends._prices import Price
from scaffold.backends._registry import make_backend
from scaffold.backends._retry import Retry

if TYPE_CHECKING:
    from scaffold.backends._entry import ModelEntry


def model_from_config(alias: str, entry: Mapping[str, Any] | ModelEntry) -> Model:
    """Build the :class:`Model` an alias's registry entry describes (see the module docstring).

    The entry is validated by :class:`~scaffold.backends._entry.ModelEntry` (strict types, each backend's
    own settings); a mistake is a :class:`~scaffold.ModelAliasError` naming the alias and the field.
    """
    from scaffold.backends._entry import ModelEntry, RetrySettings  # pydantic: imported when a registry is read

    parsed = entry if isinstance(entry, ModelEntry) else ModelEntry.parse(alias, entry)
    settings = parsed.model_settings()
    try:
        retry = settings.pop("retry", None)
        if isinstance(retry, RetrySettings):
            settings["retry"] = Retry(**retry.model_dump(exclude_none=True))
        elif retry is not None:
            settings["retry"] = Retry(attempts=retry)
        price = settings.pop("price", None)
        if price is not None:
            settings["price"] = Price(**price.model_dump())
        return Model(make_backend(parsed.backend_kind, parsed.model, parsed.backend_options()), **settings)
    except ModelAliasError:
        raise
    except (TypeError, ValueError) as exc:  # Retry(multiplier=0.5), a backend refusing an option...
        raise ModelAliasError(f"model alias {alias!r}: {exc}") from None


def load_models(source: str | PathLike[str] | Mapping[str, Any]) -> dict[str, Model]:
    """Load aliases from a TOML or YAML file (or an already parsed mapping) into :class:`Model` objects.

    The result goes straight into ``graph.run(..., models=...)``; reuse it across runs so
    limits are shared.

    Examples:
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

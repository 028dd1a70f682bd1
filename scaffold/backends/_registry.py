"""The model registry: aliases bound to backends, models, defaults and limits, from Python or a file.

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

Which backend a string or an entry without ``backend`` gets (:func:`default_kind`): ``openai``
(:class:`~scaffold.backends.OpenAIBackend`) for ``hosted_vllm/NAME``, and, given an ``api_base``, for
``openai/NAME``, ``custom_openai/NAME`` or any name without a litellm provider prefix (``pocket``,
``Qwen/Qwen2.5-7B-Instruct``); ``litellm`` for everything else: providers with their own APIs, and
``openai/NAME`` without an ``api_base`` (litellm adapts parameters to OpenAI's model families; use
``openai:NAME`` or ``backend = "openai"`` for the native path to OpenAI itself). A ``kind:`` prefix
(``litellm:hosted_vllm/x``, ``openai:gpt-4o-mini``, ``transformers:/path``, ``vllm:/path``) or
``backend = "..."`` in a file chooses explicitly.

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
from scaffold.backends._base import Backend
from scaffold.backends._model import Model
from scaffold.backends._retry import Retry

if TYPE_CHECKING:
    from scaffold.backends._entry import ModelEntry

BACKENDS = ("openai", "litellm", "transformers", "vllm")
"""Backend kinds a registry entry or a ``"kind:model"`` string may name."""

OPENAI_COMPATIBLE = ("hosted_vllm", "openai", "custom_openai", "text-completion-openai")
"""litellm provider prefixes that mean an OpenAI-compatible server: stripped from the name sent."""

VLLM_DEFAULT_BASE = "http://127.0.0.1:8000/v1"
"""Where ``hosted_vllm/NAME`` without an ``api_base`` (or ``$HOSTED_VLLM_API_BASE``) goes: ``vllm serve``'s default."""


def backend_from_spec(spec: str, **options: Any) -> Backend:
    """Build a backend from a string: ``"kind:model"`` (see :data:`BACKENDS`), or a model name whose
    backend :func:`default_kind` chooses. Credentials (``api_key``, secret ``extra_headers``) may be options.

    Examples:
        >>> backend_from_spec("hosted_vllm/tiny", api_base="http://127.0.0.1:8000/v1")
        OpenAIBackend('tiny', base_url='http://127.0.0.1:8000/v1')
        >>> type(backend_from_spec("litellm:hosted_vllm/tiny", api_base="http://127.0.0.1:8000/v1")).__name__
        'LiteLLMBackend'
    """
    kind, model = parse_spec(spec, options.get("api_base"))
    return make_backend(kind, model, options)


def parse_spec(spec: str, api_base: str | None = None) -> tuple[str, str]:
    """The one grammar of model strings: ``(kind, model)`` for ``spec``. ``"kind:model"`` names its backend
    (one of :data:`BACKENDS`); a local directory is a transformers model; any other name gets the backend
    :func:`default_kind` chooses (with ``api_base`` when given).

    Examples:
        >>> parse_spec("vllm:/models/x"), parse_spec("openai:gpt-4o-mini"), parse_spec("openai/gpt-4o-mini")
        (('vllm', '/models/x'), ('openai', 'gpt-4o-mini'), ('litellm', 'openai/gpt-4o-mini'))
        >>> parse_spec("http://host/v1")  # a URL is not a kind
        ('litellm', 'http://host/v1')
    """
    kind, _, rest = spec.partition(":")
    if rest and kind in BACKENDS and not rest.startswith("//"):
        return kind, rest
    if Path(spec).expanduser().is_dir():
        return "transformers", str(Path(spec).expanduser())
    return default_kind(spec, api_base), spec


def default_kind(model: str, api_base: str | None) -> str:
    """``"openai"`` or ``"litellm"``: the backend a model name gets without a ``kind:`` prefix (module docstring).

    Examples:
        >>> default_kind("hosted_vllm/pocket", None), default_kind("openai/gpt-4o-mini", None)
        ('openai', 'litellm')
        >>> default_kind("openai/gpt-4o-mini", "http://127.0.0.1:8000/v1"), default_kind("pocket", "http://x/v1")
        ('openai', 'openai')
    """
    prefix, slash, _ = model.partition("/")
    if slash and prefix == "hosted_vllm":
        return "openai"
    if api_base is None:
        return "litellm"
    if not slash or prefix in OPENAI_COMPATIBLE:
        return "openai"
    return "litellm" if _litellm_provider(prefix) else "openai"


def _litellm_provider(prefix: str) -> bool:
    """Whether litellm has a provider of this name (``Qwen/...`` is a model name, ``azure/...`` a provider)."""
    import importlib.util

    if importlib.util.find_spec("litellm") is None:
        return False
    from scaffold.backends._litellm import import_litellm

    names = {str(getattr(p, "value", p)) for p in import_litellm().provider_list}
    return prefix in names


def make_backend(kind: str, model: str, options: Mapping[str, Any]) -> Backend:
    """Build a backend of ``kind`` (one of :data:`BACKENDS`) for ``model`` with keyword ``options``."""
    options = dict(options)
    secret_headers = options.pop("extra_headers", None)
    backend = _make(kind, model, options)
    if secret_headers:
        backend = backend.with_secrets(extra_headers=secret_headers)  # type: ignore[attr-defined]
    return backend


def _make(kind: str, model: str, options: dict[str, Any]) -> Backend:
    if kind == "openai":
        return openai_from_spec(model, options)
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


def openai_from_spec(model: str, options: Mapping[str, Any]) -> Backend:
    """An :class:`~scaffold.backends.OpenAIBackend` for a litellm-style name: ``hosted_vllm/NAME`` sends
    ``NAME`` (to ``api_base``, ``$HOSTED_VLLM_API_BASE`` or ``vllm serve``'s default address, key from
    ``$HOSTED_VLLM_API_KEY`` if set), ``openai/NAME`` sends ``NAME`` (key from ``$OPENAI_API_KEY`` if set);
    the name as given is what is recorded and priced."""
    import os

    from scaffold.backends._openai import OpenAIBackend

    options = dict(options)
    api_base, base_url = options.pop("api_base", None), options.pop("base_url", None)
    base_url = api_base or base_url
    prefix, slash, rest = model.partition("/")
    sent, defaults = model, {}
    if slash and prefix in OPENAI_COMPATIBLE:
        sent = rest
        defaults = {"name": model, "default_key_env": "OPENAI_API_KEY"}
        if prefix == "hosted_vllm":
            base_url = base_url or os.environ.get("HOSTED_VLLM_API_BASE") or VLLM_DEFAULT_BASE
            defaults["default_key_env"] = "HOSTED_VLLM_API_KEY"
    return OpenAIBackend(sent, base_url=base_url, **{**defaults, **options})


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

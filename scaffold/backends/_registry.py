"""The backend registry: each backend kind by name (one line each) and the one grammar of model strings.

:data:`BACKENDS` maps a kind to its class. Each backend class declares who it is: ``provider`` (what its
calls report to OpenTelemetry) and ``settings`` (the keys a registry entry may give it; see
:mod:`scaffold.backends._entry`); a class that builds itself from a model string in its own way has a
``from_spec(model, options)`` class method. Adding a backend is its own file plus one line here.

Which backend a string or an entry without ``backend`` gets (:func:`default_kind`): ``openai``
(:class:`~scaffold.backends.OpenAIBackend`) for ``hosted_vllm/NAME``, and, given an ``api_base``, for
``openai/NAME``, ``custom_openai/NAME`` or any name without a litellm provider prefix (``pocket``,
``Qwen/Qwen2.5-7B-Instruct``); ``litellm`` for everything else: providers with their own APIs, and
``openai/NAME`` without an ``api_base`` (litellm adapts parameters to OpenAI's model families; use
``openai:NAME`` or ``backend = "openai"`` for the native path to OpenAI itself). A ``kind:`` prefix
(``litellm:hosted_vllm/x``, ``openai:gpt-4o-mini``, ``transformers:/path``, ``vllm:/path``) or
``backend = "..."`` in a file chooses explicitly; a local directory is a transformers model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scaffold._errors import ModelAliasError
from scaffold.backends._base import Backend
from scaffold.backends._litellm import LiteLLMBackend
from scaffold.backends._openai import OPENAI_COMPATIBLE, OpenAIBackend
from scaffold.backends._transformers import TransformersBackend
from scaffold.backends._vllm import VLLMBackend

BACKENDS: Mapping[str, type[Any]] = {
    "openai": OpenAIBackend,
    "litellm": LiteLLMBackend,
    "transformers": TransformersBackend,
    "vllm": VLLMBackend,
}
"""Backend kinds a registry entry or a ``"kind:model"`` string may name, and their classes."""

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
    cls = BACKENDS.get(kind)
    if cls is None:
        raise ModelAliasError(f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}")
    from_spec = getattr(cls, "from_spec", None)
    return from_spec(model, options) if from_spec is not None else cls(model, **options)  # type: ignore[no-any-return]

"""Model backends: the protocol, the binding of a backend to an alias, and the backends themselves.

- :class:`Backend`, :class:`Capabilities`: the protocol every backend follows; :class:`StreamingBackend`
  and :func:`stream_completions` for text as it is generated.
- :class:`Model`: a backend bound to an alias, with defaults, limits, timeout and :class:`Retry`.
- :class:`OpenAIBackend`: any OpenAI-compatible server (vLLM, SGLang, OpenAI itself), natively;
  the default for ``hosted_vllm/NAME`` and for any spec given an ``api_base``.
- :class:`LiteLLMBackend`: every API provider with its own API (Anthropic, Gemini...), through litellm.
- :class:`TransformersBackend`: a Hugging Face causal LM in process (CPU or GPU), micro-batched.
- :class:`VLLMBackend`: vLLM's engine in process, for training rollouts (LoRA, weight updates).
- :class:`VLLMServer`: starts ``vllm serve`` (OpenAI API) on 127.0.0.1 for :class:`OpenAIBackend`.
- :func:`load_models`, :func:`backend_from_spec`: aliases from a TOML/YAML registry, backends from strings.

Streaming: a backend whose ``capabilities.streams`` is true has ``stream(request)``, an async iterator
of :class:`~scaffold.Delta` (a piece of one choice's text, with its token ids where the backend gives
them) ending with one :class:`~scaffold.Finished` carrying the same completions ``complete`` returns.
OpenAIBackend, LiteLLMBackend and TransformersBackend stream.

Local engines import torch, transformers and vLLM only when built; litellm is imported on first use.
"""

from scaffold.backends._base import Backend, Capabilities, StreamingBackend, stream_completions
from scaffold.backends._litellm import LiteLLMBackend
from scaffold.backends._load import load_models
from scaffold.backends._model import Model, Reply, resolve_model
from scaffold.backends._openai import OpenAIBackend
from scaffold.backends._prices import Price
from scaffold.backends._registry import backend_from_spec
from scaffold.backends._retry import Retry
from scaffold.backends._transformers import TransformersBackend
from scaffold.backends._vllm import VLLMBackend
from scaffold.backends._vllm_server import VLLMServer

__all__ = [
    "Backend",
    "Capabilities",
    "StreamingBackend",
    "stream_completions",
    "Model",
    "Reply",
    "Retry",
    "Price",
    "resolve_model",
    "OpenAIBackend",
    "LiteLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMServer",
    "backend_from_spec",
    "load_models",
]

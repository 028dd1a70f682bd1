"""Model backends: the protocol, the binding of a backend to an alias, and the backends themselves.

- :class:`Backend`, :class:`Capabilities`: the protocol every backend follows.
- :class:`Model`: a backend bound to an alias, with defaults, limits, timeout and :class:`Retry`.
- :class:`LiteLLMBackend`: every API provider and any OpenAI-compatible server (vLLM's included).
- :class:`TransformersBackend`: a Hugging Face causal LM in process (CPU or GPU), micro-batched.
- :class:`VLLMBackend`: vLLM's engine in process, for training rollouts (LoRA, weight updates).
- :class:`VLLMServer`: starts ``vllm serve`` (OpenAI API) on 127.0.0.1 for :class:`LiteLLMBackend`.
- :func:`load_models`: aliases from a TOML/YAML registry.

Local engines import torch, transformers and vLLM only when built.
"""

from scaffold.backends._base import Backend, Capabilities
from scaffold.backends._litellm import LiteLLMBackend
from scaffold.backends._model import Model, Reply, resolve_model
from scaffold.backends._registry import backend_from_spec, load_models
from scaffold.backends._retry import Retry
from scaffold.backends._transformers import TransformersBackend
from scaffold.backends._vllm import VLLMBackend
from scaffold.backends._vllm_server import VLLMServer

__all__ = [
    "Backend",
    "Capabilities",
    "Model",
    "Reply",
    "Retry",
    "resolve_model",
    "LiteLLMBackend",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMServer",
    "backend_from_spec",
    "load_models",
]

"""A key/value cache for batched decoding on the CPU that writes in place instead of concatenating.

transformers' default ``DynamicCache`` appends each decoding step with ``torch.cat``, copying every
layer's whole cache once per generated token: for a batch of a few hundred sequences of a few
hundred tokens that copying, not the model, is most of the time a small model spends decoding.
:func:`decoding_cache` gives a ``DynamicCache`` whose full-attention layers write into buffers
allocated once for the expected length (doubling if a sequence runs past it) and hand attention a
view of the filled part. Results are identical: the same keys and values, in the same layout.
Models with sliding-window or other special layers keep transformers' own layers.

Imports torch and transformers: import it where they are already needed.
"""

from __future__ import annotations

import inspect
from functools import cache as _memo
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def decoding_cache(model: Any, capacity: int) -> DynamicCache:
    """A ``DynamicCache`` for ``model`` preallocating ``capacity`` positions per full-attention layer.

    Pass it to every forward call of the decoding loop with :func:`cache_argument` (it is updated in place).

    Examples:
        >>> cache = decoding_cache(model, prompt_width + max_new_tokens)  # doctest: +SKIP
        >>> out = model(input_ids=ids, use_cache=True, **cache_argument(model, cache))  # doctest: +SKIP
    """
    cache = DynamicCache(config=model.config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
    return cache


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model``'s forward: ``cache`` in transformers releases that renamed it, else
    ``past_key_values`` (the older name, deprecated since)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper takes **kwargs
    return {_cache_keyword(type(base).forward): cache}


@_memo
def _cache_keyword(forward: Any) -> str:
    parameters = inspect.signature(forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer whose keys and values live in buffers grown by doubling."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)
        self.length = 0
        self._keys = self._values = torch.empty(0)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self._keys = key_states.new_empty((*key_states.shape[:2], self.capacity, key_states.shape[-1]))
        self._values = value_states.new_empty((*value_states.shape[:2], self.capacity, value_states.shape[-1]))
        self.keys, self.values = self._keys[:, :, :0], self._values[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            self._keys, self._values = (self._grown(buffer, end) for buffer in (self._keys, self._values))
        self._keys[:, :, start:end] = key_states
        self._values[:, :, start:end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def _grown(self, buffer: torch.Tensor, needed: int) -> torch.Tensor:
        new = buffer.new_empty((*buffer.shape[:2], max(needed, 2 * buffer.shape[-2]), buffer.shape[-1]))
        new[:, :, : self.length] = buffer[:, :, : self.length]
        return new

    def get_seq_length(self) -> int:
        return self.length

    def reset(self) -> None:
        self.length = 0
        super().reset()

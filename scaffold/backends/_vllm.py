"""An in-process vLLM engine as a backend, for training rollouts: exact token ids, logprobs, live weights.

:class:`VLLMBackend` owns one vLLM engine in this process and drives it from one thread. Every
``complete`` call becomes an engine request as soon as it arrives and joins the running batch at
the next scheduler step (continuous batching, as in vLLM's server), so concurrent calls from a graph
run are batched by vLLM's own scheduler. ``n`` choices are one request (vLLM's parallel sampling:
the prompt is prefilled once).

Where this departs from vLLM's ``AsyncLLM``, and why: ``AsyncLLM`` always runs its engine core in a
separate process (a spawned child, which re-imports the caller's ``__main__`` and, on the CPU build,
spawns a worker process of its own). Measured on a 2-core CPU machine with a tiny model, that took
≈ 50 s to become ready against ≈ 3 s here (both after vLLM's ≈ 10 s import), needed an
``if __name__ == "__main__"`` guard in every script, and would ship every weight update through a
socket. Here the engine (``LLMEngine`` with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``) lives in this process: weight updates are in-place copies
that take milliseconds, and nothing outlives :meth:`VLLMBackend.close`.

What the completions carry:

- ``token_ids``: always, exactly as vLLM sampled them (the EOS token included when the model
  emitted it; cut at a stop string they end with the token that completed it, so they may decode to
  a little more than ``text``).
- ``logprobs``: when ``request.logprobs``; the sampled token's logprob under vLLM's default
  ``raw_logprobs`` mode: ``log_softmax`` of the model's logits *before* temperature, penalties,
  top-k and top-p (the policy a trainer differentiates; the transformers backend reports the same).
  ``engine_kwargs={"logprobs_mode": "processed_logprobs"}`` reports the sampling distribution instead.
- ``usage``: per choice, the whole prompt and that choice's tokens.
- ``metadata``: ``weight_versions`` (``(version, start, end)`` spans over the output tokens: which
  weights produced which tokens, see :meth:`VLLMBackend.update_weights`), ``cached_prompt_tokens``
  (prefix-cache hits), ``stop_reason``, and ``lora`` when an adapter answered.

Seeds: ``params["seed"]``, else ``Request.seed``; vLLM seeds choice ``i`` with ``base + i``, and the
backend spreads the base (``seed * 0x9E3779B97F4A7C15 mod 2**63``) so two calls whose seeds differ by
one do not share samples. Without a seed vLLM samples from its own generator.

One engine per process at a time: vLLM keeps its parallel state and forward context in module
globals, and an engine's shutdown tears them down for all; a second ``VLLMBackend`` while one runs
raises ``RuntimeError`` (close the first, or run the other model behind :class:`VLLMServer
<scaffold.backends._vllm_server.VLLMServer>`). Other side effects on the host process (vLLM's, not
removable from outside): creating an engine seeds Python's, NumPy's and torch's global generators
(vLLM's ``seed``, 0 by default), starts a one-process ``torch.distributed`` group (torn down by
:meth:`VLLMBackend.close`) and, on the CPU build, binds memory to the NUMA node of the first CPU.
vLLM's CPU worker also replaces ``torch.set_num_threads`` with a no-op; the backend puts the original back.
With ``enforce_eager`` (the CPU default) each engine step runs under torch's ``force_eager`` compile
stance, so vLLM's sampler does not spend ≈ 5 s compiling its logprob-rank helper with inductor on
first use; the stance is process-wide, so another thread's compiled function runs eagerly meanwhile.

Needs the ``vllm`` extra; this module imports without it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaffold._errors import BackendError
from scaffold._types import Completion, Request
from scaffold.backends._base import Capabilities
from scaffold.backends._tool_text import with_tool_calls
from scaffold.backends._vllm_engine import Abort, Call, EngineLoop, Submit, engine_args
from scaffold.backends._vllm_weights import reload_worker_weights

if TYPE_CHECKING:
    import torch

INSTALL_HINT = "pip install 'scaffold-sdk[vllm]'"

IGNORED_PARAMS = frozenset({"timeout", "request_timeout", "num_retries", "user", "metadata", "extra_headers"})
"""API parameters that do not change what a local model generates; accepted and ignored."""
RESERVED_PARAMS = frozenset({"n", "logprobs", "output_kind", "detokenize", "skip_clone", "output_text_buffer_length"})
"""``SamplingParams`` fields the backend sets itself (``n`` comes from the request)."""
BACKEND_PARAMS = frozenset({"lora", "chat_template_kwargs", "max_completion_tokens", "logprobs"})
"""Parameters the backend reads itself: ``max_completion_tokens`` (OpenAI's newer name) means ``max_tokens``;
a true ``logprobs`` means ``Request.logprobs``."""
_SEED_SPREAD = 0x9E3779B97F4A7C15


def _require_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"VLLMBackend needs vLLM: {INSTALL_HINT}") from exc
    return vllm


class VLLMBackend:
    """A vLLM engine in this process: batched sampling with exact token ids and logprobs, LoRA, live weights.

    ``model`` is a local directory (or hub name) vLLM can load. ``dtype`` defaults to ``"float32"``
    on vLLM's CPU build and ``"auto"`` elsewhere; ``max_model_len`` to the model's context length.
    ``enable_lora`` (with ``max_lora_rank``) lets :meth:`load_lora` add adapters;
    ``enable_prefix_caching`` shares the KV cache of common prompt prefixes (the population of an
    aggregation step shares its problem statement). ``engine_kwargs`` go to ``vllm.EngineArgs``
    last and override everything, e.g. ``{"seed": 1, "max_num_seqs": 64, "kv_cache_memory_bytes": 2**31}``.
    On the CPU build the defaults also set ``enforce_eager=True`` (no torch.compile: start-up in
    seconds) and a 1 GiB KV cache unless ``VLLM_CPU_KVCACHE_SPACE`` or ``engine_kwargs`` size it.

    Construction blocks until the engine is ready (seconds for a small model; from async code,
    ``await asyncio.to_thread(VLLMBackend, path)``). :meth:`close` (or ``with`` / ``async with``)
    stops it. Requests: chat ``messages`` go through the tokenizer's chat template with the
    generation prompt (``params["chat_template_kwargs"]`` passes extra template variables); a raw
    ``prompt`` is tokenised by vLLM as is. ``params`` may hold ``temperature``, ``top_p``,
    ``top_k``, ``max_tokens`` (``max_completion_tokens`` is a synonym; default: up to the end of the
    context), ``stop``, ``seed``, any other ``vllm.SamplingParams`` field, and ``lora`` (an adapter
    name, or ``None`` for the base model; default: :attr:`active_lora`). Unknown parameters and
    values vLLM rejects raise a non-retryable :class:`~scaffold._errors.BackendError`.

    Examples:
        >>> backend = VLLMBackend("/tmp/tiny-model", max_model_len=512)  # doctest: +SKIP
        >>> result = graph.run_sync({"problem": "2+2"}, models={"solver": backend})  # doctest: +SKIP
        >>> backend.update_weights(policy.state_dict())  # doctest: +SKIP
        >>> backend.close()  # doctest: +SKIP
    """

    capabilities = Capabilities(supports_n=True, returns_token_ids=True, trainable=True)

    provider = "vllm"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry)."""
    settings = frozenset({"enable_lora", "max_lora_rank", "enable_prefix_caching", "dtype", "max_model_len",
                          "engine_kwargs"})
    """The keys a registry entry (``models.toml``, a server config) may give this backend."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        enable_prefix_caching: bool = True,
        dtype: str | None = None,
        max_model_len: int | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        vllm = _require_vllm()
        self._sampling_fields = frozenset(f for f in vllm.SamplingParams.__struct_fields__ if not f.startswith("_"))
        self.name = os.fspath(model)
        """The model as given (directory or hub name); ``Completion.model`` of every answer."""
        self.enable_lora = enable_lora
        self.weights_version = 0
        """How many times :meth:`update_weights` has changed the weights (the ``weight_versions`` label)."""
        self._adapters: dict[str, Any] = {}
        self._active_lora: str | None = None
        self._lora_ids = itertools.count(1)
        self._request_ids = itertools.count()
        self._engine_loop = EngineLoop()
        args = engine_args(self.name, enable_lora=enable_lora, max_lora_rank=max_lora_rank,
                           enable_prefix_caching=enable_prefix_caching, dtype=dtype, max_model_len=max_model_len,
                           engine_kwargs=engine_kwargs or {})
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._engine_loop.run, args=(args, ready), name="scaffold-vllm-engine",
                                        daemon=True)
        self._thread.start()
        ready.result()  # raises what engine construction raised
        self._finalizer = weakref.finalize(self, self._engine_loop.stop, self._thread)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called or the engine failed."""
        return not self._finalizer.alive or not self._engine_loop.accepting

    async def complete(self, request: Request) -> list[Completion]:
        """Answer ``request`` with ``request.n`` choices; the request joins vLLM's running batch."""
        if self.closed:
            raise self._engine_loop.closed_error()
        if request.n < 1:
            return []
        if not request.messages and request.prompt is None:
            raise BackendError("the request has neither messages nor a prompt", retryable=False)
        sampling, lora_name = self._sampling(request)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Completion]] = loop.create_future()
        request_id = f"scaffold-{next(self._request_ids)}"
        lora = self._adapters[lora_name] if lora_name is not None else None
        self._engine_loop.send(Submit(request_id, request, sampling, lora, lora_name, self.name, loop, future))
        try:
            return with_tool_calls(request, await future)
        except asyncio.CancelledError:
            self._engine_loop.commands.put(Abort(request_id))  # after a stop nobody reads it: harmless
            raise

    def load_lora(self, path: str | os.PathLike[str], name: str | None = None, *, activate: bool = True) -> str:
        """Load a PEFT LoRA adapter (a ``save_pretrained`` directory) and return its name.

        With ``activate`` (the default) requests without a ``lora`` parameter use it from now on.
        Loading again under the same name (a new checkpoint of a trained adapter) replaces it for
        requests sent afterwards; the prefix cache never mixes the two (each load is a new vLLM adapter).
        Raises ``ValueError`` when the backend was built without ``enable_lora=True`` and whatever
        vLLM raises for an adapter it cannot load (a rank above ``max_lora_rank``, a missing file).
        """
        if not self.enable_lora:
            raise ValueError("this VLLMBackend was built without enable_lora=True")
        from vllm.lora.request import LoRARequest

        path = Path(path).resolve()
        name = name or path.name
        lora_id = next(self._lora_ids)
        adapter = LoRARequest(f"{name}@{lora_id}", lora_id, os.fspath(path))  # a new name: a new prefix-cache key
        added = self._call(lambda engine: engine.add_lora(adapter))
        if added is False:
            raise ValueError(f"vLLM did not load the LoRA adapter at {path}")
        self._adapters[name] = adapter
        if activate:
            self._active_lora = name
        return name

    @property
    def active_lora(self) -> str | None:
        """The adapter requests use when their params name none (``None``: the base model)."""
        return self._active_lora

    @active_lora.setter
    def active_lora(self, name: str | None) -> None:
        if name is not None and name not in self._adapters:
            raise ValueError(f"no LoRA adapter named {name!r}; loaded: {sorted(self._adapters)}")
        self._active_lora = name

    def update_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], *,
                       version: int | None = None) -> int:
        """Copy new base weights into the engine in place and return the new :attr:`weights_version`.

        ``version`` labels the new weights (default: the current version plus one; a trainer passes its
        step count). With no weights, only the label changes (a LoRA adapter loaded by :meth:`load_lora`
        gets its version this way).

        ``weights`` are Hugging Face names and tensors (``model.state_dict()``, ``named_parameters()``
        of the trained model), any dtype or device. A subset is fine, as long as it covers whole
        layers: vLLM fuses q/k/v and gate/up projections into one kernel, so a partial update
        must name every part (weight and bias) of each fused layer it touches (else ``ValueError``,
        before anything changes). Tied input and output embeddings are not refreshed by vLLM (it
        only warns): train untied models.

        Requests in flight keep the tokens they already sampled and continue with the new weights
        (their KV cache is recomputed); the prefix cache is emptied. Each completion's
        ``metadata["weight_versions"]`` says which version produced which of its tokens.
        """
        items = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
        named = [(str(name), tensor.detach()) for name, tensor in items]
        version = self.weights_version + 1 if version is None else int(version)

        def load(engine: Any) -> None:
            if named:
                engine.collective_rpc(reload_worker_weights, args=(named,))
                engine.reset_prefix_cache(reset_running_requests=True)
            engine.set_weight_version(str(version))

        self._call(load)
        self.weights_version = version
        return version

    def close(self) -> None:
        """Fail the requests in flight, shut the engine down and wait for its thread (idempotent)."""
        self._finalizer()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> VLLMBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._engine_loop.send(Call(fn, future))
        return future.result()

    def _sampling(self, request: Request) -> tuple[Any, str | None]:
        """``SamplingParams`` and adapter name of a request; bad parameters raise ``BackendError``."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = request.params
        for key, value in params.items():
            sampling_field = key in self._sampling_fields and key not in RESERVED_PARAMS
            if not (sampling_field or key in IGNORED_PARAMS or key in BACKEND_PARAMS):
                raise BackendError(f"VLLMBackend does not support the parameter {key}={value!r}", retryable=False)
        options = {key: value for key, value in params.items()
                   if value is not None and key in self._sampling_fields and key not in RESERVED_PARAMS}
        # default: to the end of the context (SamplingParams' own default is 16 tokens)
        options["max_tokens"] = options.get("max_tokens", params.get("max_completion_tokens"))
        seed = options.get("seed", request.seed)
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise BackendError(f"parameter seed={seed!r} must be an integer", retryable=False)
            options["seed"] = (seed * _SEED_SPREAD) % 2**63
        if request.logprobs or params.get("logprobs"):
            options["logprobs"] = 0  # the sampled token's logprob only
        try:
            sampling = SamplingParams(n=request.n, output_kind=RequestOutputKind.FINAL_ONLY, **options)
        except Exception as exc:  # TypeError, ValueError, vLLM's own VLLMValidationError
            raise BackendError(f"vLLM rejected the sampling parameters: {exc}", retryable=False) from exc
        lora_name = params.get("lora", self._active_lora)
        if lora_name is not None and (not isinstance(lora_name, str) or lora_name not in self._adapters):
            raise BackendError(f"no LoRA adapter named {lora_name!r}; loaded: {sorted(self._adapters)}",
                               retryable=False)
        return sampling, lora_name

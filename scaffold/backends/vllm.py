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
<scaffold.backends.vllm_server.VLLMServer>`). Other side effects on the host process (vLLM's, not
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
import contextlib
import itertools
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaffold.backends.base import Capabilities
from scaffold.errors import BackendError
from scaffold.types import Completion, Request, Usage

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
_CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache of a CPU engine when neither ``VLLM_CPU_KVCACHE_SPACE`` nor ``engine_kwargs`` size it
(vLLM's own default reserves 90% of the machine's memory)."""
_PROCESS_LOCK = threading.Lock()
"""Guards the environment while an engine is built, and ``_engine_running``."""
_engine_running = False
"""One engine per process at a time: vLLM keeps its parallel state and forward context in module globals,
and an engine's shutdown tears them down for every engine."""


def _require_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"VLLMBackend needs vLLM: {INSTALL_HINT}") from exc
    return vllm


@dataclass(slots=True)
class _Submit:
    """A request for the engine thread, and where its answer goes."""

    request_id: str
    request: Request
    sampling: Any
    """``vllm.SamplingParams``."""
    lora: Any
    """``vllm.lora.request.LoRARequest`` or ``None``."""
    lora_name: str | None
    model: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Completion]]


@dataclass(slots=True)
class _Abort:
    request_id: str


@dataclass(slots=True)
class _Call:
    """Run ``fn(engine)`` on the engine thread between two steps."""

    fn: Callable[[Any], Any]
    future: concurrent.futures.Future[Any]


_STOP = object()


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
    values vLLM rejects raise a non-retryable :class:`~scaffold.errors.BackendError`.

    Example:
        >>> backend = VLLMBackend("/tmp/tiny-model", max_model_len=512)  # doctest: +SKIP
        >>> result = graph.run_sync({"problem": "2+2"}, models={"solver": backend})  # doctest: +SKIP
        >>> backend.update_weights(policy.state_dict())  # doctest: +SKIP
        >>> backend.close()  # doctest: +SKIP
    """

    capabilities = Capabilities(supports_n=True, returns_token_ids=True, trainable=True)

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
        self._engine_loop = _EngineLoop()
        args = _engine_args(self.name, enable_lora=enable_lora, max_lora_rank=max_lora_rank,
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
        self._engine_loop.send(_Submit(request_id, request, sampling, lora, lora_name, self.name, loop, future))
        try:
            return await future
        except asyncio.CancelledError:
            self._engine_loop.commands.put(_Abort(request_id))  # after a stop nobody reads it: harmless
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

    def update_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy new base weights into the engine in place and return the new :attr:`weights_version`.

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
        version = self.weights_version + 1

        def load(engine: Any) -> None:
            engine.collective_rpc(_reload_worker_weights, args=(named,))
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
        self._engine_loop.send(_Call(fn, future))
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


def _engine_args(model: str, *, enable_lora: bool, max_lora_rank: int, enable_prefix_caching: bool,
                 dtype: str | None, max_model_len: int | None, engine_kwargs: Mapping[str, Any]) -> Any:
    """``vllm.EngineArgs`` with this backend's defaults (fast start and a bounded KV cache on CPU)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    args: dict[str, Any] = {
        "model": model,
        "dtype": dtype or ("float32" if on_cpu else "auto"),
        "max_model_len": max_model_len,
        "enable_prefix_caching": enable_prefix_caching,
        "enable_lora": enable_lora,
        "disable_log_stats": True,
    }
    if enable_lora:
        args["max_lora_rank"] = max_lora_rank
    if on_cpu:
        args["enforce_eager"] = True
        sized = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & set(engine_kwargs)
        if not sized and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            args["kv_cache_memory_bytes"] = _CPU_KV_CACHE_BYTES
    args.update(engine_kwargs)
    return EngineArgs(**args)


def _build_engine(args: Any) -> Any:
    """An ``LLMEngine`` whose core and worker run in this process (and thread)."""
    import torch
    from vllm.v1.engine.llm_engine import LLMEngine

    global _engine_running
    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op
    with _PROCESS_LOCK:
        if _engine_running:
            raise RuntimeError("another VLLMBackend is running in this process; close() it first "
                               "(vLLM's parallel state is process-wide: one in-process engine at a time)")
        previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read while the engine is built, not after
        try:
            engine = LLMEngine.from_engine_args(args)
            _engine_running = True
        except BaseException:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()  # whatever the failed start set up would block the next one
            raise
        finally:
            torch.set_num_threads = set_num_threads
            if previous is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous
    try:
        _check_cpu_head_size(engine)
    except ValueError:
        _shutdown_engine(engine)
        raise
    engine.set_weight_version("0")
    return engine


def _check_cpu_head_size(engine: Any) -> None:
    """vLLM's CPU attention fails at the first request for some head sizes; say so at start-up instead."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head_size = engine.model_config.get_head_size()
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_size not in supported:
        raise ValueError(f"vLLM's CPU attention supports head sizes {supported}; "
                         f"{engine.model_config.model} has {head_size} (hidden size / attention heads)")


class _EngineLoop:
    """The engine thread's side: a command queue in, continuous batching, futures resolved out.

    Callers (any thread) only :meth:`send` commands; the engine is touched by the thread running
    :meth:`run` alone. Once the loop stops taking commands, ``send`` raises instead of queueing
    work nobody would answer.
    """

    def __init__(self) -> None:
        self.commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.failure: BaseException | None = None
        """Why the engine stopped, when it failed."""
        self.accepting = True
        self.compile_stance: Callable[[], Any] = contextlib.nullcontext
        """Context for each step: eager torch when the engine is (its default on the CPU build)."""
        self._lock = threading.Lock()

    def closed_error(self) -> BackendError:
        reason = f" (the engine failed: {type(self.failure).__name__}: {self.failure})" if self.failure else ""
        return BackendError(f"the VLLMBackend is closed{reason}", retryable=False)

    def send(self, command: Any) -> None:
        with self._lock:
            if not self.accepting:
                raise self.closed_error()
            self.commands.put(command)

    def stop(self, thread: threading.Thread) -> None:
        """Ask the loop to stop and wait for the engine to shut down (the backend's finalizer)."""
        self.commands.put(_STOP)
        if thread is not threading.current_thread():
            thread.join()

    def run(self, args: Any, ready: concurrent.futures.Future[None]) -> None:
        """The engine thread: build the engine, serve until told to stop, answer what is left, shut down."""
        try:
            engine = _build_engine(args)
        except BaseException as exc:  # handed to the constructor, which raises it
            with self._lock:
                self.accepting = False
            ready.set_exception(exc)
            return
        if engine.model_config.enforce_eager:
            import torch

            # the sampler's logprob ranks are torch.compile'd apart from the model: ≈ 5 s of inductor per shape on CPU
            self.compile_stance = lambda: torch.compiler.set_stance("force_eager")
        ready.set_result(None)
        pending: dict[str, _Submit] = {}
        try:
            self._serve(engine, pending)
        except BaseException as exc:  # the engine is unusable; every waiter hears why
            self.failure = exc
        finally:
            with self._lock:
                self.accepting = False
            error = self.closed_error()
            for submit in pending.values():
                _deliver(submit, error)
            while not self.commands.empty():
                _refuse(self.commands.get_nowait(), error)
            _shutdown_engine(engine)

    def _serve(self, engine: Any, pending: dict[str, _Submit]) -> None:
        """Continuous batching: take every waiting command, run one scheduler step, deliver what finished."""
        while True:
            # 1) block while idle; otherwise take only what is already queued
            waiting = [] if engine.has_unfinished_requests() else [self.commands.get()]
            while not self.commands.empty():
                waiting.append(self.commands.get_nowait())
            for command in waiting:
                if command is _STOP:
                    return
                _handle(engine, command, pending)
            # 2) one scheduler step over every request in flight
            if engine.has_unfinished_requests():
                with self.compile_stance():
                    outputs = engine.step()
                for output in outputs:
                    if output.finished and (submit := pending.pop(output.request_id, None)) is not None:
                        _deliver(submit, _completions(submit, output))


def _handle(engine: Any, command: Any, pending: dict[str, _Submit]) -> None:
    if isinstance(command, _Submit):
        if command.future.done():  # cancelled before it reached the engine
            return
        try:
            prompt = _prompt(engine, command.request)
            engine.add_request(command.request_id, prompt, command.sampling, lora_request=command.lora)
        except Exception as exc:  # a bad request fails alone
            _deliver(command, BackendError(f"vLLM rejected the request: {type(exc).__name__}: {exc}",
                                           retryable=False))
            return
        pending[command.request_id] = command
    elif isinstance(command, _Abort):
        if pending.pop(command.request_id, None) is not None:
            engine.abort_request([command.request_id])
    elif isinstance(command, _Call):
        if command.future.set_running_or_notify_cancel():
            try:
                command.future.set_result(command.fn(engine))
            except Exception as exc:  # raised in the caller's thread
                command.future.set_exception(exc)


def _prompt(engine: Any, request: Request) -> Any:
    """The engine prompt: chat messages rendered with the chat template and tokenised, or the raw text."""
    if not request.messages:
        return request.prompt
    tokenizer = engine.get_tokenizer()
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"the tokenizer of {engine.model_config.model} has no chat template; send a raw `prompt`")
    messages = [{"role": role, "content": content} for role, content in request.messages]
    template_kwargs = request.params.get("chat_template_kwargs") or {}
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **template_kwargs)
    return {"prompt_token_ids": tokenizer.encode(text, add_special_tokens=False)}


def _completions(submit: _Submit, output: Any) -> list[Completion]:
    """One ``Completion`` per choice of a finished ``vllm.RequestOutput``."""
    prompt_tokens = len(output.prompt_token_ids or ())
    completions = []
    for choice in sorted(output.outputs, key=lambda c: c.index):
        token_ids = tuple(choice.token_ids)
        logprobs = None
        if choice.logprobs is not None:  # asked for
            logprobs = tuple(float(step[token].logprob) for step, token in zip(choice.logprobs, token_ids))
        metadata: dict[str, Any] = {
            "weight_versions": tuple((span.version, span.start, span.end) for span in choice.weight_versions or ()),
            "cached_prompt_tokens": output.num_cached_tokens or 0,
        }
        if choice.stop_reason is not None:
            metadata["stop_reason"] = choice.stop_reason
        if submit.lora_name is not None:
            metadata["lora"] = submit.lora_name
        completions.append(Completion(
            text=choice.text,
            token_ids=token_ids,
            logprobs=logprobs,
            usage=Usage(prompt_tokens, len(token_ids)),
            finish_reason=choice.finish_reason,
            cost=None,
            model=submit.model,
            metadata=metadata,
        ))
    return completions


def _deliver(submit: _Submit, result: list[Completion] | BaseException) -> None:
    """Resolve a caller's future from the engine thread (its loop may be gone: then nobody waits)."""

    def resolve() -> None:
        if submit.future.done():
            return
        if isinstance(result, BaseException):
            submit.future.set_exception(result)
        else:
            submit.future.set_result(result)

    try:
        submit.loop.call_soon_threadsafe(resolve)
    except RuntimeError:  # the loop is closed
        pass


def _refuse(command: Any, error: BackendError) -> None:
    """Answer a command that arrived after the engine stopped."""
    if isinstance(command, _Submit):
        _deliver(command, error)
    elif isinstance(command, _Call) and command.future.set_running_or_notify_cancel():
        command.future.set_exception(error)


def _shutdown_engine(engine: Any) -> None:
    """Stop the engine and tear down vLLM's process-wide parallel state, so another engine can start."""
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    global _engine_running
    with _PROCESS_LOCK:
        try:
            engine.engine_core.shutdown()
        finally:
            del engine
            cleanup_dist_env_and_memory()
            _engine_running = False


def _reload_worker_weights(worker: Any, weights: list[tuple[str, Any]]) -> None:
    """Runs on the vLLM worker: check that fused layers are whole, then reload in place."""
    _check_whole_layers(worker.model_runner.get_model(), [name for name, _ in weights])
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)


def _check_whole_layers(model: Any, names: list[str]) -> None:
    """Raise ``ValueError`` when ``names`` cover only part of a layer vLLM fuses (q/k/v, gate/up...).

    vLLM reloads a layer as a whole; a layer given in part would come back with uninitialised
    elements (NaN logprobs). Names vLLM maps differently from this scheme are left to vLLM.
    """
    packed: Mapping[str, list[str]] = getattr(model, "packed_modules_mapping", None) or {}
    fused_into = {member: fused for fused, members in packed.items() for member in members}
    parameters = {name.replace(".base_layer.", ".") for name, _ in model.named_parameters()}
    given: dict[str, set[tuple[str | None, str]]] = {}
    for name in names:
        module, _, parameter = name.rpartition(".")
        parent, _, leaf = module.rpartition(".")
        fused = fused_into.get(leaf)
        target = f"{parent}.{fused}" if fused and parent else module
        if f"{target}.{parameter}" in parameters:
            given.setdefault(target, set()).add((leaf if fused else None, parameter))
    missing = []
    for target, got in given.items():
        parent, _, leaf = target.rpartition(".")
        members: list[str | None] = list(packed[leaf]) if leaf in packed and any(m for m, _ in got) else [None]
        own = {p.rpartition(".")[2] for p in parameters if p.rpartition(".")[0] == target}
        for member in members:
            for parameter in own:
                if (member, parameter) not in got:
                    missing.append(f"{parent}.{member}.{parameter}" if member else f"{target}.{parameter}")
    if missing:
        raise ValueError(f"update_weights covers part of a fused layer; also pass: {', '.join(sorted(missing))}")

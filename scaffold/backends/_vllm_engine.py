"""The engine thread of :class:`~scaffold.backends._vllm.VLLMBackend`: the in-process engine and its loop.

:func:`engine_args` picks the backend's engine defaults; :class:`EngineLoop` builds the
``LLMEngine`` (one per process: vLLM's parallel state is process-wide), takes :class:`Submit`,
:class:`Abort` and :class:`Call` commands from any thread, runs continuous batching, and resolves
each caller's future with its completions; it shuts the engine down when told to stop. The module
docstring of ``scaffold.backends._vllm`` says what the completions carry and what the engine does to
the host process. Needs vLLM only when an engine is built.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scaffold._errors import BackendError
from scaffold._types import Completion, Request, Usage
from scaffold.backends._tool_text import chat_messages, native_tools

__all__ = ["Abort", "Call", "EngineLoop", "Submit", "engine_args"]

_CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache of a CPU engine when neither ``VLLM_CPU_KVCACHE_SPACE`` nor ``engine_kwargs`` size it
(vLLM's own default reserves 90% of the machine's memory)."""
_PROCESS_LOCK = threading.Lock()
"""Guards the environment while an engine is built, and ``_engine_running``."""
_engine_running = False
"""One engine per process at a time: vLLM keeps its parallel state and forward context in module globals,
and an engine's shutdown tears them down for every engine."""


@dataclass(slots=True)
class Submit:
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
class Abort:
    request_id: str


@dataclass(slots=True)
class Call:
    """Run ``fn(engine)`` on the engine thread between two steps."""

    fn: Callable[[Any], Any]
    future: concurrent.futures.Future[Any]


_STOP = object()


def engine_args(model: str, *, enable_lora: bool, max_lora_rank: int, enable_prefix_caching: bool,
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


class EngineLoop:
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
        pending: dict[str, Submit] = {}
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

    def _serve(self, engine: Any, pending: dict[str, Submit]) -> None:
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


def _handle(engine: Any, command: Any, pending: dict[str, Submit]) -> None:
    if isinstance(command, Submit):
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
    elif isinstance(command, Abort):
        if pending.pop(command.request_id, None) is not None:
            engine.abort_request([command.request_id])
    elif isinstance(command, Call):
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
    messages, extra = chat_messages(request, native_tools(tokenizer))
    template_kwargs = {**(request.params.get("chat_template_kwargs") or {}), **extra}
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **template_kwargs)
    return {"prompt_token_ids": tokenizer.encode(text, add_special_tokens=False)}


def _completions(submit: Submit, output: Any) -> list[Completion]:
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


def _deliver(submit: Submit, result: list[Completion] | BaseException) -> None:
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
    if isinstance(command, Submit):
        _deliver(command, error)
    elif isinstance(command, Call) and command.future.set_running_or_notify_cancel():
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

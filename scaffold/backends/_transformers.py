"""An in-process Hugging Face causal LM as a backend, with micro-batching and exact token logprobs.

:class:`TransformersBackend` loads a model (a local directory or a hub name) and answers requests
with its own sampling loop over the KV cache, so every sequence in a padded batch keeps its own
temperature, top-p, top-k, stop strings, length limit and random generator. Concurrent
``complete`` calls that arrive within ``batch_window`` share one batch; one batch runs at a time
in a worker thread, off the event loop.

What the completions carry, and why:

- ``token_ids``: always; the tokens as sampled, EOS included when the model emitted it (the trainer
  must see, and credit, the decision to stop). Cut at a stop string, they end with the token that
  completed the stop string, so they may decode to a little more than ``text``.
- ``logprobs``: only when ``request.logprobs`` is true; one per token id: the log-probability of that
  token under the model's *raw* distribution, ``log_softmax(logits)`` at temperature 1 before any
  top-p or top-k filtering (vLLM's default ``raw_logprobs`` mode). That is the policy a trainer
  differentiates; the sampling distribution differs whenever temperature, top-p or top-k do.
- ``text``: the generated tokens decoded without special tokens, cut before the first stop string.

Randomness: choice ``i`` of a request samples from its own ``torch.Generator`` seeded from
``(seed, i)``, drawing one exponential per vocabulary entry per step (the exponential-race form of
sampling, ``argmax(p / q)``, which vLLM also uses). The draws of a choice therefore do not depend on
which other requests share its batch. Padding does change the shape of the matrix products, which
can move logits in the last bits; a near-tie can then resolve differently, so batched and sequential
results agree up to floating-point noise (exactly, on CPU, in this package's tests).

Needs the ``train`` extra (torch, transformers); this module imports without it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaffold._errors import BackendError
from scaffold._types import Completion, Request, StreamItem, Usage
from scaffold.backends._base import Capabilities
from scaffold.backends._tool_text import chat_messages, native_tools, with_tool_calls
from scaffold.backends._transformers_sampling import IGNORED_PARAMS as IGNORED_PARAMS
from scaffold.backends._transformers_sampling import NEUTRAL_PARAMS as NEUTRAL_PARAMS
from scaffold.backends._transformers_sampling import SAMPLING_PARAMS as SAMPLING_PARAMS
from scaffold.backends._transformers_sampling import (
    Output,
    Recorder,
    Sampler,
    Sampling,
    choice_seed,
    parse_sampling,
)

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from scaffold.backends._transformers_stream import RowStream

INSTALL_HINT = "pip install 'scaffold-sdk[train]'"


def _require_torch() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ImportError(f"TransformersBackend needs torch and transformers: {INSTALL_HINT}") from exc
    return torch, transformers


def encode_prompt(tokenizer: Any, request: Request) -> list[int]:
    """The prompt token ids of ``request`` as :class:`TransformersBackend` feeds them to the model.

    Chat ``messages`` go through the tokenizer's chat template with the generation prompt, and the
    text is tokenised without adding special tokens again; a raw ``prompt`` is tokenised as is. The
    trainer rebuilds a recorded trace's prompt with this same function. Raises a non-retryable
    :class:`~scaffold._errors.BackendError` for an empty prompt or a chat request to a tokenizer
    without a chat template.
    """
    if not request.messages:
        if request.prompt is None:
            raise BackendError("the request has neither messages nor a prompt", retryable=False)
        ids = list(tokenizer(request.prompt)["input_ids"])
    elif getattr(tokenizer, "chat_template", None) is None:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise BackendError(f"the tokenizer of {name} has no chat template; send a raw `prompt`", retryable=False)
    else:
        messages, extra = chat_messages(request, native_tools(tokenizer))
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not ids:
        raise BackendError("the prompt is empty", retryable=False)
    return ids


class _Job:
    """One ``complete`` call waiting for its ``n`` choices (touched on the event loop only)."""

    def __init__(self, future: asyncio.Future[list[Completion]], n: int) -> None:
        self.future = future
        self.choices: list[Completion | None] = [None] * n
        self.remaining = n

    def deliver(self, choice: int, completion: Completion) -> None:
        if self.future.done():
            return
        self.choices[choice] = completion
        self.remaining -= 1
        if self.remaining == 0:
            self.future.set_result([c for c in self.choices if c is not None])

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass(slots=True)
class Row:
    """One choice of one request: a row of a generation batch."""

    job: _Job
    choice: int
    prompt_ids: list[int]
    sampling: Sampling
    seed: int
    stream: RowStream | None = None
    """Where this choice's deltas go, when it is streamed."""
    weights_version: int = 0
    """The backend's :attr:`~TransformersBackend.weights_version` when its batch ran."""


@dataclass
class _Queue:
    """Rows waiting on one event loop, and the task that drains them."""

    rows: deque[Row] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class TransformersBackend:
    """A Hugging Face causal LM run in this process: batched, seeded, with exact token ids and logprobs.

    ``model`` is a directory or hub name (loaded with ``AutoModelForCausalLM``) or a loaded
    ``PreTrainedModel``; ``tokenizer`` defaults to the one saved with the model. ``device`` defaults
    to ``"cpu"`` for a model loaded here and to the model's own device for a loaded one; ``dtype``
    (``torch.bfloat16``, ``"bfloat16"``, ``"auto"``) defaults to what ``from_pretrained`` picks.

    ``max_batch_size`` caps the sequences (choices, not requests) in one batch; ``max_new_tokens`` is
    the length limit of a request without ``max_tokens``; ``batch_window`` is how long (seconds) a
    batch waits for more requests before it starts.

    Chat requests go through the tokenizer's chat template (``add_generation_prompt=True``); a raw
    ``Request.prompt`` is tokenised as is, with the tokenizer's own special tokens (a BOS where it adds one).
    Generation stops at any EOS id of the generation config or the tokenizer, at a stop string, or
    after ``max_tokens`` (or where the model's context ends): ``finish_reason`` is ``"stop"`` for the
    first two and ``"length"`` for the others.

    Parameters read from ``Request.params``: ``temperature`` (default 1; 0 is greedy), ``top_p``,
    ``top_k``, ``max_tokens``, ``stop`` (a string or a list), ``seed`` (overrides ``Request.seed``;
    without either, each choice gets a fresh random seed). Parameters in :data:`IGNORED_PARAMS` are
    ignored, those in :data:`NEUTRAL_PARAMS` accepted at their neutral value; anything else raises a
    non-retryable :class:`~scaffold._errors.BackendError` naming it.

    ``model`` and ``tokenizer`` are the live objects: a trainer may update the weights in place
    between calls (generation runs in eval mode under ``no_grad`` and restores training mode after).
    ``batches``, ``sequences`` and ``peak_batch_size`` count the batches run so far.

    Examples:
        >>> from scaffold.testing import build_tiny_model
        >>> backend = TransformersBackend(build_tiny_model("/tmp/tiny-model"))  # doctest: +SKIP
        >>> graph.run_sync({"problem": "2+2"}, models={"solver": backend})  # doctest: +SKIP
    """

    capabilities = Capabilities(supports_n=True, max_n=None, returns_token_ids=True, trainable=True, streams=True)

    provider = "transformers"
    """``gen_ai.provider.name`` of its calls (OpenTelemetry)."""
    settings = frozenset({"device", "dtype", "max_batch_size", "max_new_tokens", "batch_window"})
    """The keys a registry entry (``models.toml``, a server config) may give this backend."""

    def __init__(
        self,
        model: str | os.PathLike[str] | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | str | None = None,
        *,
        device: str | None = None,
        dtype: torch.dtype | str | None = None,
        max_batch_size: int = 64,
        max_new_tokens: int = 256,
        batch_window: float = 0.005,
    ) -> None:
        if max_batch_size < 1 or max_new_tokens < 1 or batch_window < 0:
            raise ValueError("max_batch_size and max_new_tokens must be at least 1, batch_window at least 0")
        torch, _ = _require_torch()
        # how to load this backend again elsewhere (a cluster worker): only a model given by its path can be
        self._origin: tuple[Any, ...] | None = None
        if isinstance(model, (str, os.PathLike)) and (tokenizer is None or isinstance(tokenizer, str)):
            self._origin = (os.fspath(model), tokenizer, device, dtype if not isinstance(dtype, torch.dtype)
                            else str(dtype).removeprefix("torch."), max_batch_size, max_new_tokens, batch_window)
        self.model, self.name = _load_model(model, device=device, dtype=dtype)
        self.tokenizer = _load_tokenizer(tokenizer if tokenizer is not None else self.model.name_or_path)
        self.device = torch.device(device) if device is not None else self.model.device
        self.max_batch_size = max_batch_size
        self.max_new_tokens = max_new_tokens
        self.batch_window = batch_window
        self.batches = 0
        """Generation batches run so far."""
        self.sequences = 0
        """Sequences (choices) generated so far."""
        self.peak_batch_size = 0
        """Most sequences in one batch so far."""
        self.weights_version = 0
        """How many times :meth:`update_weights` has changed the weights (or the version it was last given)."""
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        """Token ids that end a sequence."""
        self.pad_id = next(i for i in (self.tokenizer.pad_token_id, *sorted(self.eos_ids), 0) if i is not None)
        """Fills the left padding (masked out, so any id would do)."""
        self.max_positions: int | None = getattr(self.model.config, "max_position_embeddings", None)
        """The model's context length, when its config says."""
        # logits_to_keep=1 (where the model takes it) spares the prefill a (batch, length, vocab) tensor
        takes_keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._forward_options: dict[str, Any] = {"use_cache": True, **({"logits_to_keep": 1} if takes_keep else {})}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scaffold-transformers")
        self._tokenizer_lock = threading.Lock()  # encoding on the loop, decoding in the worker
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()
        self._closed = False

    async def complete(self, request: Request) -> list[Completion]:
        """Answer ``request`` with ``request.n`` choices, batched with concurrent calls."""
        if request.n < 1:
            return []
        return with_tool_calls(request, await self._submit(request).future)


    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its model's path: a cluster worker that unpickles it loads its own copy from disk."""
        if self._origin is None:
            raise TypeError("a TransformersBackend built from a loaded model cannot be sent to another process; "
                            "build it from the model's directory (or use 'transformers:/path')")
        path, tokenizer, device, dtype, max_batch_size, max_new_tokens, batch_window = self._origin
        return _reload, (path, tokenizer, device, dtype, max_batch_size, max_new_tokens, batch_window)
    def stream(self, request: Request) -> AsyncIterator[StreamItem]:
        """Stream ``request``: a :class:`~scaffold._types.Delta` per sampled token (its id, and the text that
        became certain), then one :class:`~scaffold._types.Finished` (:mod:`scaffold.backends._transformers_stream`)."""
        from scaffold.backends._transformers_stream import stream_request

        return stream_request(self, request)

    def _submit(self, request: Request, streams: Sequence[RowStream] | None = None) -> _Job:
        """Queue the ``request.n`` rows of ``request`` on this loop's batch queue; the job resolves with them."""
        if self._closed:
            raise BackendError("the TransformersBackend is closed")
        sampling = parse_sampling(request, self.max_new_tokens)
        prompt_ids = self._encode(request)
        seed = request.params.get("seed")
        if seed is None:
            seed = request.seed if request.seed is not None else secrets.randbits(63)
        loop = asyncio.get_running_loop()
        job = _Job(loop.create_future(), request.n)
        queue = self._queues.setdefault(loop, _Queue())
        queue.rows.extend(Row(job, i, prompt_ids, sampling, choice_seed(seed, i), streams[i] if streams else None)
                          for i in range(request.n))
        if queue.task is None:
            queue.task = loop.create_task(self._drain(queue))
        return job

    def update_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], *,
                       version: int | None = None) -> int:
        """Copy new weights into the model between two batches and return the new :attr:`weights_version`.

        ``weights`` are names of :meth:`model.state_dict` and tensors (a subset is fine; any device or
        dtype: each is copied into its parameter in place). ``version`` labels the new weights (default:
        the current version plus one); a trainer passes its step count. The copy waits for the running
        batch and runs before the next one, so every completion comes from one version, which its
        ``metadata["weight_versions"]`` names (``((version, 0, len(token_ids)),)``, as
        :class:`~scaffold.VLLMBackend` reports). Blocks until done: from async code, use
        ``await asyncio.to_thread(backend.update_weights, weights)``. Unknown names and wrong shapes raise
        ``ValueError`` before anything changes.
        """
        torch, _ = _require_torch()
        items = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
        state = self.model.state_dict()
        unknown = sorted(str(name) for name, _ in items if name not in state)
        if unknown:
            raise ValueError(f"{self.name} has no weights named {unknown[:4]}{' ...' if len(unknown) > 4 else ''}")
        wrong = [f"{name}: {tuple(tensor.shape)} != {tuple(state[name].shape)}" for name, tensor in items
                 if tuple(tensor.shape) != tuple(state[name].shape)]
        if wrong:
            raise ValueError(f"weights of the wrong shape for {self.name}: {wrong[:4]}")
        if self._closed:
            raise BackendError("the TransformersBackend is closed")
        new = self.weights_version + 1 if version is None else int(version)

        def load() -> None:
            with torch.no_grad():
                for name, tensor in items:
                    state[name].copy_(tensor)
            self.weights_version = new

        self._executor.submit(load).result()
        return new

    def _stop_strings(self, request: Request) -> tuple[str, ...]:
        return parse_sampling(request, self.max_new_tokens).stop

    def close(self) -> None:
        """Stop accepting requests and wait for the running batch; the model and tokenizer stay usable."""
        self._closed = True
        self._executor.shutdown(wait=True)

    def _encode(self, request: Request) -> list[int]:
        with self._tokenizer_lock:
            ids = encode_prompt(self.tokenizer, request)
        if self.max_positions is not None and len(ids) >= self.max_positions:
            raise BackendError(f"the prompt has {len(ids)} tokens; {self.name} reads at most {self.max_positions}",
                               retryable=False)
        return ids

    async def _drain(self, queue: _Queue) -> None:
        """Run batches on this loop's rows until none wait: gather for ``batch_window``, generate, deliver."""
        loop = asyncio.get_running_loop()
        try:
            while queue.rows:
                if len(queue.rows) < self.max_batch_size and self.batch_window > 0:
                    await asyncio.sleep(self.batch_window)
                rows: list[Row] = []
                while queue.rows and len(rows) < self.max_batch_size:
                    row = queue.rows.popleft()
                    if not row.job.future.done():  # its caller was cancelled
                        rows.append(row)
                if not rows:
                    continue
                try:
                    outputs = await loop.run_in_executor(self._executor, self._generate, rows)
                except Exception as exc:
                    error = exc
                    if not isinstance(exc, BackendError):
                        error = BackendError(f"generation failed: {exc!r}")
                        error.__cause__ = exc
                    for row in rows:
                        row.job.fail(error)
                    continue
                for row, output in zip(rows, outputs, strict=True):
                    row.job.deliver(row.choice, self._completion(row, output))
        finally:
            queue.task = None

    def _completion(self, row: Row, output: Output) -> Completion:
        return Completion(
            text=output.text,
            token_ids=tuple(output.token_ids),
            logprobs=tuple(output.logprobs) if row.sampling.logprobs else None,
            usage=Usage(prompt_tokens=len(row.prompt_ids), completion_tokens=len(output.token_ids)),
            finish_reason=output.finish_reason,
            cost=None,
            model=self.name,
            metadata={"weight_versions": ((str(row.weights_version), 0, len(output.token_ids)),)},
        )

    def _generate(self, rows: list[Row]) -> list[Output]:
        """Generate every row of one batch (worker thread)."""
        torch, _ = _require_torch()
        for row in rows:  # update_weights runs on this thread too: the version cannot change under the batch
            row.weights_version = self.weights_version
        self.batches += 1
        self.sequences += len(rows)
        self.peak_batch_size = max(self.peak_batch_size, len(rows))
        was_training = self.model.training
        self.model.eval()
        try:
            # no_grad, not inference_mode: buffers a model creates lazily here must stay usable for training
            with torch.no_grad():
                return self._decode(rows)
        finally:
            if was_training:
                self.model.train()

    def _decode(self, rows: list[Row]) -> list[Output]:
        """The sampling loop: 1) prefill the left-padded prompts, 2) pick, record, feed one token per step."""
        torch, _ = _require_torch()
        from scaffold.backends._kv_cache import cache_argument, decoding_cache
        # 1) prefill
        lengths = [len(row.prompt_ids) for row in rows]
        width = max(lengths)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - lengths[i]:] = torch.tensor(row.prompt_ids)
            mask[i, width - lengths[i]:] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        sampler = Sampler(rows, self.device)
        record = Recorder(self, rows, lengths)
        cache = decoding_cache(self.model, width + min(max(record.limits, default=0), 512) + 1)  # grows if needed
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         **cache_argument(self.model, cache), **self._forward_options)
        next_positions = torch.tensor(lengths, device=self.device)
        # 2) decode
        while True:
            logits = out.logits[:, -1, :].float()
            tokens = sampler.pick(logits, record.active)
            logprobs = None
            if sampler.wants_logprobs:  # raw: temperature 1, no top-p/top-k, whatever the row sampled with
                logprobs = torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0].tolist()
            record.step(tokens.tolist(), logprobs)
            if not any(record.active) or all(row.job.future.done() for row in rows):
                return record.outputs()
            active = torch.tensor(record.active, device=self.device)
            feed = torch.where(active, tokens, torch.full_like(tokens, self.pad_id))
            mask = torch.cat([mask, active[:, None].long()], dim=1)
            out = self.model(input_ids=feed[:, None], attention_mask=mask, position_ids=next_positions[:, None],
                             **cache_argument(self.model, cache), **self._forward_options)
            next_positions += 1



@contextmanager
def quiet_progress(*, enabled: bool = True) -> Iterator[None]:
    """No transformers progress bars (loading or saving weights) for the duration, when ``enabled``."""
    from transformers.utils import logging

    shown = enabled and logging.is_progress_bar_enabled()
    if shown:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()


def _load_model(model: Any, *, device: str | None, dtype: Any) -> tuple[Any, str]:
    """The model on its device, and its name (the path or hub name it was loaded from)."""
    torch, transformers = _require_torch()
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        kwargs: dict[str, Any] = {}
        if dtype is not None:
            major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
            kwargs["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = dtype
        with quiet_progress(enabled=os.path.isdir(name)):  # a local load is instant: its bar only clutters
            loaded = transformers.AutoModelForCausalLM.from_pretrained(name, **kwargs).eval()
        device = device or "cpu"
    else:
        loaded = model
        name = getattr(model, "name_or_path", "") or type(model).__name__
        if dtype not in (None, "auto"):
            loaded = loaded.to(dtype=dtype)
    if device is not None:
        loaded = loaded.to(device)
    return loaded, name


def _load_tokenizer(tokenizer: Any) -> Any:
    _, transformers = _require_torch()
    if not tokenizer:
        raise ValueError("pass tokenizer=...: the model object does not say where it was loaded from")
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = transformers.AutoTokenizer.from_pretrained(os.fspath(tokenizer))
    return tokenizer


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every id that ends a sequence: the generation config's (one or a list) and the tokenizer's."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set(configured if isinstance(configured, (list, tuple)) else [configured])
    ids.add(tokenizer.eos_token_id)
    ids.discard(None)
    return frozenset(ids)


def _reload(path: str, tokenizer: str | None, device: str | None, dtype: str | None, max_batch_size: int,
            max_new_tokens: int, batch_window: float) -> TransformersBackend:
    """A :class:`TransformersBackend` loaded again from its model directory (what unpickling calls)."""
    return TransformersBackend(path, tokenizer, device=device, dtype=dtype, max_batch_size=max_batch_size,
                               max_new_tokens=max_new_tokens, batch_window=batch_window)

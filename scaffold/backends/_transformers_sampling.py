"""How the transformers backend samples: request parameters, and one batch's per-row sampler and recorder.

:func:`parse_sampling` turns ``Request.params`` into a :class:`Sampling`; in the batch loop of
:class:`~scaffold.backends._transformers.TransformersBackend`, :class:`Sampler` picks each row's next
token (temperature, top-k, top-p, its own generator) and :class:`Recorder` keeps each row's tokens,
logprobs and stopping. The module docstring of ``scaffold.backends._transformers`` says what the
completions carry and how the randomness works. Needs torch only when a batch runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scaffold._errors import BackendError
from scaffold._types import Request

if TYPE_CHECKING:
    import torch

    from scaffold.backends._transformers import Row, TransformersBackend

__all__ = [
    "IGNORED_PARAMS",
    "NEUTRAL_PARAMS",
    "SAMPLING_PARAMS",
    "Output",
    "Recorder",
    "Sampler",
    "Sampling",
    "choice_seed",
    "parse_sampling",
]

SAMPLING_PARAMS = frozenset({"temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "stop", "seed"})
"""Request parameters the backend honours (``max_completion_tokens``, OpenAI's newer name, means ``max_tokens``)."""
IGNORED_PARAMS = frozenset({"timeout", "request_timeout", "num_retries", "user", "metadata", "extra_headers"})
"""API parameters that do not change what a local model generates; accepted and ignored."""
NEUTRAL_PARAMS: Mapping[str, float] = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
"""Parameters accepted only at the value that leaves sampling unchanged; any other value is an error."""
_GREEDY_BELOW = 1e-5
"""Temperatures below this decode greedily (dividing logits by them would overflow)."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """How one request samples (parsed from ``Request.params``)."""

    temperature: float
    top_p: float
    top_k: int
    """0: no top-k filter."""
    max_tokens: int
    stop: tuple[str, ...]
    logprobs: bool


@dataclass(slots=True)
class Output:
    """One generated sequence, as the worker thread hands it back."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


def parse_sampling(request: Request, default_max_tokens: int) -> Sampling:
    """Validate ``request.params``; unknown or out-of-range values raise a non-retryable ``BackendError``."""
    params = request.params
    for key, value in params.items():
        if key in SAMPLING_PARAMS or key in IGNORED_PARAMS:
            continue
        if key in NEUTRAL_PARAMS and value in (None, NEUTRAL_PARAMS[key]):
            continue
        raise BackendError(f"TransformersBackend does not support the parameter {key}={value!r}", retryable=False)

    def number(key: str, default: float, low: float, high: float, *, integer: bool = False) -> Any:
        value = params.get(key)
        if value is None:
            return default
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
            raise BackendError(f"parameter {key}={value!r} must be a number in [{low}, {high}]", retryable=False)
        return value

    top_p = number("top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise BackendError("parameter top_p must be greater than 0", retryable=False)
    seed = params.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BackendError(f"parameter seed={seed!r} must be an integer", retryable=False)
    stop = params.get("stop")
    if isinstance(stop, str):
        stop = (stop,)
    if stop is None:
        stop = ()
    if not isinstance(stop, Sequence) or not all(isinstance(s, str) for s in stop):
        raise BackendError(f"parameter stop={stop!r} must be a string or a list of strings", retryable=False)
    temperature = float(number("temperature", 1.0, 0.0, float("inf")))
    length_key = "max_tokens" if params.get("max_tokens") is not None else "max_completion_tokens"
    return Sampling(
        temperature=temperature if temperature >= _GREEDY_BELOW else 0.0,
        top_p=float(top_p),
        top_k=max(0, number("top_k", 0, -1, 2**62, integer=True)),  # -1 and 0 both mean "off"
        max_tokens=number(length_key, default_max_tokens, 1, 2**62, integer=True),
        stop=tuple(s for s in stop if s),
        logprobs=request.logprobs,
    )


def choice_seed(seed: int, choice: int) -> int:
    """The generator seed of choice ``choice``: distinct per choice, a pure function of the request seed."""
    return (seed * 0x9E3779B97F4A7C15 + choice) % 2**63


class Sampler:
    """Per-row temperature, top-k, top-p and generator of one batch, applied to one step's logits."""

    def __init__(self, rows: Sequence[Row], device: torch.device) -> None:
        import torch

        self.greedy = torch.tensor([row.sampling.temperature == 0 for row in rows], device=device)
        self.sampled = [i for i, row in enumerate(rows) if row.sampling.temperature > 0]
        self.temperature = torch.tensor([[row.sampling.temperature or 1.0] for row in rows], device=device)
        self.top_k = torch.tensor([[row.sampling.top_k or 2**62] for row in rows], device=device)
        self.top_p = torch.tensor([[row.sampling.top_p] for row in rows], device=device)
        self.filters = any(rows[i].sampling.top_k or rows[i].sampling.top_p < 1 for i in self.sampled)
        self.generators = {i: torch.Generator(device=device).manual_seed(rows[i].seed) for i in self.sampled}
        self.wants_logprobs = any(row.sampling.logprobs for row in rows)

    def pick(self, logits: torch.Tensor, active: Sequence[bool]) -> torch.Tensor:
        """The next token of every row: argmax for greedy rows, ``argmax(p / q)``, ``q ~ Exp(1)``, for the rest."""
        import torch

        greedy = logits.argmax(-1)
        if not self.sampled:
            return greedy
        scaled = logits / self.temperature
        if self.filters:
            scaled = self._filter(scaled)
        probs = torch.softmax(scaled, -1)
        noise = torch.ones_like(probs)
        for i in self.sampled:
            if active[i]:
                noise[i].exponential_(generator=self.generators[i])
        sampled = (probs / noise.clamp_(min=torch.finfo(noise.dtype).tiny)).argmax(-1)
        return torch.where(self.greedy, greedy, sampled)

    def _filter(self, scaled: torch.Tensor) -> torch.Tensor:
        """Mask what top-k, then top-p (over the top-k survivors), leave out; the best token always stays."""
        import torch

        values, order = scaled.sort(-1, descending=True)
        ranks = torch.arange(values.shape[-1], device=values.device)
        drop = ranks[None, :] >= self.top_k
        values = values.masked_fill(drop, float("-inf"))
        probs = torch.softmax(values, -1)
        drop |= (probs.cumsum(-1) - probs >= self.top_p) & (self.top_p < 1)
        return scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))


class Recorder:
    """Token ids, logprobs and stopping of every row of one batch, step by step."""

    def __init__(self, backend: TransformersBackend, rows: Sequence[Row], lengths: Sequence[int]) -> None:
        self.backend = backend
        self.rows = rows
        limit = backend.max_positions
        self.limits = [row.sampling.max_tokens if limit is None else min(row.sampling.max_tokens, limit - length)
                       for row, length in zip(rows, lengths, strict=True)]
        self.token_ids: list[list[int]] = [[] for _ in rows]
        self.logprobs: list[list[float]] = [[] for _ in rows]
        self.texts: list[str | None] = [None] * len(rows)
        self.finish: list[str | None] = [None] * len(rows)
        self.active = [True] * len(rows)

    def step(self, tokens: Sequence[int], logprobs: Sequence[float] | None) -> None:
        for i, row in enumerate(self.rows):
            if not self.active[i]:
                continue
            self.token_ids[i].append(tokens[i])
            if row.sampling.logprobs and logprobs is not None:
                self.logprobs[i].append(logprobs[i])
            if tokens[i] in self.backend.eos_ids:
                self.finish[i] = "stop"
            elif row.sampling.stop and self._cut_at_stop(i, row.sampling.stop):
                self.finish[i] = "stop"
            elif len(self.token_ids[i]) >= self.limits[i]:
                self.finish[i] = "length"
            self.active[i] = self.finish[i] is None
            if row.stream is not None:
                text = self._decode(self.token_ids[i]) if self.active[i] else None
                row.stream.push(tokens[i], logprobs[i] if row.sampling.logprobs and logprobs is not None else None,
                                text)

    def _cut_at_stop(self, i: int, stops: Sequence[str]) -> bool:
        text = self._decode(self.token_ids[i])
        found = [at for stop in stops if (at := text.find(stop)) >= 0]
        if found:
            self.texts[i] = text[: min(found)]
        return bool(found)

    def _decode(self, token_ids: list[int]) -> str:
        with self.backend._tokenizer_lock:
            text: str = self.backend.tokenizer.decode(token_ids, skip_special_tokens=True)
        return text

    def outputs(self) -> list[Output]:
        return [
            Output(ids, lps, text if text is not None else self._decode(ids), finish or "length")
            for ids, lps, text, finish in zip(self.token_ids, self.logprobs, self.texts, self.finish, strict=True)
        ]

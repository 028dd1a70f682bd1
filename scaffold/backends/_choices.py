"""From the choices of one answer to :class:`~scaffold._types.Completion` records: usage split per choice, and cost.

An OpenAI-style answer reports usage for the whole request; each choice becomes its own trace, so
the counts are split: a choice's completion tokens are its own token count when every choice says
(token ids or logprobs, summing to the reported total), an even split otherwise; prompt tokens are
split evenly. Shared by the litellm and OpenAI-compatible backends, streamed or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaffold._types import Completion, ToolCall, Usage

__all__ = ["Choice", "cached_prompt_tokens", "completions_from", "split"]


@dataclass(frozen=True, slots=True)
class Choice:
    """One choice as read from an answer (or assembled from a stream)."""

    text: str
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


def split(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal integers that sum to it (the first ones take the remainder).

    Examples:
        >>> split(7, 3)
        [3, 2, 2]
    """
    base, extra = divmod(total, parts) if parts else (0, 0)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def token_counts(choices: Sequence[Choice], completion_total: int) -> list[int]:
    """Each choice's completion tokens: its own count when every choice has one and they sum to the total."""
    counts = [len(c.token_ids) if c.token_ids is not None else (len(c.logprobs) if c.logprobs is not None else None)
              for c in choices]
    if any(count is None for count in counts) or sum(count or 0 for count in counts) != completion_total:
        return split(completion_total, len(choices))
    return [count or 0 for count in counts]


def cached_prompt_tokens(usage: Any) -> int:
    """The prompt tokens a provider says it served from its cache (OpenAI's ``prompt_tokens_details.cached_tokens``;
    a dict or an object), 0 when it says nothing.

    Examples:
        >>> cached_prompt_tokens({"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 768}})
        768
    """
    details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else getattr(
        usage, "prompt_tokens_details", None)
    found = details.get("cached_tokens") if isinstance(details, Mapping) else getattr(details, "cached_tokens", None)
    try:
        return max(int(found or 0), 0)
    except (TypeError, ValueError):
        return 0


def completions_from(
    choices: Sequence[Choice],
    *,
    prompt_tokens: int,
    completion_tokens: int,
    model: str | None,
    prices: tuple[float, float] | None,
    logprobs: bool,
    cached_tokens: int = 0,
    cache_price: float | None = None,
) -> list[Completion]:
    """The completions of one answer; ``prices`` (dollars per input and output token) ``None``: cost unknown.

    ``cached_tokens`` of the prompt were served from the provider's cache: recorded on each choice as
    ``metadata["cached_prompt_tokens"]`` (split like the prompt) and charged ``cache_price`` each (default: the
    input price).

    Examples:
        >>> done = completions_from([Choice("a", (1, 2)), Choice("b", (3,))], prompt_tokens=5, completion_tokens=3,
        ...                         model="m", prices=(1.0, 2.0), logprobs=False)
        >>> [(c.usage.prompt_tokens, c.usage.completion_tokens, c.cost) for c in done]
        [(3, 2, 7.0), (2, 1, 4.0)]
        >>> cached = completions_from([Choice("a", None)], prompt_tokens=10, completion_tokens=1, model="m",
        ...                           prices=(1.0, 2.0), logprobs=False, cached_tokens=8, cache_price=0.5)
        >>> cached[0].cost, cached[0].metadata
        (8.0, {'cached_prompt_tokens': 8})
    """
    counts = token_counts(choices, completion_tokens)
    prompts = split(prompt_tokens, len(choices))
    cached = split(min(cached_tokens, prompt_tokens), len(choices)) if cached_tokens > 0 else [0] * len(choices)
    out = []
    for choice, p, c, hit in zip(choices, prompts, counts, cached):
        cost = None
        if prices is not None:
            rate = prices[0] if cache_price is None else cache_price
            cost = (p - hit) * prices[0] + hit * rate + c * prices[1]
        out.append(Completion(
            text=choice.text, token_ids=choice.token_ids, logprobs=choice.logprobs if logprobs else None,
            usage=Usage(prompt_tokens=p, completion_tokens=c), finish_reason=choice.finish_reason,
            cost=cost, model=model, tool_calls=choice.tool_calls,
            metadata={"cached_prompt_tokens": hit} if hit else {},
        ))
    return out

"""Dollar prices: per token from litellm's price map (without importing litellm when it is not loaded yet), and
:class:`Price`, a price given for any model.

A price map applies to a provider's own endpoint only: a model name served elsewhere (a local OpenAI-compatible
server that calls itself ``gpt-4o-mini``) is not that provider's model, and its cost is unknown unless given.

litellm takes seconds to import; its price map is a JSON file inside the package. When litellm is
already imported, its live ``model_cost`` table is read (it holds what ``litellm.register_model``
added); otherwise the bundled file is read once, directly. No litellm installed: every price is
unknown. An unknown price is ``None``, never 0.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scaffold._types import Completion, Usage

__all__ = ["EngineTime", "Price", "cache_read_price", "price_per_token"]

_PRICE_FILE = "model_prices_and_context_window_backup.json"
_OPENAI_PROVIDERS = ("openai", "text-completion-openai")


def price_per_token(model: str) -> tuple[float, float] | None:
    """``(input, output)`` dollars per token of ``model`` (``"gpt-4o-mini"``, ``"openai/gpt-4o-mini"``), or ``None``.

    A name with a provider prefix is looked up as given, then (for ``openai/``) without it.

    Examples:
        >>> price_per_token("scaffold-unknown-model") is None
        True
    """
    table = _price_table()
    candidates = [model]
    provider, slash, bare = model.partition("/")
    if slash and provider == "openai":
        candidates.append(bare)
    for name in candidates:
        entry = table.get(name)
        if not isinstance(entry, Mapping):
            continue
        if name == bare and entry.get("litellm_provider") not in _OPENAI_PROVIDERS:
            continue
        try:
            prices = (float(entry["input_cost_per_token"]), float(entry["output_cost_per_token"]))
        except (KeyError, TypeError, ValueError):
            continue
        return prices
    return None


def _price_table() -> Mapping[str, Any]:
    litellm = sys.modules.get("litellm")
    live = getattr(litellm, "model_cost", None) if litellm is not None else None
    if isinstance(live, Mapping) and live:
        return live
    return _bundled_table()


@functools.cache
def _bundled_table() -> Mapping[str, Any]:
    """litellm's bundled price map, read once (empty without litellm or without the file)."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return {}
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / _PRICE_FILE
        if path.is_file():
            try:
                table = json.loads(path.read_text())
            except (OSError, ValueError):
                return {}
            return table if isinstance(table, dict) else {}
    return {}


@dataclass(frozen=True)
class Price:
    """What a model's calls cost, given where no price map knows it: a local engine, a self-hosted server, a
    negotiated rate. ``sf.Model(backend, price=sf.Price(...))`` prices every completion with it (over what the
    backend reported), so budgets and cost reports work for any backend.

    ``input`` and ``output`` are dollars per prompt and completion token; ``cached_input`` per prompt token a
    provider served from its cache (reported as ``metadata["cached_prompt_tokens"]``; default: ``input``);
    ``per_second`` dollars per second of the engine's time (a GPU's rent): each second the model has calls in
    flight is shared among them (:class:`EngineTime`), so calls a batching engine serves together split its time
    instead of each paying it whole, and the charges add up to the time the engine was busy. A call's share is
    split among its choices.

    Examples:
        >>> from scaffold import Price
        >>> from scaffold._types import Usage
        >>> price = Price(input=1e-6, output=2e-6, per_second=0.001)
        >>> round(price.cost(Usage(prompt_tokens=100, completion_tokens=50), seconds=2.0), 6)
        0.0022
    """

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None
    per_second: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input", "per_second"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                      or value != value):
                raise ValueError(f"Price({name}=...) is dollars, a number of 0 or more; got {value!r}")

    def cost(self, usage: Usage, *, seconds: float = 0.0, cached: int = 0) -> float:
        """The dollars of one choice: its tokens (``cached`` of its prompt tokens at the cached rate) and its share
        of the call's ``seconds``."""
        cached = min(max(cached, 0), usage.prompt_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return ((usage.prompt_tokens - cached) * self.input + cached * cached_rate
                + usage.completion_tokens * self.output + seconds * self.per_second)

    def priced(self, completions: Sequence[Completion], seconds: float) -> list[Completion]:
        """``completions`` with their costs from this price (a call's ``seconds`` shared among its choices)."""
        share = seconds / max(len(completions), 1)
        return [replace(c, cost=self.cost(c.usage, seconds=share,
                                          cached=int(c.metadata.get("cached_prompt_tokens") or 0)))
                for c in completions]


def cache_read_price(model: str) -> float | None:
    """Dollars per cached prompt token of ``model`` in litellm's price map (``None``: no cache price known).

    Examples:
        >>> cache_read_price("scaffold-unknown-model") is None
        True
    """
    table = _price_table()
    provider, slash, bare = model.partition("/")
    for name in ([model, bare] if slash and provider == "openai" else [model]):
        entry = table.get(name)
        if isinstance(entry, Mapping) and entry.get("cache_read_input_token_cost") is not None:
            try:
                return float(entry["cache_read_input_token_cost"])
            except (TypeError, ValueError):
                return None
    return None


class EngineTime:
    """An engine's busy time shared among the calls in flight on it: every second with ``k`` calls in flight adds
    ``1/k`` second to each (what a batching engine serving them together spends on each). The shares of all calls
    add up to the time at least one was in flight. Safe to use from several threads.

    Examples:
        >>> ticks = iter([0.0, 0.0, 1.0, 3.0])  # a starts at 0, b at 0; a ends at 1, b at 3
        >>> meter = EngineTime(clock=lambda: next(ticks))
        >>> a, b = meter.start(), meter.start()
        >>> meter.stop(a), meter.stop(b)
        (0.5, 2.5)
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[int, float] = {}
        self._next = 0
        self._last = 0.0

    def __getstate__(self) -> dict[str, Any]:  # a copy (another process) starts with no calls in flight
        return {"clock": self._clock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["clock"])  # type: ignore[misc]

    def start(self) -> int:
        """A call begins: its ticket for :meth:`stop`."""
        with self._lock:
            self._advance()
            ticket, self._next = self._next, self._next + 1
            self._open[ticket] = 0.0
            return ticket

    def stop(self, ticket: int) -> float:
        """A call ends: its share of the engine's seconds since it began (0 for an unknown ticket)."""
        with self._lock:
            self._advance()
            return self._open.pop(ticket, 0.0)

    def _advance(self) -> None:
        now = self._clock()
        if self._open:
            share = max(now - self._last, 0.0) / len(self._open)
            for ticket in self._open:
                self._open[ticket] += share
        self._last = now

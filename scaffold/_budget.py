"""Budgets: the most tokens or dollars a run (or a whole ``map``) may spend, enforced before each call.

A call is refused — with :class:`~scaffold._errors.BudgetExceeded`, under its node's failure
policy — when sending it could pass a limit: its tokens are estimated before sending (prompt
characters / 4 plus ``n`` × ``max_tokens``) and booked, then corrected from the reported
usage (a call that reports none keeps its estimate); dollars are checked against what was
already spent (a price is only known after the answer). Calls whose cost is unknown count
no dollars: a dollar budget cannot hold for models without a price, and says so in
``unpriced_calls``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from scaffold._errors import BudgetExceeded
from scaffold._types import Completion, Request
from scaffold.backends._model import estimate_tokens


class Budget:
    """Most tokens and/or dollars to spend; share one object to share the budget.

    Give it to ``graph.run(..., budget=...)`` for one run, or to ``graph.map(..., budget=...)``
    for the whole batch. Thread-safe: runs on several threads (``run_sync`` from a thread pool)
    may share one.

    Examples:
        >>> budget = Budget(max_tokens=1_000, max_cost=0.50)
        >>> budget.tokens, budget.cost, budget.remaining_tokens
        (0, 0.0, 1000)
    """

    def __init__(self, *, max_tokens: int | None = None, max_cost: float | None = None) -> None:
        if max_tokens is None and max_cost is None:
            raise ValueError("a Budget needs max_tokens, max_cost or both")
        if (max_tokens is not None and max_tokens < 1) or (max_cost is not None and max_cost <= 0):
            raise ValueError("budget limits must be positive")
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.tokens = 0
        """Tokens spent (reported usage of finished calls; the estimate of those that report none)."""
        self.cost = 0.0
        """Dollars spent by calls with a known price."""
        self.unpriced_calls = 0
        """Finished choices (one per trace) whose price was unknown (their dollars are not counted)."""
        self.refused = 0
        """Calls refused because they could pass a limit."""
        self._booked = 0
        self._lock = threading.Lock()

    @property
    def remaining_tokens(self) -> int | None:
        """Tokens left after what was spent and what in-flight calls booked (``None``: no token limit)."""
        return None if self.max_tokens is None else self.max_tokens - self.tokens - self._booked

    def book(self, request: Request) -> int:
        """Reserve an estimate for ``request`` or raise :class:`BudgetExceeded`; returns the booked tokens."""
        booked = estimate_tokens(request) if self.max_tokens is not None else 0
        with self._lock:
            if self.max_cost is not None and self.cost >= self.max_cost:
                self.refused += 1
                raise BudgetExceeded(f"dollar budget spent: ${self.cost:.4f} of ${self.max_cost:.4f}")
            if self.max_tokens is not None:
                if self.tokens + self._booked + booked > self.max_tokens:
                    self.refused += 1
                    raise BudgetExceeded(
                        f"token budget: {self.tokens} spent and {self._booked} booked of {self.max_tokens}; "
                        f"this call may need {booked}"
                    )
                self._booked += booked
        return booked

    def settle(self, booked: int, completions: Sequence[Completion] | None) -> None:
        """Replace a booking by what the call really used (nothing when it failed)."""
        with self._lock:
            self._booked -= booked
            if completions and not any(c.usage.total_tokens for c in completions):
                self.tokens += booked  # no usage reported: the estimate stands, or the budget would never run out
            for completion in completions or ():
                self.tokens += completion.usage.total_tokens
                if completion.cost is None:
                    self.unpriced_calls += 1
                else:
                    self.cost += completion.cost

"""Budgets: token and dollar caps per run and per batch, enforced before a call is sent."""

from __future__ import annotations

import threading

import pytest
from helpers import boxed, chain

import scaffold as sf
from scaffold._types import Completion, Request, Usage
from scaffold.testing import ScriptedBackend


def priced(cost: float | None, tokens: int = 50):
    """A script answering with ``tokens`` completion tokens at ``cost`` dollars per choice."""
    return lambda request: Completion(text=boxed(1), usage=Usage(prompt_tokens=0, completion_tokens=tokens),
                                      cost=cost)


def test_token_budget_refuses_the_call_that_could_pass_it_before_sending():
    """With room for three 50-token calls (max_tokens=50 each), the fourth is refused unsent: BudgetExceeded."""
    backend = ScriptedBackend(priced(0.001))
    budget = sf.Budget(max_tokens=200)
    model = sf.Model(backend, params={"max_tokens": 50})
    with pytest.raises(sf.BudgetExceeded):
        chain.run_sync({"problem": "p"}, models={"m": model}, budget=budget)
    assert backend.calls == 3
    assert budget.tokens == 150 and budget.refused == 1
    assert budget.remaining_tokens == 50


def test_dollar_budget_stops_once_spent_and_skips_unpriced_calls_in_its_count():
    """Calls stop once $0.003 is spent; unpriced calls are counted separately, never as $0."""
    backend = ScriptedBackend(priced(0.001))
    budget = sf.Budget(max_cost=0.003)
    result = chain.run_sync({"problem": "p"}, models={"m": backend}, budget=budget, raise_on_error=False)
    assert result.status == "error" and isinstance(result.error, sf.BudgetExceeded)
    assert backend.calls == 3 and budget.cost == pytest.approx(0.003)
    unpriced = sf.Budget(max_cost=0.001)
    chain.run_sync({"problem": "p"}, models={"m": ScriptedBackend(priced(None))}, budget=unpriced)
    assert unpriced.unpriced_calls == 6 and unpriced.cost == 0.0


def test_a_budget_shared_by_map_caps_the_whole_batch():
    """One budget given to ``map`` caps the batch: later rows fail with BudgetExceeded, earlier ones finish."""
    backend = ScriptedBackend(priced(None, tokens=10))
    budget = sf.Budget(max_tokens=100)
    model = sf.Model(backend, params={"max_tokens": 10})
    rows = [{"problem": f"p{i}"} for i in range(10)]
    results = chain.build(steps=2).map_sync(rows, models={"m": model}, budget=budget, concurrency=1)
    finished = [r for r in results if r.status == "ok"]
    assert 3 <= len(finished) < 10
    assert all(isinstance(r.error, sf.BudgetExceeded) for r in results if r.status != "ok")
    assert budget.tokens <= 100


def test_drop_policy_keeps_going_when_one_branch_is_refused():
    """Under ``on_error="drop"`` a refused sample is recorded as failed and the vote uses the rest."""
    backend = ScriptedBackend(priced(None, tokens=20))

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=5, on_error="drop"))

    budget = sf.Budget(max_tokens=70)
    result = g.run_sync({"problem": "p"}, models={"m": sf.Model(backend, params={"max_tokens": 20})}, budget=budget)
    failed = [t for t in result.traces if t.status is sf.Status.ERROR]
    assert result.answer == "1" and len(failed) == 2
    assert all("BudgetExceeded" in (t.error or "") for t in failed)


def test_budget_needs_a_positive_limit():
    """A budget without limits, or with a non-positive one, is refused when made."""
    with pytest.raises(ValueError):
        sf.Budget()
    with pytest.raises(ValueError):
        sf.Budget(max_tokens=0)


def test_a_budget_shared_by_threads_counts_every_call_exactly(fast_thread_switching):
    """Runs on several threads booking and settling one Budget lose no token and pass no limit."""
    budget = sf.Budget(max_tokens=10_000_000)
    request = Request(messages=(("user", "x" * 40),), params={"max_tokens": 10})
    completion = Completion(text="y", usage=Usage(prompt_tokens=3, completion_tokens=4), cost=0.5)

    def hammer():
        for _ in range(5_000):
            budget.settle(budget.book(request), [completion])

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.tokens == 8 * 5_000 * 7 and budget.remaining_tokens == 10_000_000 - budget.tokens
    assert budget.cost == pytest.approx(8 * 5_000 * 0.5)

"""Budgets: token and dollar caps per run and per batch, enforced before a call is sent."""

from __future__ import annotations

import threading

import pytest
from helpers import boxed, chain

import scaffold as sf
from scaffold._types import Completion, Request, Usage
from scaffold.backends._prices import EngineTime
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


# -- prices given to a model (local engines, self-hosted servers) ----------------------------------------


def test_a_price_given_to_a_model_prices_every_trace_and_feeds_the_budget():
    """``sf.Model(backend, price=sf.Price(...))``: each choice costs its tokens at the given rates (cached prompt
    tokens at the cached rate), over what the backend reported; a dollar budget then stops a local engine."""
    backend = ScriptedBackend(lambda request: Completion(text=boxed(1), usage=Usage(30, 50), cost=None,
                                                        metadata={"cached_prompt_tokens": 10}))
    price = sf.Price(input=1e-6, output=2e-6, cached_input=0.5e-6)
    result = chain.run_sync({"problem": "p"}, models={"m": sf.Model(backend, price=price)})
    assert result.traces and all(t.cost == pytest.approx(20e-6 + 10 * 0.5e-6 + 100e-6) for t in result.traces)
    budget = sf.Budget(max_cost=3 * 125e-6)
    with pytest.raises(sf.BudgetExceeded):
        chain.run_sync({"problem": "p"}, models={"m": sf.Model(backend, price=price)}, budget=budget)
    assert budget.cost == pytest.approx(3 * 125e-6) and budget.unpriced_calls == 0


def test_per_second_prices_share_the_engines_time_among_calls_in_flight():
    """Four calls served together for 0.2 s are charged the engine's time once between them (0.05 s each, not
    0.2 s each): their charges add up to no more than the wall time they took together."""
    import asyncio
    import time

    backend = ScriptedBackend(lambda request: Completion(text="ok", usage=Usage(1, 1)), delay=0.2)
    model = sf.Model(backend, price=sf.Price(per_second=1.0))

    async def together():
        t0 = time.perf_counter()
        replies = await asyncio.gather(*[model.complete(Request(messages=(("user", f"q{i}"),))) for i in range(4)])
        return replies, time.perf_counter() - t0

    replies, wall = asyncio.run(together())
    charged = [c.cost for reply in replies for c in reply.completions]
    assert len(charged) == 4 and all(c > 0 for c in charged)
    assert sum(charged) <= wall + 1e-6  # the engine's busy time, charged once
    assert sum(charged) >= 0.2 * 0.95  # and not less than the time it worked


def test_engine_time_splits_each_second_among_the_calls_in_flight():
    ticks = iter([0.0, 1.0, 2.0, 4.0, 4.0, 5.0, 5.0])
    meter = EngineTime(clock=lambda: next(ticks))
    a = meter.start()  # t=0, alone until 1
    b = meter.start()  # t=1, a and b share 1..2
    assert meter.stop(a) == pytest.approx(1.5)  # t=2
    assert meter.stop(b) == pytest.approx(0.5 + 2.0)  # alone 2..4
    c = meter.start()  # t=4
    assert meter.stop(c) == pytest.approx(1.0) and meter.stop(c) == 0.0  # t=5; a second stop is nothing


def test_a_registry_price_table_prices_the_alias(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text('[models.local]\nmodel = "hosted_vllm/x"\napi_base = "http://127.0.0.1:9/v1"\n'
                    '[models.local.price]\ninput = 1e-7\noutput = 4e-7\nper_second = 0.0005\n')
    model = sf.load_models(path)["local"]
    assert model.price == sf.Price(input=1e-7, output=4e-7, per_second=0.0005)
    path.write_text('[models.local]\nmodel = "hosted_vllm/x"\n[models.local.price]\ninput = -1.0\n')
    with pytest.raises(sf.ModelAliasError, match="input"):
        sf.load_models(path)

"""In-flight limits live on a Model and are shared by every run (and every node) that uses it."""

from __future__ import annotations

import asyncio

import pytest
from helpers import boxed

import scaffold as sf
from scaffold.testing import ScriptedBackend


@sf.graph
def pair(problem):
    return sf.vote(sf.sample("Solve {problem}", model="m", n=2))


async def five_runs(models):
    return await asyncio.gather(*[pair.run({"problem": str(i)}, models=models) for i in range(5)])


def test_shared_model_limit_holds_across_concurrent_runs():
    """Five concurrent runs sharing ``Model(max_in_flight=3)`` never have more than 3 requests in flight."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.03)
    model = sf.Model(backend, max_in_flight=3)
    results = asyncio.run(five_runs({"m": model}))
    assert [r.answer for r in results] == ["1"] * 5
    assert backend.calls == 10
    assert backend.peak_in_flight == 3
    assert model.limit.peak == 3
    assert model.limit.in_flight == 0


def test_without_a_limit_every_call_runs_at_once():
    """With no limit, the same five runs put all ten requests in flight together."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.03)
    asyncio.run(five_runs({"m": backend}))
    assert backend.peak_in_flight == 10


def test_separate_models_have_separate_limits():
    """Two Model objects over one backend each have their own budget."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.03)

    @sf.graph
    def two(problem):
        return sf.concat(sf.sample("A {problem}", model="a", n=4), sf.sample("B {problem}", model="b", n=4))

    a, b = sf.Model(backend, max_in_flight=1), sf.Model(backend, max_in_flight=2)
    two.run_sync({"problem": "p"}, models={"a": a, "b": b})
    assert (a.limit.peak, b.limit.peak) == (1, 2)
    assert backend.peak_in_flight == 3


def test_limit_survives_successive_event_loops():
    """A Model can serve run_sync calls one after another (the limit is not bound to one event loop)."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.01)
    model = sf.Model(backend, max_in_flight=1)
    for _ in range(3):
        assert pair.run_sync({"problem": "p"}, models={"m": model}).answer == "1"
    assert backend.peak_in_flight == 1
    assert backend.calls == 6


def test_model_defaults_reach_the_request():
    """``Model(name=, params=)`` sets the request's model name and default params; node params override them."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m", params={"temperature": 0.2})

    backend = ScriptedBackend(lambda r: boxed(1))
    model = sf.Model(backend, name="org/model-7b", params={"temperature": 1.0, "max_tokens": 64})
    g.run_sync({"problem": "p"}, models={"m": model})
    request = backend.requests[0]
    assert request.model == "org/model-7b"
    assert dict(request.params) == {"temperature": 0.2, "max_tokens": 64}


def test_in_flight_limit_rejects_non_positive_sizes():
    """An in-flight limit below 1 is a ValueError."""
    with pytest.raises(ValueError):
        sf.InFlightLimit(0)
    with pytest.raises(ValueError):
        sf.Model(ScriptedBackend(lambda r: "x"), max_in_flight=0)


def test_in_flight_limit_serves_waiters_first_come_first_served():
    """Waiting holders get places in arrival order and the peak never exceeds the limit."""
    limit = sf.InFlightLimit(1)
    order: list[int] = []

    async def holder(i):
        async with limit:
            order.append(i)
            await asyncio.sleep(0.001)

    async def main():
        await asyncio.gather(*[holder(i) for i in range(5)])

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4]
    assert limit.peak == 1 and limit.in_flight == 0


def test_non_backend_is_rejected_by_model():
    """Binding something without ``capabilities``/``complete`` is a ModelAliasError."""
    with pytest.raises(sf.ModelAliasError):
        sf.Model(object())

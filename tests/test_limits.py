"""In-flight limits live on a Model and are shared by every run (and every node) that uses it; the clocks that
pacing, retries and timeouts wait on (real by default, virtual in tests)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from helpers import boxed

import scaffold as sf
from scaffold._clock import MONOTONIC
from scaffold._clock import timeout as clock_timeout
from scaffold.testing import ScriptedBackend, VirtualClock


@sf.graph
def pair(problem):
    return sf.vote(sf.sample("Solve {problem}", model="m", n=2))


def answering_after(clock: VirtualClock, seconds: float) -> ScriptedBackend:
    """A backend whose every call answers after ``seconds`` of ``clock``'s time.

    On a virtual clock time only moves once every call that can start has started, so how many overlap
    depends on the limits alone, never on how fast a loaded machine starts them.
    """

    async def script(request):
        await clock.sleep(seconds)
        return boxed(1)

    return ScriptedBackend(script)


async def five_runs(models):
    return await asyncio.gather(*[pair.run({"problem": str(i)}, models=models) for i in range(5)])


def test_shared_model_limit_holds_across_concurrent_runs():
    """Five concurrent runs sharing ``Model(max_in_flight=3)`` never have more than 3 requests in flight."""
    clock = VirtualClock()
    backend = answering_after(clock, 0.03)
    model = sf.Model(backend, max_in_flight=3, clock=clock)
    results = asyncio.run(five_runs({"m": model}))
    assert [r.answer for r in results] == ["1"] * 5
    assert backend.calls == 10
    assert backend.peak_in_flight == 3
    assert model.limit.peak == 3
    assert model.limit.in_flight == 0


def test_without_a_limit_every_call_runs_at_once():
    """With no limit, the same five runs put all ten requests in flight together."""
    clock = VirtualClock()
    backend = answering_after(clock, 0.03)
    asyncio.run(five_runs({"m": sf.Model(backend, clock=clock)}))
    assert backend.peak_in_flight == 10
    assert clock.now() == 0.03  # all ten answered together


def test_separate_models_have_separate_limits():
    """Two Model objects over one backend each have their own budget."""
    clock = VirtualClock()
    backend = answering_after(clock, 0.03)

    @sf.graph
    def two(problem):
        return sf.concat(sf.sample("A {problem}", model="a", n=4), sf.sample("B {problem}", model="b", n=4))

    a, b = sf.Model(backend, max_in_flight=1, clock=clock), sf.Model(backend, max_in_flight=2, clock=clock)
    two.run_sync({"problem": "p"}, models={"a": a, "b": b})
    assert (a.limit.peak, b.limit.peak) == (1, 2)
    assert backend.peak_in_flight == 3
    assert clock.now() == pytest.approx(4 * 0.03)  # "A" calls one at a time: four in a row


def test_limit_survives_successive_event_loops():
    """A Model can serve run_sync calls one after another (the limit is not bound to one event loop)."""
    clock = VirtualClock()
    backend = answering_after(clock, 0.01)
    model = sf.Model(backend, max_in_flight=1, clock=clock)
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
            await asyncio.sleep(0)  # hold the place over a turn of the loop: the others queue behind it

    async def main():
        await asyncio.gather(*[holder(i) for i in range(5)])

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4]
    assert limit.peak == 1 and limit.in_flight == 0


def test_non_backend_is_rejected_by_model():
    """Binding something without ``capabilities``/``complete`` is a ModelAliasError."""
    with pytest.raises(sf.ModelAliasError):
        sf.Model(object())


# -- clocks: what the limits, retries and timeouts wait on ------------------------------------------------


def test_a_virtual_clock_jumps_to_each_wakeup_in_turn_when_every_task_sleeps():
    """With nothing else to run, time jumps to the next wake-up: sleeps end in order, at their virtual times."""
    clock = VirtualClock(start=100.0)
    woke: list[tuple[str, float]] = []

    async def nap(name: str, seconds: float):
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    async def main():
        await asyncio.gather(nap("long", 30.0), nap("short", 5.0), nap("none", 0.0), nap("middle", 5.5))

    asyncio.run(main())
    assert woke == [("none", 100.0), ("short", 105.0), ("middle", 105.5), ("long", 130.0)]
    assert clock.now() == 130.0 and clock.slept == 3 and clock.sleeping == 0 and clock.next_wakeup is None


def test_a_virtual_clock_without_auto_advance_moves_only_when_advanced():
    """``advance`` wakes exactly the sleeps that fall due; a cancelled sleep leaves nothing pending."""
    clock = VirtualClock(auto_advance=False)

    async def main():
        sleeper = asyncio.create_task(clock.sleep(1.0))
        cancelled = asyncio.create_task(clock.sleep(0.5))
        await clock.wait_sleeping(2)
        cancelled.cancel()
        clock.advance(0.75)
        await asyncio.sleep(0)
        assert not sleeper.done() and clock.sleeping == 1 and clock.next_wakeup == 1.0
        clock.advance(0.25)
        await asyncio.wait_for(sleeper, 10)  # due now: it wakes on the loop's next turns (10 s: only if broken)
        with pytest.raises(ValueError, match="cannot go back"):
            clock.advance(-1.0)

    asyncio.run(main())
    assert clock.now() == 1.0 and clock.sleeping == 0


def test_waiting_for_sleepers_has_a_deadline_that_names_the_count():
    """``wait_sleeping`` fails with a message, not a hang, when the sleeps it waits for never come."""
    clock = VirtualClock(auto_advance=False)

    async def main():
        with pytest.raises(TimeoutError, match="0 sleep.s. pending .* waiting for 1"):
            await clock.wait_sleeping(1, timeout=0.01)

    asyncio.run(main())


def test_a_virtual_clock_advanced_from_the_test_thread_wakes_a_sleeper_on_another_loop():
    """A sleep on an event loop in another thread wakes, on that loop, when the test advances the clock."""
    clock = VirtualClock(auto_advance=False)
    woke: list[float] = []

    def sleeper():
        async def main():
            await clock.sleep(2.0)
            woke.append(clock.now())

        asyncio.run(main())

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10.0
    while clock.sleeping < 1:
        assert time.monotonic() < deadline, "the other thread's sleep never reached the clock"
        time.sleep(0.001)
    clock.advance(2.0)
    thread.join(10.0)
    assert not thread.is_alive(), "the sleeper was not woken"
    assert woke == [2.0]


def test_a_wakeup_too_small_to_move_a_large_time_still_moves_it():
    """A pacer at a large virtual time, whose last wait rounds to nothing, never spins: each start is one second
    after the one before."""
    clock = VirtualClock(start=1e9)
    sent: list[float] = []
    model = sf.Model(ScriptedBackend(lambda r: sent.append(clock.now()) or boxed(1)), requests_per_minute=60,
                     clock=clock)

    async def main():
        await asyncio.gather(*(model.complete(sf.Request(messages=(("user", "q"),))) for _ in range(3)))

    asyncio.run(main())
    assert [later - earlier for earlier, later in zip(sent, sent[1:])] == pytest.approx([1.0, 1.0], abs=1e-6)


def test_a_timeout_on_a_virtual_clock_cancels_the_body_when_its_time_comes():
    """``timeout(clock, s)``: the body is cancelled at ``s`` on the clock and TimeoutError raised; a body done in
    time leaves no watchdog asleep; a cancellation from outside stays a cancellation."""
    clock = VirtualClock()
    cancelled: list[float] = []

    async def body(seconds: float):
        try:
            await clock.sleep(seconds)
        except asyncio.CancelledError:
            cancelled.append(clock.now())
            raise

    async def timed(seconds: float, limit: float):
        async with clock_timeout(clock, limit):
            await body(seconds)

    async def main():
        with pytest.raises(TimeoutError):
            await timed(10.0, 2.0)
        assert cancelled == [2.0]
        await timed(1.0, 5.0)  # done at 3.0, before its limit at 7.0
        assert clock.now() == 3.0 and clock.sleeping == 0
        outer = asyncio.create_task(timed(10.0, 5.0))
        await clock.wait_sleeping(2)  # the body and the watchdog
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert cancelled == [2.0, 3.0] and clock.sleeping == 0

    asyncio.run(main())
    assert clock.now() == 3.0


def test_a_model_keeps_its_pacers_and_throttle_on_its_clock_and_the_real_one_by_default():
    """``Model(clock=)`` reaches its pacers and default throttle; without it, all of them read the real clock,
    whose timeouts are asyncio's own."""
    clock = VirtualClock()
    model = sf.Model(ScriptedBackend(lambda r: "x"), requests_per_minute=60, tokens_per_minute=600, clock=clock)
    assert model.clock is model.rpm.clock is model.tpm.clock is model.throttle.clock is clock
    plain = sf.Model(ScriptedBackend(lambda r: "x"), requests_per_minute=60)
    assert plain.clock is plain.rpm.clock is plain.throttle.clock is MONOTONIC
    assert MONOTONIC.now is time.monotonic and MONOTONIC.sleep is asyncio.sleep

    async def kinds():
        return type(clock_timeout(MONOTONIC, 1.0)), type(clock_timeout(clock, 1.0)).__name__

    assert asyncio.run(kinds()) == (asyncio.Timeout, "_ClockTimeout")
    own = sf.Throttle()
    assert sf.Model(ScriptedBackend(lambda r: "x"), throttle=own, clock=clock).throttle.clock is MONOTONIC

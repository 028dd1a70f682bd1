"""Failure policies (fail fast, drop, quorum), timeouts and cancellation, against the real executor."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from helpers import boxed, prompt_of

import scaffold as sf
from scaffold._clock import timeout as clock_timeout
from scaffold.testing import ScriptedBackend, VirtualClock


def failing_first(failures: int, error: BaseException | None = None):
    """A script whose first ``failures`` replies raise ``error`` (a BackendError by default), then answer 7."""
    counter = itertools.count()

    def script(request):
        if next(counter) < failures:
            raise error or sf.BackendError("boom", retryable=False, status_code=503)
        return boxed(7)

    return script


@sf.graph
def bad_and_slow(problem):
    bad = sf.generate("bad {problem}", model="m")
    slow = sf.sample("slow {problem}", model="m", n=3)
    return sf.concat(bad, slow)


def bad_and_slow_model(clock: VirtualClock) -> sf.Model:
    """The ``bad`` call fails after 0.01 s, the ``slow`` ones would answer after 0.5 s (of ``clock``'s time)."""

    async def script(request):
        if prompt_of(request).startswith("bad"):
            await clock.sleep(0.01)
            raise sf.BackendError("server error", retryable=False, status_code=500)
        await clock.sleep(0.5)
        return boxed(1)

    return sf.Model(ScriptedBackend(script), clock=clock)


# -- fail fast -----------------------------------------------------------------------------------------


def test_fail_fast_raises_call_error_with_the_failed_trace():
    """By default the first failed call raises CallError at once; ``.trace`` is the recorded failed trace."""
    clock = VirtualClock()
    model = bad_and_slow_model(clock)
    backend = model.backend
    with pytest.raises(sf.CallError) as info:
        bad_and_slow.run_sync({"problem": "p"}, models={"m": model}, run_id="r")
    assert clock.now() == 0.01  # raised when the bad call failed, without waiting for the 0.5 s calls
    trace = info.value.trace
    assert trace is not None
    assert trace.id == "r/generate#0"
    assert trace.status is sf.Status.ERROR
    assert "server error" in trace.error
    assert backend.in_flight == 0


@pytest.mark.parametrize(
    "original", [sf.BackendError("quota", retryable=False, status_code=429), KeyError("surprise")],
    ids=["backend-error", "unexpected-exception"],
)
def test_backend_exception_becomes_a_call_error_caused_by_it(original: Exception):
    """Any exception from a backend (typed or not) is reported as CallError with the original as ``__cause__``."""
    backend = ScriptedBackend(failing_first(1, original))

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m")

    with pytest.raises(sf.CallError) as info:
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert info.value.__cause__ is original


def test_fail_fast_cancels_and_records_in_flight_calls():
    """After a failure, calls still in flight are cancelled and recorded with status cancelled."""
    events: list[sf.Event] = []
    clock = VirtualClock()
    model = bad_and_slow_model(clock)
    backend = model.backend
    result = bad_and_slow.run_sync(
        {"problem": "p"}, models={"m": model}, raise_on_error=False, subscribers=[events.append], run_id="r"
    )
    assert clock.now() == 0.01
    assert result.status == "error"
    assert isinstance(result.error, sf.CallError)
    assert result.output is None
    statuses = {t.id: t.status for t in result.traces}
    assert statuses == {
        "r/generate#0": sf.Status.ERROR,
        "r/sample#0": sf.Status.CANCELLED,
        "r/sample#1": sf.Status.CANCELLED,
        "r/sample#2": sf.Status.CANCELLED,
    }
    assert all(t.request is not None for t in result.traces)
    finished = {e.trace.id: e.trace.status for e in events if isinstance(e, sf.TraceFinished)}
    assert finished == statuses
    assert isinstance(events[-1], sf.RunFinished) and events[-1].result.status == "error"
    assert backend.in_flight == 0


def test_fail_fast_sends_nothing_downstream():
    """Once a call failed, nodes that depended on it are never sent."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3)
        return sf.aggregate(pop, model="m")

    backend = ScriptedBackend(failing_first(1))
    with pytest.raises(sf.CallError):
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert all(prompt_of(r).startswith("Solve") for r in backend.requests)


def test_wrong_number_of_completions_is_a_call_error():
    """A backend returning fewer completions than ``n`` fails the call instead of silently losing samples."""

    class Short:
        capabilities = sf.Capabilities(supports_n=True)

        async def complete(self, request):
            return [sf.Completion(text=boxed(1))]

    @sf.graph
    def g(problem):
        return sf.sample("Solve {problem}", model="m", n=3)

    with pytest.raises(sf.CallError) as info:
        g.run_sync({"problem": "p"}, models={"m": Short()})
    assert isinstance(info.value.__cause__, sf.BackendError)


def test_failing_rule_fails_the_run():
    """An exception inside a rule (a scorer) is a run error caused by it, with a failed rule trace."""

    @sf.graph
    def g():
        return sf.best_of(sf.candidates(["a", "b"]), scorer=lambda t: 1 / 0)

    result = g.run_sync({}, models={}, raise_on_error=False)
    assert result.status == "error"
    assert isinstance(result.error, sf.RunError)
    assert isinstance(result.error.__cause__, ZeroDivisionError)
    failed = result.node("best_of")[0]
    assert failed.status is sf.Status.ERROR and failed.kind is sf.TraceKind.RULE


# -- drop and quorum ------------------------------------------------------------------------------------


def test_drop_records_the_failure_and_the_vote_counts_only_successes():
    """Under ``on_error="drop"`` a failed member is recorded and the vote reads only the successes."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4, on_error="drop"))

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(failing_first(1))})
    assert result.ok
    samples = result.node("sample")
    failed = [t for t in samples if t.status is sf.Status.ERROR]
    assert len(failed) == 1 and "boom" in failed[0].error
    assert result.output.metadata["voters"] == 3
    assert result.output.inputs == tuple(t.id for t in samples if t.ok)
    assert result.answer == "7"


def test_drop_aggregation_reads_only_successful_members():
    """An aggregation over a partly failed set shows only the successes and ``{k}`` is how many it read."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4, on_error="drop")
        return sf.aggregate(pop, model="m", prompt="{k} candidates:\n{candidates}")

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(failing_first(2))})
    agg = result.output
    ok_ids = tuple(t.id for t in result.node("sample") if t.ok)
    assert len(ok_ids) == 2
    assert agg.inputs == ok_ids
    assert prompt_of(agg.request).startswith("2 candidates:")


def test_top_k_over_too_few_successes_outputs_only_recorded_traces():
    """top_k over a set where fewer than k members succeeded never outputs a placeholder that was not recorded."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4, on_error="drop")
        return sf.top_k(pop, k=2, score=lambda t: 1.0)

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(failing_first(3))}, raise_on_error=False,
                        run_id="r")
    # under ``drop`` the set is what succeeded: top_k(k=2) of a one-member set is that member, not an error
    assert result.ok
    assert [t.id for t in result.output] == ["r/sample#3"]
    recorded = {t.id: t for t in result.traces}
    assert all(recorded[t.id] is t and t.ok for t in result.output)


@pytest.mark.parametrize("policy", [sf.Quorum(3), 3], ids=["Quorum", "int"])
def test_quorum_passes_when_enough_succeed(policy):
    """``on_error=Quorum(3)`` (or ``3``) tolerates one failure out of four."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4, on_error=policy))

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(failing_first(1))})
    assert result.ok
    assert result.output.metadata["voters"] == 3


def test_quorum_error_when_too_few_succeed():
    """``on_error=Quorum(3)`` with two failures out of four raises QuorumError."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4, on_error=sf.Quorum(3)))

    with pytest.raises(sf.QuorumError, match="2 of 4"):
        g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(failing_first(2))})


@pytest.mark.parametrize("consumer", ["vote", "aggregate"])
def test_every_member_failing_is_an_empty_input_error(consumer):
    """When every member of a dropped-failures set failed, the consumer raises EmptyInputError, sending nothing."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3, on_error="drop")
        return sf.vote(pop) if consumer == "vote" else sf.aggregate(pop, model="m")

    backend = ScriptedBackend(failing_first(3))
    with pytest.raises(sf.EmptyInputError):
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert backend.calls == 3


# -- timeouts ------------------------------------------------------------------------------------------


@sf.graph
def fast_and_slow(problem):
    return sf.concat(sf.generate("fast {problem}", model="m"), sf.generate("slow {problem}", model="m"))


def fast_and_slow_backend(sleep=asyncio.sleep) -> ScriptedBackend:
    """The ``fast`` call answers at once; the ``slow`` one would take 30 s of ``sleep`` (real time by default)."""

    async def script(request):
        if prompt_of(request).startswith("slow"):
            await sleep(30)
        return boxed(1)

    return ScriptedBackend(script)


def test_call_timeout_fails_the_call_with_call_timeout_as_cause():
    """``call_timeout=`` makes a slow call fail with CallError caused by CallTimeout (timed on the model's clock)."""
    clock = VirtualClock()
    model = sf.Model(fast_and_slow_backend(clock.sleep), clock=clock)
    with pytest.raises(sf.CallError) as info:
        fast_and_slow.run_sync({"problem": "p"}, models={"m": model}, call_timeout=0.1)
    assert clock.now() == 0.1  # failed when the timeout fired, not when the slow call would have answered
    assert isinstance(info.value.__cause__, sf.CallTimeout)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert info.value.trace.node == "generate_2"
    assert info.value.trace.status is sf.Status.ERROR


def test_call_timeout_under_drop_keeps_the_run_going():
    """A timed-out call under ``drop`` is recorded as an error and the run finishes with the rest."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=3, on_error="drop"))

    clock = VirtualClock()
    slow_once = itertools.count()

    async def script(request):
        await clock.sleep(0.5 if next(slow_once) == 0 else 0.01)
        return boxed(4)

    result = g.run_sync({"problem": "p"}, models={"m": sf.Model(ScriptedBackend(script), clock=clock)},
                        call_timeout=0.1, run_id="r")
    assert result.ok and result.answer == "4"
    assert {t.id: t.status for t in result.node("sample")} == {
        "r/sample#0": sf.Status.ERROR, "r/sample#1": sf.Status.OK, "r/sample#2": sf.Status.OK,
    }
    assert "CallTimeout" in result.node("sample")[0].error
    assert clock.now() == 0.1


# The run timeout is kept by the event loop in real time (not on a model's clock). The slow call would take 30 s,
# so the run can only end early by the timeout cancelling it (were it broken, the run would end after 30 s, ok, and
# the test fail). The fast call answers within a few turns of the event loop, under a millisecond: the 0.5 s before
# the timeout fires leave it a margin of hundreds of times that, which a loaded 2-core machine does not eat.


def test_run_timeout_raises_run_timeout():
    """``timeout=`` bounds the whole run: RunTimeout (a TimeoutError) is raised without waiting for slow calls."""
    backend = fast_and_slow_backend()
    with pytest.raises(sf.RunTimeout) as info:
        fast_and_slow.run_sync({"problem": "p"}, models={"m": backend}, timeout=0.5)
    assert isinstance(info.value, TimeoutError)
    assert backend.calls == 2 and backend.in_flight == 0  # the slow call was cancelled, not waited for


def test_run_timeout_records_in_flight_calls_as_cancelled():
    """After a run timeout the finished call is ok and the one in flight is recorded as cancelled."""
    result = fast_and_slow.run_sync(
        {"problem": "p"}, models={"m": fast_and_slow_backend()}, timeout=0.5, raise_on_error=False, run_id="r"
    )
    assert result.status == "timeout"
    assert isinstance(result.error, sf.RunTimeout)
    assert {t.id: t.status for t in result.traces} == {
        "r/generate#0": sf.Status.OK,
        "r/generate_2#0": sf.Status.CANCELLED,
    }


# -- cancellation -----------------------------------------------------------------------------------------


def test_cancelling_the_run_task_cancels_calls_and_releases_the_limit():
    """Cancelling the task running ``graph.run`` cancels in-flight calls and gives every in-flight place back."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=6))

    clock = VirtualClock()

    async def script(request):
        await clock.sleep(1.0)
        return boxed(1)

    backend = ScriptedBackend(script)
    model = sf.Model(backend, max_in_flight=2, clock=clock)
    events: list[sf.Event] = []

    async def main():
        task = asyncio.create_task(g.run({"problem": "p"}, models={"m": model}, subscribers=[events.append]))
        await clock.wait_sleeping(2)  # both calls that got a place are answering
        assert backend.in_flight == 2 and model.limit.in_flight == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert clock.now() == 0.0  # cancelled at once: no call ran to its answer
    assert backend.in_flight == 0
    assert model.limit.in_flight == 0
    assert backend.calls == 2  # the four calls waiting for a place were never sent
    result = events[-1].result
    assert result.status == "cancelled"
    # all six are recorded as cancelled: two were in flight, four were queued for a place (never sent)
    assert [t.status for t in result.traces] == [sf.Status.CANCELLED] * 6


def test_limit_is_usable_after_a_cancelled_run():
    """A Model whose run was cancelled serves the next run normally (no leaked places or waiters)."""

    @sf.graph
    def g(problem):
        return sf.vote(sf.sample("Solve {problem}", model="m", n=4))

    clock = VirtualClock()

    async def script(request):
        await clock.sleep(1.0 if prompt_of(request).endswith("slow") else 0.01)
        return boxed(1)

    model = sf.Model(ScriptedBackend(script), max_in_flight=1, clock=clock)

    async def main():
        task = asyncio.create_task(g.run({"problem": "slow"}, models={"m": model}, store=None))
        await clock.wait_sleeping(1)  # the first call holds the only place; three wait for it
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # a leaked place leaves the next run waiting with nothing else to do, so virtual time runs out at once
        # (no store: waiting on its writer thread would count as idle too, and let the 60 s pass meanwhile)
        try:
            async with clock_timeout(clock, 60.0):
                return await g.run({"problem": "fast"}, models={"m": model}, store=None)
        except TimeoutError:
            pytest.fail("the run after the cancelled one never got the model's place: the cancelled run kept it")

    result = asyncio.run(main())
    assert result.answer == "1"
    assert model.limit.in_flight == 0 and model.limit.peak == 1

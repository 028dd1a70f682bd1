"""Adversarial edge cases: nested loops, failures in odd places, cancellation, map, templates, determinism.

Most tests pin behaviour that an earlier version got wrong (a hang, a leaked coroutine, a lost cause, a doubled
name prefix); those marked "Pinned" pin a deliberate design choice. None of them measures speed: a run that
should end at once instead of hanging is given a generous ``timeout`` as the deadline a hang would hit, and
the test checks the typed error it ends with.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random
import re
import warnings

import pytest
from helpers import boxed, prompt_of, wait_until_async

import scaffold as sf
from scaffold.testing import ScriptedBackend, SimulatedBackend


def seeded_answer(request: sf.Request) -> str:
    """A reply that depends only on the request (its seed and prompt), never on call order."""
    return boxed((request.seed or 0) % 3) + f" [{prompt_of(request)[:12]}]"


def jittery(script, *, seed: int, max_delay: float = 0.004) -> ScriptedBackend:
    """A scripted backend whose delays are drawn from ``random.Random(seed)``: two seeds, two finishing orders."""
    jitter = random.Random(seed)
    return ScriptedBackend(script, delay=lambda r: jitter.random() * max_delay)


HANG_DEADLINE = 30.0
"""The ``timeout`` of a run that must end at once (with an error) rather than hang: far longer than such a run
takes on a loaded 2-core machine, so only a hang reaches it, and a hang then fails as RunTimeout."""


def no_runtime_warnings(fn):
    """Run ``fn`` and collect garbage, returning (its result or exception, RuntimeWarnings seen)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome: object = fn()
        except Exception as exc:  # handed back to the test
            outcome = exc
            for linked in (exc, exc.__cause__, exc.__context__):  # tracebacks keep leaked coroutines alive
                if linked is not None:
                    linked.with_traceback(None)
            del exc
        gc.collect()
    return outcome, [w for w in caught if issubclass(w.category, RuntimeWarning)]


@sf.graph
def one_call(problem):
    return sf.generate("Solve {problem}", model="m")


# -- loops: nesting, sub-graphs, bodies that ignore their input -------------------------------------------------


def nested_loops_graph():
    @sf.graph
    def nested(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3)

        def inner(p):
            body = lambda q: sf.aggregate(q, model="m", select="each", prompt="refine {candidates}")
            return sf.loop(body, p, steps=3, until=sf.agreement(1.0))

        return sf.loop(inner, pop, steps=3, until=sf.agreement(1.0))

    return nested


def test_nested_loops_stop_both_levels_once_the_set_agrees():
    """Nested loops with ``until``: one inner step that agrees stops the inner loop and then the outer loop."""
    counter = itertools.count()
    backend = ScriptedBackend(lambda r: boxed(7) if prompt_of(r).startswith("refine") else boxed(next(counter)))
    result = nested_loops_graph().run_sync({"problem": "p"}, models={"m": backend}, seed=0)
    assert result.ok
    assert backend.calls == 3 + 3  # three samples, one inner step of three refinements, nothing else
    assert [t.answer for t in result.output] == ["7"] * 3
    assert all(t.kind is sf.TraceKind.MODEL and t.ok for t in result.output)


def test_nested_loops_run_every_step_when_nothing_agrees():
    """Nested loops whose condition never holds send outer × inner steps of calls and return the last one."""
    counter = itertools.count()
    backend = ScriptedBackend(lambda r: boxed(next(counter)))
    graph = nested_loops_graph().build()
    result = graph.run_sync({"problem": "p"}, models={"m": backend}, seed=0)
    assert backend.calls == 3 + 3 * 3 * 3
    last_step = [n.name for n in graph.nodes if n.kind == "aggregate"][-1]
    assert {t.node for t in result.output} == {last_step}
    assert graph.count_calls() == {"m": backend.calls}  # the upper bound is exact when no loop stops early
    assert "at most" in graph.describe() and graph.mermaid().count("-.->") > 0


def test_nested_loop_node_names_have_one_prefix_per_level():
    """An inner loop's nodes carry one ``loop@i/`` prefix per level (``loop@0/loop@0/aggregate``), never a
    repeated one (``loop@0/loop@0/loop@0/aggregate``)."""
    names = [n.name for n in nested_loops_graph().build().nodes]
    assert "loop@0/loop@0/aggregate" in names
    assert "loop@1/loop@2/aggregate" in names
    assert not any(name.count("loop@") > 2 for name in names)


@sf.graph
def refine_loop(problem, *, steps: int = 2):
    pop = sf.sample("Solve {problem}", model="m", n=2)
    body = lambda p: sf.aggregate(p, model="m", select="each", prompt="refine {candidates}")
    return sf.loop(body, pop, steps=steps, until=sf.agreement(1.0))


def test_loop_inside_a_subgraph_is_named_under_the_subgraph_prefix():
    """A loop inside a sub-graph names its nodes ``refine_loop/loop@0/aggregate``: the sub-graph prefix once,
    never doubled (``refine_loop/refine_loop/loop@0/aggregate``)."""

    @sf.graph
    def outer(problem):
        return sf.vote(refine_loop(problem))

    names = [n.name for n in outer.build().nodes]
    assert "refine_loop/loop@0/aggregate" in names
    assert not any(name.startswith("refine_loop/refine_loop") for name in names)


def test_subgraph_with_a_loop_used_twice_runs_both_copies_independently():
    """A sub-graph holding a loop with ``until``, inlined twice: each copy stops on its own data."""

    @sf.graph
    def outer(problem):
        return sf.concat(refine_loop(problem, steps=3), refine_loop("other", steps=3))

    distinct = itertools.count()

    def script(request):
        text = prompt_of(request)
        if text == "Solve other":
            return boxed(5)  # the second copy already agrees: its loop never runs
        return boxed(6) if text.startswith("refine") else boxed(next(distinct))  # the first copy's samples differ

    backend = ScriptedBackend(script)
    result = outer.run_sync({"problem": "p"}, models={"m": backend}, seed=0)
    assert result.ok
    assert backend.calls == 2 + 2 + 2  # copy 1: 2 samples + one step of 2; copy 2: 2 samples
    assert [t.answer for t in result.output] == ["6", "6", "5", "5"]
    ids = [t.id for t in result.traces]
    assert len(ids) == len(set(ids))


def test_loop_body_that_samples_fresh_still_stops():
    """A body that ignores its input (samples afresh each step) stops once ``until`` holds on a step's output."""
    counter = itertools.count()

    @sf.graph
    def fresh(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3)
        return sf.loop(lambda p: sf.sample("Fresh {problem}", model="m", n=3), pop, steps=4, until=sf.agreement(1.0))

    backend = ScriptedBackend(lambda r: boxed(7) if prompt_of(r).startswith("Fresh") else boxed(next(counter)))
    result = fresh.run_sync({"problem": "p"}, models={"m": backend}, seed=0)
    assert backend.calls == 3 + 3
    assert {t.node for t in result.output} == {"loop@0/sample"}
    assert not any(t.node.startswith(("loop@1", "loop@2", "loop@3")) for t in result.traces)


def test_loop_body_reading_an_outer_node_as_context():
    """A loop body may use ``context=`` of a node outside the loop; each step's lineage includes it."""

    @sf.graph
    def g(problem):
        plan = sf.generate("Plan {problem}", model="m")
        pop = sf.sample("Solve {problem}", model="m", n=2)
        body = lambda p: sf.aggregate(p, model="m", select="each", prompt="{plan} | {candidates}",
                                      context={"plan": plan})
        return sf.loop(body, pop, steps=2, until=sf.agreement(1.0))

    counter = itertools.count()
    backend = ScriptedBackend(lambda r: "PLAN" if prompt_of(r).startswith("Plan") else boxed(next(counter)))
    result = g.run_sync({"problem": "p"}, models={"m": backend}, run_id="r", seed=0)
    assert result.ok
    steps = [t for t in result.traces if "@" in t.node]
    assert len(steps) == 4
    for trace in steps:
        assert prompt_of(trace.request).startswith("PLAN | ")
        assert trace.inputs[-1] == "r/generate#0"


def test_until_sees_only_the_successful_members():
    """``until`` gets the successful members only: one success out of four with ``agreement(1.0)`` stops the loop."""
    seen: list[int] = []
    counter = itertools.count()

    def until(traces):
        seen.append(len(traces))
        return sf.agreement(1.0)(traces)

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4, on_error="drop")
        return sf.loop(lambda p: sf.aggregate(p, model="m", select="each"), pop, steps=2, until=until)

    def script(request):
        if next(counter) < 3:
            raise sf.BackendError("down")
        return boxed(1)

    backend = ScriptedBackend(script)
    result = g.run_sync({"problem": "p"}, models={"m": backend}, run_id="r")
    assert seen == [1]
    assert backend.calls == 4
    assert [t.id for t in result.output] == [t.id for t in result.node("sample") if t.ok]


def test_until_that_raises_is_a_run_error():
    """A stop condition raising at run time fails the run with a RunError and leaves nothing in flight."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=2)
        return sf.loop(lambda p: sf.aggregate(p, model="m", select="each"), pop, steps=2, until=lambda ts: 1 / 0)

    backend = ScriptedBackend(lambda r: boxed(1))
    result = g.run_sync({"problem": "p"}, models={"m": backend}, raise_on_error=False)
    assert result.status == "error" and isinstance(result.error, sf.RunError)
    assert "ZeroDivisionError" in str(result.error)
    assert backend.calls == 2 and backend.in_flight == 0


def test_output_structure_with_skipped_loop_iterations():
    """A dict/tuple output keeps its shape: skipped iterations give ``[]`` (sets) or ``None`` (one trace)."""
    captured: list[sf.Node] = []

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=2)

        def body(p, step):
            node = sf.aggregate(p, model="m", select="each", prompt=f"step{step} {{candidates}}")
            captured.append(node)
            return node

        final = sf.loop(body, pop, steps=3, until=sf.agreement(1.0))
        return {"final": final, "steps": list(captured), "votes": (sf.vote(final), sf.vote(captured[2]))}

    counter = itertools.count()
    backend = ScriptedBackend(lambda r: boxed(7) if prompt_of(r).startswith("step0") else boxed(next(counter)))
    result = g.run_sync({"problem": "p"}, models={"m": backend}, seed=0)
    assert result.ok
    out = result.output
    assert set(out) == {"final", "steps", "votes"}
    assert [t.node for t in out["final"]] == ["loop@0/aggregate"] * 2
    assert [len(s) for s in out["steps"]] == [2, 0, 0]
    assert isinstance(out["votes"], tuple)
    assert out["votes"][0].answer == "7"
    assert out["votes"][1] is None  # a vote over a skipped iteration is skipped too, not an error
    assert "vote_2" not in {t.node for t in result.traces}


def test_loop_over_run_time_candidates_that_changes_size_is_a_run_error():
    """A loop with ``until`` over a run-time set whose body changes the size fails with a typed RunError."""

    @sf.graph
    def g(problem, cands):
        return sf.loop(lambda p: sf.aggregate(p, model="m", k=2, n=2), cands, steps=2, until=lambda ts: False)

    result = g.run_sync({"problem": "p", "cands": ["a", "b", "c"]}, models={"m": ScriptedBackend(lambda r: boxed(1))},
                        raise_on_error=False)
    assert result.status == "error"
    assert isinstance(result.error, sf.RunError)
    assert "iteration returned 2 traces" in str(result.error)


# -- on_error="drop" upstream of rules and set operations ----------------------------------------------------


def fail_calls(*numbers: int):
    """A script whose calls number ``numbers`` (in arrival order) raise; the others answer ``\\boxed{<n>}``."""
    counter = itertools.count()

    def script(request):
        n = next(counter)
        if n in numbers:
            raise sf.BackendError(f"call {n} down")
        return boxed(n)

    return script


@pytest.mark.parametrize(
    "consumer",
    ["top_k", "concat", "map_traces", "best_of", "weighted_vote"],
)
def test_dropped_members_never_reach_a_consumer(consumer):
    """Members dropped upstream are left out of top_k, concat, map_traces, best_of and weighted_vote outputs."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=4, on_error="drop")
        if consumer == "top_k":
            return sf.top_k(pop, k=2, score=lambda t: -t.index)
        if consumer == "concat":
            return sf.concat(pop, sf.candidates([boxed(9)]))
        if consumer == "map_traces":
            return sf.map_traces(pop, lambda t: t.text.upper())
        if consumer == "best_of":
            return sf.best_of(pop, scorer=lambda t: t.index)
        return sf.weighted_vote(pop, weight=lambda t: 1.0)

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(fail_calls(0, 2))}, run_id="r")
    assert result.ok
    ok_ids = [t.id for t in result.node("sample") if t.ok]
    assert ok_ids == ["r/sample#1", "r/sample#3"]
    out = result.output if isinstance(result.output, list) else [result.output]
    assert all(t.ok for t in out)
    if consumer == "top_k":
        assert [t.id for t in out] == ok_ids
    elif consumer == "concat":
        assert [t.id for t in out] == ok_ids + ["r/candidates#0"]
    elif consumer == "map_traces":
        assert [t.inputs for t in out] == [(i,) for i in ok_ids]
        assert len(result.node("map")) == 2  # the failed members are not re-recorded under the map's name
    else:
        assert out[0].inputs == tuple(ok_ids)


def test_weight_function_that_raises_under_drop_records_the_failure():
    """A weighted vote whose weight raises, under ``drop``, records an error trace and outputs None."""

    @sf.graph
    def g(problem):
        return sf.weighted_vote(sf.sample("Solve {problem}", model="m", n=2), weight=lambda t: 1 / 0, on_error="drop")

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))})
    assert result.ok and result.output is None
    failed = result.node("weighted_vote")[0]
    assert failed.status is sf.Status.ERROR and "ZeroDivisionError" in failed.error


def test_weight_function_that_raises_fails_the_run_with_its_cause():
    """A weighted vote whose weight raises (default policy) fails the run, the exception as the cause."""

    @sf.graph
    def g(problem):
        return sf.weighted_vote(sf.sample("Solve {problem}", model="m", n=2), weight=lambda t: 1 / 0)

    with pytest.raises(sf.CallError, match=r"^weighted_vote#0 failed: ZeroDivisionError: division by zero$") as info:
        g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))})
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_refining_each_member_after_a_drop_fails_on_the_dropped_member():
    """Pinned design: ``aggregate(select="each")`` (policy raise) over a set with a dropped member raises
    EmptyInputError for that member, whereas ``map_traces`` passes the failure through."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=3, on_error="drop")
        return sf.aggregate(pop, model="m", select="each")

    with pytest.raises(sf.EmptyInputError, match="^every member read by 'aggregate' failed$"):
        g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(fail_calls(1))})


# -- async scorers, user callables that raise -------------------------------------------------------------


def test_async_scorer_that_raises_fails_the_run_without_leaking_coroutines():
    """When one async score raises, best_of fails the run with the score's error as the cause and leaves no
    other score coroutine un-awaited (no 'coroutine was never awaited' warning)."""

    async def scorer(trace):
        await asyncio.sleep(0.001)
        if trace.index == 0:
            raise ValueError("judge down")
        return 1.0

    @sf.graph
    def g(problem):
        return sf.best_of(sf.sample("Solve {problem}", model="m", n=3), scorer=scorer)

    outcome, runtime_warnings = no_runtime_warnings(
        lambda: g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))})
    )
    assert isinstance(outcome, sf.CallError) and isinstance(outcome.__cause__, ValueError)
    assert [str(w.message) for w in runtime_warnings] == []


def test_async_scorers_run_concurrently():
    """best_of awaits its five async scores together: all five are running at once (each waits until the
    other four have started), not one after another."""
    running = peak = 0
    everyone = asyncio.Event()

    async def scorer(trace):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 5:
            everyone.set()
        try:  # awaited one by one, the first score would wait here for the others until the deadline
            await asyncio.wait_for(everyone.wait(), timeout=HANG_DEADLINE)
        except TimeoutError:
            everyone.set()  # scored one at a time: let the rest through, the peak below tells
        running -= 1
        return trace.index

    @sf.graph
    def g(problem):
        return sf.best_of(sf.sample("Solve {problem}", model="m", n=5), scorer=scorer)

    result = g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))}, run_id="r")
    assert result.output.metadata["winner"] == "r/sample#4"
    assert peak == 5, f"only {peak} of the 5 async scores ran at once"


def graph_with_raising_callable(where: str, armed: dict[str, bool]):
    """A graph where one user callable (score, map fn, until, selector, render) raises ZeroDivisionError at run time."""

    def selector(size, rng):
        if armed["on"]:
            return [(0, 1 // 0)]
        return [(0, 1)]

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=2)
        if where == "top_k score":
            return sf.top_k(pop, k=1, score=lambda t: 1 / 0)
        if where == "map fn":
            return sf.map_traces(pop, lambda t: 1 / 0)
        if where == "until":
            return sf.loop(lambda p: sf.map_traces(p, lambda t: t.text), pop, steps=1, until=lambda ts: 1 / 0)
        if where == "selector":
            return sf.aggregate(pop, model="m", select=selector)
        return sf.aggregate(pop, model="m", render=lambda ts: str(1 / 0))

    built = g.build()
    armed["on"] = True
    return built


@pytest.mark.parametrize("where", ["top_k score", "map fn", "until", "selector", "render"])
def test_user_callable_raising_at_run_time_is_the_cause_of_the_run_error(where):
    """A user callable (score, map fn, until, selector, render) raising at run time fails the run with a
    RunError whose ``__cause__`` is the original exception, as a rule's error does, and leaves nothing in flight."""
    armed = {"on": False}
    built = graph_with_raising_callable(where, armed)
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.01)
    result = built.run_sync({"problem": "p"}, models={"m": backend}, raise_on_error=False)
    assert result.status == "error"
    assert isinstance(result.error, sf.RunError)
    assert backend.in_flight == 0
    assert isinstance(result.error.__cause__, ZeroDivisionError)


def test_custom_selector_returning_bad_groups_at_run_time_cancels_what_was_sent():
    """Pinned: a selector whose groups turn invalid at run time raises GraphDefinitionError; calls already sent
    are cancelled and recorded, nothing is left in flight."""
    armed = {"on": False}

    def selector(size, rng):
        return [(0, 0)] if armed["on"] else [(0, 1)]

    @sf.graph
    def g(problem):
        return sf.aggregate(sf.sample("Solve {problem}", model="m", n=2), model="m", select=selector)

    built = g.build()
    armed["on"] = True
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.05)
    model = sf.Model(backend, max_in_flight=1)
    result = built.run_sync({"problem": "p"}, models={"m": model}, raise_on_error=False)
    assert isinstance(result.error, sf.GraphDefinitionError)
    assert backend.in_flight == 0 and model.limit.in_flight == 0
    assert {t.status for t in result.traces} <= {sf.Status.CANCELLED}


# -- user code and backends that misbehave after a call: the run must end, not hang ----------------------------


def test_extract_that_raises_fails_the_run_instead_of_hanging():
    """An ``extract=`` that raises on a reply fails that call, and with it the run, with a CallError whose cause
    is the extractor's exception; the run does not wait for its timeout."""

    @sf.graph
    def g(problem):
        return sf.generate("Solve {problem}", model="m", extract=lambda text: text.split()[99])

    with pytest.raises(sf.CallError, match=r"^generate#0 failed: IndexError: list index out of range$") as info:
        g.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: "no answer")}, timeout=HANG_DEADLINE)
    assert isinstance(info.value.__cause__, IndexError)


def test_backend_returning_non_completions_is_a_call_error_not_a_hang():
    """A backend returning plain strings instead of Completions fails the call with a CallError (as a wrong
    count does), whose cause is the AttributeError of reading ``.text``; the run does not wait for its timeout."""

    class Strings:
        capabilities = sf.Capabilities()

        async def complete(self, request):
            return ["just text"] * request.n

    with pytest.raises(sf.CallError, match=r"^generate#0 failed: AttributeError: 'str' object has no attribute "
                                           r"'text'$") as info:
        one_call.run_sync({"problem": "p"}, models={"m": Strings()}, timeout=HANG_DEADLINE)
    assert isinstance(info.value.__cause__, AttributeError)


def test_subscriber_that_raises_ends_the_run():
    """A subscriber raising on TraceFinished ends the run at once with a RunError naming the subscriber, whose
    cause is the subscriber's exception; the run does not wait for its timeout."""

    def subscriber(event):
        if isinstance(event, sf.TraceFinished):
            raise RuntimeError("store down")

    with pytest.raises(sf.RunError, match=r"^subscriber 'subscriber' failed: RuntimeError: store down$") as info:
        one_call.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))},
                          timeout=HANG_DEADLINE, subscribers=[subscriber])
    assert type(info.value) is sf.RunError  # not a RunTimeout, nor a CallError: no call failed
    assert isinstance(info.value.__cause__, RuntimeError) and str(info.value.__cause__) == "store down"


def test_backend_raising_cancelled_error_on_its_own_does_not_hang_the_run():
    """A backend that raises CancelledError although nobody cancelled the run fails the call with a CallError
    (a BackendError saying so as its cause), rather than being taken for a cancellation that hangs the run."""

    class Cancels:
        capabilities = sf.Capabilities()

        async def complete(self, request):
            raise asyncio.CancelledError()

    with pytest.raises(sf.CallError, match=r"^generate#0 failed: BackendError: the backend raised CancelledError$"
                       ) as info:
        one_call.run_sync({"problem": "p"}, models={"m": Cancels()}, timeout=HANG_DEADLINE)
    assert isinstance(info.value.__cause__, sf.BackendError)


# -- timeouts, cancellation and shared limits -------------------------------------------------------------------


@sf.graph
def long_rsa(problem, *, steps: int = 200):
    pop = sf.sample("Solve {problem}", model="m", n=4)
    for _ in range(steps):
        pop = sf.aggregate(pop, model="m", k=2, n=4)
    return sf.vote(pop)


def test_run_timeout_while_the_graph_is_still_expanding():
    """A run timeout that fires while nodes are still being expanded stops the run there: no call is sent after
    it, and the calls in flight are cancelled. The timeout (2 ms) is due before any call's reply (50 ms), and the
    event loop runs due timers in deadline order however loaded the machine, so no call ever finished and no
    place beyond the first three was ever given."""
    graph = long_rsa.build()
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.05)
    model = sf.Model(backend, max_in_flight=3)
    events: list[sf.Event] = []
    result = graph.run_sync({"problem": "p"}, models={"m": model}, timeout=0.002, raise_on_error=False,
                            subscribers=[events.append])
    assert result.status == "timeout" and isinstance(result.error, sf.RunTimeout)
    assert backend.calls <= 3  # of the 4 + 200 * 4 calls of the graph
    assert {t.node for t in result.traces} <= {"sample"}  # the 4th sample waited for a place; nothing further began
    assert backend.in_flight == 0 and model.limit.in_flight == 0
    assert all(t.status is sf.Status.CANCELLED for t in result.traces)
    assert isinstance(events[-1], sf.RunFinished)


def test_zero_timeout_sends_nothing_that_is_left_running():
    """``timeout=0`` times out at the first await; whatever was sent is cancelled and recorded."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.05)
    result = long_rsa.build(steps=2).run_sync({"problem": "p"}, models={"m": backend}, timeout=0,
                                              raise_on_error=False)
    assert result.status == "timeout"
    assert backend.in_flight == 0
    assert all(t.status is sf.Status.CANCELLED for t in result.traces)


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5, 8, 13])
def test_cancelling_a_run_at_any_point_leaves_nothing_behind(turns):
    """Cancelling ``graph.run`` after any number of loop turns: CancelledError, no call or place left,
    and RunFinished(cancelled) whenever RunStarted was sent."""
    graph = long_rsa.build(steps=3)
    backend = ScriptedBackend(lambda r: boxed(1), delay=0.02)
    model = sf.Model(backend, max_in_flight=2)
    events: list[sf.Event] = []

    async def main():
        task = asyncio.create_task(graph.run({"problem": "p"}, models={"m": model}, subscribers=[events.append]))
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert backend.in_flight == 0
    assert model.limit.in_flight == 0 and not model.limit._waiters
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("RunStarted") == kinds.count("RunFinished") <= 1
    if events:
        assert events[-1].result.status == "cancelled"


def test_many_runs_sharing_a_limited_model_with_failures():
    """Twelve concurrent runs over one ``Model(max_in_flight=2)``, a third failing fast: the others succeed,
    the peak never exceeds 2, and every place is given back."""
    graph = long_rsa.build(steps=2)

    def script(request):
        if "bad" in prompt_of(request):
            raise sf.BackendError("down")
        return boxed(1)

    backend = jittery(script, seed=5)
    model = sf.Model(backend, max_in_flight=2)

    async def main():
        rows = [{"problem": ("bad" if i % 3 == 0 else "ok") + str(i)} for i in range(12)]
        return await asyncio.gather(*[graph.run(r, models={"m": model}, raise_on_error=False) for r in rows])

    results = asyncio.run(main())
    assert [r.status for r in results] == ["error", "ok", "ok"] * 4
    assert all(isinstance(r.error, sf.CallError) for r in results[::3])
    assert model.limit.peak == 2 and backend.peak_in_flight == 2
    assert model.limit.in_flight == 0 and not model.limit._waiters
    assert backend.in_flight == 0


def test_simulated_backend_serves_a_second_run_after_a_timed_out_one():
    """A SimulatedBackend reused by a second run_sync, after a run that timed out on its own event loop, answers
    the second run (its wake-up timer is not left on the first, closed loop)."""

    @sf.graph
    def eight(problem):
        return sf.sample("Solve {problem}", model="m", n=8)

    backend = SimulatedBackend(median=0.05, sigma=0.5)
    # seed 0 draws latencies of 23 to 92 ms: the 10 ms timeout is due first, and due timers run in deadline order
    with pytest.raises(sf.RunTimeout, match=r"ran past 0\.01s$"):
        eight.run_sync({"problem": "p"}, models={"m": backend}, timeout=0.01, seed=0)
    result = eight.run_sync({"problem": "p"}, models={"m": backend}, timeout=HANG_DEADLINE, seed=0,
                            raise_on_error=False)
    assert result.status == "ok" and len(result.output) == 8


# -- map ------------------------------------------------------------------------------------------------------


NEVER = 3600.0
"""A call delay no test waits out: a call that ends before it was cancelled."""


def test_map_breaking_out_early_cancels_pending_runs(caplog):
    """Breaking out of ``async for`` over ``map`` cancels the runs still pending (their calls would otherwise
    take an hour); nothing errors afterwards."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=lambda r: 0.005 if prompt_of(r) == "Solve 0" else NEVER)

    async def main():
        async for _ in one_call.map([{"problem": str(i)} for i in range(10)], models={"m": backend}, concurrency=4):
            break
        # the abandoned generator is closed by the event loop's finalizer hook, which cancels the pending runs
        await wait_until_async(lambda: backend.in_flight == 0, timeout=HANG_DEADLINE,
                               message=lambda: f"{backend.in_flight} calls still in flight after the break")

    gc.collect()  # dead tasks of earlier tests must not log into this test's caplog
    asyncio.run(main())
    assert backend.calls == 4
    assert not [r for r in caplog.records if r.name == "asyncio"]


def test_map_aclose_cancels_pending_runs():
    """A map iterator kept alive keeps its runs going until ``aclose()``, which cancels them."""
    backend = ScriptedBackend(lambda r: boxed(1), delay=lambda r: 0.005 if prompt_of(r) == "Solve 0" else NEVER)

    async def main():
        it = one_call.map([{"problem": str(i)} for i in range(10)], models={"m": backend}, concurrency=4)
        first = await it.__anext__()
        held = backend.in_flight
        await asyncio.wait_for(it.aclose(), HANG_DEADLINE)  # a deadline: aclose that waited would wait an hour
        return first, held, backend.in_flight

    first, held, after = asyncio.run(main())
    assert first.index == 0 and held == 3 and after == 0


def test_map_over_a_generator_with_more_concurrency_than_rows():
    """``map`` consumes a generator lazily, and concurrency above the row count is fine."""
    pulled: list[int] = []

    def rows():
        for i in range(3):
            pulled.append(i)
            yield {"problem": str(i)}

    backend = ScriptedBackend(lambda r: boxed(prompt_of(r).removeprefix("Solve ")))
    results = one_call.build().map_sync(rows(), models={"m": backend}, concurrency=50)
    assert [r.answer for r in results] == ["0", "1", "2"]
    assert pulled == [0, 1, 2]


def test_map_sync_orders_results_and_keeps_failures_in_place():
    """``map_sync`` returns rows in dataset order, failed runs and bad rows at their own positions."""
    backend = jittery(lambda r: sf.BackendError("down") if prompt_of(r).endswith("3") else boxed(1), seed=3,
                      max_delay=0.01)
    rows: list = [{"problem": str(i)} for i in range(6)]
    rows[4] = {"question": "no problem key"}
    results = one_call.build().map_sync(rows, models={"m": backend}, concurrency=3)
    assert [r.index for r in results] == list(range(6))
    assert [r.status for r in results] == ["ok", "ok", "ok", "error", "error", "ok"]
    assert isinstance(results[3].error, sf.CallError) and isinstance(results[4].error, sf.InputError)


def test_map_row_that_is_none_is_reported_and_does_not_shift_indices():
    """A ``None`` row yields an error result at its own index; it is not taken for the end of the rows, and
    the rows after it keep their ``index`` values."""
    backend = ScriptedBackend(lambda r: boxed(prompt_of(r).removeprefix("Solve ")))
    results = one_call.build().map_sync([{"problem": "0"}, None, {"problem": "2"}], models={"m": backend})
    assert [(r.index, r.status) for r in results] == [(0, "ok"), (1, "error"), (2, "ok")]
    assert results[2].answer == "2"


# -- sync entry points from async code ------------------------------------------------------------------------


def test_run_sync_inside_a_running_loop_raises_without_leaking_a_coroutine():
    """run_sync from inside a running event loop raises RunError (a RuntimeError) at once and leaves no
    un-awaited ``Graph.run`` coroutine behind (no 'coroutine Graph.run was never awaited' warning)."""

    async def main():
        one_call.run_sync({"problem": "p"}, models={"m": ScriptedBackend(lambda r: boxed(1))})

    outcome, runtime_warnings = no_runtime_warnings(lambda: asyncio.run(main()))
    assert type(outcome) is sf.RunError and isinstance(outcome, RuntimeError)
    assert str(outcome) == "run_sync() cannot be called inside a running event loop; use `await graph.run(...)` there"
    assert [str(w.message) for w in runtime_warnings] == []


# -- templates and scoping --------------------------------------------------------------------------------------


def test_graph_input_named_candidates_is_shadowed_by_the_aggregated_set():
    """Pinned: in ``aggregate`` ``{candidates}`` is always the rendered members, even if a graph input has that name."""

    @sf.graph
    def g(problem, candidates):
        pop = sf.sample("Solve {problem}", model="m", n=2)
        return sf.aggregate(pop, model="m", prompt="[{candidates}] {k}")

    backend = ScriptedBackend(lambda r: boxed(1))
    result = g.run_sync({"problem": "p", "candidates": "FROM INPUT"}, models={"m": backend})
    sent = prompt_of(result.output.request)
    assert "FROM INPUT" not in sent
    assert sent.startswith("[Candidate 1:") and sent.endswith("] 2")


def test_graph_input_named_candidates_renders_in_generate():
    """Pinned: in ``generate`` (which provides no candidates) ``{candidates}`` is the graph input of that name."""

    @sf.graph
    def g(candidates):
        return sf.generate("Look at {candidates}", model="m")

    backend = ScriptedBackend(lambda r: boxed(1))
    g.run_sync({"candidates": "these"}, models={"m": backend})
    assert prompt_of(backend.requests[0]) == "Look at these"


def test_context_named_candidates_is_rejected():
    """``aggregate(context={"candidates": ...})`` is a build error: such a context would replace the members in
    the prompt while the lineage still said the members were read."""

    @sf.graph
    def g(problem):
        pop = sf.sample("Solve {problem}", model="m", n=2)
        other = sf.generate("Other {problem}", model="m")
        return sf.aggregate(pop, model="m", prompt="Aggregate {candidates}", context={"candidates": other})

    with pytest.raises(sf.GraphDefinitionError, match=r"^sf\.aggregate\(\): context may not be named candidates; "
                                                     "aggregate fills those itself$"):
        g.build()


def test_set_bound_to_a_subgraph_input_is_not_a_template_variable():
    """A sub-graph input bound to a set, used as ``{population}`` in a prompt, is a TemplateError at build (the
    prompt never gets the node's repr as a constant)."""

    @sf.graph
    def refine(population):
        return sf.generate("Refine {population}", model="m")

    @sf.graph
    def outer(problem):
        return refine(sf.sample("Solve {problem}", model="m", n=2))

    with pytest.raises(sf.TemplateError, match=r"^prompt of 'refine/generate' uses \{population\} but only these "
                                             r"variables are available: problem\."):
        outer.build()


def test_subgraph_templates_see_the_root_graph_inputs():
    """Pinned design: a sub-graph prompt may use a root graph input it was not passed (it fails to build alone)."""

    @sf.graph
    def critic(draft):
        return sf.generate("Critique {draft} for {problem}", model="m")

    with pytest.raises(sf.TemplateError, match=r"^prompt of 'generate' uses \{problem\} but only these variables "
                                             r"are available: draft\."):
        critic.build()

    @sf.graph
    def root(problem):
        return critic("my draft")

    backend = ScriptedBackend(lambda r: boxed(1))
    root.run_sync({"problem": "2+2"}, models={"m": backend})
    assert prompt_of(backend.requests[0]) == "Critique my draft for 2+2"


def test_context_whose_only_trace_was_dropped_is_an_empty_input_error():
    """A node whose ``context`` trace failed (dropped upstream) raises EmptyInputError, as an empty set does; it
    is never sent with the variable rendered as an empty string."""

    @sf.graph
    def g(problem):
        draft = sf.generate("Draft {problem}", model="m", on_error="drop")
        return sf.generate("Check [{draft}]", model="m", context={"draft": draft})

    backend = ScriptedBackend(lambda r: sf.BackendError("down") if prompt_of(r).startswith("Draft") else boxed(1))
    with pytest.raises(sf.EmptyInputError, match="^every trace of context 'draft' read by 'generate_2' failed$"):
        g.run_sync({"problem": "p"}, models={"m": backend})
    assert [prompt_of(r) for r in backend.requests] == ["Draft p"]


# -- validation gaps -------------------------------------------------------------------------------------------


@sf.graph
def aggregate_given(problem, cands):
    return sf.aggregate(cands, model="m", k=2, n=2)


@pytest.mark.parametrize(
    ("cands", "error", "message"),
    [([], sf.EmptySetError, r"^node 'aggregate' reads an empty set$"),
     (["only one"], sf.SubsetSizeError, r"^subset size k=2 is larger than the set it draws from \(n=1\)$")],
    ids=["empty", "smaller-than-k"],
)
def test_validate_checks_the_sizes_of_given_candidate_sets(cands, error, message):
    """``Graph.validate(models, inputs)`` rejects the candidate sets the run would reject, with the same error
    (not only a check that the input names are present)."""
    graph = aggregate_given.build()
    with pytest.raises(error, match=message):
        graph.run_sync({"problem": "p", "cands": cands}, models={"m": ScriptedBackend(lambda r: boxed(1))})
    with pytest.raises(error, match=message):
        graph.validate({"m": ScriptedBackend(lambda r: boxed(1))}, inputs={"problem": "p", "cands": cands})


def test_node_from_another_graph_is_rejected_at_build():
    """Reading a node built by another graph is a build error (accepted, it would read at run time whichever
    node of this graph has the same id)."""
    captured: dict[str, sf.Node] = {}

    @sf.graph
    def first(problem):
        captured["pop"] = sf.sample("First {problem}", model="m", n=2)
        return captured["pop"]

    first.build()

    @sf.graph
    def second(problem):
        sf.generate("Second {problem}", model="m")
        return sf.vote(captured["pop"])

    with pytest.raises(sf.GraphDefinitionError, match=r"^sf\.vote\(\) got node 'sample' from another graph"):
        second.build()


def test_bad_candidate_row_never_leaves_a_run_started_without_run_finished():
    """A bad candidate row raises InputError before the run starts: a subscriber sees no event at all, so never
    a RunStarted without its RunFinished."""

    @sf.graph
    def g(cands):
        return sf.vote(cands)

    events: list[sf.Event] = []
    with pytest.raises(sf.InputError, match=r"^candidate 1 of input 'cands' is int; give a string, a Trace, or a "
                                            "mapping with a 'text' key$"):
        g.run_sync({"cands": ["fine", 3]}, models={}, subscribers=[events.append])
    # Of the two consistent outcomes (nothing, or RunStarted then RunFinished) the package gives the first: the
    # inputs are checked before RunStarted is sent, so a store never records a run that could not start.
    assert events == []


# -- determinism and trace ids ----------------------------------------------------------------------------------


@sf.graph
def solve_twice(problem):
    pop = sf.sample("Solve {problem}", model="m", n=3)
    return sf.vote(sf.aggregate(pop, model="m", k=2, n=3))


@sf.graph
def everything(problem, *, n: int = 4):
    pop = sf.sample("Draft {problem}", model="m", n=n, on_error="drop")
    best = sf.top_k(pop, k=2, score=lambda t: len(t.text))
    mapped = sf.map_traces(pop, lambda t: t.text + " (checked)")

    def inner(p):
        return sf.loop(lambda q: sf.aggregate(q, model="m", k=2, n=n, on_error="drop"), p, steps=2,
                       until=sf.agreement(0.75))

    looped = sf.loop(inner, sf.concat(best, sf.top_k(mapped, k=2, score=lambda t: t.index)), steps=2,
                     until=sf.agreement(1.0))
    judged = sf.best_of(looped, scorer=lambda t: len(t.text))
    return {"vote": sf.vote(sf.concat(looped, solve_twice(problem), solve_twice("again"))), "judged": judged}


def snapshot(result: sf.RunResult) -> list[tuple]:
    return sorted((t.id, t.status.value, t.inputs, t.answer, t.text, t.error) for t in result.traces)


def test_same_seed_same_traces_whatever_the_finishing_order():
    """Same seed and run id: identical trace ids, lineage, answers and failures even with random call delays."""

    def script(request):
        if prompt_of(request).startswith("Draft") and (request.seed or 0) % 3 == 0:
            raise sf.BackendError("unlucky seed")
        return seeded_answer(request)

    graph = everything.build()
    first = graph.run_sync({"problem": "p"}, models={"m": jittery(script, seed=1)}, seed=11, run_id="r")
    second = graph.run_sync({"problem": "p"}, models={"m": jittery(script, seed=2)}, seed=11, run_id="r")
    assert first.ok and second.ok
    assert [t.id for t in first.traces] != [t.id for t in second.traces]  # the calls really finished in other orders
    assert any(t.status is sf.Status.ERROR for t in first.traces)
    assert snapshot(first) == snapshot(second)
    assert first.output["vote"].metadata == second.output["vote"].metadata
    assert first.output["judged"].text == second.output["judged"].text


@pytest.mark.parametrize("seed", range(4))
def test_trace_ids_are_unique_and_well_formed_in_a_mixed_topology(seed):
    """Nested loops, a sub-graph used twice, top_k, map, concat and rules: every recorded id is unique and
    equals ``{run_id}/{node}#{index}``."""
    result = everything.build().run_sync({"problem": "p"}, models={"m": jittery(seeded_answer, seed=seed)},
                                         seed=seed, run_id="run")
    assert result.ok
    ids = [t.id for t in result.traces]
    assert len(ids) == len(set(ids))
    for trace in result.traces:
        assert trace.id == f"run/{trace.node}#{trace.index}"
        assert re.fullmatch(r"[\w@/]+", trace.node)
    recorded = set(ids)
    assert all(i in recorded for t in result.traces for i in t.inputs)

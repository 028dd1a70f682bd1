"""Node kinds (one module each, found through a registry) and the layered model-call path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

import scaffold as sf
from scaffold import _call
from scaffold._builder import current_builder
from scaffold._kinds import expander, expands
from scaffold._kinds.registry import members, when_ready
from scaffold._nodes import CallNode, Node, SetNode
from scaffold.testing import ScriptedBackend, VirtualClock


@dataclass(eq=False)
class ReversedNode(SetNode):
    """A kind defined outside scaffold: the members of a set, in reverse order, passed through."""

    kind = "reversed"
    passes_through = True


@expands(ReversedNode)
def expand_reversed(run: Any, node: ReversedNode) -> list[Any]:
    items = members(run, node, node.items)
    outs = run.new_slots(len(items))

    def fire(run: Any, node: ReversedNode) -> None:
        for slot, member in zip(outs, reversed(items)):
            run.resolve(slot, member.trace)

    when_ready(run, node, items, outs, fire)
    return outs


def reversed_set(node: Node) -> Node:
    builder = current_builder("reversed_set")
    return builder.add(ReversedNode(name=builder.unique_name("reversed"), size=node.size, items=node))


def test_a_new_node_kind_is_one_data_class_and_one_registered_expansion():
    """A kind registered with ``@expands`` runs like a built-in one: it waits for its set and passes it on."""
    counter = iter(range(100))
    backend = ScriptedBackend(lambda request: f"\\boxed{{{next(counter)}}}")

    @sf.graph
    def flipped(problem: str) -> Any:
        return reversed_set(sf.sample("Solve {problem}", model="m", n=4))

    result = flipped.run_sync({"problem": "x"}, models={"m": backend}, seed=0, store=None)
    samples = [t for t in result.traces if t.node.startswith("sample")]
    assert [t.id for t in result.output] == [t.id for t in sorted(samples, key=lambda t: t.index)][::-1]
    assert result.passed["reversed"] == [t.id for t in result.output]


def test_an_unregistered_kind_is_a_typed_error():
    @dataclass(eq=False)
    class Orphan(Node):
        kind = "orphan"

    with pytest.raises(sf.GraphDefinitionError, match="no expansion is registered for Orphan"):
        expander(Orphan(name="orphan", size=1))
    assert expander(CallNode(name="c", size=1)).__module__ == "scaffold._kinds.call"


class Reply:
    def __init__(self, n: int) -> None:
        self.completions = [sf.Completion(text="\\boxed{1}", usage=sf.Usage(1, 1))] * n


def test_layers_wrap_in_order_and_no_layer_leaves_model_complete_itself():
    """The first layer is innermost; a run without budget or timeout sends through ``Model.complete`` directly."""
    seen: list[str] = []

    def tag(name: str) -> _call.Layer:
        def wrap(send: _call.Send) -> _call.Send:
            async def tagged(request: sf.Request) -> Any:
                seen.append(f"{name}>")
                reply = await send(request)
                seen.append(f"<{name}")
                return reply
            return tagged
        return wrap

    async def complete(request: sf.Request) -> Any:
        seen.append("send")
        return Reply(request.n)

    send = _call.layered(complete, [tag("inner"), tag("outer")])
    asyncio.run(send(sf.Request(messages=(("user", "q"),), n=2)))
    assert seen == ["outer>", "inner>", "send", "<inner", "<outer"]
    model = sf.Model(ScriptedBackend(lambda r: "x"))
    plain = _call.sender(model, "m", call_timeout=None, budget=None)
    assert plain == model.complete


def test_the_call_timeout_is_kept_on_the_models_clock():
    """``sender`` times a run's call timeout on the model's clock: every retry counts against it."""
    clock = VirtualClock()
    sent: list[float] = []

    def script(request: sf.Request) -> Any:
        sent.append(clock.now())
        return sf.ServerError("503")

    model = sf.Model(ScriptedBackend(script), retry=sf.Retry(attempts=10, initial_delay=1.0, jitter=0), clock=clock)
    send = _call.sender(model, "m", call_timeout=2.5, budget=None)
    with pytest.raises(sf.CallTimeout, match="call to 'm' ran past 2.5s"):
        asyncio.run(send(sf.Request(messages=(("user", "q"),))))
    assert sent == [0.0, 1.0] and clock.now() == 2.5  # cut while backing off 2 s after the second attempt


def test_timeout_layer_raises_call_timeout_and_budget_layer_settles_a_failed_call():
    """The call timeout cuts a slow send with CallTimeout, in real time or on a given clock; the budget layer
    gives back what a failed call booked."""

    async def slow(request: sf.Request) -> Any:
        await asyncio.sleep(30)  # would answer after 30 s: only the timeout ends it sooner

    with pytest.raises(sf.CallTimeout, match="call to 'judge' ran past 0.01s"):
        asyncio.run(_call.timeout_layer(0.01, "judge")(slow)(sf.Request(messages=(("user", "q"),))))

    clock = VirtualClock()

    async def slow_on_clock(request: sf.Request) -> Any:
        await clock.sleep(30)

    with pytest.raises(sf.CallTimeout, match="call to 'judge' ran past 2.5s"):
        asyncio.run(_call.timeout_layer(2.5, "judge", clock)(slow_on_clock)(sf.Request(messages=(("user", "q"),))))
    assert clock.now() == 2.5 and clock.sleeping == 0

    budget = sf.Budget(max_tokens=10_000)

    async def failing(request: sf.Request) -> Any:
        raise sf.ServerError("boom")

    request = sf.Request(messages=(("user", "q"),), params={"max_tokens": 50})
    with pytest.raises(sf.ServerError):
        asyncio.run(_call.budget_layer(budget)(failing)(request))
    assert budget.tokens == 0 and budget.remaining_tokens == 10_000

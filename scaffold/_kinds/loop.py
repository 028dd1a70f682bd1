"""Loops (``sf.loop``): a gate before each iteration and the loop's result after the last one.

The gate passes its set on, or, when ``until`` holds, resolves everything of the iteration as
skipped; its token is what the iteration's nodes wait on (``run.control_slots``). The result is
the last iteration that ran (the loop's input if none did).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaffold._errors import RunError
from scaffold._kinds.registry import expands, members, when_ready
from scaffold._nodes import GateNode, LoopResultNode
from scaffold._types import Status, Trace

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext

GO = Trace(id="", run_id="", node="", index=-1)
"""A gate token's value when the iteration runs."""


@expands(GateNode)
def expand_gate(run: RunContext, node: GateNode) -> list[Slot]:
    items = members(run, node, node.items, nonempty=False)
    outs = run.new_slots(len(items))
    token = run.new_slots(1)[0]
    run.gate_tokens[node.id] = token
    when_ready(run, node, items, outs + [token], fire_gate, items, outs, token)
    return outs


def fire_gate(run: RunContext, node: GateNode, items: list[Slot], outs: list[Slot], token: Slot) -> None:
    assert node.until is not None
    stop = bool(node.until(run.ok(items)))
    for member, slot in zip(items, outs):
        run.resolve(slot, run.skipped if stop else member.trace)  # type: ignore[arg-type]
    run.resolve(token, run.skipped if stop else GO)


@expands(LoopResultNode)
def expand_loop_result(run: RunContext, node: LoopResultNode) -> list[Slot]:
    sets = [run.slots[c.id] for c in node.candidates]
    outs = run.new_slots(len(sets[0]))
    control = run.control_slots(node)
    # later iterations are skipped when the loop stops: that must not skip the loop's result
    when_ready(run, node, [s for slots in sets for s in slots], outs, fire_loop_result, sets, outs, control,
               propagate_skip=False)
    return outs


def fire_loop_result(run: RunContext, node: LoopResultNode, sets: list[list[Slot]], outs: list[Slot],
                     control: list[Slot]) -> None:
    if any(s.trace is run.skipped for s in control):  # an enclosing loop stopped before this one ran
        for slot in outs:
            run.resolve(slot, run.skipped)
        return
    chosen = sets[0]
    for slots in sets:
        if slots and all(s.trace is not None and s.trace.status is not Status.SKIPPED for s in slots):
            chosen = slots
    if len(chosen) != len(outs):
        raise RunError(f"loop {node.name!r}: an iteration returned {len(chosen)} traces, its input had {len(outs)}")
    for slot, src in zip(outs, chosen):
        run.resolve(slot, src.trace)  # type: ignore[arg-type]

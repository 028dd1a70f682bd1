"""``top_k`` and ``select``: k members chosen, best first, by a score or a function once the whole set (and
every ``using`` set) is resolved; the chosen traces pass through unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaffold._errors import RunError, SubsetSizeError
from scaffold._kinds.registry import expands, members, when_ready
from scaffold._nodes import SelectNode
from scaffold._types import Status, Trace

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext

MISSING = Trace(id="", run_id="", node="", index=-1, status=Status.ERROR, error="fewer members than k succeeded")
"""What a chosen place holds when fewer than ``k`` members succeeded."""


@expands(SelectNode)
def expand_select(run: RunContext, node: SelectNode) -> list[Slot]:
    items = members(run, node, node.items)
    if node.k > len(items):
        raise SubsetSizeError(f"{node.kind} {node.name!r}: k={node.k} is larger than its set (n={len(items)})")
    using = [run.slots[other.id] for other in node.using]
    outs = run.new_slots(node.k)
    when_ready(run, node, items + [slot for slots in using for slot in slots], outs, fire_select, items, outs, using)
    return outs


def fire_select(run: RunContext, node: SelectNode, items: list[Slot], outs: list[Slot],
                using: list[list[Slot]]) -> None:
    read = run.ok(items)
    if node.choose is not None:
        try:
            chosen = list(node.choose(read, *[run.ok(slots) for slots in using]))
        except Exception as exc:  # user code: the selection fails under the node's policy
            run.node_failed(node, outs, 0, exc)
            return
        allowed = {id(t) for t in read}
        if any(id(t) not in allowed for t in chosen) or len({id(t) for t in chosen}) != len(chosen):
            run.node_failed(node, outs, 0, RunError(
                f"select {node.name!r}: the function must return distinct members of the set it chooses from"))
            return
        ranked = chosen[: node.k]
    else:
        assert node.score is not None
        ranked = sorted(read, key=node.score, reverse=True)[: node.k]
    for i, slot in enumerate(outs):
        run.resolve(slot, ranked[i] if i < len(ranked) else MISSING)

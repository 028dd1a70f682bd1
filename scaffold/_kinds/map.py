"""``map_traces``: a function applied to each member on its own, as soon as that member exists; each result
is a new trace reading it (a failed member passes through as it is)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scaffold._errors import RunError
from scaffold._kinds.registry import expands, members, when_ready
from scaffold._nodes import MapNode, RuleOutput
from scaffold._types import Trace, TraceKind

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext


@expands(MapNode)
def expand_map(run: RunContext, node: MapNode) -> list[Slot]:
    items = members(run, node, node.items, nonempty=False)
    outs = run.new_slots(len(items))
    for i, (member, out) in enumerate(zip(items, outs)):
        when_ready(run, node, [member], [out], fire_map, member, out, i)
    return outs


def fire_map(run: RunContext, node: MapNode, member: Slot, out: Slot, index: int) -> None:
    source = member.trace
    assert source is not None and node.fn is not None
    if not source.ok:
        run.resolve(out, source)
        return
    value = node.fn(source)
    if isinstance(value, RuleOutput):
        text, answer, metadata = value.text, value.answer, value.metadata
    elif isinstance(value, str):
        text, answer, metadata = value, run.extractor(node)(value), {}
    else:
        raise RunError(f"map_traces {node.name!r}: the function returned {type(value).__name__}, not a string")
    run.finish(out, Trace(
        id=f"{run.run_id}/{node.name}#{index}", run_id=run.run_id, node=node.name, index=index,
        kind=TraceKind.RULE, text=text, answer=answer, inputs=(source.id,), started_at=time.time(),
        metadata=metadata,
    ))

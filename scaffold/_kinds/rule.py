"""Rule aggregation (``vote``, ``best_of``, ``weighted_vote``, ``rule``...): a function of the whole set,
fired once every member (and every ``using`` set) is resolved; its result is one new trace."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any

from scaffold._errors import EmptyInputError, RunError
from scaffold._kinds.registry import expands, members, when_ready
from scaffold._nodes import RuleNode, RuleOutput
from scaffold._types import Trace, TraceKind

if TYPE_CHECKING:
    from scaffold._jobs import Slot
    from scaffold._run_context import RunContext


@expands(RuleNode)
def expand_rule(run: RunContext, node: RuleNode) -> list[Slot]:
    items = members(run, node, node.items)
    using = [run.slots[other.id] for other in node.using]
    out = run.new_slots(1)
    when_ready(run, node, items + [slot for slots in using for slot in slots], out, fire_rule, items, out[0], using)
    return out


def fire_rule(run: RunContext, node: RuleNode, items: list[Slot], out: Slot, using: list[list[Slot]]) -> None:
    read = run.ok(items)
    if not read:
        run.node_failed(node, [out], 0, EmptyInputError(f"every member read by {node.name!r} failed"))
        return
    extra = [run.ok(slots) for slots in using]
    assert node.fn is not None
    try:
        given: dict[str, Any] = {}
        if node.pass_inputs:
            given["inputs"] = run.inputs
        if node.pass_answers:
            given["answers"] = run.answers
        result = node.fn(read, *extra, **given)
    except Exception as exc:  # user code in a rule (scorer, weight): recorded as the rule's failure
        run.node_failed(node, [out], 0, exc)
        return
    seen = read + [t for traces in extra for t in traces]
    if inspect.isawaitable(result):
        run.start(_await_rule(run, node, seen, out, result))
    else:
        _rule_done(run, node, seen, out, result)


async def _await_rule(run: RunContext, node: RuleNode, read: list[Trace], out: Slot, pending: Any) -> None:
    try:
        result = await pending
    except Exception as exc:
        run.node_failed(node, [out], 0, exc)
        return
    finally:
        run.tasks.discard(asyncio.current_task())  # type: ignore[arg-type]
    _rule_done(run, node, read, out, result)


def _rule_done(run: RunContext, node: RuleNode, read: list[Trace], out: Slot, result: RuleOutput | str) -> None:
    if isinstance(result, str):
        result = RuleOutput(result, run.extract(result))
    elif not isinstance(result, RuleOutput):
        run.node_failed(node, [out], 0, RunError(
            f"rule {node.name!r} returned {type(result).__name__}; return a RuleOutput or a string"))
        return
    trace = Trace(
        id=f"{run.run_id}/{node.name}#0", run_id=run.run_id, node=node.name, index=0, kind=TraceKind.RULE,
        text=result.text, answer=result.answer, inputs=tuple(t.id for t in read), started_at=time.time(),
        metadata=result.metadata,
    )
    run.finish(out, trace)


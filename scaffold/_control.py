"""Loops: repeat a step on a set, optionally until a data-dependent condition holds.

A loop is unrolled when the graph is built (``steps`` is its upper bound), so
validation, ``describe()`` and call counts see every iteration. With ``until``,
a gate before each iteration checks the condition on the current set; once it
holds, every node of the later iterations is skipped (never sent, never
recorded) and the loop returns the last set that was computed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from scaffold._builder import current_builder
from scaffold._errors import GraphDefinitionError, SubsetSizeError
from scaffold._nodes import GateNode, LoopResultNode, Node
from scaffold._primitives import SetLike, as_set
from scaffold._types import Trace


def loop(
    body: Callable[..., Node],
    items: SetLike,
    *,
    steps: int,
    until: Callable[[list[Trace]], bool] | None = None,
    name: str = "loop",
) -> Node:
    """Apply ``body(items)`` (or ``body(items, step)``) ``steps`` times, feeding each output to the next.

    ``until(traces) -> bool`` is checked on the set before each iteration (the
    successful members only); when it returns true the loop stops there.
    Node names inside get an ``@step`` suffix: ``loop@2/aggregate``.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def rsa(problem, *, n: int = 4, k: int = 2, steps: int = 3):
        ...     pop = sf.sample("Solve: {problem}", model="solver", n=n)
        ...     pop = sf.loop(lambda p: sf.aggregate(p, model="solver", k=k, n=n), pop, steps=steps,
        ...                   until=sf.agreement(1.0))
        ...     return sf.vote(pop)
        >>> rsa.build().count_calls()  # an upper bound: the loop may stop early
        {'solver': 16}
    """
    builder = current_builder("loop")
    if not isinstance(steps, int) or steps < 1:
        raise SubsetSizeError(f"sf.loop(): steps must be an integer of at least 1, got {steps!r}")
    if not callable(body):
        raise GraphDefinitionError("sf.loop() needs a body function set -> set")
    takes_step = _takes_step(body)
    current = as_set(items, what="loop")
    loop_name = builder.unique_name(name)
    short = loop_name.rsplit("/", 1)[-1]  # the scope adds the enclosing prefixes itself
    outputs = [current]
    for step in range(steps):
        with builder.scope(f"{short}@{step}"):
            if until is not None:
                gate = GateNode(name=builder.unique_name("until"), size=current.size, items=current, until=until)
                builder.add(gate)
                with builder.control(gate):
                    current = _call(body, gate, step, takes_step)
            else:
                current = _call(body, current, step, takes_step)
        outputs.append(current)
    if until is None:
        return current
    sizes = {o.size for o in outputs}
    if len(sizes) > 1 and None not in sizes:
        raise GraphDefinitionError(
            f"sf.loop() with until needs every iteration to keep the set size; got sizes {[o.size for o in outputs]}"
        )
    result = LoopResultNode(name=loop_name, size=outputs[0].size, single=outputs[0].single,
                            candidates=tuple(outputs))
    return builder.add(result)


def _takes_step(body: Callable[..., Node]) -> bool:
    try:
        params = inspect.signature(body).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _call(body: Callable[..., Node], items: Node, step: int, takes_step: bool) -> Node:
    out = body(items, step) if takes_step else body(items)
    if not isinstance(out, Node):
        raise GraphDefinitionError(f"a loop body must return a set (a node), got {type(out).__name__}")
    return out

"""Rewards: one number per recorded model trace, from its extracted answer and the reference.

The default is math-verify equivalence (``scaffold.equivalent``): 1.0 when the trace's answer is
the reference's value, else 0.0 (no answer, or a failed call, scores 0.0). Any function of
``(trace, reference)`` can replace it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scaffold._answers import equivalent
from scaffold._types import Trace, TraceKind
from trainers.episodes import turn_of

RewardFn = Callable[[Trace, str], float]
"""``reward_fn(trace, reference) -> float``."""


def math_reward(trace: Trace, answer: str) -> float:
    """1.0 when the trace's extracted answer is mathematically equivalent to ``answer``, else 0.0.

    Examples:
        >>> t = Trace(id="r/s#0", run_id="r", node="s", index=0, answer="0.5")
        >>> math_reward(t, "1/2"), math_reward(t, "2")
        (1.0, 0.0)
    """
    return 1.0 if equivalent(trace.answer, answer) else 0.0


def rewards_from(
    traces: Iterable[Trace], answer: str | Mapping[str, str], reward_fn: RewardFn = math_reward
) -> dict[str, float]:
    """Reward every model trace: trace id → ``reward_fn(trace, reference)``; rule and external traces get none.

    An agent's turns before its last have no answer and get no reward: the agent's final trace has it
    (:mod:`trainers.episodes` credits the turns from it).

    ``answer`` is the reference of every trace, or a mapping run id → reference when the traces
    come from runs of different problems (a run missing from the mapping raises ``KeyError``).

    Examples:
        >>> ts = [Trace(id=f"r/s#{i}", run_id="r", node="s", index=i, answer=a) for i, a in enumerate(["4", "5"])]
        >>> rewards_from(ts, "4")
        {'r/s#0': 1.0, 'r/s#1': 0.0}
    """
    out: dict[str, float] = {}
    for trace in traces:
        if trace.kind is not TraceKind.MODEL or turn_of(trace) is not None:
            continue
        reference = answer if isinstance(answer, str) else answer[trace.run_id]
        out[trace.id] = float(reward_fn(trace, reference))
    return out

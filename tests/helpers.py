"""Small helpers shared by the tests: reading requests and writing scripted replies."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import graphs
import scaffold as sf
from scaffold._types import Request

rsa = graphs.rsa
"""Recursive Self-Aggregation (``graphs.rsa``, the paper's defaults N=16, K=4, T=10), the topology most tests use:
``rsa.build(n=..., k=..., steps=...)``; its nodes are ``step0`` (the samples), ``step1`` … ``step{T}`` and ``vote``."""


@sf.graph
def chain(problem, *, steps: int = 6):
    """A sequential chain: one answer, then ``steps - 1`` calls each improving the last."""
    out = sf.generate("Solve {problem}", model="m")
    for _ in range(steps - 1):
        out = sf.aggregate(out, model="m", prompt="Improve: {candidates}")
    return out


def prompt_of(request: Request) -> str:
    """The last user message of a request."""
    return request.last_content


def boxed(value: object) -> str:
    """A model output whose final answer is ``value``."""
    return f"so the answer is \\boxed{{{value}}}"


def numbered_script(answer: object = 7) -> Callable[[Request], str]:
    """A script whose every reply is unique (``draft 0``, ``draft 1``...), all with the same answer."""
    counter = itertools.count()
    return lambda request: f"draft {next(counter)} \\boxed{{{answer}}}"


def max_in_window(times: list[float], window: float) -> int:
    """Largest number of timestamps inside any window of ``window`` seconds."""
    times = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best


def peak_in_flight(served) -> int:
    """Most requests the server was handling at once, from its own arrival and finish times."""
    events = sorted([(r.arrived_at, 1) for r in served] + [(r.finished_at, -1) for r in served])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak

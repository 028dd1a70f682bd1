"""Small helpers shared by the tests: reading requests and writing scripted replies."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest

import graphs
import scaffold as sf
from scaffold._types import Completion, Request, Usage
from scaffold.testing import ScriptedBackend

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


def _said(message: str | Callable[[], str]) -> str:
    return message() if callable(message) else message


def wait_until(predicate: Callable[[], object], *, timeout: float, message: str | Callable[[], str],
               interval: float = 0.01) -> None:
    """Poll ``predicate`` until it is true; fail the test with ``message`` (a string, or a function giving one
    from the state at that moment) if it is still false after ``timeout`` seconds.

    ``timeout`` is a deadline against hanging, not a bound on speed: make it many times longer than the
    wait takes on a loaded machine.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            pytest.fail(f"{_said(message)} (still not so after {timeout} s)")
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], object], *, timeout: float, message: str | Callable[[], str],
                           interval: float = 0.01) -> None:
    """:func:`wait_until` inside a running event loop: polls with ``asyncio.sleep``, so other tasks run."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            pytest.fail(f"{_said(message)} (still not so after {timeout} s)")
        await asyncio.sleep(interval)


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


class ScriptedEngine(ScriptedBackend):
    """A rollout engine without a model: answers 0, 1 or 2 by the call's seed, with token ids and logprobs.

    It takes weight updates as a real engine does: ``update_weights`` keeps the version and a checksum
    of the tensors, and every completion records both (``weight_versions``, ``weights_sum``), so a test
    can check which weights each rollout saw. ``delay`` slows every call (seconds).
    """

    def __init__(self, model_dir: str = "", *, delay: float = 0.0) -> None:
        super().__init__(self.answer, delay=delay)
        self.weights_version = 0
        self.weights_sum = 0.0

    def answer(self, request: Request) -> Completion:
        seed = request.seed or 0
        token_ids = (30 + seed % 7, 40 + seed % 5, 50 + seed % 3, 60)
        return Completion(text=f"so \\boxed{{{seed % 3}}}", token_ids=token_ids, logprobs=(-1.5, -1.0, -0.5, -0.25),
                          usage=Usage(prompt_tokens=10, completion_tokens=len(token_ids)),
                          metadata={"weight_versions": ((str(self.weights_version), 0, len(token_ids)),),
                                    "weights_sum": self.weights_sum})

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        items = list(weights.items()) if hasattr(weights, "items") else list(weights)
        if items:
            self.weights_sum = round(sum(float(t.double().sum()) for _, t in items), 6)
        self.weights_version = self.weights_version + 1 if version is None else version
        return self.weights_version


def no_weights_engine(model_dir: str) -> ScriptedBackend:
    """A rollout engine that cannot take new weights (no ``update_weights``)."""
    return ScriptedBackend(lambda request: boxed(1))


SAMPLING = {"temperature": 1.0, "max_tokens": 40}
"""How the trainer tests sample the pocket model."""


def held_out_reward(policy: Any, graph: sf.Graph, rows: list[dict[str, str]], seed: int) -> float:
    """Mean math reward of every model trace of ``graph`` over ``rows``, with the policy's current weights."""
    model = sf.Model(policy.backend(max_new_tokens=40), params=SAMPLING)
    results = graph.map_sync([{"problem": r["problem"]} for r in rows], models={"solver": model}, store=None,
                             seed=seed, concurrency=len(rows))
    rewards = [float(sf.equivalent(t.answer, rows[r.index or 0]["answer"]))
               for r in results for t in r.traces if t.kind is sf.TraceKind.MODEL]
    return sum(rewards) / len(rewards)


def grpo_learning_run(model_dir: Any, log_path: str | None = None, **train_options: Any) -> dict[str, Any]:
    """The CI learning run: 20 GRPO steps (16 problems, 8 samples, lr 1e-4) of a pocket model, with the held-out
    reward (64 problems, every sample) before and after; ``train_options`` go to ``train_online`` (``cluster=``)."""
    from scaffold.pocket import SOLVE_PROMPT, pocket_task
    from trainers.loop import LoopConfig, train_online
    from trainers.policy import Policy, PolicyConfig

    task = pocket_task(model_dir)
    graph = graphs.grpo_group.build(n=8, prompt=SOLVE_PROMPT)
    held_out = task.problems(64, seed=9, split="test")
    policy = Policy(model_dir, PolicyConfig(lr=1e-4, seed=0))
    before = held_out_reward(policy, graph, held_out, seed=1)
    config = LoopConfig(steps=20, problems_per_step=16, scheme="grpo", seed=0, sampling=SAMPLING, log_path=log_path)
    history = train_online(policy, graph, task.problems(1000, seed=3, split="train"), config, progress=False,
                           **{"store": None, **train_options})
    after = held_out_reward(policy, graph, held_out, seed=1)
    return {"before": before, "after": after, "history": history, "steps_done": policy.steps_done, "log": log_path}

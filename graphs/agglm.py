"""Learned aggregation of parallel samples: AggLM (Zhao et al. 2025, "The Majority is not always right: RL
training for solution aggregation") and SSA (Qi et al. 2025, "Learning to Reason Across Parallel Samples for
LLM Reasoning").

AggLM: ``n`` (the paper's m) solutions are sampled, then one aggregator call reads all of them and
writes a new solution — reviewing, correcting, filling gaps and combining, which can recover a
correct minority answer that a majority vote would lose. The paper trains the aggregator with RL
on sets of m=8 solutions; that is the default. :data:`~graphs.prompts.AGGREGATE_PROMPT` is the
instruction in our own words.

SSA: ``n`` (N) solutions are concatenated and a (small, trained) aggregator reads them and gives
a short final answer only (:data:`~graphs.prompts.SUMMARY_PROMPT`), instead of a new solution.
Departure: the number of samples the SSA model was trained on varies in the paper; the default
here is 8 — set ``n`` to what your aggregator knows.

:func:`aggregate_given` runs the same aggregation over candidates collected elsewhere (another
model, an earlier run), passed per run as the graph input ``given``; with
``aggregate_prompt=SUMMARY_PROMPT`` it is SSA over them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT, SOLVE_PROMPT, SUMMARY_PROMPT


@sf.graph(name="agglm")
def agglm(
    problem: str,
    *,
    n: int = 8,
    model: str = "solver",
    aggregator: str = "aggregator",
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    render: Callable[[Sequence[sf.Trace]], str] | None = None,
) -> Any:
    """``n`` samples (node ``candidates``), then one aggregator call reading them all (``aggregate``), which shows
    them with ``render`` (``None``: :func:`scaffold.format_candidates`, each one's whole text).

    Examples:
        >>> from graphs import agglm
        >>> agglm.build().count_calls()
        {'solver': 8, 'aggregator': 1}
    """
    cands = sf.sample(prompt, model=model, n=n, name="candidates")
    return sf.aggregate(cands, model=aggregator, prompt=aggregate_prompt, name="aggregate", render=render)


@sf.graph(name="ssa")
def ssa(
    problem: str,
    *,
    n: int = 8,
    model: str = "solver",
    aggregator: str = "aggregator",
    prompt: str = SOLVE_PROMPT,
    summary_prompt: str = SUMMARY_PROMPT,
) -> Any:
    """``n`` samples (node ``samples``), then a short final answer from the aggregator (``answer``).

    Examples:
        >>> from graphs import ssa
        >>> ssa.build(n=5).count_calls()
        {'solver': 5, 'aggregator': 1}
    """
    drafts = sf.sample(prompt, model=model, n=n, name="samples")
    return sf.aggregate(drafts, model=aggregator, prompt=summary_prompt, name="answer")


@sf.graph(name="aggregate_given")
def aggregate_given(
    problem: str,
    given: list[Any],
    *,
    aggregator: str = "aggregator",
    aggregate_prompt: str = AGGREGATE_PROMPT,
) -> Any:
    """One aggregator call over candidates passed in as the input ``given`` (strings, traces or text rows).

    Examples:
        >>> from scaffold.testing import ScriptedBackend
        >>> from graphs import aggregate_given
        >>> run = aggregate_given.run_sync({"problem": "1+1", "given": [r"\\\\boxed{2}", r"\\\\boxed{3}"]},
        ...                                models={"aggregator": ScriptedBackend(lambda r: r"\\\\boxed{2}")},
        ...                                store=None)
        >>> run.answer, len(run.output.inputs)
        ('2', 2)
    """
    return sf.aggregate(given, model=aggregator, prompt=aggregate_prompt, name="aggregate")

"""DeepConf (Fu et al. 2025, "Deep Think with Confidence", facebookresearch/deepconf): self-consistency that
weighs each sample by the model's confidence, drops the least confident, and stops sampling once the confident
ones agree.

Online, as in the paper: ``warmup`` samples (N_init) set the bar: the confidence a sample needs to be kept is
the one that keeps the ``eta`` share of them most confident (DeepConf-low keeps 10%, DeepConf-high 90%). Then
samples come ``batch`` at a time until the kept samples' confidence-weighted majority holds at least ``tau`` of
their weight (the paper's consensus threshold, 0.95) or ``budget`` samples were drawn. The answer is the
confidence-weighted vote of the kept samples. Nodes: ``warmup``, then ``more@{i}/samples`` batches, then
``vote``, whose metadata has the bar, the kept samples and the consensus reached.

A trace's confidence is :func:`scaffold.trace_confidence` of its token logprobs (the lowest group by default:
``measure``, ``window``), which every call here records (``logprobs=True``).

With ``warmup * eta`` below 2 the bar keeps a single warmup sample, whose consensus with itself is 1: every run
stops after the warmup, and DeepConf is the most confident of ``warmup`` samples (on the pocket model, warmup 8
at ``eta`` 0.1 did that, as well as self-consistency over 32 at a quarter of the tokens: ``benchmarks/replay.py``).

**Departures.** The paper stops a trace *while it is generated*, as soon as a group's confidence falls below the
bar; that needs a stream of per-token logprobs and an engine that can be told to stop, so here a trace is
generated whole and then kept or dropped (the sampling stops early, a trace does not). Token confidence is the
sampled token's log-probability, not minus the mean of the top-k candidates' (see
:mod:`scaffold._confidence`). Samples come in batches, not one at a time, so calls stay parallel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import scaffold as sf
from graphs.checks import whole_numbers
from graphs.prompts import SOLVE_PROMPT


def confidence_bar(confidences: Sequence[float], eta: float) -> float:
    """The confidence a sample needs to be kept: the lowest of the ``eta`` share of ``confidences`` that are
    highest (at least one).

    Examples:
        >>> confidence_bar([0.2, 0.9, 0.5, 0.7], 0.5)
        0.7
    """
    ranked = sorted(confidences, reverse=True)
    if not ranked:
        return 0.0
    return ranked[max(1, math.ceil(eta * len(ranked) - 1e-9)) - 1]


def _weighted(traces: Sequence[sf.Trace], equivalence: sf.Equivalence, measure: Any, window: int,
              eta: float) -> tuple[list[tuple[str, float, list[sf.Trace]]], float, list[sf.Trace]]:
    """The kept traces' clusters by confidence weight, the bar, and the kept traces."""
    drawn = [t for t in traces if t.kind is sf.TraceKind.MODEL]  # not the empty slots still to fill
    warm = [t for t in drawn if t.node == "warmup"] or drawn
    score = {t.id: sf.trace_confidence(t, measure=measure, window=window) or 0.0 for t in drawn}
    bar = confidence_bar([score[t.id] for t in warm], eta)
    kept = [t for t in drawn if score[t.id] >= bar]
    return sf.cluster_answers(kept, lambda t: score[t.id], equivalence), bar, kept


@sf.graph(name="deepconf")
def deepconf(
    problem: str,
    *,
    model: str = "solver",
    warmup: int = 16,
    batch: int = 8,
    budget: int = 64,
    eta: float = 0.1,
    tau: float = 0.95,
    measure: str = "lowest_group",
    window: int = 2048,
    prompt: str = SOLVE_PROMPT,
    equivalence: sf.Equivalence | None = None,
) -> Any:
    """``warmup`` samples, then batches of ``batch`` until the confident samples agree (``tau``) or ``budget``
    samples were drawn; the confidence-weighted vote of the samples above the warmup's bar.

    Examples:
        >>> from graphs import deepconf
        >>> deepconf.build().count_calls()  # an upper bound: sampling stops once the confident ones agree
        {'solver': 64}
    """
    whole_numbers("deepconf", warmup=warmup, batch=batch, budget=budget)
    if budget < warmup:
        raise sf.SubsetSizeError(f"deepconf(): budget={budget} is smaller than warmup={warmup}")
    if not 0 < eta <= 1 or not 0 < tau <= 1:
        raise sf.GraphDefinitionError(f"deepconf(): eta and tau are shares in (0, 1], got {eta!r} and {tau!r}")
    if measure not in sf.CONFIDENCE_MEASURES:
        raise sf.GraphDefinitionError(f"deepconf(): measure must be one of {', '.join(sf.CONFIDENCE_MEASURES)}")
    same = equivalence or sf.equivalent

    def agreed(traces: list[sf.Trace]) -> bool:
        clusters, _, _ = _weighted(traces, same, measure, window, eta)
        total = sum(weight for _, weight, _ in clusters)
        return bool(clusters) and total > 0 and clusters[0][1] / total >= tau

    def decide(members: list[sf.Trace]) -> sf.RuleOutput:
        clusters, bar, kept = _weighted(members, same, measure, window, eta)
        total = sum(weight for _, weight, _ in clusters)
        meta = {"bar": bar, "kept": len(kept), "samples": sum(t.kind is sf.TraceKind.MODEL for t in members),
                "consensus": clusters[0][1] / total if clusters and total else 0.0,
                "counts": [[answer, weight, len(found)] for answer, weight, found in clusters]}
        if not clusters:
            return sf.RuleOutput(text="", answer=None, metadata=meta)
        answer, _, found = clusters[0]
        return sf.RuleOutput(text=found[0].text, answer=answer, metadata={**meta, "winner": found[0].id})

    pop = sf.sample(prompt, model=model, n=warmup, name="warmup", logprobs=True)
    rounds = math.ceil((budget - warmup) / batch)
    if rounds:
        # the loop keeps one set of `budget` slots: the samples so far, then empty slots the batches fill in turn
        pop = sf.concat(pop, sf.candidates([""] * (budget - warmup), name="unfilled"), name="pool")

        def grow(slots: Any, step: int) -> Any:
            filled = warmup + step * batch
            take = min(batch, budget - filled)
            parts = [sf.select(slots, filled, lambda members: members[:filled], name="drawn"),
                     sf.sample(prompt, model=model, n=take, logprobs=True, name="samples")]
            if budget - filled - take:
                parts.append(sf.select(slots, budget - filled - take, lambda members: members[filled + take:],
                                       name="unfilled"))
            return sf.concat(*parts, name="pool")

        pop = sf.loop(grow, pop, steps=rounds, until=agreed, name="more")
    return sf.rule(pop, decide, name="vote")

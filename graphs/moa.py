"""Mixture-of-Agents (Wang et al. 2024, "Mixture-of-Agents Enhances Large Language Model Capabilities") and
Self-MoA (Li et al. 2025, "Rethinking Mixture-of-Agents: Is Mixing Different LLMs Beneficial?").

Mixture-of-Agents stacks layers of proposers. In layer 1 every proposer answers the problem; in each
later layer every proposer reads *all* responses of the previous layer with the
aggregate-and-synthesize prompt (:data:`~graphs.prompts.MOA_PROMPT`) and writes its own; the last
layer is a single aggregator that reads all responses of the layer before it. The paper's default
MoA uses six open proposers, the same six in every layer, and three layers, the last of which is
the aggregator (Qwen1.5-110B-Chat); here ``layers`` counts the aggregator's layer too, so the
defaults are six proposer aliases (``proposer1`` … ``proposer6``), ``layers=3`` (two proposer
layers, then the aggregator) and ``aggregator="aggregator"``. Nodes are ``layer{l}_{alias}``
(one trace each) and ``final``.

Self-MoA replaces the mix of models by one strong model sampled ``n`` times (N; six samples, in
the paper's AlpacaEval setting), then aggregated once — :func:`self_moa`.

Parameter names: ``proposers`` is *not* a count and so is not called ``n``: it is the tuple of
model aliases of one layer (the paper's n proposers are ``len(proposers)`` of them), because MoA
mixes different models; ``layers`` is the paper's l. Self-MoA has one model, so its sample
count is ``n``, as everywhere else.

Self-MoA-Seq, the paper's sequential variant for more samples than one prompt holds, is
:func:`self_moa_seq`: the aggregator reads a sliding ``window`` of samples at a time together with
its own previous synthesis, so each prompt holds at most ``window + 1`` responses however large ``n``
is. Nodes: ``samples``, then ``window{i}`` (the i-th window's samples, passed through) and
``synthesis{i}``; the last synthesis is the answer. Departure: the windows do not overlap (the paper
slides by a stride it sets per experiment; a stride equal to the window is the case it uses to fit
the most samples in the fewest calls).
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.checks import whole_numbers
from graphs.prompts import MOA_PROMPT, SOLVE_PROMPT

PROPOSERS = ("proposer1", "proposer2", "proposer3", "proposer4", "proposer5", "proposer6")
"""Default proposer aliases: six, as in the paper's MoA."""


def _check_proposers(proposers: Any) -> tuple[str, ...]:
    if isinstance(proposers, str) or not isinstance(proposers, (tuple, list)) or not proposers:
        raise sf.GraphDefinitionError(
            f"mixture_of_agents(proposers=...) takes a non-empty tuple of model aliases, got {proposers!r}")
    bad = [p for p in proposers if not isinstance(p, str) or not p]
    if bad:
        raise sf.GraphDefinitionError(f"mixture_of_agents(): proposers must be alias strings, got {bad!r}")
    return tuple(proposers)


@sf.graph(name="mixture_of_agents")
def mixture_of_agents(
    problem: str,
    *,
    proposers: tuple[str, ...] = PROPOSERS,
    layers: int = 3,
    aggregator: str = "aggregator",
    prompt: str = SOLVE_PROMPT,
    moa_prompt: str = MOA_PROMPT,
) -> Any:
    """``layers - 1`` layers of proposers, each reading every response of the layer before; then one aggregator.

    Examples:
        >>> from graphs import mixture_of_agents
        >>> mixture_of_agents.build(proposers=("a", "b", "c")).count_calls()
        {'a': 2, 'b': 2, 'c': 2, 'aggregator': 1}
    """
    aliases = _check_proposers(proposers)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 2:
        raise sf.SubsetSizeError(f"mixture_of_agents(): layers must be at least 2 (one of proposers, then the "
                                 f"aggregator), got {layers!r}")
    responses = [sf.generate(prompt, model=alias, name=f"layer1_{alias}") for alias in aliases]
    for layer in range(2, layers):
        previous = sf.concat(*responses, name=f"layer{layer - 1}_responses")
        responses = [sf.aggregate(previous, model=alias, prompt=moa_prompt, name=f"layer{layer}_{alias}")
                     for alias in aliases]
    last = sf.concat(*responses, name=f"layer{layers - 1}_responses")
    return sf.aggregate(last, model=aggregator, prompt=moa_prompt, name="final")


@sf.graph(name="self_moa")
def self_moa(
    problem: str,
    *,
    model: str = "solver",
    n: int = 6,
    aggregator: str | None = None,
    prompt: str = SOLVE_PROMPT,
    moa_prompt: str = MOA_PROMPT,
) -> Any:
    """``n`` responses of one model (node ``samples``), aggregated in one call (node ``final``).

    The aggregator is the same model unless ``aggregator`` names another alias.

    Examples:
        >>> from graphs import self_moa
        >>> self_moa.build().count_calls()
        {'solver': 7}
    """
    responses = sf.sample(prompt, model=model, n=n, name="samples")
    return sf.aggregate(responses, model=aggregator or model, prompt=moa_prompt, name="final")


@sf.graph(name="self_moa_seq")
def self_moa_seq(
    problem: str,
    *,
    model: str = "solver",
    n: int = 12,
    window: int = 4,
    aggregator: str | None = None,
    prompt: str = SOLVE_PROMPT,
    moa_prompt: str = MOA_PROMPT,
) -> Any:
    """``n`` responses of one model, synthesised ``window`` at a time: each synthesis reads the next window and
    the synthesis before it.

    Examples:
        >>> from graphs import self_moa_seq
        >>> self_moa_seq.build(n=12, window=4).count_calls()  # 12 samples, then 3 syntheses
        {'solver': 15}
    """
    whole_numbers("self_moa_seq", n=n, window=window)
    responses = sf.sample(prompt, model=model, n=n, name="samples")
    synthesis = None
    for number, start in enumerate(range(0, n, window), start=1):
        size = min(window, n - start)
        part = sf.select(responses, size, lambda members, start=start, size=size: members[start:start + size],
                         name=f"window{number}")
        read = part if synthesis is None else sf.concat(synthesis, part, name=f"read{number}")
        synthesis = sf.aggregate(read, model=aggregator or model, prompt=moa_prompt, name=f"synthesis{number}")
    return synthesis

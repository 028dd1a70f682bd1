"""Aggregate answers you already collected (e.g. from several API models) without regenerating them.

The candidates enter the graph as an input set. One graph votes over them by mathematical
equivalence; another asks an aggregator model to read them all and write one solution
(here a scripted stand-in; bind your own backend to "aggregator").

    python examples/aggregate_collected_outputs.py
"""

from __future__ import annotations

import scaffold as sf
from scaffold.testing import ScriptedBackend

COLLECTED = [
    {"text": r"Half of the pie is left: \boxed{\frac{1}{2}}", "model": "openai/gpt-4o-mini"},
    {"text": r"1 - 0.5 = \boxed{0.5}", "model": "anthropic/claude-haiku"},
    {"text": r"I think \boxed{0.25}", "model": "together/llama-3-8b"},
    r"Answer: \boxed{1/2}",  # a plain string works too
]


@sf.graph
def majority(problem, candidates):
    """Self-consistency over outputs gathered elsewhere."""
    return sf.vote(candidates)


@sf.graph
def learned_aggregation(problem, candidates):
    """One aggregator call reads every candidate and writes a new solution."""
    return sf.aggregate(candidates, model="aggregator")


def main() -> None:
    inputs = {"problem": "Half a pie is eaten. What fraction is left?", "candidates": COLLECTED}
    vote = majority.run_sync(inputs, models={})
    print("vote:", vote.answer, "counts:", vote.output.metadata["counts"])

    aggregator = ScriptedBackend(lambda request: r"All careful candidates agree: \boxed{\frac{1}{2}}")
    result = learned_aggregation.run_sync(inputs, models={"aggregator": aggregator})
    print("aggregated:", result.answer, "read:", len(result.output.inputs), "candidates")
    print("\nthe aggregator saw this prompt:\n" + aggregator.requests[0].last_content)


if __name__ == "__main__":
    main()

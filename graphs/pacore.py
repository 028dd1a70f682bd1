"""Aggregation with compaction between rounds (after PaCoRe and GenSelect's summaries): every candidate is
compacted before the next aggregation reads it, so the aggregation prompt stays bounded however many rounds run.

Recursive aggregation (:func:`graphs.rsa`) feeds whole solutions into each round; long reasoning traces make the
aggregation prompt grow with K times the longest solution, and each round's solutions can grow further. Here
``n`` samples are drawn (node ``step0``); then at each of ``steps`` rounds every member of the population is
compacted (node ``compact{t}``) and ``n`` aggregations each read ``k`` compacted members (node ``step{t}``); the
final population is voted (node ``vote``).

Compaction is ``"rule"`` (no model call: the candidate's last ``max_chars`` characters, which hold its
conclusion and final answer, with its answer stated) or ``"model"`` (one call per member with
:data:`~graphs.prompts.COMPACT_PROMPT`, a few lines of approach, key results and answer, at most
``summary_tokens`` tokens). Either way an aggregation prompt holds at most ``k`` compacted candidates: with the
rule, at most ``k * max_chars`` characters of candidates in every round.

Departures: PaCoRe trains its model to reason over compacted messages and runs rounds in parallel with
message passing; here compaction is a prompt (or a rule) on any model and the rounds are RSA's.
"""

from __future__ import annotations

from typing import Any

import scaffold as sf
from graphs.prompts import AGGREGATE_PROMPT, COMPACT_PROMPT, SOLVE_PROMPT


def compact_tail(trace: sf.Trace, max_chars: int) -> str:
    """A candidate compacted by rule: its last ``max_chars`` characters (where its conclusion is), with its answer
    stated when the cut lost it.

    Examples:
        >>> from scaffold import Trace
        >>> t = Trace(id="r/a#0", run_id="r", node="a", index=0, text="x" * 50 + r" so \\boxed{7}", answer="7")
        >>> compact_tail(t, 20)
        '… xxxxx so \\\\boxed{7}'
    """
    text = trace.text if len(trace.text) <= max_chars else "… " + trace.text[-max_chars + 2:].lstrip()
    if trace.answer is not None and trace.answer not in text:
        text += f"\nFinal answer: {trace.answer}"
    return text


@sf.graph(name="pacore")
def pacore(
    problem: str,
    *,
    n: int = 8,
    k: int = 4,
    steps: int = 3,
    compact: str = "rule",
    max_chars: int = 600,
    summary_tokens: int = 256,
    model: str = "solver",
    prompt: str = SOLVE_PROMPT,
    aggregate_prompt: str = AGGREGATE_PROMPT,
    compact_prompt: str = COMPACT_PROMPT,
) -> Any:
    """``n`` samples, then ``steps`` rounds of compaction and ``n`` aggregations over ``k`` compacted members each;
    a final vote.

    Examples:
        >>> from graphs import pacore
        >>> pacore.build(n=4, k=2, steps=2).count_calls()  # rule compaction calls no model
        {'solver': 12}
        >>> pacore.build(n=4, k=2, steps=2, compact="model").count_calls()
        {'solver': 20}
    """
    if compact not in ("rule", "model"):
        raise sf.GraphDefinitionError(f"pacore(): compact is 'rule' or 'model', got {compact!r}")
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 40:
        raise sf.GraphDefinitionError(f"pacore(): max_chars must be an integer of at least 40, got {max_chars!r}")
    pop = sf.sample(prompt, model=model, n=n, name="step0")
    for step in range(1, steps + 1):
        if compact == "rule":
            short = sf.map_traces(pop, lambda t: compact_tail(t, max_chars), name=f"compact{step}")
        else:
            short = sf.aggregate(pop, model=model, prompt=compact_prompt, select=sf.Each(), name=f"compact{step}",
                                 params={"max_tokens": summary_tokens})
        pop = sf.aggregate(short, model=model, k=k, n=n, prompt=aggregate_prompt, name=f"step{step}")
    return sf.vote(pop, name="vote")

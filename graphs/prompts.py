"""Default prompts of the ready-made topologies, in our own words.

Every topology takes its prompts as build parameters, so a model trained on other prompts (the
pocket model's :data:`~scaffold.pocket.SOLVE_PROMPT`, say) gets exactly what it knows. Templates
use ``{problem}``; aggregation prompts also get ``{candidates}`` (the numbered candidate texts)
and ``{k}`` (how many). ``{answer_format}`` is how to state the answer, in the words of the run's answer kind
(:mod:`scaffold.answers`: "End with the final answer in \\boxed{}." for math, the default), so every topology
runs on multiple choice or free text without a new prompt (``graph.run(..., answer_kind="choice")``). Other
braces are literal (``\\boxed{}``); ``{{name}}`` is a literal ``{name}``.
The generic aggregation prompt is not defined here: :data:`AGGREGATE_PROMPT` is the text of
:data:`scaffold.AGGREGATE_PROMPT`, so that ``sf.aggregate`` and the topologies share one default.
"""

from __future__ import annotations

import scaffold as sf

SOLVE_PROMPT = (
    "Solve the following problem step by step. {answer_format}\n\n"
    "Problem:\n{problem}"
)
"""One chain of thought for a problem."""

AGGREGATE_PROMPT: str = sf.AGGREGATE_PROMPT.text
"""Recursive Self-Aggregation and AggLM: candidates in, one better solution out. The text of
:data:`scaffold.AGGREGATE_PROMPT` (``sf.aggregate``'s default), which is its one home."""

SUMMARY_PROMPT = (
    "Problem:\n{problem}\n\n"
    "Here are {k} independent attempts at the problem:\n\n{candidates}\n\n"
    "Considering all of the attempts, state the final answer only. {answer_format}"
)
"""SSA-style aggregation: the samples in, a short final answer out."""

MOA_PROMPT = (
    "You have been given responses from several models to the problem below. Critically evaluate them, "
    "since some may be biased or wrong, and write one refined, accurate and complete response of your own. "
    "{answer_format}\n\n"
    "Problem:\n{problem}\n\nResponses:\n{candidates}"
)
"""Mixture-of-Agents: a layer's proposers and the final aggregator read every previous-layer response."""

EVOLVE_PROMPT = (
    "Problem:\n{problem}\n\n"
    "Here are {k} solutions from a population of attempts:\n\n{candidates}\n\n"
    "Write a new, improved solution: keep what is right in them, fix what is wrong, and try a different idea "
    "where they all seem stuck. {answer_format}"
)
"""Population evolution: parents in, one child out."""

JUDGE_PROMPT = (
    "Problem:\n{problem}\n\nProposed solution:\n{candidates}\n\n"
    "Check the solution step by step. Then rate how likely it is to be correct on a scale from 0 to 10, "
    "on the last line, exactly as: Score: <number>"
)
"""A judge scoring one candidate (best-of-N, weighted majority)."""

COMPARE_PROMPT = (
    "Problem:\n{problem}\n\nTwo candidate solutions follow.\n\n{candidates}\n\n"
    "Compare them step by step and decide which one is more likely to be correct. "
    "On the last line write exactly: Winner: 1  or  Winner: 2"
)
"""A judge comparing two candidates (pairwise ranking)."""

REFINE_PROMPT = (
    "Problem:\n{problem}\n\n"
    "Here are the best solutions found so far, as ranked by a judge:\n\n{candidates}\n\n"
    "Write a new solution that improves on them: fix any remaining mistakes and make every step clear. "
    "{answer_format}"
)
"""Pairwise ranking: elites in, a new candidate out."""

COMPACT_PROMPT = (
    "Problem:\n{problem}\n\nHere is one attempt at it:\n\n{candidates}\n\n"
    "Summarise this attempt in a few lines for someone who will compare it with others: its approach, its key "
    "intermediate results, and its final answer. {answer_format}"
)
"""Compaction: one candidate in, a short summary of it out (its approach, key results and answer)."""

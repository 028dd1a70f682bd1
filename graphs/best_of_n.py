"""Best-of-N and weighted majority with a verifier or a judge (Cobbe et al. 2021, "Training Verifiers to
Solve Math Word Problems"; Lightman et al. 2023, "Let's Verify Step by Step").

``n`` (the N of best-of-N) solutions are sampled (node ``samples``) and each gets a score: from a
``verifier`` function (an outcome or process reward, a unit test,
:meth:`scaffold.pocket.PocketTask.check_steps`) or, without one, from a ``judge`` model that reads
each sample on its own and ends with ``Score: <0-10>`` (node ``judgements``, one call per sample).
:func:`best_of_n` keeps the sample scored highest; :func:`weighted_majority` sums the scores of the
samples behind each answer (answers clustered by mathematical equivalence) and keeps the heaviest
answer.

Departures: the papers score with a trained verifier / process reward model; a prompted judge
(LLM-as-a-judge) stands in for it by default. A score that cannot be read counts as the lowest
(best-of-N) or as weight 0 (weighted majority); ties go to the sample seen first.

A verifier is called as ``verifier(problem, trace)``, the problem being the run's ``problem``
input (the rule reads the run's inputs: ``sf.rule(..., inputs=True)``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import scaffold as sf
from graphs.prompts import JUDGE_PROMPT, SOLVE_PROMPT

Verifier = Callable[[str, sf.Trace], float]
"""``verifier(problem, trace) -> score``: higher is better."""
ScoreParser = Callable[[str], float | None]
"""Reads a judge's text into a score, ``None`` when it gives none."""

_SCORE = re.compile(r"score\**\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_score(text: str) -> float | None:
    """The number after the last ``Score:`` in a judge's text, ``None`` if there is none.

    Examples:
        >>> parse_score("Step 2 is wrong. Score: 3\\nOn reflection... Score: 4.5")
        4.5
        >>> parse_score("**Score:** 8/10"), parse_score("looks fine") is None
        (8.0, True)
    """
    found = _SCORE.findall(text)
    return float(found[-1]) if found else None


def judged_scores(
    members: Sequence[sf.Trace], judgements: Sequence[sf.Trace], parser: ScoreParser = parse_score
) -> list[float | None]:
    """Each member's score from the judgement that read it (``None``: no judgement, or none readable).

    Examples:
        >>> t = lambda i, text="", inputs=(): sf.Trace(id=i, run_id="r", node="n", index=0, text=text, inputs=inputs)
        >>> judged_scores([t("a"), t("b")], [t("j0", "Score: 2", ("b",))])
        [None, 2.0]
    """
    by_member: dict[str, float | None] = {}
    for judgement in judgements:
        if len(judgement.inputs) == 1:
            by_member[judgement.inputs[0]] = parser(judgement.text)
    return [by_member.get(member.id) for member in members]


def _best(members: Sequence[sf.Trace], scores: Sequence[float | None]) -> sf.RuleOutput:
    values = [float("-inf") if s is None else s for s in scores]
    chosen = members[max(range(len(members)), key=lambda i: values[i])]  # first seen wins ties
    return sf.RuleOutput(chosen.text, chosen.answer, {"scores": list(scores), "winner": chosen.id})


def _weighted(members: Sequence[sf.Trace], scores: Sequence[float | None]) -> sf.RuleOutput:
    weights = {m.id: max(0.0, s or 0.0) for m, s in zip(members, scores, strict=True)}
    clusters = sf.cluster_answers(members, weight=lambda t: weights[t.id])
    total = sum(weight for _, weight, _ in clusters)
    meta: dict[str, Any] = {
        "counts": [[answer, weight, len(group)] for answer, weight, group in clusters],
        "share": clusters[0][1] / total if clusters and total else 0.0,
        "voters": len(members),
        "scores": list(scores),
    }
    if not clusters:
        return sf.RuleOutput("", None, meta)
    answer, _, group = clusters[0]
    return sf.RuleOutput(group[0].text, answer, {**meta, "winner": group[0].id})


def _verified(verifier: Verifier, members: Sequence[sf.Trace], inputs: Mapping[str, Any]) -> list[float | None]:
    problem = str(inputs.get("problem", ""))
    return [float(verifier(problem, member)) for member in members]


@sf.graph(name="best_of_n")
def best_of_n(
    problem: str,
    *,
    n: int = 16,
    model: str = "solver",
    judge: str = "judge",
    prompt: str = SOLVE_PROMPT,
    judge_prompt: str = JUDGE_PROMPT,
    verifier: Verifier | None = None,
    score_parser: ScoreParser = parse_score,
) -> Any:
    """``n`` samples (node ``samples``), each scored; the best one (node ``best``).

    With ``verifier`` the scores are ``verifier(problem, sample)`` (no judge calls); without it a
    ``judge`` call per sample (node ``judgements``) and ``score_parser`` give them. The output's
    ``metadata["scores"]`` holds every sample's score, ``["winner"]`` the chosen sample's id.

    Examples:
        >>> from graphs import best_of_n
        >>> best_of_n.build(n=4).count_calls()
        {'solver': 4, 'judge': 4}
        >>> best_of_n.build(n=4, verifier=lambda problem, trace: len(trace.text)).count_calls()
        {'solver': 4}
    """
    samples = sf.sample(prompt, model=model, n=n, name="samples")
    return _scored_rule(samples, _best, "best", judge, judge_prompt, verifier, score_parser)


@sf.graph(name="weighted_majority")
def weighted_majority(
    problem: str,
    *,
    n: int = 16,
    model: str = "solver",
    judge: str = "judge",
    prompt: str = SOLVE_PROMPT,
    judge_prompt: str = JUDGE_PROMPT,
    verifier: Verifier | None = None,
    score_parser: ScoreParser = parse_score,
) -> Any:
    """``n`` samples, scored as in :func:`best_of_n`; a vote where each sample counts its score (node ``vote``).

    Negative and unreadable scores count 0. The output's metadata is :func:`scaffold.vote`'s
    (``counts`` as ``[answer, total score, members]``, best first; ``share`` of the total score;
    ``voters``; ``winner``) plus every sample's ``scores``.

    Examples:
        >>> from graphs import weighted_majority
        >>> weighted_majority.build(n=8).count_calls()
        {'solver': 8, 'judge': 8}
    """
    samples = sf.sample(prompt, model=model, n=n, name="samples")
    return _scored_rule(samples, _weighted, "vote", judge, judge_prompt, verifier, score_parser)


def _scored_rule(samples: sf.Node, combine: Callable[[Sequence[sf.Trace], Sequence[float | None]], sf.RuleOutput],
                 name: str, judge: str, judge_prompt: str, verifier: Verifier | None,
                 score_parser: ScoreParser) -> sf.Node:
    """Score the samples (with the verifier, or one judge call each) and ``combine`` samples and scores."""
    if verifier is not None:
        check = verifier

        def from_verifier(members: list[sf.Trace], *, inputs: Mapping[str, Any]) -> sf.RuleOutput:
            return combine(members, _verified(check, members, inputs))

        return sf.rule(samples, from_verifier, inputs=True, name=name)
    judgements = sf.aggregate(samples, model=judge, select="each", prompt=judge_prompt, name="judgements")

    def from_judge(members: list[sf.Trace], judged: list[sf.Trace]) -> sf.RuleOutput:
        return combine(members, judged_scores(members, judged, score_parser))

    return sf.rule(samples, from_judge, using=judgements, name=name)

"""Pairwise ranking with a judge, in the style of OpenDeepThink: a population refined by its Bradley–Terry elites.

Parameters, lettered as in RSA (Venkatraman et al. 2025): ``n`` (N) is the population size,
``generations`` (T) the number of judged generations, ``elites`` the number of members kept each
generation — a top-``elites`` by score, not a random subset, so it is not called ``k``.

Generation 0 samples N candidates (node ``population0``). Each generation a judge
compares pairs of members — every member meets about ``comparisons_per_member`` others, in
random order inside the pair (node ``compare{g}``) — the comparisons are fitted with a
Bradley–Terry model (Bradley & Terry 1952, "Rank Analysis of Incomplete Block Designs"; fitted
with Hunter's 2004 MM algorithm, :func:`bradley_terry`) and the ``elites`` strongest members are
kept (best first). Unless it is the last generation, ``n - elites`` refinement calls
each read all the elites, best first, and write a new candidate (node ``refine{g}``); elites
and children are the next population (:func:`population_by_generation` reads them back). The
output (node ``best``) is the member of the last population with the highest Bradley–Terry
score, i.e. the top elite; its ``metadata["scores"]`` holds every member's score, in the order
of the population.

A *verdict* turns one comparison into the probability that its first candidate (``judge.inputs[0]``,
"Candidate 1" in the prompt) wins: :func:`parse_winner` reads ``Winner: 1`` / ``Winner: 2``;
:func:`agreement_verdict` lets a model that can aggregate but not judge act as the judge — the
candidate whose answer matches the answer of the judge's own solution wins.

Departures: OpenDeepThink's exact prompts, pairing schedule and refinement subsets are not
reproduced; every child reads all the elites (diversity comes from sampling), and the
Bradley–Terry fit carries a small symmetric prior so that an unbeaten member keeps a finite score.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import scaffold as sf
from graphs.prompts import COMPARE_PROMPT, REFINE_PROMPT, SOLVE_PROMPT

Verdict = Callable[[sf.Trace, sf.Trace, sf.Trace], float]
"""``verdict(judge, a, b)``: the probability that ``a`` (the judge's first candidate) beats ``b``."""

_WINNER = re.compile(r"winner\**\s*[:=]?\s*\**\s*(?:candidate\s*)?([12])\b", re.IGNORECASE)


def bradley_terry(
    n_items: int, outcomes: Sequence[tuple[int, int, float]], *, iterations: int = 200, prior: float = 0.1
) -> list[float]:
    """Bradley–Terry strengths of ``n_items`` from ``(i, j, p)`` outcomes, ``p`` the share of ``i``'s win over ``j``.

    Fitted by Hunter's (2004) minorise–maximise iterations. The prior is ``prior`` wins and
    ``prior`` losses of every item against a fixed item of strength 1, so an unbeaten item stays
    finite and an item nobody compared scores 1. The chance that ``i`` beats ``j`` is
    ``s[i] / (s[i] + s[j])``. Ties (``p=0.5``) count half a win each.

    Examples:
        >>> s = bradley_terry(3, [(0, 1, 1.0), (1, 2, 1.0), (0, 2, 1.0)])
        >>> sorted(range(3), key=lambda i: -s[i])
        [0, 1, 2]
        >>> bradley_terry(2, [(0, 1, 1.0), (1, 0, 1.0)])
        [1.0, 1.0]
    """
    if prior <= 0:
        raise ValueError(f"prior must be positive, got {prior}")
    wins = [prior] * n_items
    games: list[dict[int, float]] = [{} for _ in range(n_items)]
    for i, j, p in outcomes:
        if i == j:
            continue
        wins[i] += p
        wins[j] += 1.0 - p
        games[i][j] = games[i].get(j, 0.0) + 1.0
        games[j][i] = games[j].get(i, 0.0) + 1.0
    strength = [1.0] * n_items
    for _ in range(iterations):
        new = [
            wins[i] / (2 * prior / (s + 1.0) + sum(c / (s + strength[j]) for j, c in games[i].items()))
            for i, s in enumerate(strength)
        ]
        change = max((abs(a - b) / b for a, b in zip(new, strength, strict=True)), default=0.0)
        strength = new
        if change < 1e-12:
            break
    return strength


def parse_winner(judge: sf.Trace, a: sf.Trace, b: sf.Trace) -> float:
    """1.0 if the judge's last ``Winner:`` line names candidate 1 (``a``), 0.0 for candidate 2, else 0.5.

    Examples:
        >>> t = lambda text: sf.Trace(id="j", run_id="r", node="compare0", index=0, text=text)
        >>> [parse_winner(t(text), t(""), t("")) for text in ("Winner: 2", "**Winner:** Candidate 1", "a draw")]
        [0.0, 1.0, 0.5]
    """
    found = _WINNER.findall(judge.text)
    if not found:
        return 0.5
    return 1.0 if found[-1] == "1" else 0.0


def agreement_verdict(judge: sf.Trace, a: sf.Trace, b: sf.Trace) -> float:
    """1.0 if only ``a``'s answer is equivalent to the judge's own answer, 0.0 if only ``b``'s, else 0.5.

    For a judge that writes a solution of its own after reading both candidates (an aggregation
    prompt) instead of naming a winner.

    Examples:
        >>> t = lambda answer: sf.Trace(id="t", run_id="r", node="n", index=0, answer=answer)
        >>> agreement_verdict(t("0.5"), t("1/2"), t("3")), agreement_verdict(t("4"), t("1"), t("3"))
        (1.0, 0.5)
    """
    agree_a, agree_b = sf.equivalent(judge.answer, a.answer), sf.equivalent(judge.answer, b.answer)
    if agree_a == agree_b:
        return 0.5
    return 1.0 if agree_a else 0.0


def pairwise_scores(members: Sequence[sf.Trace], comparisons: Sequence[sf.Trace], verdict: Verdict) -> list[float]:
    """Bradley–Terry scores of ``members`` from the comparisons among them (others are ignored).

    Examples:
        >>> t = lambda i, text="", inputs=(): sf.Trace(id=i, run_id="r", node="n", index=0, text=text, inputs=inputs)
        >>> s = pairwise_scores([t("a"), t("b")], [t("c", "Winner: 2", ("a", "b"))], parse_winner)
        >>> s[1] > s[0]
        True
    """
    where = {m.id: i for i, m in enumerate(members)}
    outcomes: list[tuple[int, int, float]] = []
    for comparison in comparisons:
        if len(comparison.inputs) != 2 or not all(i in where for i in comparison.inputs):
            continue
        i, j = where[comparison.inputs[0]], where[comparison.inputs[1]]
        outcomes.append((i, j, float(verdict(comparison, members[i], members[j]))))
    return bradley_terry(len(members), outcomes)


@sf.graph(name="pairwise_ranking")
def pairwise_ranking(
    problem: str,
    *,
    n: int = 8,
    generations: int = 3,
    elites: int = 4,
    comparisons_per_member: int = 4,
    model: str = "solver",
    judge: str = "judge",
    prompt: str = SOLVE_PROMPT,
    compare_prompt: str = COMPARE_PROMPT,
    refine_prompt: str = REFINE_PROMPT,
    verdict: Verdict = parse_winner,
) -> Any:
    """Sample, then ``generations`` rounds of pairwise judging and Bradley–Terry elites, refined between rounds.

    Examples:
        >>> from graphs import pairwise_ranking
        >>> pairwise_ranking.build().count_calls()  # 8 + 2 x 4 solver calls, 3 x 16 comparisons
        {'solver': 16, 'judge': 48}
    """
    if generations < 1:
        raise sf.GraphDefinitionError(f"pairwise_ranking needs at least 1 generation, got {generations}")
    if not 1 <= elites <= n or (generations > 1 and elites == n):
        raise sf.SubsetSizeError(f"pairwise_ranking: elites must be at least 1 and below the population "
                                 f"(n={n}), got {elites}")

    def ranked(members: list[sf.Trace], comparisons: list[sf.Trace]) -> list[sf.Trace]:
        scores = pairwise_scores(members, comparisons, verdict)
        return [members[i] for i in sorted(range(len(members)), key=lambda i: -scores[i])]

    def best(members: list[sf.Trace], comparisons: list[sf.Trace]) -> sf.RuleOutput:
        scores = pairwise_scores(members, comparisons, verdict)
        chosen = members[max(range(len(members)), key=lambda i: scores[i])]
        return sf.RuleOutput(chosen.text, chosen.answer, {"scores": scores, "members": [m.id for m in members],
                                                         "winner": chosen.id})

    pop = sf.sample(prompt, model=model, n=n, name="population0")
    pairs = sf.Pairs(per_member=comparisons_per_member)
    comparisons = sf.aggregate(pop, model=judge, select=pairs, prompt=compare_prompt, name="compare0")
    for g in range(1, generations):
        kept = sf.select(pop, elites, choose=ranked, using=comparisons, name=f"elites{g - 1}")
        children = sf.aggregate(kept, model=model, prompt=refine_prompt, n=n - elites,
                                name=f"refine{g - 1}")
        pop = sf.concat(kept, children, name=f"population{g}")
        comparisons = sf.aggregate(pop, model=judge, select=pairs, prompt=compare_prompt, name=f"compare{g}")
    return sf.rule(pop, best, using=comparisons, name="best")


def population_by_generation(result: sf.RunResult) -> list[list[sf.Trace]]:
    """The population of each generation of a :func:`pairwise_ranking` run (from generation 1: elites first).

    Examples:
        >>> from scaffold.testing import ScriptedBackend
        >>> judge = ScriptedBackend(lambda r: "Winner: 1")
        >>> run = pairwise_ranking.build(n=4, elites=2, generations=2).run_sync(
        ...     {"problem": "1+1"}, models={"solver": ScriptedBackend(lambda r: "\\boxed{2}"), "judge": judge},
        ...     store=None)
        >>> [len(p) for p in population_by_generation(run)]
        [4, 4]
    """
    out: list[list[sf.Trace]] = []
    while population := result.node(f"population{len(out)}"):
        out.append(population)
    return out

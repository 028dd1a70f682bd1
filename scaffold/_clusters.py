"""Clustering answers and the majority vote's result, over traces: what ``sf.vote``, the evaluation reports and
recorded imports compute alike (a leaf, so the store can vote as the graph does).

Examples:
    >>> from scaffold._types import Trace
    >>> ts = [Trace(id=str(i), run_id="r", node="s", index=i, answer=a) for i, a in enumerate(["4", "4.0", "5"])]
    >>> vote_summary(ts)[1:]
    ('4', {'counts': [['4', 2.0, 2], ['5', 1.0, 1]], 'share': 0.6666666666666666, 'voters': 3, 'winner': '0'})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from scaffold._answers import Equivalence, equivalent

__all__ = ["AnswerChecker", "Voter", "cluster_answers", "vote_summary"]


class Voter(Protocol):
    """What a vote reads of a member: a :class:`~scaffold._types.Trace`, or an imported output's row."""

    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def answer(self) -> str | None: ...


V = TypeVar("V", bound=Voter)


def cluster_answers(
    traces: Sequence[V],
    weight: Callable[[V], float] | None = None,
    same: Equivalence = equivalent,
) -> list[tuple[str, float, list[V]]]:
    """Group traces whose answers are equivalent; returns ``(answer, total weight, members)``, best first.

    Traces without an answer are left out. Ties go to the cluster seen first.

    Examples:
        >>> from scaffold._types import Trace
        >>> ts = [Trace(id=str(i), run_id="r", node="s", index=i, answer=a) for i, a in enumerate(["1/2", "0.5", "3"])]
        >>> [(a, w) for a, w, _ in cluster_answers(ts)]
        [('1/2', 2.0), ('3', 1.0)]
    """
    clusters: list[tuple[str, list[float], list[V]]] = []
    exact: dict[str, int] = {}
    for trace in traces:
        answer = trace.answer
        if answer is None:
            continue
        w = 1.0 if weight is None else float(weight(trace))
        where = exact.get(answer)
        if where is None:
            for i, (rep, _, _) in enumerate(clusters):
                if same(rep, answer):
                    where = i
                    break
            if where is None:
                where = len(clusters)
                clusters.append((answer, [0.0], []))
            exact[answer] = where
        clusters[where][1][0] += w
        clusters[where][2].append(trace)
    order = sorted(range(len(clusters)), key=lambda i: -clusters[i][1][0])  # stable: first seen wins ties
    return [(clusters[i][0], clusters[i][1][0], clusters[i][2]) for i in order]


def vote_summary(traces: Sequence[V], weight: Callable[[V], float] | None = None,
                 same: Equivalence = equivalent) -> tuple[str, str | None, dict[str, Any]]:
    """The (weighted) majority vote over ``traces``: the text of the first member giving the winning answer, that
    answer (``None`` when no member has one) and the vote's metadata (``counts``: ``[answer, votes, members]`` per
    cluster, best first; ``share``; ``voters``; ``winner``, the id of that first member)."""
    clusters = cluster_answers(traces, weight, same)
    if not clusters:
        return "", None, {"counts": [], "share": 0.0, "voters": len(traces)}
    counts = [[answer, total, len(members)] for answer, total, members in clusters]
    total = sum(c[1] for c in clusters)
    answer, top, members = clusters[0]
    return members[0].text, answer, {"counts": counts, "share": top / total if total else 0.0,
                                     "voters": len(traces), "winner": members[0].id}


class AnswerChecker:
    """Correctness of answers against one reference, each distinct answer checked once.

    Examples:
        >>> check = AnswerChecker("1/2")
        >>> check("0.5"), check("2"), check(None)
        (True, False, False)
    """

    def __init__(self, reference: str, equivalence: Equivalence = equivalent) -> None:
        self.reference = reference
        self.equivalence = equivalence
        self._seen: dict[str, bool] = {}

    def __call__(self, answer: str | None) -> bool:
        if answer is None:
            return False
        found = self._seen.get(answer)
        if found is None:
            found = self._seen[answer] = bool(self.equivalence(answer, self.reference))
        return found

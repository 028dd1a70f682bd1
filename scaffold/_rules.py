"""Rule aggregators and set operations: a set in, traces out, no model call.

``vote`` clusters answers by mathematical equivalence (``"1/2"`` and ``"0.5"``
are one cluster) and records the counts; ``weighted_vote`` sums a weight per
member; ``best_of`` keeps the member a scorer likes most. ``top_k``,
``concat`` and ``map_traces`` reshape sets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from scaffold._answers import Equivalence, Extractor, equivalent
from scaffold._builder import current_builder
from scaffold._clusters import cluster_answers, vote_summary
from scaffold._errors import EmptySetError, GraphDefinitionError, SubsetSizeError
from scaffold._judge import Judge, Similar
from scaffold._nodes import (
    ConcatNode,
    JudgedVoteNode,
    MapNode,
    Node,
    OnError,
    Quorum,
    RuleNode,
    RuleOutput,
    SelectNode,
    make_policy,
)
from scaffold._primitives import SetLike, as_set, resolve_variables
from scaffold._types import Trace
from scaffold.answers import AnswerKind, answer_kind, as_extractor


def _vote_output(traces: list[Trace], weight: Callable[[Trace], float] | None, same: Equivalence) -> RuleOutput:
    text, answer, metadata = vote_summary(traces, weight, same)
    return RuleOutput(text=text, answer=answer, metadata=metadata)


def _equivalence(value: Equivalence | AnswerKind | str | None, what: str) -> Equivalence | None:
    """A vote's ``equivalence=``: a function of two answers, an answer kind (its ``same``) or a kind's name;
    ``None``: the run's kind's, decided when the vote fires."""
    if value is None or isinstance(value, (str, AnswerKind)):
        return None if value is None else answer_kind(value).same
    if not callable(value):
        raise GraphDefinitionError(f"sf.{what}(equivalence=...) takes a function of two answers, an answer kind "
                                   f"or a kind's name, got {type(value).__name__}")
    return value


def _by_kind(fn: Callable[..., RuleOutput], equivalence: Equivalence | None) -> tuple[Callable[..., Any], bool]:
    """A vote function of the members alone when its equivalence is fixed, else one that is given the run's answer
    kind (``answers=``) and clusters by it."""
    if equivalence is not None:
        return (lambda traces: fn(traces, equivalence)), False
    return (lambda traces, answers: fn(traces, answers.same)), True


def _rule(what: str, items: SetLike, fn: Callable[..., Any], name: str | None, on_error: OnError,
          pass_answers: bool = False) -> Node:
    node = as_set(items, what=what)
    builder = current_builder(what)
    if node.size == 0:
        raise EmptySetError(f"sf.{what}() over an empty set")
    policy = make_policy(on_error)
    if isinstance(policy, Quorum) and policy.k > 1:
        raise SubsetSizeError(f"sf.{what}() makes one trace; a quorum of {policy.k} can never be met")
    return builder.add(RuleNode(name=builder.unique_name(name or what), size=1, single=True,
                                on_error=policy, items=node, fn=fn, rule=what, pass_answers=pass_answers))


def vote(
    items: SetLike,
    *,
    equivalence: Equivalence | AnswerKind | Judge | Similar | str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Node:
    """Majority vote over answers (self-consistency), clustered by the run's answer kind: mathematical
    equivalence by default (``"1/2"`` is ``"0.5"``).

    ``equivalence`` fixes the vote's own: a function of two answers (``same(a, b) -> bool``), an answer kind
    or a kind's name (``"text"``: normalised exact match), :func:`scaffold.judge` (a model decides, its
    judgments recorded; ``metadata["judge_calls"]`` counts them) or :func:`scaffold.similar` (embeddings).
    The output trace carries the winning answer, the text of the first member that gave it, and
    ``metadata["counts"]`` (``[answer, votes, members]`` per cluster, best first) and ``["share"]``.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     return sf.vote(sf.candidates([r"\\boxed{1/2}", r"\\boxed{0.5}", r"\\boxed{3}"]))
        >>> r = g.run_sync({}, models={})
        >>> r.answer, r.output.metadata["share"]
        ('1/2', 0.6666666666666666)
    """
    if isinstance(equivalence, (Judge, Similar)):
        return _judged_vote(items, equivalence, name, on_error)
    fn, by_run = _by_kind(lambda ts, same: _vote_output(ts, None, same), _equivalence(equivalence, "vote"))
    return _rule("vote", items, fn, name, on_error, pass_answers=by_run)


def _judged_vote(items: SetLike, judge: Judge | Similar, name: str | None, on_error: OnError) -> Node:
    """A vote whose clusters ``judge``'s model decides, or its embeddings (:mod:`scaffold._judge`)."""
    node = as_set(items, what="vote")
    builder = current_builder("vote")
    if node.size == 0:
        raise EmptySetError("sf.vote() over an empty set")
    policy = make_policy(on_error)
    if isinstance(policy, Quorum) and policy.k > 1:
        raise SubsetSizeError(f"sf.vote() makes one trace; a quorum of {policy.k} can never be met")
    node_name = builder.unique_name(name or "vote")
    if isinstance(judge, Similar):
        return builder.add(JudgedVoteNode(name=node_name, size=1, single=True, on_error=policy, items=node,
                                          alias=judge.model, method="embed", threshold=judge.threshold))
    template = judge.template(builder.available_vars())
    variables = resolve_variables(builder, [template], {"first", "second"}, f"judge prompt of {node_name!r}")
    return builder.add(JudgedVoteNode(name=node_name, size=1, single=True, on_error=policy, items=node,
                                      alias=judge.model, prompt=template, params=dict(judge.params),
                                      variables=variables, max_calls=judge.max_calls))


def weighted_vote(
    items: SetLike,
    weight: Callable[[Trace], float],
    *,
    equivalence: Equivalence | AnswerKind | str | None = None,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Node:
    """Vote where each member counts ``weight(trace)`` (e.g. a verifier's score) instead of 1; ``equivalence``
    as in :func:`vote`.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     cands = sf.candidates([{"text": r"\\boxed{1}", "score": 0.2}, {"text": r"\\boxed{2}", "score": 0.9}])
        ...     return sf.weighted_vote(cands, weight=lambda t: t.metadata["score"])
        >>> g.run_sync({}, models={}).answer
        '2'
    """
    if not callable(weight):
        raise GraphDefinitionError("sf.weighted_vote() needs a weight function trace -> float")
    fn, by_run = _by_kind(lambda ts, same: _vote_output(ts, weight, same), _equivalence(equivalence, "weighted_vote"))
    return _rule("weighted_vote", items, fn, name, on_error, pass_answers=by_run)


def best_of(
    items: SetLike, scorer: Callable[[Trace], Any], *, name: str | None = None, on_error: OnError = "raise"
) -> Node:
    """The member with the highest ``scorer(trace)`` (best-of-N). The scorer may be async.

    The output is a new trace with the chosen member's text and answer; ``metadata["scores"]``
    holds every member's score.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     return sf.best_of(sf.candidates(["short", "the longest one"]), scorer=lambda t: len(t.text))
        >>> g.run_sync({}, models={}).output.text
        'the longest one'
    """
    if not callable(scorer):
        raise GraphDefinitionError("sf.best_of() needs a scorer function trace -> float")

    def choose(traces: list[Trace]) -> Any:
        scores = [scorer(t) for t in traces]
        if any(hasattr(s, "__await__") for s in scores):
            return _choose_async(traces, scores)
        return _best(traces, scores)

    return _rule("best_of", items, choose, name, on_error)


async def _choose_async(traces: list[Trace], scores: list[Any]) -> RuleOutput:
    # every async score runs at once; if one fails the others are cancelled, none is left unawaited
    pending = {i: asyncio.ensure_future(s) for i, s in enumerate(scores) if hasattr(s, "__await__")}
    try:
        await asyncio.gather(*pending.values())
    finally:
        for task in pending.values():
            task.cancel()
        await asyncio.gather(*pending.values(), return_exceptions=True)
    return _best(traces, [pending[i].result() if i in pending else s for i, s in enumerate(scores)])


def _best(traces: list[Trace], scores: list[Any]) -> RuleOutput:
    values = [float(s) for s in scores]
    best = max(range(len(traces)), key=lambda i: values[i])
    chosen = traces[best]
    return RuleOutput(chosen.text, chosen.answer, {"scores": values, "winner": chosen.id})


def _chosen_from(items: SetLike, k: int, what: str) -> Node:
    """The set ``top_k``/``select`` keep ``k`` members of, checked: k a positive integer, the set not smaller."""
    node = as_set(items, what=what)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SubsetSizeError(f"sf.{what}(): k must be an integer of at least 1, got {k!r}")
    if node.size == 0:
        raise EmptySetError(f"sf.{what}() over an empty set")
    if node.size is not None and k > node.size:
        raise SubsetSizeError(f"sf.{what}(): k={k} is larger than the set (n={node.size})")
    return node


def top_k(items: SetLike, k: int, score: Callable[[Trace], float], *, name: str | None = None) -> Node:
    """The ``k`` members with the highest ``score`` (ties keep set order); the traces pass through unchanged.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     return sf.top_k(sf.candidates(["a", "ccc", "bb"]), k=2, score=lambda t: len(t.text))
        >>> [t.text for t in g.run_sync({}, models={}).output]
        ['ccc', 'bb']
    """
    node = _chosen_from(items, k, "top_k")
    builder = current_builder("top_k")
    if not callable(score):
        raise GraphDefinitionError("sf.top_k() needs a score function trace -> float")
    return builder.add(SelectNode(name=builder.unique_name(name or "top_k"), size=k, items=node, k=k, score=score))


def _using_sets(using: SetLike | Sequence[SetLike] | None, what: str) -> tuple[Node, ...]:
    if using is None:
        return ()
    if isinstance(using, (list, tuple)):
        return tuple(as_set(u, what=what) for u in using)
    return (as_set(using, what=what),)  # type: ignore[arg-type]


def rule(
    items: SetLike,
    fn: Callable[..., RuleOutput | str | Any],
    *,
    using: SetLike | Sequence[SetLike] | None = None,
    inputs: bool = False,
    name: str | None = None,
    on_error: OnError = "raise",
) -> Node:
    """Your own rule aggregator: ``fn(members, *using)`` reads whole sets and writes one new trace.

    ``fn`` gets the successful traces of ``items`` and of each set in ``using`` (for example a
    judge's verdicts on the members) and returns a :class:`RuleOutput` or a text (its answer is
    extracted); it may be async. With ``inputs=True`` it is also given the run's inputs as the
    keyword argument ``inputs`` (a verifier that needs the problem text). The new trace's lineage
    is every trace it read.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     drafts = sf.candidates([r"\\boxed{3}", r"\\boxed{4}"])
        ...     grades = sf.candidates(["0.2", "0.9"])
        ...     def pick(members, scores):
        ...         best = max(zip(members, scores), key=lambda pair: float(pair[1].text))[0]
        ...         return sf.RuleOutput(best.text, best.answer, {"picked": best.id})
        ...     return sf.rule(drafts, pick, using=grades)
        >>> g.run_sync({}, models={}).answer
        '4'
    """
    node = as_set(items, what="rule")
    extra = _using_sets(using, "rule")
    builder = current_builder("rule")
    if node.size == 0:
        raise EmptySetError("sf.rule() over an empty set")
    if not callable(fn):
        raise GraphDefinitionError("sf.rule() needs a function (members, *using) -> RuleOutput | str")
    policy = make_policy(on_error)
    if isinstance(policy, Quorum) and policy.k > 1:
        raise SubsetSizeError(f"sf.rule() makes one trace; a quorum of {policy.k} can never be met")
    return builder.add(RuleNode(name=builder.unique_name(name or "rule"), size=1, single=True, on_error=policy,
                                items=node, fn=fn, rule="rule", using=extra, pass_inputs=inputs))


def select(
    items: SetLike,
    k: int,
    choose: Callable[..., Sequence[Trace]],
    *,
    using: SetLike | Sequence[SetLike] | None = None,
    name: str | None = None,
) -> Node:
    """Keep ``k`` members chosen by ``choose(members, *using)``, best first; the traces pass through unchanged.

    The set operation behind elites and rankings: ``choose`` gets the successful traces of
    ``items`` and of each set in ``using`` (say, pairwise judgements of the members) and returns
    distinct members of ``items``; the first ``k`` are kept.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     drafts = sf.candidates(["a", "bb", "ccc"])
        ...     return sf.select(drafts, 2, lambda members: sorted(members, key=lambda t: len(t.text)))
        >>> [t.text for t in g.run_sync({}, models={}).output]
        ['a', 'bb']
    """
    node = _chosen_from(items, k, "select")
    extra = _using_sets(using, "select")
    builder = current_builder("select")
    if not callable(choose):
        raise GraphDefinitionError("sf.select() needs a function (members, *using) -> chosen members")
    return builder.add(SelectNode(name=builder.unique_name(name or "select"), size=k, items=node, k=k,
                                  choose=choose, using=extra))


def concat(*sets: SetLike, name: str | None = None) -> Node:
    """Join sets in order into one set; no new traces (lineage points at the originals).

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     return sf.concat(sf.candidates(["a"]), sf.candidates(["b", "c"]))
        >>> [t.text for t in g.run_sync({}, models={}).output]
        ['a', 'b', 'c']
    """
    builder = current_builder("concat")
    parts = tuple(as_set(s, what="concat") for s in sets)
    if not parts:
        raise EmptySetError("sf.concat() needs at least one set")
    sizes = [p.size for p in parts]
    size = None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
    return builder.add(ConcatNode(name=builder.unique_name(name or "concat"), size=size, parts=parts))


def map_traces(
    items: SetLike,
    fn: Callable[[Trace], str | RuleOutput],
    *,
    extract: Extractor | AnswerKind | str | None = None,
    name: str | None = None,
) -> Node:
    """Apply ``fn`` to each member: each result is a new trace that reads that member (``map``).

    ``fn`` returns the new text (its answer is extracted again) or a :class:`RuleOutput`.

    Examples:
        >>> import scaffold as sf
        >>> @sf.graph
        ... def g():
        ...     return sf.map_traces(sf.candidates(["x = 1", "x = 2"]), lambda t: t.text.upper())
        >>> [t.text for t in g.run_sync({}, models={}).output]
        ['X = 1', 'X = 2']
    """
    node = as_set(items, what="map_traces")
    builder = current_builder("map_traces")
    if not callable(fn):
        raise GraphDefinitionError("sf.map_traces() needs a function trace -> str")
    return builder.add(MapNode(name=builder.unique_name(name or "map"), size=node.size, items=node, fn=fn,
                               extract=as_extractor(extract, "sf.map_traces()")))


def agreement(share: float, *, equivalence: Equivalence = equivalent) -> Callable[[list[Trace]], bool]:
    """A loop stop condition: true when the most common answer holds at least ``share`` of the set.

    Examples:
        >>> from scaffold._types import Trace
        >>> ts = [Trace(id=str(i), run_id="r", node="s", index=i, answer=a) for i, a in enumerate("1112")]
        >>> agreement(0.75)(ts), agreement(0.8)(ts)
        (True, False)
    """
    if not 0 < share <= 1:
        raise GraphDefinitionError(f"agreement share must be in (0, 1], got {share}")

    def reached(traces: list[Trace]) -> bool:
        if not traces:
            return False
        clusters = cluster_answers(traces, None, equivalence)
        return bool(clusters) and clusters[0][1] / len(traces) >= share

    return reached

"""Replay: rule topologies over an evaluation's recorded samples, at every k up to what was sampled, with no model
call.

An evaluation that sampled N answers per problem has already paid for every rule topology over k ≤ N of them:
self-consistency at k, a weighted vote, best-of-k with a scorer, DeepConf's confidence filter. :func:`replay`
reads the samples back from the store and estimates what each rule would have answered on a uniformly random
k-subset drawn without replacement, which is what a live run of k samples draws when its samples are
exchangeable (the same prompt at the same temperature).

**How.** Each problem's N samples are put in ``draws`` random orders; the first k of a uniformly random order are
a uniform k-subset, so one order serves every k (a vote's counts grow along it). Per problem and k, the estimate
is the mean over the draws; over problems, a bootstrap interval (problems resampled). Tokens and dollars at k are
exact expectations: k times the mean sample's. A problem with fewer recorded samples than the others (a sample
that failed) keeps the failed ones as samples without an answer, as a live run would.

**Rules**, decided as the live primitives decide them:

- ``vote``: majority by the evaluation's answer kind; ties go to the cluster seen first in the subset (``sf.vote``).
- ``weighted_vote``: each sample counts ``weight(trace)`` (default: its confidence); ties as ``vote``.
- ``best_of``: the sample with the highest ``scorer(trace)`` (default: its confidence); ties to the first.
- ``deepconf``: DeepConf's offline filter (Fu et al. 2025): keep the ``eta`` share of the subset with the highest
  confidence (at least one sample), then vote weighted by confidence. Confidence is
  :func:`scaffold.trace_confidence` of the recorded logprobs (see there for how it departs from the paper).

A sample is right when the evaluation scored it right (``scaffold eval`` scores every recorded trace), else when
its answer is equivalent to the problem's reference.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import TYPE_CHECKING, Any

from scaffold._answers import Equivalence
from scaffold._confidence import ConfidenceMeasure, trace_confidence
from scaffold._rules import cluster_answers
from scaffold._types import Trace
from scaffold.answers._kind import recorded_kind
from scaffold.evaluation._metrics import bootstrap_ci
from scaffold.evaluation._report import EVAL_SOURCE, Estimate, samples_node_of

if TYPE_CHECKING:
    from scaffold._graph import Graph
    from scaffold.evaluation._report import EvalReport
    from scaffold.store._store import Store

__all__ = ["METHODS", "ReplayPoint", "ReplayReport", "replay", "replay_aggregation"]

METHODS: tuple[str, ...] = ("vote", "weighted_vote", "best_of", "deepconf")
"""The rule topologies :func:`replay` evaluates."""


@dataclass(frozen=True, slots=True)
class ReplayPoint:
    """One rule at one k: its expected accuracy (with a bootstrap interval over problems), and the expected tokens
    and dollars per problem of its k samples (``cost`` ``None`` when a sample's price is unknown)."""

    method: str
    k: int
    accuracy: Estimate
    tokens: float
    cost: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "k": self.k, "accuracy": self.accuracy.as_dict(), "tokens": self.tokens,
                "cost": self.cost}


@dataclass(frozen=True)
class ReplayReport:
    """What :func:`replay` found: every rule's curve over k, from recorded samples alone (``calls`` is 0)."""

    name: str
    """The evaluation replayed."""
    samples_node: str
    samples: int
    """Samples per problem (N): the largest k."""
    problems: int
    draws: int
    seed: int
    points: tuple[ReplayPoint, ...]
    calls: int = 0
    """Model calls the replay made: none, for rule topologies."""
    live: Estimate | None = None
    """The evaluation's own recorded accuracy (its topology at N), beside the replayed curves."""
    settings: Mapping[str, Any] = field(default_factory=dict)

    def curve(self, method: str) -> tuple[ReplayPoint, ...]:
        """The points of one rule, by k."""
        return tuple(p for p in self.points if p.method == method)

    def at(self, method: str, k: int) -> ReplayPoint:
        """One rule's point at ``k``; raises :class:`KeyError` if it was not replayed."""
        for point in self.points:
            if point.method == method and point.k == k:
                return point
        raise KeyError(f"no replayed point for {method} at k={k}")

    def summary(self) -> dict[str, Any]:
        """The report as JSON data."""
        return {"name": self.name, "samples_node": self.samples_node, "samples": self.samples,
                "problems": self.problems, "draws": self.draws, "seed": self.seed, "calls": self.calls,
                "live": None if self.live is None else self.live.as_dict(), "settings": dict(self.settings),
                "points": [p.as_dict() for p in self.points]}

    def to_text(self) -> str:
        """A table: one row per k, one column per rule (accuracy with its interval), and the tokens at k."""
        methods = list(dict.fromkeys(p.method for p in self.points))
        ks = sorted({p.k for p in self.points})
        lines = [f"replay of {self.name!r}: {self.problems} problems x {self.samples} samples of "
                 f"{self.samples_node!r}, {self.draws} draws, {self.calls} model calls"]
        lines.append("   k  " + "".join(f"{m:>26}" for m in methods) + f"{'tokens':>12}")
        for k in ks:
            row = {p.method: p for p in self.points if p.k == k}
            cells = "".join(f"{str(row[m].accuracy) if m in row else '':>26}" for m in methods)
            tokens = next(iter(row.values())).tokens
            lines.append(f"{k:>4}  {cells}{tokens:>12.0f}")
        if self.live is not None:
            lines.append(f"live (recorded topology at k={self.samples}): {self.live}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Problem:
    """One problem's samples, read for replay: cluster labels (-1: no answer), which clusters are right, and
    each sample's weight, score and confidence."""

    labels: tuple[int, ...]
    right: tuple[bool, ...]
    correct: tuple[bool, ...]
    weights: tuple[float, ...]
    scores: tuple[float, ...]
    confidences: tuple[float, ...]
    tokens: float
    cost: float | None


def replay(store: Store | str, name: str, *, methods: Sequence[str] = ("vote",), ks: Sequence[int] | None = None,
           draws: int = 200, seed: int = 0, samples_node: str | None = None,
           weight: Callable[[Trace], float] | None = None, scorer: Callable[[Trace], float] | None = None,
           measure: ConfidenceMeasure = "lowest_group", window: int = 2048, eta: float = 0.1,
           equivalence: Equivalence | None = None, confidence: float = 0.95, resamples: int = 1000) -> ReplayReport:
    """Replay rule topologies over the recorded samples of evaluation ``name``: their expected accuracy, tokens and
    dollars at every ``k`` (default 1, 2, 4, … and N), with no model call.

    ``methods`` from :data:`METHODS`. ``weight`` (for ``weighted_vote``) and ``scorer`` (for ``best_of``) are
    functions of a recorded trace (its answer, usage, cost, metadata, text and logprobs), as the live
    ``sf.weighted_vote``/``sf.best_of`` take; without them, the trace's confidence (``measure``, ``window``:
    :func:`scaffold.trace_confidence`) is used, which needs recorded logprobs. ``eta`` is the share DeepConf keeps.
    ``samples_node`` is the node whose traces are the samples (default: the first model node). Answers cluster by
    ``equivalence`` (default: the evaluation's answer kind).

    Examples:
        >>> import scaffold as sf, tempfile, os
        >>> from scaffold.testing import ScriptedBackend
        >>> from scaffold.evaluation import evaluate
        >>> @sf.graph
        ... def sc(problem, *, n: int = 8):
        ...     return sf.vote(sf.sample("{problem}", model="m", n=n))
        >>> answers = iter([r"\\boxed{4}", r"\\boxed{4}", r"\\boxed{5}"] * 100)  # 6 of 8 samples right
        >>> store = sf.Store(os.path.join(tempfile.mkdtemp(), "e.db"))
        >>> backend = ScriptedBackend(lambda request: next(answers))
        >>> _ = evaluate(sc.build(), [{"problem": "2+2", "answer": "4"}], {"m": backend}, name="sc8", store=store)
        >>> report = sf.replay(store, "sc8", ks=[1, 8])
        >>> report.calls, abs(report.at("vote", 1).accuracy.value - 0.75) < 0.05, report.at("vote", 8).accuracy.value
        (0, True, 1.0)
        >>> store.close()
    """
    from scaffold.store import Store as StoreClass

    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be among {', '.join(METHODS)}; got {list(methods)!r}")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    if not 0 < eta <= 1:
        raise ValueError(f"eta is the share DeepConf keeps, in (0, 1]; got {eta!r}")
    opened = isinstance(store, str)
    db = StoreClass(store) if isinstance(store, str) else store
    try:
        info = db.evaluation(name)
        same = equivalence or recorded_kind(info.settings).same
        runs = db.evaluation_runs(name)
        run_ids = [run.id for run in runs]
        node = samples_node or samples_node_of(db.answer_traces(run_ids[:20]).values())
        if node is None:
            raise ValueError(f"evaluation {name!r} recorded no model trace to replay")
        needs_conf = "deepconf" in methods or ("weighted_vote" in methods and weight is None) or (
            "best_of" in methods and scorer is None)
        traces = db.node_traces(run_ids, node, texts=weight is not None or scorer is not None,
                                logprobs=needs_conf or weight is not None or scorer is not None)
        rewards: dict[str, dict[str | None, Mapping[str, Any]]] = {}
        for row in db.rewards_of(run_ids, source=EVAL_SOURCE):
            rewards.setdefault(row["run_id"], {})[row["call_id"]] = row
        live_values = [float(bool((rewards.get(run.id, {}).get(None) or {}).get("value", 0) >= 0.5)) for run in runs]
    finally:
        if opened:
            db.close()
    size = max((len(found) for found in traces.values()), default=0)
    if size == 0:
        raise ValueError(f"evaluation {name!r} has no finished samples on node {node!r}")
    problems = []
    for run in runs:
        samples = traces.get(run.id, [])
        scored = rewards.get(run.id, {})
        reference = ((scored.get(None) or {}).get("metadata") or {}).get("reference")
        if not samples or (reference is None and not scored):
            continue
        problems.append(_read_problem(samples, size, scored, reference, same, weight, scorer, measure, window,
                                      methods))
    sizes = sorted({k for k in ks if 1 <= k <= size}) if ks else sorted({2**i for i in range(size.bit_length())
                                                                         if 2**i <= size} | {size})
    if not sizes:
        raise ValueError(f"no k in {list(ks or [])!r} is between 1 and the {size} samples recorded per problem")
    rng = random.Random(seed)
    per_method: dict[str, list[list[float]]] = {m: [] for m in methods}
    for problem in problems:
        found = replay_problem(problem, sizes, methods=methods, draws=draws, rng=rng, eta=eta)
        for method in methods:
            per_method[method].append(found[method])
    points = []
    for method in methods:
        for column, k in enumerate(sizes):
            values = [row[column] for row in per_method[method]]
            low_high = bootstrap_ci(values, confidence=confidence, resamples=resamples, seed=seed) if values else (
                math.nan, math.nan, math.nan)
            costs = [p.cost for p in problems]
            points.append(ReplayPoint(
                method=method, k=k, accuracy=Estimate(*low_high),
                tokens=fmean(p.tokens * k for p in problems) if problems else 0.0,
                cost=fmean(c * k for c in costs) if costs and all(c is not None for c in costs) else None))  # type: ignore[operator]
    live = Estimate(*bootstrap_ci(live_values, confidence=confidence, resamples=resamples, seed=seed)) \
        if live_values else None
    return ReplayReport(name=name, samples_node=node, samples=size, problems=len(problems), draws=draws, seed=seed,
                        points=tuple(points), live=live,
                        settings={"methods": list(methods), "eta": eta, "measure": measure, "window": window})


def _read_problem(samples: Sequence[Trace], size: int, scored: Mapping[str | None, Mapping[str, Any]],
                  reference: str | None, same: Equivalence, weight: Callable[[Trace], float] | None,
                  scorer: Callable[[Trace], float] | None, measure: ConfidenceMeasure, window: int,
                  methods: Sequence[str]) -> _Problem:
    """One problem's samples as labels, correctness, weights, scores and confidences (padded to ``size`` with
    samples that gave no answer)."""
    correct = []
    for trace in samples:
        row = scored.get(trace.id)
        if row is not None:
            correct.append(bool(row["value"] >= 0.5))
        else:
            correct.append(trace.answer is not None and reference is not None and bool(same(trace.answer, reference)))
    # right answers vote together (they are all equivalent to the reference); wrong ones cluster by equivalence
    keyed = [Trace(id=str(i), run_id="", node="", index=i, answer=None if t.answer is None else
                   ("\x00right" if good else t.answer)) for i, (t, good) in enumerate(zip(samples, correct))]
    clusters = cluster_answers(keyed, None, lambda a, b: a == b or ("\x00right" not in (a, b) and bool(same(a, b))))
    label_of = {member.index: number for number, (_, _, members) in enumerate(clusters) for member in members}
    labels = [label_of.get(i, -1) for i in range(len(samples))]
    right = [answer == "\x00right" for answer, _, _ in clusters]
    conf = [0.0] * len(samples)
    if "deepconf" in methods or ("weighted_vote" in methods and weight is None) or (
            "best_of" in methods and scorer is None):
        if all(t.logprobs is None for t in samples):
            raise ValueError("this replay reads confidences, and the samples recorded no logprobs: sample with "
                             "logprobs=True, or give weight= / scorer=")
        conf = [trace_confidence(t, measure=measure, window=window) or 0.0 for t in samples]
    weights = [float(weight(t)) for t in samples] if weight is not None else conf
    scores = [float(scorer(t)) for t in samples] if scorer is not None else conf
    missing = size - len(samples)
    tokens = [t.usage.prompt_tokens + t.usage.completion_tokens for t in samples]
    costs = [t.cost for t in samples]
    return _Problem(
        labels=tuple(labels + [-1] * missing), right=tuple(right), correct=tuple(correct + [False] * missing),
        weights=tuple(weights + [0.0] * missing), scores=tuple(scores + [-math.inf] * missing),
        confidences=tuple(conf + [0.0] * missing),
        tokens=sum(tokens) / size, cost=None if any(c is None for c in costs) else sum(costs) / size,  # type: ignore[arg-type]
    )


def replay_problem(problem: _Problem, ks: Sequence[int], *, methods: Sequence[str] = ("vote",), draws: int = 200,
                   rng: random.Random | None = None, eta: float = 0.1) -> dict[str, list[float]]:
    """Expected accuracy of each rule at each ``k`` for one problem, over ``draws`` random orders of its samples."""
    rng = rng or random.Random(0)
    n = len(problem.labels)
    order = list(range(n))
    wanted = set(ks)
    totals = {m: [0.0] * len(ks) for m in methods}
    column = {k: i for i, k in enumerate(ks)}
    for _ in range(draws):
        rng.shuffle(order)
        if "vote" in methods:
            _vote_prefixes(order, problem.labels, problem.right, None, wanted, column, totals["vote"])
        if "weighted_vote" in methods:
            _vote_prefixes(order, problem.labels, problem.right, problem.weights, wanted, column,
                           totals["weighted_vote"])
        if "best_of" in methods:
            _best_prefixes(order, problem.scores, problem.correct, wanted, column, totals["best_of"])
        if "deepconf" in methods:
            for k in ks:
                kept = _filtered(order[:k], problem.confidences, eta)
                if _vote(kept, problem.labels, problem.right, problem.confidences):
                    totals["deepconf"][column[k]] += 1.0
    return {m: [v / draws for v in values] for m, values in totals.items()}


def _vote_prefixes(order: Sequence[int], labels: Sequence[int], right: Sequence[bool],
                   weights: Sequence[float] | None, wanted: set[int], column: Mapping[int, int],
                   totals: list[float]) -> None:
    """Add, for every wanted k, whether the vote over the first k of ``order`` is right (the leader is kept as the
    counts grow: a cluster leads with the most votes, ties to the one seen first)."""
    counts: dict[int, float] = {}
    first: dict[int, int] = {}
    leader = -1
    for position, sample in enumerate(order, start=1):
        label = labels[sample]
        if label >= 0:
            if label not in counts:
                counts[label] = 0.0
                first[label] = position
            counts[label] += 1.0 if weights is None else weights[sample]
            if leader < 0:
                leader = label
            elif label != leader:
                ahead = counts[label] - counts[leader]
                if ahead > 0 or (ahead == 0 and first[label] < first[leader]):
                    leader = label
            elif weights is not None and weights[sample] < 0:  # a negative weight can cost the lead
                leader = max(counts, key=lambda c: (counts[c], -first[c]))
        if position in wanted and leader >= 0 and right[leader]:
            totals[column[position]] += 1.0


def _best_prefixes(order: Sequence[int], scores: Sequence[float], correct: Sequence[bool], wanted: set[int],
                   column: Mapping[int, int], totals: list[float]) -> None:
    """Add, for every wanted k, whether the best-scored of the first k is right (ties to the first)."""
    best = -math.inf
    chosen = False
    for position, sample in enumerate(order, start=1):
        if position == 1 or scores[sample] > best:
            best, chosen = scores[sample], correct[sample]
        if position in wanted and chosen:
            totals[column[position]] += 1.0


def _filtered(subset: Sequence[int], confidences: Sequence[float], eta: float) -> list[int]:
    """DeepConf's filter: the ``eta`` share of ``subset`` with the highest confidence (at least one), in subset
    order."""
    keep = max(1, math.ceil(eta * len(subset) - 1e-9))
    ranked = sorted(range(len(subset)), key=lambda i: -confidences[subset[i]])[:keep]
    return [subset[i] for i in sorted(ranked)]


def _vote(subset: Sequence[int], labels: Sequence[int], right: Sequence[bool], weights: Sequence[float]) -> bool:
    """Whether a weighted vote over ``subset`` (in order; ties to the cluster seen first) is right."""
    totals: dict[int, float] = {}
    for sample in subset:
        if labels[sample] >= 0:
            totals[labels[sample]] = totals.get(labels[sample], 0.0) + weights[sample]
    if not totals:
        return False
    winner = max(totals, key=lambda c: totals[c])  # dicts keep first-seen order: max keeps the first of equals
    return right[winner]


def replay_aggregation(store: Store, source: str, graph: Graph, models: Mapping[str, Any], *, name: str,
                       k: int | None = None, draws: int = 1, seed: int = 0, candidates: str = "given",
                       samples_node: str | None = None, **kwargs: Any) -> EvalReport:
    """Run an aggregation topology over the recorded samples of evaluation ``source``, as evaluation ``name``:
    only its own calls are made and paid; the candidates are the recorded traces, reused.

    ``graph`` reads its candidates from the input ``candidates`` (``"given"``, as
    :func:`graphs.aggregate_given`; one RSA step or MoA's last layer written the same way). Each problem runs
    ``draws`` times, each over ``k`` of its recorded samples drawn without replacement (all of them when ``k`` is
    ``None``), seeded by ``seed``. The candidates enter as external traces carrying the recorded trace's id
    (``metadata["source_id"]``), text, answer, tokens and cost, so the new runs' lineage leads back to the
    samples they reuse. Other keyword arguments go to :func:`~scaffold.evaluation.evaluate` (``concurrency``,
    ``answer_kind``...).

    Examples:
        >>> import scaffold as sf, tempfile, os
        >>> from scaffold.testing import ScriptedBackend
        >>> from scaffold.evaluation import evaluate, replay_aggregation
        >>> import graphs
        >>> store = sf.Store(os.path.join(tempfile.mkdtemp(), "e.db"))
        >>> answers = iter([r"\\boxed{4}", r"\\boxed{5}"] * 8)
        >>> _ = evaluate(graphs.self_consistency.build(n=4), [{"problem": "2+2", "answer": "4"}],
        ...              {"solver": ScriptedBackend(lambda request: next(answers))}, name="sc4", store=store)
        >>> aggregator = ScriptedBackend(lambda request: r"\\boxed{4}")
        >>> report = replay_aggregation(store, "sc4", graphs.aggregate_given.build(), {"aggregator": aggregator},
        ...                             name="agg-over-sc4", k=2, draws=3)
        >>> report.problems, report.accuracy.value, aggregator.calls
        (3, 1.0, 3)
        >>> store.close()
    """
    from scaffold.evaluation._harness import evaluate

    if candidates not in graph.inputs:
        raise ValueError(f"the graph reads its candidates from an input named {candidates!r}, and it has "
                         f"{', '.join(graph.inputs) or 'no inputs'}; pass candidates=<its input>")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    runs = store.evaluation_runs(source)
    run_ids = [run.id for run in runs]
    node = samples_node or samples_node_of(store.answer_traces(run_ids[:20]).values())
    if node is None:
        raise ValueError(f"evaluation {source!r} recorded no samples to aggregate")
    traces = store.node_traces(run_ids, node, texts=True)
    references = {row["run_id"]: ((row.get("metadata") or {}).get("reference"))
                  for row in store.rewards_of(run_ids, source=EVAL_SOURCE) if row["call_id"] is None}
    rng = random.Random(seed)
    rows = []
    for run in runs:
        pool = traces.get(run.id, [])
        reference = references.get(run.id)
        if not pool or reference is None:
            continue
        for _ in range(draws):
            chosen = pool if k is None or k >= len(pool) else sorted(rng.sample(pool, k), key=lambda t: t.index)
            rows.append({**run.inputs, candidates: list(chosen), "answer": reference, "replayed_from": run.id})
    if not rows:
        raise ValueError(f"evaluation {source!r} has no scored problem with samples on node {node!r}")
    settings = {"graph": graph.name, "params": graph.spec()["params"], "replayed_from": source, "k": k,
                "draws": draws, "seed": seed}
    return evaluate(graph, rows, models, name=name, store=store, settings=kwargs.pop("settings", settings), **kwargs)

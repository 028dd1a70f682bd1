"""An evaluation's report, computed from the store alone: accuracy, pass@k, majority@k, budget, per node.

:func:`load_report` reads the runs ``{name}-{item}`` of an evaluation and the correctness rewards
``scaffold eval`` recorded (source :data:`EVAL_SOURCE`: 1.0 or 0.0 for the run's answer and for every
model trace's answer, the reference answer in the run reward's metadata), so a report can be
made again later, on another machine, from the same store. Nothing is re-run and no answer is
re-checked except to cluster answers for majority votes.

* **accuracy** — the topology's final answer, over every problem of the evaluation (a run that
  failed or never ran counts as wrong; ``finished`` and ``failed`` say how many).
* **pass@k** and **majority@k** — over the traces of the *samples node* (the first model node of
  the graph, e.g. ``samples`` or RSA's ``step0``): unbiased pass@k (Chen et al. 2021) and the mean
  majority vote over ``k``-subsets, for ``k`` = 1, 2, 4, … up to the node's size.
* **tokens**, **cost** (dollars; ``None`` when any price is unknown), **latency** (the run's wall
  time; a resumed run's includes the pause) and **calls** per problem.
* **node accuracy** — the share of right answers among each model node's traces, in the order the
  nodes ran: RSA's per-step accuracy (``step0`` … ``stepT``).
* **gain** — AggLM Figure 4: every model call that read two or more candidates is one row of
  (majority share among its candidates, majority right, its own answer right).

Every mean comes with a bootstrap confidence interval over problems.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import TYPE_CHECKING, Any

from scaffold._answers import Equivalence
from scaffold._clusters import cluster_answers
from scaffold._types import Trace, TraceKind
from scaffold.answers._kind import recorded_kind
from scaffold.evaluation._metrics import (
    GainBin,
    MajorityRow,
    bootstrap_ci,
    majority_at_k,
    majority_cluster_gain,
    pass_at_k,
)
from scaffold.store._evaluations import EVAL_SOURCE

if TYPE_CHECKING:
    from scaffold.store._evaluations import EvaluationInfo
    from scaffold.store._query import RunInfo
    from scaffold.store._store import Store

@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean over problems with its bootstrap confidence interval."""

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


@dataclass(frozen=True, slots=True)
class ProblemOutcome:
    """One problem of an evaluation, as recorded."""

    item: int
    run_id: str
    status: str
    """The run's status (``ok``, ``error``, ...), or ``missing`` when it never ran."""
    correct: bool | None
    """Whether the final answer was right; ``None`` when the run was not scored (failed or missing)."""
    reference: str | None
    answer: str | None
    tokens: int = 0
    cost: float | None = None
    latency: float | None = None
    calls: int = 0
    samples: tuple[bool, ...] = ()
    """Correctness of each trace of the samples node, in index order."""
    sample_answers: tuple[str | None, ...] = ()
    nodes: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Model node -> (right answers, traces), in the order the nodes ran."""
    aggregations: tuple[MajorityRow, ...] = ()


@dataclass(frozen=True, slots=True)
class EvalReport:
    """Everything ``scaffold eval`` prints for one evaluation; :meth:`summary` is its JSON form."""

    name: str
    graph: str
    dataset: str | None
    settings: Mapping[str, Any]
    problems: int
    outcomes: tuple[ProblemOutcome, ...]
    samples_node: str | None
    accuracy: Estimate
    pass_at_k: Mapping[int, Estimate]
    majority_at_k: Mapping[int, Estimate]
    tokens: Estimate
    """Prompt plus completion tokens per problem."""
    cost: Estimate | None
    """Dollars per problem; ``None`` when any call's price is unknown."""
    latency: Estimate | None
    calls: float
    """Model calls per problem."""
    node_accuracy: Mapping[str, float]
    gain: tuple[GainBin, ...]

    @property
    def finished(self) -> int:
        """Problems whose run finished and was scored."""
        return sum(o.correct is not None for o in self.outcomes)

    @property
    def failed(self) -> int:
        """Problems whose run ended in an error (they count as wrong)."""
        return sum(o.status not in ("ok", "missing", "running") for o in self.outcomes)

    @property
    def complete(self) -> bool:
        return self.finished == self.problems

    def summary(self) -> dict[str, Any]:
        """The report as JSON data (no per-problem rows)."""
        return {
            "name": self.name, "graph": self.graph, "dataset": self.dataset, "problems": self.problems,
            "finished": self.finished, "failed": self.failed, "settings": dict(self.settings),
            "accuracy": self.accuracy.as_dict(),
            "pass_at_k": {str(k): v.as_dict() for k, v in self.pass_at_k.items()},
            "majority_at_k": {str(k): v.as_dict() for k, v in self.majority_at_k.items()},
            "samples_node": self.samples_node,
            "tokens_per_problem": self.tokens.as_dict(),
            "cost_per_problem": None if self.cost is None else self.cost.as_dict(),
            "latency_per_problem": None if self.latency is None else self.latency.as_dict(),
            "calls_per_problem": self.calls,
            "node_accuracy": dict(self.node_accuracy),
            "gain": [{"low": b.low, "high": b.high, "problems": b.problems, "majority_accuracy": b.majority_accuracy,
                      "aggregator_accuracy": b.aggregator_accuracy} for b in self.gain],
        }


# -- scoring (used when recording) -------------------------------------------------------------
# -- reading -----------------------------------------------------------------------------------
def load_report(store: Store, name: str, *, ks: Sequence[int] | None = None, samples_node: str | None = None,
                resamples: int = 1000, confidence: float = 0.95, seed: int = 0,
                equivalence: Equivalence | None = None) -> EvalReport:
    """The report of evaluation ``name`` from ``store``; raises :class:`~scaffold._errors.StoreError` if unknown.

    Answers are compared with the reference by ``equivalence``; by default, by the answer kind recorded with the
    evaluation (math when none was).

    ``ks`` are the pass@k / majority@k sizes (default 1, 2, 4, … up to the samples node's
    size); ``samples_node`` overrides which node's traces they count.

    Examples:
        >>> import scaffold as sf, tempfile, os
        >>> from scaffold.testing import ScriptedBackend
        >>> from scaffold.evaluation import evaluate, load_report
        >>> @sf.graph
        ... def vote3(problem):
        ...     return sf.vote(sf.sample("{problem}", model="m", n=3))
        >>> store = sf.Store(os.path.join(tempfile.mkdtemp(), "e.db"))
        >>> rows = [{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": "4"}]
        >>> _ = evaluate(vote3.build(), rows, {"m": ScriptedBackend(lambda r: r"\\boxed{2}")}, name="demo", store=store)
        >>> report = load_report(store, "demo")
        >>> report.accuracy.value, report.pass_at_k[2].value, report.tokens.value > 0
        (0.5, 0.5, True)
        >>> store.close()
    """
    info = store.evaluation(name)
    if equivalence is None:
        equivalence = recorded_kind(info.settings).same
    runs = {run.item: run for run in store.evaluation_runs(name)}
    run_ids = [run.id for run in runs.values()]
    traces = store.answer_traces(run_ids)
    rewards = _rewards_by_run(store.rewards_of(run_ids, source=EVAL_SOURCE))
    node = samples_node or samples_node_of(traces.values())
    outcomes = tuple(_outcome(name, item, runs.get(item), traces, rewards, node, equivalence)
                     for item in range(info.problems))
    return _report(info, outcomes, node, ks, resamples, confidence, seed, equivalence)


def _rewards_by_run(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str | None, Mapping[str, Any]]]:
    found: dict[str, dict[str | None, Mapping[str, Any]]] = {}
    for row in rows:
        found.setdefault(row["run_id"], {})[row["call_id"]] = row
    return found


def samples_node_of(runs: Any) -> str | None:
    """The first model node; for a graph with none (outputs imported or given as candidates), the first node of
    given outputs."""
    given = None
    for traces in runs:
        for trace in traces:
            if trace.kind is TraceKind.MODEL:
                return trace.node
            if given is None and trace.kind is TraceKind.EXTERNAL:
                given = trace.node
    return given


def _outcome(name: str, item: int, run: RunInfo | None, traces: Mapping[str, list[Trace]],
             rewards: Mapping[str, Mapping[str | None, Mapping[str, Any]]], samples_node: str | None,
             equivalence: Equivalence) -> ProblemOutcome:
    if run is None:
        return ProblemOutcome(item=item, run_id=f"{name}-{item}", status="missing", correct=None, reference=None,
                              answer=None)
    scored = rewards.get(run.id, {})
    whole = scored.get(None)
    model = [t for t in traces.get(run.id, []) if t.kind in (TraceKind.MODEL, TraceKind.EXTERNAL)]
    right = {t.id: bool(scored[t.id]["value"] >= 0.5) for t in model if t.id in scored}
    nodes: dict[str, tuple[int, int]] = {}
    for trace in model:
        if trace.id in right:
            good, total = nodes.get(trace.node, (0, 0))
            nodes[trace.node] = (good + right[trace.id], total + 1)
    samples = sorted((t for t in model if t.node == samples_node and t.id in right), key=lambda t: t.index)
    return ProblemOutcome(
        item=item, run_id=run.id, status=run.status,
        correct=None if whole is None else bool(whole["value"] >= 0.5),
        reference=None if whole is None else (whole.get("metadata") or {}).get("reference"),
        answer=run.answer, tokens=run.prompt_tokens + run.completion_tokens, cost=run.cost,
        latency=run.wall_time, calls=run.calls,
        samples=tuple(right[t.id] for t in samples), sample_answers=tuple(t.answer for t in samples),
        nodes=nodes, aggregations=tuple(_aggregation_rows(model, right, equivalence)),
    )


def _aggregation_rows(model: Sequence[Trace], right: Mapping[str, bool],
                      equivalence: Equivalence) -> list[MajorityRow]:
    """One row per model call that read two or more scored candidates (AggLM Figure 4)."""
    by_id = {t.id: t for t in model}
    readers = [t for t in model if t.id in right and sum(i in right for i in t.inputs) >= 2]
    if not readers:
        return []
    # cluster this problem's distinct answers once; every candidate set is read off those labels
    answers = sorted({t.answer for t in model if t.answer is not None})
    clusters = cluster_answers([Trace(id=str(i), run_id="", node="", index=i, answer=a) for i, a in enumerate(answers)],
                               None, equivalence)
    label = {member.answer: number for number, (_, _, members) in enumerate(clusters) for member in members}
    rows = []
    for reader in readers:
        candidates = [by_id[i] for i in reader.inputs if i in right]
        counts: dict[int, list[Trace]] = {}
        for candidate in candidates:
            if candidate.answer is not None:
                counts.setdefault(label[candidate.answer], []).append(candidate)
        if not counts:
            rows.append(MajorityRow(0.0, False, right[reader.id]))
            continue
        top = max(counts.values(), key=len)  # max keeps the first cluster seen among equals, as sf.vote does
        rows.append(MajorityRow(len(top) / len(candidates), right[top[0].id], right[reader.id]))
    return rows


def _report(info: EvaluationInfo, outcomes: tuple[ProblemOutcome, ...], node: str | None,
            ks: Sequence[int] | None, resamples: int, confidence: float, seed: int,
            equivalence: Equivalence) -> EvalReport:
    def ci(values: Sequence[float]) -> Estimate:
        if not values:
            return Estimate(math.nan, math.nan, math.nan)
        return Estimate(*bootstrap_ci(values, confidence=confidence, resamples=resamples, seed=seed))

    ran = [o for o in outcomes if o.status != "missing"]
    pool = [o for o in outcomes if o.samples]
    size = min((len(o.samples) for o in pool), default=0)
    sizes = sorted(set(ks)) if ks else [2**i for i in range(size.bit_length())] if size else []
    sizes = [k for k in sizes if 1 <= k <= size]
    passes = {k: ci([pass_at_k(len(o.samples), sum(o.samples), k) for o in pool]) for k in sizes}
    majorities = {k: ci([_majority(o, k, equivalence) for o in pool]) for k in sizes}
    costs = [o.cost for o in ran]
    node_totals: dict[str, list[int]] = {}
    for o in outcomes:
        for name, (good, total) in o.nodes.items():
            entry = node_totals.setdefault(name, [0, 0])
            entry[0] += good
            entry[1] += total
    return EvalReport(
        name=info.name, graph=info.graph, dataset=info.dataset, settings=info.settings, problems=info.problems,
        outcomes=outcomes, samples_node=node,
        accuracy=ci([float(bool(o.correct)) for o in outcomes]),
        pass_at_k=passes, majority_at_k=majorities,
        tokens=ci([float(o.tokens) for o in ran]),
        cost=ci([float(c) for c in costs]) if ran and all(c is not None for c in costs) else None,  # type: ignore[arg-type]
        latency=ci([o.latency for o in ran if o.latency is not None]) if any(o.latency for o in ran) else None,
        calls=fmean(o.calls for o in ran) if ran else 0.0,
        node_accuracy={name: good / total for name, (good, total) in node_totals.items() if total},
        gain=tuple(majority_cluster_gain([row for o in outcomes for row in o.aggregations])),
    )


_RIGHT = "\x00right"
_EXACT_SUBSETS = 500
"""majority@k is exact (every k-subset) up to this many subsets per problem..."""
_SAMPLED_SUBSETS = 300
"""...and the mean over this many random k-subsets beyond (a standard error of at most 0.03 per problem)."""


def _majority(outcome: ProblemOutcome, k: int, equivalence: Equivalence) -> float:
    """Majority@k of one problem from its recorded per-sample correctness and answers.

    Right answers are relabelled to one token, so every right sample votes together (that is
    what "equivalent to the reference" means); wrong answers cluster by ``equivalence``.
    """
    n = len(outcome.samples)
    subsets: Any = "all" if math.comb(n, k) <= _EXACT_SUBSETS else _SAMPLED_SUBSETS
    answers = [_RIGHT if good else answer for good, answer in zip(outcome.samples, outcome.sample_answers)]

    def same(a: str, b: str) -> bool:
        return a == b or (_RIGHT not in (a, b) and bool(equivalence(a, b)))

    return majority_at_k(answers, _RIGHT, k, subsets=subsets, equivalence=same)

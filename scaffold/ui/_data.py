"""What the viewer's pages show, read from the store as JSON-ready dicts (each a function of the store).

- :func:`runs_page`: one page of runs (SQL ``LIMIT``/``OFFSET``), the filtered count and totals, and the
  values each filter can take.
- :func:`run_view`: one run's *executed* DAG: every trace (prompt, text, answer, tokens, cost, latency,
  attempts, status, reward, right or wrong against the reference when known), every lineage edge, the
  nodes in the order the data flowed through them, and per-node and per-model rollups.
- :func:`evaluations_view`, :func:`compare_view`: the ``scaffold compare`` table (with intervals and the
  points its plots draw), and two evaluations problem by problem.
- :func:`training_view`: the step metrics of a training log (JSONL, one :class:`~trainers.StepMetrics` a line).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scaffold._answers import equivalent
from scaffold._types import Trace, TraceKind
from scaffold.store._query import RunInfo, Totals
from scaffold.store._store import Store

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
FILTERS = ("graph", "dataset", "model", "status", "since", "until")
"""What the runs list filters on (``since``/``until``: seconds since the epoch, on the run's start)."""


def runs_page(store: Store, *, offset: int = 0, limit: int = PAGE_SIZE, **filters: Any) -> dict[str, Any]:
    """One page of runs, newest first, with the count and totals of every run the filters select."""
    limit = max(1, min(int(limit), MAX_PAGE_SIZE))
    chosen = {key: value for key, value in filters.items() if key in FILTERS and value not in (None, "")}
    runs = store.runs(limit=limit, offset=max(0, int(offset)), **chosen)
    count, totals = store.count_runs(**chosen)
    return {"runs": [run_summary(info) for info in runs], "total": count, "offset": offset, "limit": limit,
            "totals": _totals(totals), "filters": chosen, "choices": store.distinct_values()}


def run_summary(info: RunInfo) -> dict[str, Any]:
    """A run's row in the list: ids, status, answer, counters, time and the models it bound."""
    return {"id": info.id, "graph": info.graph, "status": info.status, "answer": info.answer, "error": info.error,
            "dataset": info.dataset, "item": info.item, "calls": info.calls, "prompt_tokens": info.prompt_tokens,
            "completion_tokens": info.completion_tokens, "cost": info.cost, "attempts": info.attempts,
            "started_at": info.started_at, "finished_at": info.finished_at, "wall_time": info.wall_time,
            "seed": info.seed, "models": {alias: (spec or {}).get("model") for alias, spec in info.models.items()},
            "problem": _short(info.inputs.get("problem"))}


def run_view(store: Store, run_id: str) -> dict[str, Any]:
    """One run, whole: summary, inputs, traces with rewards and correctness, lineage edges, node order, rollups.

    Raises :class:`~scaffold.StoreError` when the store has no such run.
    """
    info = store.run(run_id)
    traces = store.traces(run_id)
    rewards = store.rewards(run_id)
    reference = _reference(store, info)
    by_trace: dict[str, float] = {}
    for row in rewards:
        if row["call_id"] is not None:
            by_trace[row["call_id"]] = float(row["value"])
    known = {t.id for t in traces}
    edges = [[source, t.id] for t in traces for source in t.inputs if source in known]
    checked: dict[str | None, bool | None] = {}  # math equivalence is slow: once per distinct answer

    def correct(answer: str | None) -> bool | None:
        if answer not in checked:
            checked[answer] = _correct(answer, reference)
        return checked[answer]

    return {
        "run": {**run_summary(info), "inputs": _jsonable(info.inputs), "params": _jsonable(info.params),
                "reference": reference, "correct": _correct(info.answer, reference)},
        "traces": [_trace(t, by_trace.get(t.id), correct) for t in traces],
        "edges": edges,
        "nodes": node_order(traces),
        "rollups": {by: {str(key): _totals(total) for key, total in store.rollup(by, run_id=run_id).items()}
                    for by in ("node", "model")},
    }


def node_order(traces: Sequence[Trace]) -> list[dict[str, Any]]:
    """Each node once, in data-flow order: by the longest lineage path to its traces, then by first appearance."""
    depth: dict[str, int] = {}
    by_id = {t.id: t for t in traces}

    def of(trace_id: str, seen: frozenset[str] = frozenset()) -> int:
        if trace_id in depth:
            return depth[trace_id]
        trace = by_id[trace_id]
        parents = [p for p in trace.inputs if p in by_id and p not in seen]
        depth[trace_id] = 1 + max((of(p, seen | {trace_id}) for p in parents), default=-1)
        return depth[trace_id]

    nodes: dict[str, dict[str, Any]] = {}
    for position, trace in enumerate(traces):
        level = of(trace.id)
        column = column_of(trace)
        entry = nodes.setdefault(column, {"name": column, "kind": trace.kind.value, "traces": 0,
                                          "level": level, "first": position})
        entry["traces"] += 1
        entry["level"] = max(entry["level"], level)
    return sorted(nodes.values(), key=lambda n: (n["level"], n["first"]))


def column_of(trace: Trace) -> str:
    """The DAG column a trace is drawn in: its node's, except an agent's turns that called tools
    (``{node} · turns``) and its tool calls (``{node} · tool calls``), each beside the agent's answers.

    Examples:
        >>> column_of(Trace(id="r/a#0.1.0", run_id="r", node="a", index=0, kind=TraceKind.TOOL))
        'a · tool calls'
    """
    if trace.kind is TraceKind.TOOL:
        return f"{trace.node} · tool calls"
    if trace.kind is TraceKind.MODEL and "." in trace.id.rsplit("#", 1)[-1]:
        return f"{trace.node} · turns"
    return trace.node


def _label(trace: Trace) -> str | None:
    """What a trace's box says instead of its answer: a tool call's tool, an agent turn's number."""
    metadata = trace.metadata or {}
    if trace.kind is TraceKind.TOOL:
        return f"{metadata.get('tool', 'tool')}()"
    if trace.kind is TraceKind.MODEL and "." in trace.id.rsplit("#", 1)[-1]:
        return f"turn {metadata.get('turn', '?')}"
    return None


def evaluations_view(store: Store, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Every evaluation (or ``names``) as ``scaffold compare`` shows them, with the points of its plots."""
    from scaffold.evaluation import comparison_rows, load_report

    chosen = list(names) if names else [info.name for info in store.evaluations()]
    reports = [load_report(store, name) for name in chosen]
    rows = comparison_rows(reports)
    plots = [{"name": r.name, "accuracy": r.accuracy.value, "low": r.accuracy.low, "high": r.accuracy.high,
              "tokens": r.tokens.value, "cost": None if r.cost is None else r.cost.value,
              "pass_at_k": {str(k): v.value for k, v in sorted(r.pass_at_k.items())}} for r in reports]
    return {"rows": _jsonable(rows), "plots": _jsonable(plots)}


def compare_view(store: Store, first: str, second: str, *, differing: bool = False) -> dict[str, Any]:
    """Two evaluations problem by problem: each one's answer, whether it was right, and its run id;
    with ``differing``, only the problems one got right and the other did not."""
    from scaffold.evaluation import load_report, paired_difference

    a, b = load_report(store, first), load_report(store, second)
    problems_of = {run.id: run.inputs.get("problem") for run in store.evaluation_runs(first)}
    theirs = {o.item: o for o in b.outcomes}
    problems = []
    for mine in a.outcomes:
        other = theirs.get(mine.item)
        row = {"item": mine.item, "problem": _short(problems_of.get(mine.run_id), 200), "reference": mine.reference,
               "a": _outcome(mine), "b": _outcome(other) if other is not None else None,
               "differs": other is None or bool(mine.correct) != bool(other.correct)}
        if not differing or row["differs"]:
            problems.append(row)
    difference = paired_difference(a, b)
    return {"a": first, "b": second, "problems": problems,
            "difference": _jsonable({**difference.difference.as_dict(), "problems": difference.problems,
                                     "only_a": difference.only_a, "only_b": difference.only_b,
                                     "token_ratio": difference.token_ratio})}


def training_view(path: str | Path) -> dict[str, Any]:
    """A training log's steps (one JSON object a line); lines that do not parse are counted, not fatal."""
    steps, skipped = [], 0
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        try:
            step = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if isinstance(step, dict) and "step" in step:
            steps.append(_jsonable(step))
        else:
            skipped += 1
    return {"path": str(path), "name": Path(path).stem, "steps": steps, "skipped": skipped}


def _trace(trace: Trace, reward: float | None, correct: Callable[[str | None], bool | None]) -> dict[str, Any]:
    request = trace.request
    prompt: Any = None
    if request is not None:
        prompt = request.prompt if request.prompt is not None else [[m[0], m[1]] for m in request.messages]
    return {
        "id": trace.id, "node": trace.node, "column": column_of(trace), "label": _label(trace),
        "index": trace.index, "kind": trace.kind.value, "model": trace.model,
        "status": trace.status.value, "error": trace.error, "attempt": trace.attempt, "text": trace.text,
        "answer": trace.answer, "prompt": prompt, "inputs": list(trace.inputs),
        "prompt_tokens": trace.usage.prompt_tokens, "completion_tokens": trace.usage.completion_tokens,
        "cost": trace.cost, "latency": round(trace.latency, 4), "started_at": trace.started_at,
        "reward": reward,
        "correct": correct(trace.answer) if trace.kind is not TraceKind.TOOL else None,
        "metadata": _jsonable(dict(trace.metadata)),
    }


def _reference(store: Store, info: RunInfo) -> str | None:
    """The reference answer: the run's inputs (``answer``), or its dataset item's."""
    if info.inputs.get("answer") not in (None, ""):
        return str(info.inputs["answer"])
    if info.dataset is not None and info.item is not None:
        row = store.item(info.dataset, info.item)
        if row is not None and row.get("answer") not in (None, ""):
            return str(row["answer"])
    return None


def _correct(answer: str | None, reference: str | None) -> bool | None:
    if reference is None:
        return None
    return answer is not None and equivalent(answer, reference)


def _outcome(outcome: Any) -> dict[str, Any]:
    return {"answer": outcome.answer, "correct": outcome.correct, "run_id": outcome.run_id,
            "status": outcome.status, "tokens": outcome.tokens}


def _totals(totals: Totals) -> dict[str, Any]:
    return {"calls": totals.calls, "prompt_tokens": totals.prompt_tokens, "completion_tokens": totals.completion_tokens,
            "cost": totals.cost, "latency": round(totals.latency, 4), "errors": totals.errors}


def _short(value: Any, length: int = 120) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= length else text[: length - 1] + "…"


def _jsonable(value: Any) -> Any:
    """``value`` with NaN and infinities as ``None`` and tuples as lists (what ``JSON.parse`` reads)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value

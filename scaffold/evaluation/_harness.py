"""Running an evaluation: a graph over a dataset, every run recorded and scored, resumable after a kill.

An evaluation has a name. Row ``i`` runs as ``{name}-{i}`` (``Graph.map`` with ``run_id=name``),
recorded in the store as item ``i`` of ``dataset``; when a run finishes, its final answer and
every model trace's answer are scored against the row's reference and recorded as rewards from
source ``"eval"`` (the reference in the run reward's metadata). The evaluation itself —
graph, dataset, problem count and the caller's ``settings`` — is a row of the store's
``evaluations`` table. Calling :func:`evaluate` again with the same name resumes: scored runs
are replayed from the store without a model call, unfinished ones continue where they stopped
(their finished calls are not sent again) and missing ones run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from scaffold._answers import Equivalence
from scaffold._clusters import AnswerChecker
from scaffold._errors import EvaluationError
from scaffold._executor import bind_models
from scaffold._graph import Graph
from scaffold._json import to_json
from scaffold._result import RunResult
from scaffold._sync import no_running_loop, run_released
from scaffold._types import TraceKind
from scaffold.answers import AnswerKind
from scaffold.answers import answer_kind as answer_kind_of
from scaffold.answers._kind import kind_settings
from scaffold.evaluation._report import EVAL_SOURCE, EvalReport, load_report
from scaffold.store._default import resolve_store
from scaffold.store._evaluations import same_evaluation
from scaffold.store._store import Store


async def evaluate_async(
    graph: Graph,
    rows: Sequence[Mapping[str, Any]],
    models: Mapping[str, Any],
    *,
    name: str,
    store: Store | str,
    equivalence: Equivalence | None = None,
    answer_kind: AnswerKind | str | None = None,
    **kwargs: Any,
) -> EvalReport:
    """:func:`evaluate` from async code."""
    target = await record_evaluation(graph, rows, models, name=name, store=store, equivalence=equivalence,
                                     answer_kind=answer_kind, **kwargs)
    kind = answer_kind_of(answer_kind)
    return await asyncio.to_thread(load_report, target, name, equivalence=equivalence or kind.same)


async def record_evaluation(
    graph: Graph,
    rows: Sequence[Mapping[str, Any]],
    models: Mapping[str, Any],
    *,
    name: str,
    store: Store | str,
    dataset: str | None = None,
    source: str | None = None,
    settings: Mapping[str, Any] | None = None,
    concurrency: int = 16,
    seed: int = 0,
    progress: bool = False,
    equivalence: Equivalence | None = None,
    answer_kind: AnswerKind | str | None = None,
    require_answers: bool = True,
    **run_kwargs: Any,
) -> Store:
    """Run, record and score an evaluation (:func:`evaluate` without its report); returns the store. With
    ``require_answers=False`` a row without a reference (``answer``) is recorded and not scored."""
    target = _check(name, rows, store, graph.inputs, require_answers)
    dataset = dataset or name
    kind = answer_kind_of(answer_kind)
    recorded = dict(settings) if settings is not None else {"graph": graph.name, "params": graph.spec()["params"]}
    for key, value in kind_settings(kind).items():  # recorded, so that a report read later scores by the same kind
        recorded.setdefault(key, value)
    found = await asyncio.to_thread(target.save_evaluation, name, graph=graph.name, dataset=dataset,
                                    settings=recorded, problems=len(rows))
    same_evaluation(found, graph.name, dataset, to_json(dict(recorded)), len(rows))
    run_ids = [f"{name}-{i}" for i in range(len(rows))]
    scored = {r["run_id"] for r in await asyncio.to_thread(target.rewards_of, run_ids, source=EVAL_SOURCE)
              if r["call_id"] is None}
    target.add_dataset(dataset, rows, source=source)
    todo = [i for i, run_id in enumerate(run_ids) if run_id not in scored]  # scored runs are not run again
    read = [*graph.inputs, *(key for key in kind.inputs if key not in graph.inputs)]  # the kind reads the row too
    # a run already recorded (stopped part way) resumes; the others start fresh, with no lookup before each,
    # unless rows may run twice (a cluster retries the rows of a worker that died: they must reuse its calls)
    started = {run.id for run in await asyncio.to_thread(target.evaluation_runs, name)}
    retried = run_kwargs.get("cluster") is not None or run_kwargs.get("runner") is not None
    again = [i for i in todo if run_ids[i] in started or retried]
    fresh = [i for i in todo if not (run_ids[i] in started or retried)]
    for part, resume in ((again, True), (fresh, False)):
        if not part:
            continue
        inputs = [{key: rows[i][key] for key in read if key in rows[i]} for i in part]
        async for result in graph.map(inputs, models=models, concurrency=concurrency, seed=seed, progress=progress,
                                      run_id=name, dataset=dataset, store=target, items=part, answer_kind=kind,
                                      resume=resume, **run_kwargs):
            row = rows[result.index or 0]
            if result.ok and row.get("answer") is not None:  # a row without a reference is recorded, not scored
                _score(target, result, str(row["answer"]), equivalence or kind.bind(row).same)
    await asyncio.to_thread(target.flush)
    return target


def evaluate(graph: Graph, rows: Sequence[Mapping[str, Any]], models: Mapping[str, Any], **kwargs: Any) -> EvalReport:
    """Run ``graph`` on every row (``problem`` and ``answer``), record and score every run, return the report.

    ``answer_kind`` (:mod:`scaffold.answers`; math by default) reads the runs' answers and scores them against
    the rows' references; the fields it reads from a row (a multiple-choice kind's ``choices``) go into each
    run's inputs, and a kind other than math is recorded in the evaluation's settings. ``equivalence``
    overrides how an answer is compared with the reference.

    ``name`` names the evaluation (its runs are ``{name}-{i}``); the same name again resumes it.
    ``store`` is a :class:`~scaffold.Store` or a path/URL (required: an evaluation lives in a
    store). ``settings`` is recorded with the evaluation and must match when resuming
    (``scaffold eval`` records topology, parameters, model specs and sampling there); it
    defaults to the graph's name and parameters. Other keyword arguments go to
    :meth:`Graph.map` (``concurrency``, ``seed``, ``progress``, ``budget``, ``call_timeout``...).

    Examples:
        >>> import scaffold as sf, tempfile, os
        >>> from scaffold.testing import ScriptedBackend
        >>> from scaffold.evaluation import evaluate
        >>> @sf.graph
        ... def solve(problem):
        ...     return sf.generate("{problem}", model="m")
        >>> rows = [{"problem": "1+1", "answer": "2"}, {"problem": "1+2", "answer": "3"}]
        >>> store = os.path.join(tempfile.mkdtemp(), "e.db")
        >>> report = evaluate(solve.build(), rows, {"m": ScriptedBackend(lambda r: r"\\boxed{2}")}, name="e1",
        ...                   store=store)
        >>> report.accuracy.value, report.finished, [o.correct for o in report.outcomes]
        (0.5, 2, [True, False])
    """
    no_running_loop("evaluate", "await evaluate_async(...)")
    bound = bind_models(graph, models)
    return run_released(evaluate_async(graph, rows, bound, **kwargs), bound)


def _check(name: str, rows: Sequence[Mapping[str, Any]], store: Store | str, inputs: Sequence[str],
           require_answers: bool = True) -> Store:
    if not name or any(c.isspace() for c in name) or "/" in name:
        raise EvaluationError(f"an evaluation name must be non-empty without spaces or '/', got {name!r}")
    if not rows:
        raise EvaluationError("an evaluation needs at least one row")
    for position, row in enumerate(rows):
        missing = [key for key in ((("answer",) if require_answers else ()) + tuple(inputs)) if key not in row]
        if missing:
            raise EvaluationError(f"row {position} needs {', '.join(map(repr, missing))} (the reference and the "
                                  f"graph's inputs); it has {', '.join(row) or 'nothing'}")
    target = resolve_store(store)
    if target is None:
        raise EvaluationError("an evaluation is recorded in a store; store=None is not allowed")
    return target


def _score(store: Store, result: RunResult, reference: str, equivalence: Equivalence) -> None:
    """Record the correctness of the run's answer and of every model trace's (and given output's) answer."""
    check = AnswerChecker(reference, equivalence)
    for trace in result.traces:
        if trace.kind in (TraceKind.MODEL, TraceKind.EXTERNAL) and trace.ok:
            store.add_reward(float(check(trace.answer)), run_id=result.run_id, call_id=trace.id, source=EVAL_SOURCE)
    store.add_reward(float(check(result.answer)), run_id=result.run_id, source=EVAL_SOURCE,
                     metadata={"reference": reference})
